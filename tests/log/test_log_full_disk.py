"""A real full filesystem: a 2 MB tmpfs mounted by the test fills up under a log. Every append
that returned stays whole and readable, the segments hold only whole CRC-valid batches, and once
space is freed appending continues at the next offset; reopening recovers every acknowledged
batch."""
from __future__ import annotations

import pytest
from log_helpers import numbered, values_batch

from ember import errors
from ember.log import Log, LogConfig, read_offset_range
from ember.record.batch import check_batch


@pytest.fixture
def small_disk(tmpfs):
    """A 2m tmpfs (root only; unmounted at teardown)."""
    return tmpfs("2m")


def assert_whole_batches(path):
    data = path.read_bytes()
    position = 0
    while position < len(data):
        position += check_batch(data, position).size  # raises CorruptRecord at a torn batch
    assert position == len(data)


def crash(log):
    for segment in log._segments:
        segment.close()
    log._closed = True


def acknowledged_values(log_dir, end):
    return [v for b in read_offset_range(log_dir, 0, end) for v in b.column("value").to_pylist()]


@pytest.mark.parametrize("flush_each", [False, True])
def test_appending_until_the_disk_is_full_keeps_every_acknowledged_batch(small_disk, flush_each):
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (256 * 1024))
    log_dir = small_disk / "topic-0"
    config = LogConfig.from_properties({"segment.bytes": 200_000, "index.interval.bytes": 4096,
                                        **({"flush.messages": 1} if flush_each else {})})
    log = Log.open(log_dir, config)
    acked = 0
    failures = []
    for _ in range(1000):  # bounded; 2 MB fill up long before
        count = 40 + acked % 7  # batches of varying size, about 1-2 KB of values
        try:
            result = log.append_as_leader(values_batch(numbered(acked, count, size=40)), 0)
        except errors.StorageError as e:
            failures.append(e)
            if len(failures) == 3:
                break
            continue
        assert result.first_offset == acked
        acked = result.last_offset + 1
    assert failures, "the disk never filled up"
    assert all(isinstance(e.__cause__, OSError) for e in failures)
    assert not log.offline and log.log_end_offset == acked
    for path in log_dir.glob("*.log"):
        assert_whole_batches(path)
    assert acknowledged_values(log_dir, acked) == numbered(0, acked, size=40)

    filler.unlink()  # the operator frees space
    result = log.append_as_leader(values_batch(numbered(acked, 5, size=40)), 0)
    assert result.first_offset == acked
    acked = result.last_offset + 1
    crash(log)  # no clean shutdown: recovery has to cope with whatever the disk holds

    log = Log.open(log_dir, config)
    try:
        assert log.log_end_offset == acked
        assert acknowledged_values(log_dir, acked) == numbered(0, acked, size=40)
        for path in log_dir.glob("*.log"):
            assert_whole_batches(path)
        assert log.append_as_leader(values_batch([b"after"]), 0).first_offset == acked
    finally:
        log.close()
