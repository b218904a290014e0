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
from ember.record.batch import decode_payload, slice_offsets
from ember.record.control import is_control


def read_offset_range(partition_dir: os.PathLike[str] | str, start_offset: int, end_offset: int, *,
                      verify_crc: bool = True) -> Iterator[pa.RecordBatch]:
    """Records with offsets in [start_offset, end_offset), as record batches of
    ``batch.DECODED_SCHEMA``, trimmed exactly to the range."""
    directory = Path(partition_dir)
    if end_offset <= start_offset:
        return
    bases = segment_bases(directory)
    log_start = max(bases[0] if bases else 0,
                    checkpoint.read_offset(directory / checkpoint.LOG_START_OFFSET) or 0)
    if not bases or start_offset < log_start:
        raise errors.OffsetOutOfRange(
            f"offset {start_offset} is below the log start {log_start} of {directory}")
    next_offset = start_offset
    for base in bases[max(0, bisect.bisect_right(bases, start_offset) - 1):]:
        if next_offset >= end_offset:
            return
        next_offset = yield from _read_segment(directory, base, next_offset, end_offset, verify_crc)
    if next_offset < end_offset:
        raise errors.OffsetOutOfRange(
            f"{directory} holds offsets only up to {next_offset}, {end_offset} requested")


def _read_segment(directory: Path, base: int, start: int, end: int,
                  verify_crc: bool) -> Generator[pa.RecordBatch, None, int]:
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
                if not is_control(header):    # a transaction marker holds no record to read
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
