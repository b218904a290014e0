"""Truncation, the leader epoch cache and OffsetsForLeaderEpoch, DeleteRecords."""
from __future__ import annotations

import pytest
from log_helpers import numbered, values_batch

from ember import errors
from ember.log.checkpoint import LEADER_EPOCH, read_entries
from ember.record import to_table


def fill(log, epochs):
    """One 2-record batch per epoch in ``epochs``."""
    for epoch in epochs:
        log.append_as_leader(values_batch(numbered(log.log_end_offset, 2)), epoch)


def test_epoch_cache_and_offsets_for_leader_epoch(open_log, log_dir):
    log = open_log()
    fill(log, [1, 1, 3, 3, 5])  # epoch 1 at 0, 3 at 4, 5 at 8; LEO 10
    assert read_entries(log_dir / LEADER_EPOCH, 2) == [(1, 0), (3, 4), (5, 8)]
    assert log.end_offset_for_epoch(5) == (5, 10)
    assert log.end_offset_for_epoch(3) == (3, 8)
    assert log.end_offset_for_epoch(2) == (1, 4)  # unknown epoch: the one before it
    assert log.end_offset_for_epoch(0) == (0, 0)  # older than everything
    assert log.end_offset_for_epoch(6) == (-1, -1)


def test_truncate_drops_data_epochs_and_clamps_marks(open_log, log_dir):
    log = open_log(segment_bytes=2500)
    fill(log, [1, 1, 3, 3, 5, 5])
    log.update_high_watermark(12)
    log.flush()
    log.truncate_to(6)
    assert log.log_end_offset == 6 and log.high_watermark == 6 and log.recovery_point <= 6
    assert log.latest_epoch == 3 and log.end_offset_for_epoch(3) == (3, 6)
    assert read_entries(log_dir / LEADER_EPOCH, 2) == [(1, 0), (3, 4)]
    fill(log, [7])
    assert log.end_offset_for_epoch(3) == (3, 6) and log.log_end_offset == 8
    values = []
    offset = 0
    while offset < log.log_end_offset:
        fetched = log.read(offset, 1 << 20)
        table = to_table(fetched.read_bytes())
        values += table.column("value").to_pylist()
        offset = table.column("offset")[-1].as_py() + 1
    assert values == numbered(0, 8)
    log.close()
    reopened = open_log(segment_bytes=2500)
    assert reopened.log_end_offset == 8 and reopened.latest_epoch == 7


def test_truncate_is_batch_aligned(open_log):
    log = open_log()
    fill(log, [0, 0])
    log.truncate_to(3)  # inside the second batch: the whole batch goes
    assert log.log_end_offset == 2


def test_truncate_fully_and_start_at(open_log):
    log = open_log(segment_bytes=2000)
    fill(log, [1] * 5)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark, log.latest_epoch) == (100, 100, 100, -1)
    fill(log, [2])
    assert log.read(100, 1 << 20).first_offset == 100
    with pytest.raises(errors.OffsetOutOfRange):
        log.read(5, 100)
    log.close()
    reopened = open_log(segment_bytes=2000)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (100, 102)


def test_delete_records_before(open_log):
    log = open_log(segment_bytes=2000)
    fill(log, [1] * 10)
    with pytest.raises(errors.OffsetOutOfRange, match="high watermark"):
        log.delete_records_before(5)
    log.update_high_watermark(20)
    segments = len(log._segments)
    assert log.delete_records_before(9) == 9
    assert len(log._segments) < segments and log._segments[0].base_offset <= 9
    with pytest.raises(errors.OffsetOutOfRange):
        log.read(8, 100)
    assert log.read(9, 100).first_offset == 8  # the batch holding 9
    assert log.delete_records_before(3) == 9  # never moves back
    log.close()
    assert open_log(segment_bytes=2000).log_start_offset == 9


def test_a_stale_leader_epoch_append_is_fenced(tmp_path):
    """An append racing a leadership change must not write an old epoch after a newer one."""
    from log_helpers import values_batch

    from ember.log import Log

    log = Log.open(tmp_path / "t-0")
    log.append_as_leader(values_batch([b"a"]), leader_epoch=1)
    log.append_as_leader(values_batch([b"b"]), leader_epoch=3)
    with pytest.raises(errors.FencedLeaderEpoch, match="epoch 1 refused"):
        log.append_as_leader(values_batch([b"c"]), leader_epoch=1)
    assert log.log_end_offset == 2 and log.end_offset_for_epoch(1) == (1, 1)
    log.close()
