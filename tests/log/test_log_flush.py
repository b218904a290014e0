"""fsync policy: flush.messages, the flush.ms timer, flushing concurrently with appends."""
from __future__ import annotations

import threading

import pytest
from log_helpers import numbered, values_batch

from ember.log import FsyncNeeded, read_offset_range
from ember.log.checkpoint import RECOVERY_POINT, read_offset


def test_flush_messages_fsyncs_every_n_records(open_log):
    log = open_log(flush_messages=5)
    log.append_as_leader(values_batch(numbered(0, 3)), 0)
    assert log.recovery_point == 0
    log.append_as_leader(values_batch(numbered(3, 3)), 0)
    assert log.recovery_point == 6


def test_an_append_that_may_not_fsync_refuses_a_roll_or_a_sync_and_writes_nothing(open_log):
    """The broker's event loop appends with fsync=False and sends such an append to its I/O pool."""
    batch = values_batch(numbered(0, 3))
    for props, synced in (({"flush_messages": 5}, (6, 1)), ({"segment_bytes": len(batch) + 1}, (3, 2))):
        log = open_log(**props)
        log.append_as_leader(batch, 0, fsync=False)
        assert log.log_end_offset == 3 and log.recovery_point == 0     # neither a sync nor a roll yet
        for append in (lambda: log.append_as_leader(values_batch(numbered(3, 3)), 0, fsync=False),
                       lambda: log.append_as_follower(values_batch(numbered(3, 3), base_offset=3), fsync=False)):
            with pytest.raises(FsyncNeeded):
                append()
            assert (log.log_end_offset, log.recovery_point, log.segment_stats[0]) == (3, 0, 1)
        log.append_as_leader(values_batch(numbered(3, 3)), 0)              # fsync allowed: it syncs or rolls
        assert (log.recovery_point, log.segment_stats[0]) == synced
        log.close()
        for path in log.directory.iterdir():
            path.unlink()


def test_flush_timer(open_log, clock, log_dir):
    log = open_log(flush_ms=1000)
    assert not log.flush_if_due(clock.now + 10_000)  # nothing to flush
    log.append_as_leader(values_batch(numbered(0, 2)), 0)
    assert not log.flush_if_due(clock.now + 999)
    assert log.recovery_point == 0
    assert log.flush_if_due(clock.now + 1000)
    assert log.recovery_point == 2 and read_offset(log_dir / RECOVERY_POINT) == 2
    log.update_high_watermark(2)
    assert log.flush_if_due(clock.now + 5000)  # a moved high watermark gets checkpointed too


def test_the_timer_s_cheap_look_agrees_with_the_flush(open_log, clock):
    """flush_check_has_work (the broker's timer skips logs without work) says True exactly when
    flush_if_due would flush."""
    log = open_log(flush_ms=1000)
    assert not log.flush_check_has_work(clock.now + 10_000)
    log.append_as_leader(values_batch(numbered(0, 2)), 0)
    assert not log.flush_check_has_work(clock.now + 999)
    assert log.flush_check_has_work(clock.now + 1000)
    assert log.flush_if_due(clock.now + 1000)
    assert not log.flush_check_has_work(clock.now + 1000)
    log.update_high_watermark(2)
    assert log.flush_check_has_work(clock.now + 5000)


def test_flush_from_another_thread_while_appending(open_log, log_dir):
    log = open_log(segment_bytes=20_000)
    stop = threading.Event()
    failures = []

    def flusher():
        try:
            for _ in range(10_000):  # bounded
                if stop.is_set():
                    return
                log.flush()
        except Exception as e:  # noqa: BLE001 - reported to the main thread
            failures.append(e)

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        for i in range(300):
            log.append_as_leader(values_batch(numbered(i * 3, 3)), 0)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not failures
    log.flush()
    assert log.recovery_point == log.log_end_offset == 900
    values = [v for b in read_offset_range(log_dir, 0, 900) for v in b.column("value").to_pylist()]
    assert values == numbered(0, 900)
