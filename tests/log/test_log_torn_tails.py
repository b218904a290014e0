"""Recovery without an operator: whatever a full or failing disk tore at the end of a segment
(zeros where a header should be, a bad magic, a length past the end of the file, a bad CRC),
``Log.open`` truncates it after the last whole batch and keeps every whole batch before it, in
the unflushed region as below the recovery point."""
from __future__ import annotations

import logging

import pytest
from log_helpers import numbered, values_batch

from ember.log import read_offset_range
from ember.log.segment import READ_CHUNK
from ember.record.batch import check_batch

SEGMENT_BYTES = 3000


def torn(kind: str, next_offset: int) -> bytes:
    """Bytes a failed write can leave after the last whole batch, which ends at ``next_offset``."""
    batch = bytearray(values_batch(numbered(next_offset, 4), base_offset=next_offset))
    if kind == "zeros":  # a hole where the header should be, then record bytes (the incident)
        return bytes(887) + bytes(batch[100:])
    if kind == "bad_magic":
        batch[16] = 120
        return bytes(batch)
    if kind == "past_eof":  # the header promises more bytes than the file holds
        return bytes(batch[:len(batch) // 2])
    if kind == "bad_crc":
        batch[17] ^= 0xFF
        return bytes(batch)
    raise AssertionError(kind)


TEARS = ["zeros", "bad_magic", "past_eof", "bad_crc"]


def write_batches(log, count):
    for _ in range(count):
        log.append_as_leader(values_batch(numbered(log.log_end_offset, 4)), 0)


def crash(log):
    """Drop a log without closing: nothing flushed or checkpointed after the last flush."""
    for segment in log._segments:
        segment.close()
    log._closed = True


def segment_logs(log_dir):
    return sorted(log_dir.glob("*.log"))


def assert_whole_batches(path):
    data = path.read_bytes()
    position = 0
    while position < len(data):
        position += check_batch(data, position).size
    assert position == len(data)


def assert_recovered(log, log_dir, end):
    assert log.log_end_offset == end
    assert [v for b in read_offset_range(log_dir, 0, end) for v in b.column("value").to_pylist()] \
        == numbered(0, end)
    for path in segment_logs(log_dir):
        assert_whole_batches(path)
    assert log.append_as_leader(values_batch([b"next"]), 0).first_offset == end


@pytest.mark.parametrize("kind", TEARS)
def test_a_torn_tail_of_the_unflushed_segment_is_truncated(open_log, log_dir, kind):
    log = open_log()
    write_batches(log, 3)
    log.flush()
    write_batches(log, 2)
    size, end = log.size_in_bytes, log.log_end_offset
    crash(log)
    with open(segment_logs(log_dir)[-1], "ab") as f:
        f.write(torn(kind, end))
    log = open_log()
    assert log.size_in_bytes == size
    assert_recovered(log, log_dir, end)


@pytest.mark.parametrize("kind", TEARS)
def test_a_torn_tail_below_the_recovery_point_of_the_last_segment_is_truncated(
        open_log, log_dir, kind, caplog):
    log = open_log()
    write_batches(log, 3)
    size, end = log.size_in_bytes, log.log_end_offset
    log.close()  # the recovery point is the log end: the tear sits in "trusted" bytes
    path = segment_logs(log_dir)[-1]
    with open(path, "ab") as f:
        f.write(torn(kind, end))
    with caplog.at_level(logging.WARNING, logger="ember.log"):
        log = open_log()
    assert log.size_in_bytes == size
    assert_recovered(log, log_dir, end)
    assert any(path.name in r.getMessage() and f"position {size}" in r.getMessage()
               and "dropping" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("kind", TEARS)
def test_a_torn_tail_of_a_sealed_segment_is_truncated_and_later_segments_kept(
        open_log, log_dir, kind):
    log = open_log(segment_bytes=SEGMENT_BYTES, index_interval_bytes=0)
    write_batches(log, 12)
    end = log.log_end_offset
    log.close()
    sealed, second = segment_logs(log_dir)[:2]
    size = sealed.stat().st_size
    with open(sealed, "ab") as f:  # the segment's batches end exactly where the next one begins
        f.write(torn(kind, int(second.stem)))
    log = open_log(segment_bytes=SEGMENT_BYTES, index_interval_bytes=0)
    assert sealed.stat().st_size == size and len(segment_logs(log_dir)) == len(log._segments) > 2
    assert_recovered(log, log_dir, end)


def test_a_tear_that_lost_offsets_in_a_sealed_segment_drops_the_later_segments(open_log, log_dir):
    log = open_log(segment_bytes=SEGMENT_BYTES)
    write_batches(log, 12)
    log.close()
    sealed = segment_logs(log_dir)[0]
    data = sealed.read_bytes()
    last = 0
    while last + check_batch(data, last).size < len(data):
        last += check_batch(data, last).size
    lost_from = check_batch(data, last).base_offset
    with open(sealed, "r+b") as f:  # its last batch torn: offsets below the next segment are gone
        f.truncate(last + 70)
    log = open_log(segment_bytes=SEGMENT_BYTES)
    # offsets never change once assigned: the log ends at the tear (a replica fetches the rest
    # again from the leader) rather than leaving a gap
    assert len(segment_logs(log_dir)) == len(log._segments) == 1
    assert sealed.stat().st_size == last
    assert_recovered(log, log_dir, lost_from)


def test_a_sealed_segment_that_lost_whole_batches_drops_the_later_segments(open_log, log_dir):
    log = open_log(segment_bytes=SEGMENT_BYTES)
    write_batches(log, 12)
    log.close()
    sealed = segment_logs(log_dir)[0]
    data = sealed.read_bytes()
    first = check_batch(data, 0)
    sealed.write_bytes(data[:first.size])  # cut at a batch boundary: no torn bytes, but a gap
    log = open_log(segment_bytes=SEGMENT_BYTES)
    assert len(segment_logs(log_dir)) == len(log._segments) == 1
    assert_recovered(log, log_dir, first.last_offset + 1)


def test_a_torn_batch_larger_than_a_read_chunk_is_truncated(open_log, log_dir):
    log = open_log()
    write_batches(log, 3)
    size, end = log.size_in_bytes, log.log_end_offset
    log.close()
    header = bytearray(values_batch([b"x"], base_offset=end)[:61])
    header[8:12] = (READ_CHUNK + 1_018_981).to_bytes(4, "big")  # runs far past the end
    with open(segment_logs(log_dir)[-1], "ab") as f:
        f.write(bytes(header) + b"r" * 5000)
    log = open_log()
    assert log.size_in_bytes == size
    assert_recovered(log, log_dir, end)
