"""Opening a partition directory after a clean or unclean shutdown.

Segments wholly below the recovery point (flushed, validated before) are trusted: their indexes
are loaded and sanity-checked, and the headers after the last index entry must end exactly at the
end of the file, where the next segment begins; if not, a write tore the tail and the segment is
CRC-checked and truncated after its last whole batch. From the segment holding the recovery point
on, every batch is length- and CRC-checked; the first bad one marks a torn or corrupt tail, which
is truncated. Later segments are deleted only if a segment no longer ends at the next segment's
base (the truncation lost offsets): offsets never change once assigned, so the log must end there
(a replica fetches the rest again from the leader). No operator is needed: a torn tail never keeps
a partition offline.
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
    segments: list[LogSegment] = []
    try:
        _load_into(segments, directory, config, recovery_point)
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return segments


def _load_into(segments: list[LogSegment], directory: Path, config: LogConfig, recovery_point: int) -> None:
    bases = segment_bases(directory)
    for i, base in enumerate(bases):
        segment = open_segment(directory, base, config)
        segments.append(segment)
        next_base = bases[i + 1] if i + 1 < len(bases) else None
        if next_base is not None and next_base <= recovery_point:
            truncated = segment.open_sealed(next_base)
        else:
            truncated = segment.open_unflushed(recovery_point)
        if next_base is not None and segment.next_offset == next_base:
            segment.end_time_index()
        elif next_base is not None:
            _log.warning("%s ends at offset %d%s, but the next segment starts at %d: deleting the "
                         "segments from %d on (this replica fetches offsets from %d on again)",
                         segment.path, segment.next_offset,
                         f" after truncating {truncated} bytes" if truncated else "", next_base,
                         next_base, segment.next_offset)
            for later in bases[i + 1:]:
                _log.warning("deleting segment %d after a truncated tail", later)
                for suffix in SEGMENT_SUFFIXES:
                    (directory / f"{later:020d}{suffix}").unlink(missing_ok=True)
            break
