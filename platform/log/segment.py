"""One log segment: a ``.log`` file of batches plus its offset and time indexes.

Files are named by the segment's base offset (20 digits). The segment indexes batches as they are
appended (an offset-index entry every ``index.interval.bytes``, a time-index entry whenever the
running maximum timestamp grows at such a point) and finds batches by binary search in the index
followed by a short forward scan of batch headers.

A failed write never leaves bytes behind: ``append`` and ``seal`` undo themselves (``rollback``
to a ``mark`` taken before) and re-raise the OSError; if the undo fails too they raise
``UntrustedFiles`` (as does a failed fsync), and the log goes offline.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterator, NamedTuple, Optional, Sequence

from ember import errors
from ember.log.disk import UntrustedFiles, fsync
from ember.log.index import OffsetIndex, TimeIndex
from ember.record.batch import check_batch
from ember.record.header import HEADER_SIZE, BatchHeader, Buffer

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)

_HEADER_CHUNK = 64 * 1024  # one read covers many small batches' headers
READ_CHUNK = 8 * 1024 * 1024  # whole-batch reads (recovery, reader)
MAX_RELATIVE_OFFSET = (1 << 32) - 1
_IOV_MAX = 1024

_log = logging.getLogger(__name__)


def segment_path(directory: Path, base_offset: int, suffix: str) -> Path:
    return directory / f"{base_offset:020d}{suffix}"


def base_offset_of(path: Path) -> Optional[int]:
    """The base offset a segment file is named by, or None for other files."""
    stem = path.name.split(".", 1)[0]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def scan_batches(fd: int, position: int, end: int, *, verify_crc: bool = True
                 ) -> Iterator[tuple[int, BatchHeader, memoryview]]:
    """Whole batches in [position, end) of a file, read in large chunks.

    Raises ``CorruptRecord`` naming the file position of the first batch that fails length or
    CRC checks.
    """
    chunk, chunk_pos = memoryview(b""), position
    while position < end:
        rel = position - chunk_pos
        for _ in range(2):  # read a chunk; again if it holds only the start of a larger batch
            available = len(chunk) - rel
            need = BatchHeader.parse(chunk, rel).size if available >= HEADER_SIZE else HEADER_SIZE
            if available >= need:
                break
            want = min(max(READ_CHUNK, need), end - position)
            chunk, chunk_pos, rel = memoryview(os.pread(fd, want, position)), position, 0
        header = check_batch(chunk, rel, verify_crc=verify_crc, origin=chunk_pos)
        yield position, header, chunk[rel:rel + header.size]
        position += header.size


class Mark(NamedTuple):
    """A segment's append state, to undo a failed write (``LogSegment.rollback``)."""
    size: int
    next_offset: int
    max_timestamp: int
    max_timestamp_offset: int
    bytes_since_entry: int
    offset_entries: int
    time_entries: int


