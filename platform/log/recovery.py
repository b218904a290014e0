"""Opening a partition directory after a clean or unclean shutdown.

Segments wholly below the recovery point (flushed, validated before) are trusted: only their
indexes are loaded and sanity-checked. From the segment holding the recovery point on, every
batch is length- and CRC-checked; the first bad one marks a torn or corrupt tail, which is
truncated together with every later segment.
"""
from __future__ import annotations

import logging
from pathlib import Path

from ember.log.checkpoint import TMP_SUFFIX
from ember.log.config import LogConfig
from ember.log.segment import DELETED_SUFFIX, LOG_SUFFIX, SEGMENT_SUFFIXES, LogSegment, base_offset_of

_log = logging.getLogger(__name__)


def clean_directory(directory: Path) -> None:
    """Delete leftovers of interrupted work: temp checkpoints, deleted segments, orphan indexes."""
    bases = {base_offset_of(p) for p in directory.glob("*" + LOG_SUFFIX)}
    for path in directory.iterdir():
        orphan = path.suffix in SEGMENT_SUFFIXES and base_offset_of(path) not in bases
        if path.is_file() and (path.name.endswith((TMP_SUFFIX, DELETED_SUFFIX)) or orphan):
            _log.info("deleting stray file %s", path)
            path.unlink()


def segment_bases(directory: Path) -> list[int]:
    """Base offsets of the segments in ``directory``, oldest first."""
    bases = (base_offset_of(p) for p in directory.glob("*" + LOG_SUFFIX))
    return sorted(b for b in bases if b is not None)


def open_segment(directory: Path, base_offset: int, config: LogConfig, *, create: bool = False) -> LogSegment:
    return LogSegment(directory, base_offset, index_interval_bytes=config.index_interval_bytes,
                      index_max_bytes=config.segment_index_bytes, create=create)


def load_segments(directory: Path, config: LogConfig, recovery_point: int) -> list[LogSegment]:
    """Open every segment, recovering those at or past ``recovery_point``."""
    bases = segment_bases(directory)
    segments: list[LogSegment] = []
    for i, base in enumerate(bases):
        segment = open_segment(directory, base, config)
        segments.append(segment)
        next_base = bases[i + 1] if i + 1 < len(bases) else None
        if next_base is not None and next_base <= recovery_point:
            segment.open_sealed(next_base)
        elif segment.open_unflushed(recovery_point) and next_base is not None:
            for later in bases[i + 1:]:
                _log.warning("deleting segment %d after a truncated tail", later)
                for suffix in SEGMENT_SUFFIXES:
                    (directory / f"{later:020d}{suffix}").unlink(missing_ok=True)
            break
    return segments
