"""Idempotent producer: dedup of retries, sequence gaps, epoch fencing, rebuild on open."""
from __future__ import annotations

import pytest
from log_helpers import numbered, values_batch

from ember import errors


def produce(log, pid, epoch, seq, n, start=0):
    raw = values_batch(numbered(start, n), producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    return log.append_as_leader(raw, 0)


def test_retry_returns_original_offsets_and_writes_nothing(open_log):
    log = open_log()
    first = produce(log, 7, 0, 0, 3)
    produce(log, 8, 0, 0, 2)  # another producer in between
    size = log.size_in_bytes
    retry = produce(log, 7, 0, 0, 3)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert log.size_in_bytes == size and log.log_end_offset == 5
    assert not produce(log, 7, 0, 3, 1).duplicate


def test_only_the_last_five_batches_are_remembered(open_log):
    log = open_log()
    for i in range(6):
        produce(log, 1, 0, i, 1)
    assert produce(log, 1, 0, 1, 1).duplicate  # still cached
    with pytest.raises(errors.OutOfOrderSequenceNumber):
        produce(log, 1, 0, 0, 1)  # fell out of the cache: not a known retry, not in sequence


def test_sequence_gap_and_fenced_epoch(open_log):
    log = open_log()
    produce(log, 1, 2, 0, 2)
    with pytest.raises(errors.OutOfOrderSequenceNumber, match="expected sequence 2, got 5"):
        produce(log, 1, 2, 5, 1)
    with pytest.raises(errors.InvalidProducerEpoch):
        produce(log, 1, 1, 2, 1)
    with pytest.raises(errors.OutOfOrderSequenceNumber, match="must start at sequence 0"):
        produce(log, 1, 3, 4, 1)
    assert not produce(log, 1, 3, 0, 1).duplicate  # a bumped epoch restarts at 0
    assert log.log_end_offset == 3


def test_unknown_producer_may_start_anywhere_and_sequences_wrap(open_log):
    log = open_log()
    produce(log, 5, 0, (1 << 31) - 2, 2)  # last sequence is int32 max
    assert not produce(log, 5, 0, 0, 1).duplicate


def test_bad_batch_in_a_multi_batch_append_leaves_state_untouched(open_log):
    log = open_log()
    ok = values_batch([b"a"], producer_id=1, producer_epoch=0, base_sequence=0)
    gap = values_batch([b"b"], producer_id=1, producer_epoch=0, base_sequence=5)
    with pytest.raises(errors.OutOfOrderSequenceNumber):
        log.append_as_leader(ok + gap, 0)
    assert log.log_end_offset == 0
    assert not log.append_as_leader(ok, 0).duplicate


def test_producer_state_is_rebuilt_on_open(open_log):
    log = open_log()
    first = produce(log, 9, 0, 0, 4)
    log.close()
    log = open_log()
    retry = produce(log, 9, 0, 0, 4)
    assert retry.duplicate and retry.first_offset == first.first_offset
    with pytest.raises(errors.OutOfOrderSequenceNumber):
        produce(log, 9, 0, 7, 1)


def test_truncation_rebuilds_producer_state(open_log):
    log = open_log()
    produce(log, 9, 0, 0, 2)
    produce(log, 9, 0, 2, 2)
    log.truncate_to(2)
    assert not produce(log, 9, 0, 2, 2).duplicate  # the truncated batch is written again
    assert log.log_end_offset == 4


def test_idle_producers_expire_after_producer_id_expiration_ms(open_log):
    log = open_log(producer_id_expiration_ms=3_600_000)
    now = produce(log, 7, 0, 0, 3).max_timestamp
    log.apply_retention(now_ms=now + 60_000)            # idle a minute: still remembered
    assert produce(log, 7, 0, 0, 3).duplicate
    log.apply_retention(now_ms=now + 2 * 3_600_000)     # idle two hours: forgotten
    retry = produce(log, 7, 0, 0, 3)
    assert not retry.duplicate and retry.first_offset == 3
