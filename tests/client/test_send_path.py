"""The producer's C send path (ember.client._append): which calls it takes, where it puts a record
(the sticky partition, or Kafka's murmur2 partition of its key), what it appends, and that
it and the Python path share one batch's lists, size, count and the buffer's bytes in use."""
from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.client._append import RecordAppender
from ember.client.accumulator import BATCH_OVERHEAD, RECORD_OVERHEAD, RecordAccumulator
from ember.client.futures import FutureRecordMetadata, ProduceResult
from ember.client.partitioner import partition_for_key, partitions_for_keys
from ember.wire.types import TopicPartition

TPS = [TopicPartition("t", 0), TopicPartition("t", 1)]


class SlowPath:
    """Stands in for the Python ``Producer.send``: records each call it gets."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        self.calls.append((args, kwargs))
        return "slow"


def make(batch_size: int = 10_000, buffer_memory: int = 1 << 20, max_request_size: int = 1 << 20,
         sticky: int | None = 1) -> tuple[RecordAccumulator, RecordAppender, SlowPath]:
    acc = RecordAccumulator(batch_size=batch_size, buffer_memory=buffer_memory, linger_ms=5)
    slow = SlowPath()
    acc.appender.configure_send({"t": TPS}, {} if sticky is None else {"t": sticky}, max_request_size,
                                RECORD_OVERHEAD, BATCH_OVERHEAD, slow)
    return acc, acc.appender, slow


def open_batch(acc: RecordAccumulator, tp: TopicPartition = TPS[1]) -> None:
    """A first record through the Python path opens the partition's batch, as the first send does."""
    acc.append(tp, 1, b"first", b"v0", None, RECORD_OVERHEAD + 7, 1.0)


def test_a_keyless_bytes_value_is_appended_to_the_sticky_partitions_open_batch() -> None:
    acc, send, slow = make()
    open_batch(acc)
    before_ms = time.time_ns() // 1_000_000
    future = send("t", b"hello")
    after_ms = time.time_ns() // 1_000_000
    assert isinstance(future, FutureRecordMetadata) and slow.calls == []
    batch = acc.peek(TPS[1])
    assert batch is not None
    assert batch.values == [b"v0", b"hello"] and batch.keys == [b"first", None] and batch.headers == [None, None]
    assert before_ms <= batch.timestamps[1] <= after_ms
    assert batch.count == 2 and batch.size == 2 * RECORD_OVERHEAD + 7 + 5 and acc.used == batch.size
    batch.future.set_result(ProduceResult("t", 1, 40))
    metadata = future.get(1)
    assert (metadata.topic, metadata.partition, metadata.offset, metadata.timestamp) == ("t", 1, 41, batch.timestamps[1])


