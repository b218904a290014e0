"""RecordAccumulator and record futures, without a broker."""
from __future__ import annotations

import threading
import time

import pytest

from ember.client.accumulator import RecordAccumulator
from ember.client.futures import ProduceResult
from ember.errors import KafkaTimeoutError, NotLeaderOrFollower
from ember.record.batch import build_batch, decode_batches
from ember.record.schema import RECORD_SCHEMA
from ember.wire.types import RecordMetadata, TopicPartition

TP = TopicPartition("t", 0)


def make(batch_size: int = 1000, buffer_memory: int = 1 << 20, linger_ms: float = 5) -> RecordAccumulator:
    return RecordAccumulator(batch_size=batch_size, buffer_memory=buffer_memory, linger_ms=linger_ms)


def test_records_fill_batches_up_to_batch_size() -> None:
    acc = make(batch_size=250)
    for i in range(10):
        acc.append(TP, 1000 + i, b"k%d" % i, b"v" * 50, None, 80, 1.0)
    first = acc.pop(TP, 5)
    assert first.count == 3 and first.size == 240
    table = first.records()
    assert table.schema == RECORD_SCHEMA
    assert table.column("key").to_pylist() == [b"k0", b"k1", b"k2"]
    assert table.column("timestamp").to_pylist() == [1000, 1001, 1002]


def test_batch_roundtrips_through_the_log_format() -> None:
    acc = make()
    acc.append(TP, 5, None, b"a", [("h", b"1")], 30, 1.0)
    acc.append(TP, 6, b"k", None, None, 30, 1.0)
    batch = acc.pop(TP, 5)
    decoded = next(decode_batches(build_batch(batch.records())))
    assert decoded.column("value").to_pylist() == [b"a", None]
    assert decoded.column("headers").to_pylist() == [[{"key": "h", "value": b"1"}], None]


def test_abort_on_new_batch_for_sticky_partitioner() -> None:
    acc = make(batch_size=100)
    assert acc.append(TP, 0, None, b"x", None, 60, 1.0, abort_on_new_batch=True) is None
    assert acc.append(TP, 0, None, b"x", None, 60, 1.0) is not None
    assert acc.append(TP, 0, None, b"x", None, 30, 1.0, abort_on_new_batch=True) is not None
    assert acc.append(TP, 0, None, b"x", None, 30, 1.0, abort_on_new_batch=True) is None


def test_linger_makes_a_partial_batch_ready() -> None:
    acc = make(linger_ms=10_000)   # long enough that a loaded machine never reaches it by accident
    acc.append(TP, 0, None, b"x", None, 30, 1.0)
    ready, wait = acc.next_ready(time.monotonic())
    assert ready == [] and 0 < wait <= 10
    ready, _ = acc.next_ready(time.monotonic() + 11)
    assert ready == [TP]


def test_a_new_batch_wakes_the_sender_and_more_records_in_it_do_not() -> None:
    acc = make(batch_size=250, linger_ms=0)
    acc.append(TP, 1, None, b"v", None, 80, 1.0)
    assert acc.wakeup.is_set()          # with linger_ms=0 the sender would otherwise sleep retry_backoff_ms
    acc.wakeup.clear()
    acc.append(TP, 2, None, b"v", None, 80, 1.0)
    assert not acc.wakeup.is_set()      # the open batch: the sender already knows when it is due
    acc.append(TP, 3, None, b"v", None, 80, 1.0)
    acc.append(TP, 4, None, b"v", None, 80, 1.0)    # 320 > 250: a new batch
    assert acc.wakeup.is_set()


def test_full_buffer_blocks_then_times_out() -> None:
    acc = make(batch_size=100, buffer_memory=100)
    acc.append(TP, 0, None, b"x", None, 100, 1.0)
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError):
        acc.append(TP, 0, None, b"x", None, 50, 0.05)
    assert time.monotonic() - started >= 0.04


def test_released_memory_unblocks_append() -> None:
    acc = make(batch_size=100, buffer_memory=100)
    acc.append(TP, 0, None, b"x", None, 100, 1.0)
    batch = acc.pop(TP, 5)
    timer = threading.Timer(0.05, lambda: (acc.landed(batch), acc.release(batch)))
    timer.start()
    assert acc.append(TP, 0, None, b"y", None, 50, 5.0) is not None
    timer.join()


def test_retry_goes_back_in_sequence_order_and_waits_for_in_flight() -> None:
    acc = make(batch_size=50)
    for _ in range(4):
        acc.append(TP, 0, None, b"x", None, 50, 1.0)
    a, b = acc.pop(TP, 5), acc.pop(TP, 5)
    for seq, batch in enumerate((a, b)):
        batch.base_sequence, batch.encoded = seq, b"raw"
    b.attempts = 1
    acc.requeue(b)
    assert acc.peek(TP) is b
    assert acc.has_earlier_unacked(b)          # a is still in flight
    assert acc.pop(TP, 5) is None              # a retry waits until nothing else is in flight
    a.attempts = 1
    acc.requeue(a)
    assert acc.pop(TP, 5) is a and acc.pop(TP, 5) is None
    acc.landed(a)
    assert acc.pop(TP, 5) is b


def test_in_flight_limit_per_partition() -> None:
    acc = make(batch_size=50)
    for _ in range(3):
        acc.append(TP, 0, None, b"x", None, 50, 1.0)
    assert acc.pop(TP, 2) and acc.pop(TP, 2) and acc.pop(TP, 2) is None


def test_record_future_resolves_with_offset_of_its_record() -> None:
    acc = make()
    futures = [acc.append(TP, 100 + i, None, b"x", None, 30, 1.0) for i in range(3)]
    seen = []
    futures[2].add_callback(seen.append)
    batch = acc.pop(TP, 5)
    batch.future.set_result(ProduceResult("t", 0, 40))
    assert futures[1].get(1) == RecordMetadata("t", 0, 41, 101)
    assert seen == [RecordMetadata("t", 0, 42, 102)]
    assert futures[0].succeeded() and not futures[0].failed()


def test_record_future_errors() -> None:
    acc = make()
    future = acc.append(TP, 0, None, b"x", None, 30, 1.0)
    errors = []
    future.add_errback(errors.append)
    with pytest.raises(KafkaTimeoutError):
        future.get(0.01)
    acc.pop(TP, 5).future.set_exception(NotLeaderOrFollower("gone"))
    with pytest.raises(NotLeaderOrFollower):
        future.get(1)
    assert isinstance(errors[0], NotLeaderOrFollower) and future.failed()
