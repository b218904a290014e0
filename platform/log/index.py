"""Sparse per-segment indexes, held in memory as arrays and appended to their files.

* ``OffsetIndex`` (``.index``): 8-byte entries (relative_offset uint32, position uint32), both
  strictly increasing; maps an offset to the position of a batch at or before it.
* ``TimeIndex`` (``.timeindex``): 12-byte entries (timestamp int64, relative_offset uint32) with
  strictly increasing timestamps (the segment's running maximum); maps a timestamp to an offset
  from which all earlier batches are known to be older.

Entries point at batch starts, so a lookup lands on a batch boundary and the caller scans batch
headers forward from there. Files are big-endian like Kafka's. Writes are buffered per append and
written with one ``write``; no file descriptor is kept open between appends.
"""
from __future__ import annotations

import bisect
import os
import struct
import sys
from array import array
from pathlib import Path
from typing import Optional

from ember.log.disk import fsync

_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")


class _Index:
    entry: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_bytes // self.entry.size)
        self._pending = bytearray()

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    def _read_file(self) -> Optional[bytes]:
        """The file's whole entries (a torn last entry is ignored), or None if it is missing."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        return data[:len(data) - len(data) % self.entry.size]

    def _queue(self, *fields: int) -> None:
        self._pending += self.entry.pack(*fields)

    def write_pending(self) -> None:
        """Append the entries added since the last call to the file."""
        if not self._pending:
            return
        data, self._pending = bytes(self._pending), bytearray()
        _write_file(self.path, data, os.O_APPEND)

    def rollback(self, count: int) -> None:
        """Forget the entries after the first ``count`` (in memory, queued and in the file) after
        a failed write; raises OSError if the file cannot be cut back."""
        self._truncate(count)
        self._pending.clear()
        try:
            os.truncate(self.path, count * self.entry.size)
        except FileNotFoundError:
            if count:
                raise

    def _truncate(self, keep: int) -> None:
        raise NotImplementedError

    def rewrite(self) -> None:
        """Replace the file with the in-memory entries (creation, truncation, rebuild)."""
        self._pending.clear()
        _write_file(self.path, self._serialize(), os.O_TRUNC)

    def flush(self) -> None:
        """fsync what was written (entries are written under the log's lock by ``write_pending``;
        this may run concurrently on the flusher thread, so it writes nothing itself)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return  # no entries yet
        try:
            fsync(fd, self.path)
        finally:
            os.close(fd)

    def _serialize(self) -> bytes:
        raise NotImplementedError


class OffsetIndex(_Index):
    entry = _OFFSET_ENTRY

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        super().__init__(path, base_offset, max_bytes)
        self.offsets = array("I")  # relative offsets
        self.positions = array("I")

    def __len__(self) -> int:
        return len(self.offsets)

    def load(self, log_size: int) -> bool:
        """Read the file; False (and empty) if it is missing or fails sanity checks."""
        data = self._read_file()
        if data is None:
            return False
        flat = array("I", data)
        if sys.byteorder == "little":
            flat.byteswap()
        offsets, positions = flat[0::2], flat[1::2]
        if not _increasing(offsets) or not _increasing(positions) or \
                (positions and positions[-1] >= log_size):
            return False
        self.offsets, self.positions = offsets, positions
        return True

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        self.offsets.append(relative)
        self.positions.append(position)
        self._queue(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before ``offset``; (base, 0) if none."""
        i = bisect.bisect_right(self.offsets, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self.offsets[i], self.positions[i]

    def floor_entry(self, position: int, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before byte ``position`` and below
        ``offset``; (base, 0) if none."""
        i = min(bisect.bisect_right(self.positions, position),
                bisect.bisect_left(self.offsets, offset - self.base_offset)) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self.offsets[i], self.positions[i]

    def last(self) -> tuple[int, int]:
        return (self.base_offset + self.offsets[-1], self.positions[-1]) if self.offsets \
            else (self.base_offset, 0)

    def truncate_to_position(self, position: int) -> None:
        """Drop entries at or after byte ``position``."""
        self._truncate(bisect.bisect_left(self.positions, position))

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for ``offset`` and later."""
        self._truncate(bisect.bisect_left(self.offsets, max(0, offset - self.base_offset)))

    def _truncate(self, keep: int) -> None:
        del self.offsets[keep:], self.positions[keep:]

    def _serialize(self) -> bytes:
        flat = array("I", bytes(8 * len(self.offsets)))
        flat[0::2], flat[1::2] = self.offsets, self.positions
        if sys.byteorder == "little":
            flat.byteswap()
        return flat.tobytes()


class TimeIndex(_Index):
    entry = _TIME_ENTRY

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        super().__init__(path, base_offset, max_bytes)
        self.timestamps = array("q")
        self.offsets = array("I")  # relative offsets

    def __len__(self) -> int:
        return len(self.timestamps)

    def load(self) -> bool:
        """Read the file; False (and empty) if it is missing or fails sanity checks."""
        data = self._read_file()
        if data is None:
            return False
        flat = struct.unpack(">" + "qI" * (len(data) // self.entry.size), data)
        timestamps, offsets = array("q", flat[0::2]), array("I", flat[1::2])
        if not _increasing(timestamps) or not _increasing(offsets, strict=False):
            return False
        self.timestamps, self.offsets = timestamps, offsets
        return True

    @property
    def max_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) if it raises the segment's indexed maximum timestamp."""
        if timestamp > self.max_timestamp:
            self.timestamps.append(timestamp)
            self.offsets.append(offset - self.base_offset)
            self._queue(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """An offset such that every batch before it is older than ``timestamp``."""
        i = bisect.bisect_right(self.timestamps, timestamp) - 1
        return self.base_offset + (self.offsets[i] if i >= 0 else 0)

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries pointing at or after ``offset``."""
        self._truncate(bisect.bisect_left(self.offsets, max(0, offset - self.base_offset)))

    def _truncate(self, keep: int) -> None:
        del self.timestamps[keep:], self.offsets[keep:]

    def _serialize(self) -> bytes:
        return b"".join(self.entry.pack(t, o) for t, o in zip(self.timestamps, self.offsets))


def _write_file(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` opened with ``mode`` (``O_APPEND`` or ``O_TRUNC``)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | mode, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _increasing(values: array[int], strict: bool = True) -> bool:
    if strict:
        return all(a < b for a, b in zip(values, values[1:]))
    return all(a <= b for a, b in zip(values, values[1:]))
