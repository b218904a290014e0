"""Read-only access to a partition directory from other processes (Spark executors).

No recovery, no locks, no writes: the files are opened read-only and only batches below an
offset the caller already knows is committed (the high watermark) are read, so a concurrent
broker appending to, rolling or retaining the same log cannot be disturbed. A segment that
retention deletes underneath surfaces as ``OffsetOutOfRange``, a damaged batch as
``CorruptSegment``.
"""
from __future__ import annotations

import bisect
import os
from pathlib import Path
from typing import Generator, Iterator

import pyarrow as pa

from ember import errors
from ember.log import checkpoint
from ember.log.index import OffsetIndex
from ember.log.recovery import segment_bases
from ember.log.segment import INDEX_SUFFIX, LOG_SUFFIX, scan_batches, segment_path
from ember.record.batch import check_batch, decode_payload, slice_offsets
from ember.record.control import is_control, is_transactional, read_marker
from ember.record.header import HEADER_SIZE, BatchHeader


def read_offset_range(partition_dir: os.PathLike[str] | str, start_offset: int, end_offset: int, *,
                      verify_crc: bool = True, committed: bool = False) -> Iterator[pa.RecordBatch]:
    """Records with offsets in [start_offset, end_offset), as record batches of
    ``batch.DECODED_SCHEMA``, trimmed exactly to the range. ``committed`` (read_committed: the
    range must end at or below the last stable offset) leaves out the records of aborted
    transactions, decided per batch by the producer's next marker (:class:`TxnOutcomes`)."""
    directory = Path(partition_dir)
    if end_offset <= start_offset:
        return
    bases = segment_bases(directory)
    log_start = max(bases[0] if bases else 0,
                    checkpoint.read_offset(directory / checkpoint.LOG_START_OFFSET) or 0)
    if not bases or start_offset < log_start:
        raise errors.OffsetOutOfRange(
            f"offset {start_offset} is below the log start {log_start} of {directory}")
    outcomes = TxnOutcomes.scan(directory, bases, start_offset, end_offset) if committed else None
    next_offset = start_offset
    for base in bases[max(0, bisect.bisect_right(bases, start_offset) - 1):]:
        if next_offset >= end_offset:
            return
        next_offset = yield from _read_segment(directory, base, next_offset, end_offset, verify_crc, outcomes)
    if next_offset < end_offset:
        raise errors.OffsetOutOfRange(
            f"{directory} holds offsets only up to {next_offset}, {end_offset} requested")


def _read_segment(directory: Path, base: int, start: int, end: int, verify_crc: bool,
                  outcomes: "TxnOutcomes | None") -> Generator[pa.RecordBatch, None, int]:
    """Yield [start, end) from one segment; return the next offset to read."""
    path = segment_path(directory, base, LOG_SUFFIX)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise errors.OffsetOutOfRange(f"segment {path} was deleted (retention?)") from None
    try:
        size = os.fstat(fd).st_size
        index = OffsetIndex(segment_path(directory, base, INDEX_SUFFIX), base, 0)
        index.load(size)  # a missing or damaged index just means scanning from the start
        _, position = index.lookup(start)
        try:
            for _, header, data in scan_batches(fd, position, size, verify_crc=verify_crc):
                if header.last_offset < start:
                    continue
                # a transaction marker holds no record to read; an aborted transaction's are left out
                if not is_control(header) and (outcomes is None or outcomes.committed(header)):
                    records = slice_offsets(decode_payload(header, data), start, end)
                    if records.num_rows:
                        yield records
                start = header.last_offset + 1
                if start >= end:  # never touch the batch after: it may still be being written
                    break
        except errors.CorruptRecord as e:
            raise errors.CorruptSegment(f"{path}: {e}") from None
        return start
    finally:
        os.close(fd)


class TxnOutcomes:
    """How each transaction in a range ended, for a read_committed reader of segment files: the
    markers of the producers whose transactional batches the range holds, found by a first pass
    over batch headers (and the markers' one record), continued past the range until each such
    producer's next marker is found. A range that ends at or below the last stable offset has
    all of them: a transaction with records below it has its marker below the high watermark."""

    def __init__(self, markers: dict[int, list[tuple[int, bool]]]) -> None:
        self._markers = markers      # producer id -> (marker offset, commit?) in offset order

    def committed(self, header: BatchHeader) -> bool:
        """Whether a batch is to be read: not transactional, or its transaction committed."""
        if not is_transactional(header):
            return True
        found = self._markers.get(header.producer_id, [])
        at = bisect.bisect_right(found, header.base_offset, key=lambda m: m[0])
        return at < len(found) and found[at][1]   # no marker found: not known to be committed

    @classmethod
    def scan(cls, directory: Path, bases: list[int], start: int, end: int) -> "TxnOutcomes":
        markers: dict[int, list[tuple[int, bool]]] = {}
        pending: set[int] = set()      # producers with a transactional batch in range and no marker after it yet
        for base in bases[max(0, bisect.bisect_right(bases, start) - 1):]:
            path = segment_path(directory, base, LOG_SUFFIX)
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                raise errors.OffsetOutOfRange(f"segment {path} was deleted (retention?)") from None
            try:
                size = os.fstat(fd).st_size
                position = 0
                if base <= start:
                    index = OffsetIndex(segment_path(directory, base, INDEX_SUFFIX), base, 0)
                    index.load(size)
                    position = index.lookup(start)[1]
                for at, header in _headers(fd, position, size):
                    if header.last_offset < start:
                        continue
                    if header.base_offset >= end and not pending:
                        return cls(markers)
                    if is_control(header):
                        raw = os.pread(fd, header.size, at)
                        try:
                            check_batch(raw)
                        except errors.CorruptRecord as e:
                            raise errors.CorruptSegment(f"{path}: {e}") from None
                        marker = read_marker(header, raw)
                        markers.setdefault(header.producer_id, []).append((header.base_offset, marker.commit))
                        pending.discard(header.producer_id)
                    elif is_transactional(header) and header.base_offset < end:
                        pending.add(header.producer_id)
            finally:
                os.close(fd)
        return cls(markers)     # the log's end: what is still pending is left out (never read uncommitted)


def _headers(fd: int, position: int, size: int) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch from ``position``: headers only, stopping at the
    first that is not whole yet (a broker may be appending there)."""
    while position + HEADER_SIZE <= size:
        header = BatchHeader.parse(os.pread(fd, HEADER_SIZE, position))
        if header.problem() is not None or position + header.size > size:
            return
        yield position, header
        position += header.size