@pytest.mark.parametrize("args, kwargs", [
    (("t", b"v"), {"key": "a str key"}),
    (("t", b"v", b"k"), {"key": b"k"}),
    (("t", b"v"), {"value": b"twice"}),
    (("t", b"v"), {"headers": [("h", b"1")]}),
    (("t", b"v"), {"partition": 0}),
    (("t", b"v"), {"timestamp_ms": 5}),
    (("t", "a str"), {}),
    (("t", bytearray(b"v")), {}),
    (("t", None), {}),
    (("t",), {}),
    (("other-topic", b"v"), {}),
])
def test_every_other_call_goes_to_the_python_path_unchanged(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    acc, send, slow = make()
    open_batch(acc)
    assert send(*args, **kwargs) == "slow"
    assert slow.calls == [(args, kwargs)]
    assert acc.peek(TPS[1]).count == 1   # type: ignore[union-attr]


def test_value_and_key_none_by_keyword_take_the_c_path() -> None:
    acc, send, slow = make()
    open_batch(acc)
    assert isinstance(send("t", value=b"a"), FutureRecordMetadata)
    assert isinstance(send("t", b"b", key=None), FutureRecordMetadata)
    assert isinstance(send("t", key=None, value=b"c"), FutureRecordMetadata)
    assert slow.calls == [] and acc.peek(TPS[1]).values == [b"v0", b"a", b"b", b"c"]   # type: ignore[union-attr]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.integers(min_value=1, max_value=2))
def test_a_keyed_record_goes_to_kafkas_murmur2_partition(key: bytes, partitions: int) -> None:
    acc = RecordAccumulator(batch_size=1 << 20, buffer_memory=1 << 30, linger_ms=5)
    slow = SlowPath()
    acc.appender.configure_send({"t": TPS[:partitions]}, {}, 1 << 20, RECORD_OVERHEAD, BATCH_OVERHEAD, slow)
    for tp in TPS[:partitions]:
        open_batch(acc, tp)
    future = acc.appender("t", b"v", key=key)
    # against the columnar murmur2 (pyarrow.compute), an implementation apart from the C one both paths share
    expected = TPS[partitions_for_keys(pa.array([key], pa.binary()), partitions)[0].as_py()]
    assert expected == TPS[partition_for_key(key, partitions)]
    assert isinstance(future, FutureRecordMetadata) and slow.calls == []
    batch = acc.peek(expected)
    assert batch is not None and batch.keys[-1] == key and batch.values[-1] == b"v"
    assert batch.size == 2 * RECORD_OVERHEAD + 7 + 1 + len(key)
    assert isinstance(acc.appender("t", b"w", key), FutureRecordMetadata) and batch.keys[-1] == key


def test_a_new_batch_a_full_buffer_a_large_record_or_no_sticky_choice_take_the_python_path() -> None:
    acc, send, slow = make(batch_size=RECORD_OVERHEAD * 2 + 20)
    assert send("t", b"v") == "slow"               # no open batch yet
    open_batch(acc)
    assert isinstance(send("t", b"v"), FutureRecordMetadata)
    assert send("t", b"v" * 30) == "slow"          # would overflow batch_size: the Python path starts a new batch
    acc, send, slow = make(buffer_memory=RECORD_OVERHEAD + 10)
    open_batch(acc)
    assert send("t", b"v" * 5) == "slow"           # buffer_memory full: the Python path waits
    acc, send, slow = make(max_request_size=BATCH_OVERHEAD + RECORD_OVERHEAD + 10)
    open_batch(acc)
    assert send("t", b"v" * 11) == "slow"          # over max_request_size: the Python path raises
    acc, send, slow = make(sticky=None)
    open_batch(acc)
    assert send("t", b"v") == "slow"               # no partition chosen for the topic yet
    acc, send, slow = make(sticky=2)
    open_batch(acc)
    assert send("t", b"v") == "slow"               # the topic shrank below the chosen partition


def test_after_close_every_send_takes_the_python_path() -> None:
    acc, send, slow = make()
    open_batch(acc)
    send.close()
    assert send("t", b"v") == "slow"


def test_a_batch_whose_lists_were_replaced_takes_the_python_path_and_the_lock_is_released() -> None:
    acc, send, slow = make()
    open_batch(acc)
    batch = acc.peek(TPS[1])
    assert batch is not None
    batch.values = ("not", "a list")  # type: ignore[assignment]
    assert send("t", b"v") == "slow"
    assert acc._lock.acquire(timeout=1)
    acc._lock.release()


def test_an_appender_whose_init_never_ran_takes_the_python_path() -> None:
    appender = RecordAppender.__new__(RecordAppender)
    slow = SlowPath()
    appender.configure_send({"t": TPS}, {"t": 0}, 1 << 20, RECORD_OVERHEAD, BATCH_OVERHEAD, slow)
    assert appender("t", b"v") == "slow"


def test_a_subclass_overriding_send_keeps_its_override() -> None:
    from ember.client import Producer

    class Recording(Producer):
        def send(self, *args: Any, **kwargs: Any) -> Any:   # type: ignore[override]
            return "overridden"

    producer = Recording("127.0.0.1:1", max_block_ms=100)
    try:
        assert producer.send("t", b"v") == "overridden"
    finally:
        producer.close(0)
    plain = Producer("127.0.0.1:1", max_block_ms=100)
    try:
        assert isinstance(plain.send, RecordAppender)
    finally:
        plain.close(0)


def test_an_appender_without_configure_send_refuses_calls() -> None:
    acc = RecordAccumulator(batch_size=1000, buffer_memory=1000, linger_ms=5)
    with pytest.raises(RuntimeError, match="configure_send"):
        acc.appender("t", b"v")


def test_the_future_type_must_be_a_record_future_without_fields() -> None:
    acc = RecordAccumulator(batch_size=1000, buffer_memory=1000, linger_ms=5)
    with pytest.raises(TypeError):
        RecordAppender({}, acc._lock, 10, 10, object)   # type: ignore[arg-type]

    class WithField(FutureRecordMetadata):
        __slots__ = ("extra",)
    with pytest.raises(TypeError, match="no fields"):
        RecordAppender({}, acc._lock, 10, 10, WithField)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.binary(max_size=40)), min_size=1, max_size=80),
       st.integers(min_value=RECORD_OVERHEAD + 40, max_value=600))
def test_fast_and_python_appends_interleaved_keep_every_batch_consistent(
        sends: list[tuple[bool, bytes]], batch_size: int) -> None:
    """However the two paths interleave: each batch's lists stay aligned with its count, sizes add
    up to the bytes in use, and the records come out in the order they were sent."""
    acc = RecordAccumulator(batch_size=batch_size, buffer_memory=1 << 30, linger_ms=5)
    tp = TPS[0]

    def python_path(topic: str, value: bytes, key: Any = None) -> FutureRecordMetadata:
        return acc.append(tp, 7, key, value, None, RECORD_OVERHEAD + len(value), 1.0)

    acc.appender.configure_send({"t": [tp]}, {"t": 0}, 1 << 20, RECORD_OVERHEAD, BATCH_OVERHEAD, python_path)
    futures = []
    for fast, value in sends:
        futures.append(acc.appender("t", value) if fast else python_path("t", value))
    batches = []
    while (batch := acc.pop(tp, 1_000_000)) is not None:
        batches.append(batch)
    assert sum(b.size for b in batches) == acc.used == sum(RECORD_OVERHEAD + len(v) for _, v in sends)
    for batch in batches:
        assert len(batch.keys) == len(batch.values) == len(batch.timestamps) == len(batch.headers) == batch.count
        assert batch.size <= batch_size or batch.count == 1
    assert [v for b in batches for v in b.values] == [v for _, v in sends]
    offset = 0
    for batch in batches:
        batch.future.set_result(ProduceResult("t", 0, offset))
        offset += batch.count
    assert [f.get(0).offset for f in futures] == list(range(len(sends)))


def test_record_futures_are_collected_with_their_batch_future() -> None:
    """A callback that refers to its own future makes a cycle through the C fields: the collector must see it."""
    import gc
    import weakref

    batch: Future[ProduceResult] = Future()
    future = FutureRecordMetadata(batch, 0, 1)
    future.add_callback(lambda metadata, me=future: me)
    ref = weakref.ref(batch)
    del batch, future
    gc.collect()
    assert ref() is None
