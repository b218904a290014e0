"""Retention by time and by size: whole sealed segments, below the high watermark."""
from __future__ import annotations

from log_helpers import values_batch

HOUR = 3600 * 1000


def fill_segments(log, timestamps):
    """One ~1 KiB batch per timestamp; segment.bytes=1500 makes each batch its own segment."""
    for ts in timestamps:
        log.append_as_leader(values_batch([b"x" * 400], timestamp=ts), 0)
    log.update_high_watermark(log.log_end_offset)


def test_retention_by_time_uses_the_newest_record_of_each_segment(open_log, clock, log_dir):
    log = open_log(segment_bytes=1500, retention_ms=HOUR, file_delete_delay_ms=0)
    now = clock.now
    fill_segments(log, [now - 5 * HOUR, now - 3 * HOUR, now - 10, now - 4 * HOUR, now])
    assert len(log._segments) == 5
    assert log.apply_retention(now) == 2  # stops at the first young segment, like Kafka
    assert log.log_start_offset == 2 and log._segments[0].base_offset == 2
    assert not any(p.name.startswith("00000000000000000000") for p in log_dir.iterdir())
    log.close()
    assert open_log(segment_bytes=1500, retention_ms=HOUR).log_start_offset == 2


def test_retention_never_deletes_the_active_segment(open_log, clock):
    log = open_log(segment_bytes=1500, retention_ms=HOUR)
    fill_segments(log, [clock.now - 10 * HOUR] * 3)
    assert log.apply_retention(clock.now) == 2
    assert len(log._segments) == 1 and log.log_end_offset == 3


def test_retention_by_size(open_log, clock):
    log = open_log(segment_bytes=1500, retention_ms=-1)
    fill_segments(log, [clock.now] * 6)
    segment_size = log._segments[0].size
    log.update_config(log.config.overridden({"retention.bytes": 3 * segment_size}))
    assert log.apply_retention(clock.now) == 3
    assert log.size_in_bytes <= 3 * segment_size and log.log_start_offset == 3


def test_retention_waits_for_the_high_watermark(open_log, clock):
    log = open_log(segment_bytes=1500, retention_ms=HOUR)
    fill_segments(log, [clock.now - 10 * HOUR] * 4)
    log.update_high_watermark(1)  # only the first segment is fully replicated
    assert log.apply_retention(clock.now) == 1
    assert log.log_start_offset == 1


def test_retention_forever(open_log, clock):
    log = open_log(segment_bytes=1500, retention_ms=-1)
    fill_segments(log, [0] * 4)
    assert log.apply_retention(clock.now) == 0


def test_a_compact_only_log_keeps_old_segments_and_compact_delete_drops_them(open_log, clock):
    log = open_log(segment_bytes=1500, retention_ms=HOUR, retention_bytes=1, cleanup_policy="compact")
    fill_segments(log, [clock.now - 10 * HOUR] * 4)
    assert log.apply_retention(clock.now) == 0 and log.log_start_offset == 0
    log.update_config(log.config.overridden({"cleanup.policy": "compact,delete"}))
    assert log.apply_retention(clock.now) == 3 and log.log_start_offset == 3
