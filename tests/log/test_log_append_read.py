"""Appending (leader and follower), reading, rolling, the high watermark, the reader."""
from __future__ import annotations

import pyarrow as pa
import pytest
from log_helpers import kafka_batch, numbered, table_batch, values_batch

from ember import errors
from ember.log import Log, LogConfig, read_offset_range
from ember.record import HEADER_SIZE, to_table
from ember.record.header import BatchHeader


def test_offsets_are_assigned_by_the_leader(open_log):
    log = open_log()
    first = log.append_as_leader(values_batch(numbered(0, 3), base_offset=999), leader_epoch=4)
    second = log.append_as_leader(values_batch(numbered(3, 2)), leader_epoch=4)
    assert (first.first_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert log.log_end_offset == 5 and log.latest_epoch == 4
    raw = log.read(0, 1 << 20).read_bytes()
    table = to_table(raw)
    assert table.column("offset").to_pylist() == list(range(5))
    assert table.column("value").to_pylist() == numbered(0, 5)
    assert {BatchHeader.parse(raw).partition_leader_epoch} == {4}


def test_multi_batch_append_is_all_or_nothing(open_log):
    log = open_log(max_message_bytes=5000)
    good = values_batch(numbered(0, 2))
    bad = bytearray(values_batch(numbered(2, 2)))
    bad[-3] ^= 0x10
    with pytest.raises(errors.CorruptRecord):
        log.append_as_leader(good + bytes(bad), 0)
    with pytest.raises(errors.MessageTooLarge, match="max.message.bytes 5000"):
        log.append_as_leader(good + values_batch([b"x" * 6000]), 0)
    with pytest.raises(errors.CorruptRecord):
        log.append_as_leader(b"", 0)
    assert log.log_end_offset == 0 and log.size_in_bytes == 0
    result = log.append_as_leader(good + values_batch(numbered(2, 2)), 0)
    assert (result.first_offset, result.last_offset, result.record_count) == (0, 3, 4)


def test_read_is_batch_aligned_and_bounded(open_log):
    log = open_log()
    sizes = []
    for i in range(10):
        log.append_as_leader(values_batch(numbered(i * 3, 3)), 0)
        sizes.append(log.size_in_bytes - sum(sizes))
    whole = log.read(4, 1 << 20)
    assert (whole.first_offset, whole.position, whole.size) == (3, sizes[0], sum(sizes[1:]))
    assert log.read(4, sizes[1] + sizes[2] - 1).size == sizes[1]  # whole batches only
    assert log.read(4, 10).size == sizes[1]  # min_one_batch
    assert log.read(4, 10, min_one_batch=False).size == 0
    capped = log.read(0, 1 << 20, max_offset=9)  # batch at 9 excluded
    assert to_table(capped.read_bytes()).column("offset").to_pylist() == list(range(9))
    assert log.read(9, 1 << 20, max_offset=9).size == 0
    assert log.read(30, 100).size == 0  # at the log end: empty
    for bad in (-1, 31):
        with pytest.raises(errors.OffsetOutOfRange):
            log.read(bad, 100)


def test_rolls_on_segment_bytes_and_segment_ms(open_log, clock):
    log = open_log(segment_bytes=4000, segment_ms=60_000)
    one = values_batch([b"x" * 500])
    while len(log._segments) == 1:
        log.append_as_leader(one, 0)
    assert all(s.size <= 4000 for s in log._segments)
    assert log._segments[1].base_offset == log._segments[0].next_offset
    before = len(log._segments)
    log.append_as_leader(values_batch([b"t"], timestamp=1_000), 0)
    log.append_as_leader(values_batch([b"t"], timestamp=1_000 + 60_001), 0)
    assert len(log._segments) == before + 1
    big = values_batch([b"y" * 9000])  # larger than a segment: gets one of its own
    log.append_as_leader(big, 0)
    assert log._segments[-1].size == len(big)


def test_log_append_time_stamps_batches(open_log, clock):
    log = open_log(message_timestamp_type="LogAppendTime")
    result = log.append_as_leader(values_batch([b"a", b"b"], timestamp=5), 0)
    assert result.max_timestamp == clock.now
    table = to_table(log.read(0, 1 << 20).read_bytes())
    assert table.column("timestamp").to_pylist() == [clock.now] * 2


def test_follower_keeps_leader_offsets_and_epochs(open_log, tmp_path):
    leader = Log.open(tmp_path / "leader", LogConfig())
    leader.append_as_leader(values_batch(numbered(0, 3)), 1)
    leader.append_as_leader(values_batch(numbered(3, 2)), 3)
    raw = leader.read(0, 1 << 20).read_bytes()
    follower = open_log()
    result = follower.append_as_follower(raw)
    assert (result.first_offset, result.last_offset) == (0, 4)
    assert follower.read(0, 1 << 20).read_bytes() == raw
    assert follower.end_offset_for_epoch(1) == (1, 3) and follower.latest_epoch == 3
    with pytest.raises(errors.UnexpectedAppendOffset, match="expected 5"):
        follower.append_as_follower(raw)
    leader.close()


def test_high_watermark_is_clamped(open_log):
    log = open_log()
    log.append_as_leader(values_batch(numbered(0, 4)), 0)
    assert log.update_high_watermark(100) == 4
    assert log.update_high_watermark(-5) == 0
    log.update_high_watermark(3)
    log.close()
    assert open_log().high_watermark == 3


def test_reader_trims_exactly_and_spans_segments(open_log, log_dir):
    log = open_log(segment_bytes=3000, index_interval_bytes=0)
    for i in range(30):
        log.append_as_leader(values_batch(numbered(i * 5, 5)), 0)
    assert len(log._segments) > 3
    for start, end in [(0, 150), (7, 8), (12, 133), (149, 150), (5, 5)]:
        table = pa.Table.from_batches(list(read_offset_range(log_dir, start, end)),
                                      schema=to_table(b"").schema)
        assert table.column("offset").to_pylist() == list(range(start, end))
        assert table.column("value").to_pylist() == numbered(start, end - start)
    with pytest.raises(errors.OffsetOutOfRange, match="only up to 150"):
        list(read_offset_range(log_dir, 140, 151))


def test_reader_sees_retention_as_out_of_range(open_log, log_dir):
    log = open_log(segment_bytes=3000, retention_bytes=1, file_delete_delay_ms=0)
    for i in range(20):
        log.append_as_leader(values_batch(numbered(i * 5, 5)), 0)
    log.update_high_watermark(log.log_end_offset)
    reader = read_offset_range(log_dir, 0, 100)
    first = next(reader)  # the reader has started on segment 0 ...
    assert first.column("offset")[0].as_py() == 0
    assert log.apply_retention() > 0  # ... when retention deletes the following ones
    with pytest.raises(errors.OffsetOutOfRange):
        list(reader)
    with pytest.raises(errors.OffsetOutOfRange, match="below the log start"):
        list(read_offset_range(log_dir, 0, 10))


def test_closed_log_refuses_work(open_log):
    log = open_log()
    log.close()
    log.close()
    with pytest.raises(errors.StorageError, match="closed"):
        log.append_as_leader(values_batch([b"a"]), 0)


def test_fetch_slice_survives_rename_for_delayed_delete(open_log, clock):
    log = open_log(segment_bytes=2000, retention_ms=1000, file_delete_delay_ms=60_000)
    for _i in range(10):
        log.append_as_leader(values_batch([b"x" * 300], timestamp=clock.now), 0)
    log.update_high_watermark(log.log_end_offset)
    fetched = log.read(0, 1 << 20)
    assert log.apply_retention(now_ms=clock.now + 5000) > 0
    assert fetched.read_bytes()[:HEADER_SIZE]  # read from the .deleted file
    log.apply_retention(now_ms=clock.now + 70_000)  # purges the renamed files
    with pytest.raises(errors.OffsetOutOfRange):
        fetched.read_bytes()


def test_a_created_log_works_and_reopens_as_the_log_open_would_have_made(log_dir, clock, open_log):
    """``Log.create`` (a directory just made: nothing read) gives the same log ``Log.open`` makes
    of an empty directory: appends, reads, and a reopen that finds exactly what was written."""
    log_dir.mkdir()
    created = Log.create(log_dir, LogConfig(), now_ms=clock)
    try:
        assert (created.log_start_offset, created.log_end_offset, created.high_watermark) == (0, 0, 0)
        created.append_as_leader(values_batch(numbered(0, 3)), leader_epoch=2)
        created.flush()
    finally:
        created.close()
    reopened = open_log()
    assert reopened.log_end_offset == 3 and reopened.latest_epoch == 2
    assert to_table(reopened.read(0, 1 << 20).read_bytes()).column("value").to_pylist() == numbered(0, 3)


@pytest.mark.parametrize("kafka", [False, True], ids=["ember batch", "Kafka batch"])
def test_a_compacted_log_refuses_records_without_a_key_and_writes_nothing(open_log, kafka):
    log = open_log(cleanup_policy="compact")
    keyed = pa.table({"key": [b"a", b"b"], "value": [b"1", b"2"]})
    keyless = pa.table({"key": [b"a", None], "value": [b"1", b"2"]})
    build = kafka_batch if kafka else table_batch
    assert log.append_as_leader(build(keyed), 0).last_offset == 1
    with pytest.raises(errors.InvalidRecord, match="Compacted topic cannot accept message without key"):
        log.append_as_leader(build(keyless), 0)
    assert log.log_end_offset == 2
