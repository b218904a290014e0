"""Which old segments retention may delete: always a prefix of the sealed segments.

Kafka's three rules, each taking segments from the oldest: wholly below the log start offset
(DeleteRecords), older than ``retention.ms`` by their newest record, or beyond ``retention.bytes``.
Time and size only delete segments wholly below the high watermark, so retention never removes
data followers may still need; the active segment is never deleted. Time and size apply only when
``cleanup.policy`` has ``delete``: a compact-only log keeps every key's latest record however old.
"""
from __future__ import annotations

from typing import Sequence

from ember.log.config import LogConfig
from ember.log.segment import LogSegment


def deletable_count(segments: Sequence[LogSegment], *, config: LogConfig, now_ms: int,
                    log_start_offset: int, high_watermark: int) -> int:
    """How many of the oldest ``segments`` (oldest first, active last) may be deleted."""
    sealed = segments[:-1]
    count = below_log_start(segments, log_start_offset)

    def replicated(segment: LogSegment) -> bool:
        return segment.next_offset <= high_watermark

    if not config.delete:
        return count
    if config.retention_ms >= 0:
        while count < len(sealed) and replicated(sealed[count]) and \
                now_ms - sealed[count].max_timestamp > config.retention_ms:
            count += 1
    if config.retention_bytes >= 0:
        excess = sum(s.size for s in segments[count:]) - config.retention_bytes
        while count < len(sealed) and replicated(sealed[count]) and excess >= sealed[count].size:
            excess -= sealed[count].size
            count += 1
    return count


def below_log_start(segments: Sequence[LogSegment], log_start_offset: int) -> int:
    """How many of the oldest segments lie wholly below ``log_start_offset``."""
    count = 0
    while count < len(segments) - 1 and segments[count + 1].base_offset <= log_start_offset:
        count += 1
    return count