class LogSegment:
    """A segment's files and in-memory state; the owning ``Log`` serializes access."""

    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int,
                 index_max_bytes: int, create: bool = False) -> None:
        self.base_offset = base_offset
        self.path = segment_path(directory, base_offset, LOG_SUFFIX)
        self.offset_index = OffsetIndex(segment_path(directory, base_offset, INDEX_SUFFIX),
                                        base_offset, index_max_bytes)
        self.time_index = TimeIndex(segment_path(directory, base_offset, TIME_INDEX_SUFFIX),
                                    base_offset, index_max_bytes)
        self.index_interval_bytes = index_interval_bytes
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        # A new segment's index files are created with its first index entry (one index interval
        # in): two file creations fewer for each of the 1,000 logs a topic of 1,000 partitions
        # opens on every broker, which was a quarter of their work.
        self._fd = os.open(self.path, flags, 0o644)
        try:
            stat = os.fstat(self._fd)
            self.size = stat.st_size
            #: which file this is: a cleaned copy replaces it under the same name
            self.inode = stat.st_ino
        except OSError as e:
            self.close()
            if create:  # a half-created segment would make every later roll fail with EEXIST
                self._remove_files(e)
            raise
        self.next_offset = base_offset  # one past the last batch's last offset
        self.max_timestamp = -1
        self._max_timestamp_offset = base_offset
        self._bytes_since_entry = 0

    def _remove_files(self, cause: OSError) -> None:
        for suffix in SEGMENT_SUFFIXES:
            try:
                segment_path(self.path.parent, self.base_offset, suffix).unlink(missing_ok=True)
            except OSError as e:
                raise UntrustedFiles(f"cannot remove the half-created segment {self.path} "
                                     f"(its creation failed: {cause})", e) from e

    # --- loading and recovery ---------------------------------------------------------------

    def open_sealed(self, next_offset: int) -> int:
        """Open a flushed segment that ends where the next one (at ``next_offset``) begins;
        returns bytes truncated.

        Its indexes are loaded (rebuilt from headers if damaged) and the headers after the last
        index entry walked: they must end exactly at the end of the file, at ``next_offset``. If
        not, a write tore the tail (a full or failing disk): every batch is CRC-checked and the
        file truncated after the last whole one. The caller compares ``next_offset`` afterwards:
        unless it is the next segment's base, offsets were lost and later segments must go.
        """
        self.next_offset = next_offset
        if self._load_index_files():
            self.max_timestamp = self.time_index.max_timestamp
            if self._tail_is_whole(next_offset):
                return 0
        else:
            _log.warning("%s: rebuilding damaged or missing indexes", self.path)
            try:
                self._resume()
                whole = self.next_offset == next_offset
            except errors.CorruptSegment:
                whole = False
            if whole:
                self._rewrite_indexes()
                return 0
        return self._recover_all()

    def open_unflushed(self, recovery_point: int) -> int:
        """Recover a segment holding data at or past the recovery point; returns bytes truncated.

        Batches below the recovery point were flushed and validated before: they are walked by
        header only. From the recovery point on every batch is checked (length, CRC) and
        re-indexed; the file is truncated at the first bad one. A bad header below the recovery
        point (a tear that a flush could not see) makes it CRC-check the whole segment instead.
        """
        position = 0
        if self.base_offset < recovery_point:
            self._load_index_files()
            self.offset_index.truncate_to_offset(recovery_point)
            self.time_index.truncate_to_offset(recovery_point)
            try:
                position = self._resume(stop_offset=recovery_point)
            except errors.CorruptSegment as e:
                _log.warning("%s below the recovery point %d: checking every batch",
                             e, recovery_point)
                return self._recover_all()
        truncated = self._recover_from(position)
        self._rewrite_indexes()
        return truncated

    def _tail_is_whole(self, next_offset: int) -> bool:
        """Whether the headers from the last offset-index entry on end exactly at the end of the
        file with offset ``next_offset`` (a sanity check reading about one index interval)."""
        end_offset, position = self.offset_index.last()
        try:
            for _, header in self.iter_headers(position):
                if header.base_offset < end_offset:   # offsets only grow
                    _log.warning("%s: batch at offset %d where %d or more was expected", self.path,
                                 header.base_offset, end_offset)
                    return False
                end_offset = header.last_offset + 1
        except errors.CorruptSegment as e:
            _log.warning("%s", e)
            return False
        if end_offset != next_offset:
            _log.warning("%s: batches end at offset %d, the next segment starts at %d",
                         self.path, end_offset, next_offset)
            return False
        return True

    def _recover_all(self) -> int:
        """CRC-check and re-index every batch, truncating after the last whole one."""
        self._clear_indexes()
        self.next_offset = self.base_offset
        self.max_timestamp, self._max_timestamp_offset = -1, self.base_offset
        self._bytes_since_entry = 0
        truncated = self._recover_from(0)
        self._rewrite_indexes()
        return truncated

    def _load_index_files(self) -> bool:
        # A segment no longer than one index interval never had an offset entry, so it may have no
        # offset index file (created with its first entry). Its time index is another matter: a
        # sealed segment's ends with the seal's entry, its max timestamp, which retention reads.
        never_indexed = self.size <= self.index_interval_bytes and not self.offset_index.path.exists()
        ok = (never_indexed or self.offset_index.load(self.size)) and self.time_index.load()
        if not ok:
            self._clear_indexes()
        return ok

    def end_time_index(self) -> None:
        """Give a sealed segment's time index its final entry (its max timestamp) if a rebuild from
        headers, which indexes only at offset-entry points, left it out: retention and lookups
        by timestamp read a sealed segment's max timestamp from that last entry."""
        if self.time_index.max_timestamp < self.max_timestamp:
            self.time_index.maybe_append(self.max_timestamp, self._max_timestamp_offset)
            self.time_index.write_pending()

    def _clear_indexes(self) -> None:
        self.offset_index.truncate_to_offset(self.base_offset)
        self.time_index.truncate_to_offset(self.base_offset)

    def _resume(self, stop_offset: Optional[int] = None) -> int:
        """Re-derive the append state by walking headers from the last offset-index entry.

        Stops before the first batch at or past ``stop_offset``; returns that position (or the
        end of the walk). Raises ``CorruptSegment`` at an implausible header.
        """
        self.max_timestamp = self.time_index.max_timestamp
        self._max_timestamp_offset = self.time_index.lookup(self.max_timestamp)
        self._bytes_since_entry = 0
        entry_offset, entry_position = self.offset_index.last()
        self.next_offset = entry_offset
        for position, header in self.iter_headers(entry_position):
            if header.base_offset < self.next_offset:  # offsets only grow (gaps allowed: compaction)
                raise self.corrupt(position, f"batch at offset {header.base_offset} where "
                                             f"{self.next_offset} or more was expected")
            if stop_offset is not None and header.base_offset >= stop_offset:
                return position
            self._index_batch(position, header)
        return self.size

    def _recover_from(self, position: int) -> int:
        end = position
        try:
            for pos, header, _ in scan_batches(self._fd, position, self.size):
                if header.base_offset < self.next_offset:  # e.g. an old batch's bytes
                    raise errors.CorruptRecord(f"batch at offset {header.base_offset} where "
                                               f"{self.next_offset} or more was expected at position {pos}")
                self._index_batch(pos, header)
                end = pos + header.size
        except errors.CorruptRecord as e:
            _log.warning("%s: torn or corrupt batch (%s): truncating the file at position %d, "
                         "dropping %d bytes; offsets from %d on will be fetched again from the "
                         "leader", self.path, e, end, self.size - end, self.next_offset)
        truncated = self.size - end
        if truncated:
            os.ftruncate(self._fd, end)
            self.size = end
        return truncated

    def _rewrite_indexes(self) -> None:
        self.offset_index.rewrite()
        self.time_index.rewrite()

    # --- appending --------------------------------------------------------------------------

    def append(self, headers: Sequence[BatchHeader], buffers: Sequence[Buffer]) -> None:
        """Write batches (``headers`` carry their final offsets; ``buffers`` are their bytes).

        On OSError the segment is as before (``rollback``) and the error re-raised.
        """
        mark = self.mark()
        position = self.size
        try:
            _pwrite_all(self._fd, buffers, position)
            for header in headers:
                self._index_batch(position, header)
                position += header.size
            self.size = position
            self.offset_index.write_pending()
            self.time_index.write_pending()
        except OSError:
            self.rollback(mark)
            raise

    def mark(self) -> Mark:
        """The append state now, for ``rollback`` (O(1))."""
        return Mark(self.size, self.next_offset, self.max_timestamp, self._max_timestamp_offset,
                    self._bytes_since_entry, len(self.offset_index), len(self.time_index))

    def rollback(self, mark: Mark) -> None:
        """Undo everything appended since ``mark``: in memory, then in the files (the partial
        bytes of a failed write are cut off). Raises ``UntrustedFiles`` if the files cannot be
        cut back."""
        self.size, self.next_offset, self.max_timestamp = mark.size, mark.next_offset, mark.max_timestamp
        self._max_timestamp_offset, self._bytes_since_entry = mark.max_timestamp_offset, mark.bytes_since_entry
        try:
            os.ftruncate(self._fd, mark.size)
            self.offset_index.rollback(mark.offset_entries)
            self.time_index.rollback(mark.time_entries)
        except OSError as e:
            raise UntrustedFiles(f"cannot undo a failed write to {self.path}", e) from e

    def _index_batch(self, position: int, header: BatchHeader) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp, self._max_timestamp_offset = header.max_timestamp, header.base_offset
        if self._bytes_since_entry > self.index_interval_bytes:
            self.offset_index.append(header.base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self._max_timestamp_offset)
            self._bytes_since_entry = 0
        self._bytes_since_entry += header.size
        self.next_offset = header.last_offset + 1

    def should_roll(self, batch_bytes: int, max_timestamp: int, last_offset: int, *,
                    segment_bytes: int, segment_ms: int) -> bool:
        """Whether an append of ``batch_bytes`` must go to a new segment (Kafka's rules)."""
        if self.size == 0:
            return False
        return (self.size + batch_bytes > segment_bytes
                or max_timestamp - self.rolling_timestamp() > segment_ms
                or self.offset_index.is_full or self.time_index.is_full
                or last_offset - self.base_offset > MAX_RELATIVE_OFFSET)

    def rolling_timestamp(self) -> int:
        """The first batch's max timestamp: segment.ms counts from it, as in Kafka (and the log
        cleaner's max.compaction.lag.ms)."""
        return BatchHeader.parse(os.pread(self._fd, HEADER_SIZE, 0)).max_timestamp

    def seal(self) -> None:
        """Finish the segment before a roll: final time-index entry, then fsync everything.

        A failed write of the entry is undone (OSError); a failed fsync raises UntrustedFiles.
        """
        mark = self.mark()
        self.time_index.maybe_append(self.max_timestamp, self._max_timestamp_offset)
        try:
            self.offset_index.write_pending()
            self.time_index.write_pending()
        except OSError:
            self.rollback(mark)
            raise
        self.flush()

    # --- reading ----------------------------------------------------------------------------

    def iter_headers(self, position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from ``position`` on, reading headers only."""
        buf, buf_pos = b"", position
        while position < self.size:
            rel = position - buf_pos
            if rel + HEADER_SIZE > len(buf):
                buf, buf_pos, rel = os.pread(self._fd, _HEADER_CHUNK, position), position, 0
                if len(buf) < HEADER_SIZE:
                    raise self.corrupt(position, "truncated batch header")
            header = BatchHeader.parse(buf, rel)
            reason = header.problem()
            if reason is None and position + header.size > self.size:
                reason = f"batch of {header.size} bytes runs past the end of the file"
            if reason is not None:
                raise self.corrupt(position, reason)
            yield position, header
            position += header.size

    def corrupt(self, position: int, reason: str) -> errors.CorruptSegment:
        return errors.CorruptSegment(f"{self.path}: {reason} at position {position}")

    def find_batch(self, offset: int) -> Optional[tuple[int, BatchHeader]]:
        """(position, header) of the batch holding ``offset`` (or the first one after it)."""
        _, entry_position = self.offset_index.lookup(offset)
        for position, header in self.iter_headers(entry_position):
            if header.last_offset >= offset:
                return position, header
        return None

    def read(self, start_offset: int, max_bytes: int, max_offset: Optional[int],
             min_one_batch: bool, skip_empty: bool = False) -> Optional[tuple[int, int, int]]:
        """(position, size, first batch's base offset) of whole batches from the one holding
        ``start_offset``: at most ``max_bytes`` (but one batch if ``min_one_batch``), none whose
        base offset is ``max_offset`` or more. None if the segment holds nothing at/after it
        (``skip_empty``: nothing but batches a log cleaning emptied)."""
        found = self.find_batch(start_offset)
        if found is None:
            return None
        start, first = found
        stop = max_offset if max_offset is not None else self.next_offset
        if skip_empty and first.record_count == 0:
            found = next(((p, h) for p, h in self.iter_headers(start) if h.record_count or h.base_offset >= stop),
                         None)
            if found is None or found[1].base_offset >= stop:
                return None
            start, first = found
        limit = start + max_bytes
        end = max(start, self.offset_index.floor_entry(limit, stop)[1])
        for position, header in self.iter_headers(end):
            if header.base_offset >= stop or position + header.size > limit:
                break
            end = position + header.size
        if end == start and min_one_batch and first.base_offset < stop:
            end = start + first.size
        return start, end - start, first.base_offset

    def timestamp_candidates(self, timestamp: int, min_offset: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of the batches at/after ``min_offset`` whose max timestamp is
        ≥ ``timestamp``, in order, starting where the time index proves earlier ones older."""
        start = max(self.time_index.lookup(timestamp), min_offset)
        _, entry_position = self.offset_index.lookup(start)
        for position, header in self.iter_headers(entry_position):
            if header.last_offset >= min_offset and header.max_timestamp >= timestamp:
                yield position, header

    def read_batch(self, position: int, header: BatchHeader) -> bytes:
        """The raw bytes of the batch at ``position``, CRC-checked."""
        data = os.pread(self._fd, header.size, position)
        try:
            check_batch(data, origin=position)
        except errors.CorruptRecord as e:
            raise errors.CorruptSegment(f"{self.path}: {e}") from None
        return data

    # --- truncation, flushing, deletion -----------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop the batch holding ``offset`` and all after it; returns bytes removed."""
        found = self.find_batch(offset)
        if found is None:
            return 0
        position, header = found
        removed = self.size - position
        os.ftruncate(self._fd, position)
        self.size = position
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to_offset(header.base_offset)
        self._resume()
        self._rewrite_indexes()
        return removed

    def flush(self) -> None:
        """fsync the data and index files; a failure raises UntrustedFiles."""
        fsync(self._fd, self.path)
        self.offset_index.flush()
        self.time_index.flush()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def rename_for_delete(self) -> list[Path]:
        """Close and rename the segment's files to ``*.deleted``; returns the new paths."""
        self.close()
        renamed = []
        for suffix in SEGMENT_SUFFIXES:
            path = segment_path(self.path.parent, self.base_offset, suffix)
            if path.exists():
                target = path.with_name(path.name + DELETED_SUFFIX)
                path.rename(target)
                renamed.append(target)
        return renamed


def _pwrite_all(fd: int, buffers: Sequence[Buffer], position: int) -> None:
    """Write ``buffers`` contiguously at ``position`` without joining them (no payload copy)."""
    views = [memoryview(b).cast("B") for b in buffers]
    i = 0
    while i < len(views):
        written = os.pwritev(fd, views[i:i + _IOV_MAX], position)
        position += written
        while i < len(views) and written >= len(views[i]):
            written -= len(views[i])
            i += 1
        if written:
            views[i] = views[i][written:]
