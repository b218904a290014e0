"""``ember.client.Producer``: batched, asynchronous, optionally idempotent record producer.

``send`` partitions a record, appends it to the partition's open batch and returns a future; a
background :class:`~ember.client.sender.Sender` ships batches to partition leaders. On an instance,
``send`` is the C path of ``ember.client._append`` (a bytes value, with a bytes key or none, appended to
an open batch, a sixth to a tenth of the Python method's cost, docs/clients.md); every other call falls through to the
method below. ``send_batch``
is the columnar path: it partitions a whole Arrow table with vectorized murmur2 and queues large,
ready-made batches. Config names are Kafka's in snake_case (``linger_ms`` = ``linger.ms``).

``producer_id=`` gives an idempotent producer a caller-chosen identity instead of one from
``InitProducerId``: sending the same batches again under it is deduplicated by the broker, which
is how the Spark sink makes re-run micro-batches exactly-once.

``transactional_id=`` makes a transactional producer (Kafka's API: ``init_transactions``,
``begin_transaction``, ``send_offsets_to_transaction``, ``commit_transaction``,
``abort_transaction``; the state machine is :class:`~ember.client.transaction_manager.TransactionManager`).
Its ``send`` is the Python method (each send checks that a transaction is open).
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future, wait
from functools import partial
from typing import Any, Callable, Iterable, Mapping, Optional

import pyarrow as pa
import pyarrow.compute as pc

from ember.client.accumulator import BATCH_OVERHEAD, RECORD_OVERHEAD, Headers, ProducerBatch, RecordAccumulator
from ember.client.futures import FutureRecordMetadata, ProduceResult
from ember.client.group_metadata import ConsumerGroupMetadata
from ember.client.metadata import MetadataClient
from ember.client.partitioner import StickyPartitioner, partition_for_key, partitions_for_keys
from ember.client.sender import Sender, SenderConfig
from ember.client.transaction_manager import TransactionManager
from ember.errors import (
    EmberError,
    IllegalStateError,
    KafkaTimeoutError,
    MessageTooLarge,
    TransactionAborted,
    UnknownTopicOrPartition,
)
from ember.record.header import COMPRESSION_TYPES
from ember.record.schema import RECORD_SCHEMA
from ember.security.client import ClientSecurity
from ember.wire.types import BatchMetadata, OffsetAndMetadata, TopicPartition

Serializer = Optional[Callable[[Any], Optional[bytes]]]
_ACKS = {0: 0, 1: 1, -1: -1, "all": -1, "0": 0, "1": 1, "-1": -1}


class Producer:
    """Publish records to ember topics (see docs/clients.md for every option)."""

    def __init__(self, bootstrap_servers: str | Iterable[str] = "127.0.0.1:9092", *, acks: int | str | None = None,
                 linger_ms: float = 5, batch_size: int = 256 * 1024, buffer_memory: int = 64 * 1024 * 1024,
                 max_block_ms: int = 60000, compression_type: str | None = None, retries: int = 2**31 - 1,
                 retry_backoff_ms: int = 100, delivery_timeout_ms: int = 120000, request_timeout_ms: int = 30000,
                 max_request_size: int = 1024 * 1024, enable_idempotence: bool | None = None,
                 max_in_flight_requests_per_connection: int = 5, metadata_max_age_ms: int = 300000,
                 key_serializer: Serializer = None, value_serializer: Serializer = None,
                 producer_id: int | None = None, producer_epoch: int = 0, transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60000, **security: Any) -> None:
        """``security``: ``security_protocol``, ``ssl_cafile``, ``sasl_mechanism`` and the other security keywords of
        :class:`ember.security.client.SecurityOptions` (kafka-python's names). ``acks`` defaults to 1, to
        ``'all'`` with a ``transactional_id`` (a transactional producer is idempotent with acks=all)."""
        if acks is None:
            acks = "all" if transactional_id is not None else 1
        if acks not in _ACKS:
            raise ValueError(f"acks must be 0, 1 or 'all', not {acks!r}")
        acks = _ACKS[acks]
        compression = compression_type or "none"
        if compression not in COMPRESSION_TYPES:
            raise ValueError(f"compression_type must be one of {sorted(COMPRESSION_TYPES)}, not {compression_type!r}")
        if not 1 <= max_in_flight_requests_per_connection <= 5:
            raise ValueError("max_in_flight_requests_per_connection must be between 1 and 5")
        if enable_idempotence and acks == 0:
            raise ValueError("enable_idempotence needs acks=1 or 'all' (acks=0 gets no answer to dedup by)")
        idempotent = acks != 0 if enable_idempotence is None else enable_idempotence
        if transactional_id is not None:
            _check_transactional(acks, idempotent, producer_id)
        if producer_id is not None:
            _check_identity(producer_id, producer_epoch, idempotent)
        if delivery_timeout_ms < linger_ms + request_timeout_ms:
            raise ValueError("delivery_timeout_ms must be at least linger_ms + request_timeout_ms")
        self.max_block_s = max_block_ms / 1000
        self._request_timeout_s = request_timeout_ms / 1000
        self.max_request_size = max_request_size
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._metadata = MetadataClient(bootstrap_servers, request_timeout_ms=request_timeout_ms,
                                        retry_backoff_ms=retry_backoff_ms, metadata_max_age_ms=metadata_max_age_ms,
                                        security=ClientSecurity.from_options(security, "Producer"))
        self._accumulator = RecordAccumulator(batch_size=batch_size, buffer_memory=buffer_memory, linger_ms=linger_ms)
        self._transactions = None if transactional_id is None else TransactionManager.connect(
            self._metadata, transactional_id, transaction_timeout_ms, request_timeout_ms / 1000)
        self._sticky = StickyPartitioner()
        self._partitions: dict[str, list[TopicPartition]] = {}
        self._topics: set[str] = set()
        self._closed = False
        self._sender = Sender(self._metadata, self._accumulator, SenderConfig(
            acks=acks, compression=compression, retries=retries, retry_backoff_s=retry_backoff_ms / 1000,
            delivery_timeout_s=delivery_timeout_ms / 1000, request_timeout_ms=request_timeout_ms,
            max_in_flight=max_in_flight_requests_per_connection, max_request_size=max_request_size,
            idempotent=idempotent, producer_id=-1 if producer_id is None else producer_id,
            producer_epoch=producer_epoch), self._topics, self._transactions)
        self._sender.start()
        # the C path takes bytes as they are, and stands for Producer.send only (not a subclass's override)
        if (value_serializer is None and key_serializer is None and type(self).send is Producer.send
                and self._transactions is None):
            appender = self._accumulator.appender
            appender.configure_send(self._partitions, self._sticky.current, max_request_size, RECORD_OVERHEAD,
                                    BATCH_OVERHEAD, partial(Producer.send, self))
            self.__dict__["send"] = appender   # shadows the method on this instance only

    # -- single records ----------------------------------------------------------------------

    def send(self, topic: str, value: Any = None, key: Any = None, headers: Optional[Headers] = None,
             partition: Optional[int] = None, timestamp_ms: Optional[int] = None) -> FutureRecordMetadata:
        """Queue one record; the future resolves to its RecordMetadata once the leader acknowledges it.

        Blocks (up to ``max_block_ms``) only for topic metadata or when ``buffer_memory`` is full."""
        if self._closed:
            raise RuntimeError("send() on a closed Producer")
        if self._transactions is not None:
            self._transactions.check_send()
        if self._key_serializer is not None and key is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None and value is not None:
            value = self._value_serializer(value)
        if value.__class__ is not bytes and value is not None:
            value = _as_bytes(value, "value")
        if key.__class__ is not bytes and key is not None:
            key = _as_bytes(key, "key")
        tps = self._partitions.get(topic) or self._await_topic(topic)
        size = RECORD_OVERHEAD + (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
        if headers:
            headers = [(k, v if v is None or v.__class__ is bytes else _as_bytes(v, "header value")) for k, v in headers]
            size += sum(len(k) + len(v or b"") + 8 for k, v in headers)
        if size + BATCH_OVERHEAD > self.max_request_size:
            raise _too_large(f"the record is {size} bytes", self.max_request_size)
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        acc = self._accumulator
        if partition is not None:
            if not 0 <= partition < len(tps):
                raise UnknownTopicOrPartition(
                    f"topic {topic!r} has {len(tps)} partitions; there is no partition {partition}"
                    + (f": add partitions first (Admin.create_partitions({topic!r}, {partition + 1}), "
                       f"`ember topics alter {topic} --partitions {partition + 1}`)" if partition >= len(tps) else ""))
            return acc.append(tps[partition], timestamp_ms, key, value, headers, size, self.max_block_s)
        if key is not None:
            return acc.append(tps[partition_for_key(key, len(tps))], timestamp_ms, key, value, headers, size,
                              self.max_block_s)
        sticky = self._sticky.partition(topic, len(tps))
        future = acc.append(tps[sticky], timestamp_ms, key, value, headers, size, self.max_block_s, True)
        if future is None:
            self._sticky.on_new_batch(topic, len(tps), sticky)
            future = acc.append(tps[self._sticky.partition(topic, len(tps))], timestamp_ms, key, value, headers,
                                size, self.max_block_s)
        return future

    def _await_topic(self, topic: str) -> list[TopicPartition]:
        """Partitions of ``topic``, waiting up to max_block_ms for metadata (topics may be new)."""
        self._topics.add(topic)
        count = self._metadata.partition_count(topic)
        if count is None:
            try:
                count = len(self._metadata.wait_for_topic(topic, self.max_block_s).partitions)
            except EmberError as exc:
                if isinstance(exc, UnknownTopicOrPartition):
                    raise UnknownTopicOrPartition(f"topic {topic!r} not found in metadata after "
                                                  f"{self.max_block_s * 1000:.0f} ms (max_block_ms); create it "
                                                  f"first (Admin.create_topic, `ember topics create {topic}`) "
                                                  f"unless the brokers auto-create topics") from None
                raise
        tps = [TopicPartition(topic, p) for p in range(count)]
        self._partitions[topic] = tps
        return tps

    # -- columnar ----------------------------------------------------------------------------

    def send_batch(self, topic: str, table: pa.Table | pa.RecordBatch, partition: Optional[int] = None
                   ) -> "Future[dict[TopicPartition, list[BatchMetadata]]]":
        """Send a whole Arrow table (columns ``value`` and optionally ``key``, ``timestamp`` (int64 ms
        or timestamp), ``headers``) as large batches; no per-record Python work.

        Rows go to ``partition``, or by murmur2 of ``key`` (Kafka's partitioner, vectorized), or, with
        no keys, in large contiguous runs spread over the partitions. Per partition, rows keep their
        table order. The future resolves to the batches written per partition."""
        if self._closed:
            raise RuntimeError("send_batch() on a closed Producer")
        if self._transactions is not None:
            self._transactions.check_send()
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        unknown = set(table.column_names) - set(RECORD_SCHEMA.names)
        if unknown or "value" not in table.column_names:
            raise ValueError(f"send_batch needs a 'value' column and at most {RECORD_SCHEMA.names}; got {table.column_names}")
        tps = self._partitions.get(topic) or self._await_topic(topic)
        if partition is not None and not 0 <= partition < len(tps):
            raise UnknownTopicOrPartition(f"topic {topic!r} has {len(tps)} partitions; there is no partition {partition}")
        sizes = _row_sizes(table)
        largest = pc.max(sizes).as_py() or 0
        if largest + BATCH_OVERHEAD > self.max_request_size:
            raise _too_large(f"a row is {largest} bytes", self.max_request_size)
        batches: list[ProducerBatch] = []
        for p, piece, piece_sizes in self._split_by_partition(topic, len(tps), table, sizes, partition):
            for chunk, chunk_size in _chunks(piece, piece_sizes, self.max_request_size - BATCH_OVERHEAD):
                batches.append(self._accumulator.append_table(tps[p], chunk, chunk_size + BATCH_OVERHEAD,
                                                              self.max_block_s))
        return _gather(batches)

    def _split_by_partition(self, topic: str, count: int, table: pa.Table, sizes: pa.Array,
                            partition: Optional[int]) -> Iterable[tuple[int, pa.Table, pa.Array]]:
        if partition is not None or table.num_rows == 0:
            yield (partition if partition is not None else 0), table, sizes
            return
        keys = table.column("key") if "key" in table.column_names else None
        if keys is None or keys.null_count == len(keys):
            # No keys: contiguous slices, one partition each, starting at the sticky partition.
            start = self._sticky.partition(topic, count)
            per_part = -(-table.num_rows // count)
            for i in range(count):
                piece = table.slice(i * per_part, per_part)
                if piece.num_rows:
                    yield (start + i) % count, piece, sizes.slice(i * per_part, per_part)
            self._sticky.on_new_batch(topic, count, start)
            return
        parts = partitions_for_keys(keys, count).fill_null(self._sticky.partition(topic, count))
        order = pc.sort_indices(parts)   # stable: rows of a partition keep their order
        table, sizes, parts = table.take(order), sizes.take(order), parts.take(order)
        runs = pc.run_end_encode(parts)
        begin = 0
        for end, p in zip(runs.run_ends.to_pylist(), runs.values.to_pylist()):
            yield p, table.slice(begin, end - begin), sizes.slice(begin, end - begin)
            begin = end

    # -- transactions (Kafka's API; each call bounded by ``timeout`` seconds, default max_block_ms) --

    def init_transactions(self, timeout: Optional[float] = None) -> None:
        """Get the transactional id's producer id and epoch, fencing every earlier producer of it
        (whose open transaction the coordinator aborts). Call once, before the first transaction."""
        producer_id, epoch = self._transaction_manager().init_transactions(self._txn_timeout(timeout))
        self._sender.use_producer_id(producer_id, epoch)

    def begin_transaction(self) -> None:
        """Start a transaction: every record sent until it ends belongs to it."""
        manager = self._transaction_manager()
        self._bump_after_gap(manager, self.max_block_s)
        manager.begin_transaction()

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
                                    group_id_or_consumer_group_metadata: str | ConsumerGroupMetadata,
                                    timeout: Optional[float] = None) -> None:
        """Commit a consumer group's ``offsets`` (the next offsets to read) with the transaction:
        they count only if it commits. Pass ``consumer.group_metadata()`` so a consumer that left
        the group cannot commit."""
        self._transaction_manager().send_offsets_to_transaction(
            offsets, group_id_or_consumer_group_metadata, self._txn_timeout(timeout))

    def commit_transaction(self, timeout: Optional[float] = None) -> None:
        """Send every record of the transaction, then commit it. KafkaTimeoutError: call again to
        finish; any other error: the transaction must be aborted (or, if fatal, the producer closed)."""
        manager = self._transaction_manager()
        deadline = time.monotonic() + self._txn_timeout(timeout)
        manager.begin_commit()
        self.flush(max(deadline - time.monotonic(), 0))
        manager.end_transaction(True, max(deadline - time.monotonic(), 0), self._sender.use_producer_id)

    def abort_transaction(self, timeout: Optional[float] = None) -> None:
        """Drop the records not yet sent (their futures fail with TransactionAborted), wait for those
        on the way, then abort: no reader with isolation_level read_committed sees any of it."""
        manager = self._transaction_manager()
        deadline = time.monotonic() + self._txn_timeout(timeout)
        manager.begin_abort()
        self._sender.abort_unsent(TransactionAborted(f"transaction of {manager.transactional_id!r} aborted "
                                                     f"before the record was sent"))
        _, in_flight = wait(self._accumulator.unfinished(), max(deadline - time.monotonic(), 0))
        if in_flight:
            raise KafkaTimeoutError(f"abort_transaction: {len(in_flight)} batch(es) still unanswered; call again")
        manager.end_transaction(False, max(deadline - time.monotonic(), 0), self._sender.use_producer_id)
        self._bump_after_gap(manager, max(deadline - time.monotonic(), 0))

    def _bump_after_gap(self, manager: TransactionManager, timeout_s: float) -> None:
        """A new epoch when an aborted transaction left a gap in sequence numbers (retried at the
        next ``begin_transaction`` if this one times out)."""
        if self._sender.sequence_gap():
            producer_id, epoch = manager.bump_epoch(timeout_s)
            self._sender.use_producer_id(producer_id, epoch)

    def _transaction_manager(self) -> TransactionManager:
        if self._transactions is None:
            raise IllegalStateError("transactional calls need a transactional producer: "
                                    "Producer(transactional_id=...)")
        if self._closed:
            raise RuntimeError("transaction call on a closed Producer")
        return self._transactions

    def _txn_timeout(self, timeout: Optional[float]) -> float:
        return self.max_block_s if timeout is None else timeout

    # -- lifecycle ---------------------------------------------------------------------------

    def partitions_for(self, topic: str) -> set[int]:
        return {tp.partition for tp in (self._partitions.get(topic) or self._await_topic(topic))}

    def flush(self, timeout: Optional[float] = None) -> None:
        """Send everything queued now and wait for the answers (KafkaTimeoutError after ``timeout``)."""
        acc = self._accumulator
        acc.flushing += 1
        acc.wakeup.set()
        try:
            _, not_done = wait(acc.unfinished(), timeout)
        finally:
            acc.flushing -= 1
        if not_done:
            raise KafkaTimeoutError(f"flush: {len(not_done)} batch(es) still unacknowledged after {timeout}s")

    def close(self, timeout: Optional[float] = None) -> None:
        """Send what is queued (waiting up to ``timeout`` seconds; with None, until every batch has
        resolved, which takes at most ``delivery_timeout_ms``), then stop. Records still unsent
        after the timeout fail with KafkaTimeoutError; close() itself returns within ``timeout``
        plus ``request_timeout_ms`` at worst (a send blocked on a dead socket)."""
        if self._closed:
            return
        self._closed = True
        self._accumulator.appender.close()   # later sends take the Python path, which refuses them
        self._accumulator.closing = True
        self._sender.running = False
        self._accumulator.wakeup.set()
        self._sender.join(timeout)
        if self._sender.is_alive():
            self._sender.force_close = True
            self._accumulator.wakeup.set()
            self._sender.join(self._request_timeout_s)
        # Closing the connections fails the requests still out; their batches go back to the
        # queue or fail, and whatever is queued then fails here: no future is left unresolved.
        if self._transactions is not None:
            self._transactions.close()
        self._metadata.close()
        self._sender.abort_unsent(KafkaTimeoutError("producer closed before the record was acknowledged"))

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _as_bytes(value: Any, what: str) -> bytes:
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be bytes (or set {what.split()[0]}_serializer), not {type(value).__name__}")


def _row_sizes(table: pa.Table) -> pa.Array:
    """Estimated encoded bytes of every row (int64), as ``send`` counts them."""
    sizes = pc.add(pc.fill_null(pc.binary_length(table.column("value")), 0), RECORD_OVERHEAD)
    if "key" in table.column_names:
        sizes = pc.add(sizes, pc.fill_null(pc.binary_length(table.column("key")), 0))
    if "headers" in table.column_names:
        sizes = pc.add(sizes, _header_sizes(table.column("headers").combine_chunks()))
    return sizes.combine_chunks().cast(pa.int64()) if isinstance(sizes, pa.ChunkedArray) else sizes.cast(pa.int64())


def _header_sizes(headers: pa.Array) -> pa.Array:
    """Bytes of each row's headers (key + value + 8 per header), summed per row without Python loops."""
    flat = pc.list_flatten(headers)
    per_header = pc.add(pc.add(pc.binary_length(pc.struct_field(flat, "key")),
                               pc.fill_null(pc.binary_length(pc.struct_field(flat, "value")), 0)), 8)
    running = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(per_header).cast(pa.int64())])
    lengths = pc.fill_null(pc.list_value_length(headers), 0)
    ends = pc.cumulative_sum(lengths)
    return pc.subtract(running.take(ends), running.take(pc.subtract(ends, lengths)))


def _chunks(table: pa.Table, sizes: pa.Array, limit: int) -> Iterable[tuple[pa.Table, int]]:
    """Contiguous slices of ``table`` of at most ``limit`` bytes (a larger row alone), cut greedily.

    A slice ends where the next row would not fit, so a cut depends only on the rows before it:
    the same rows always give the same batches, and a prefix of a table is cut like the table up
    to the prefix's last slice (what the Spark sink's exactly-once writes rely on)."""
    ends = pc.cumulative_sum(sizes)
    begin, consumed = 0, 0
    while begin < len(ends):
        end = max(pc.search_sorted(ends, pa.scalar(consumed + limit, ends.type), side="right").as_py(), begin + 1)
        total = ends[end - 1].as_py()
        yield table.slice(begin, end - begin), total - consumed
        begin, consumed = end, total


def _too_large(what: str, max_request_size: int) -> MessageTooLarge:
    """The limit a record hit is the producer's own, not the topic's: say so and how to raise it."""
    return MessageTooLarge(
        f"{what}, more than this producer's max_request_size ({max_request_size} bytes), the largest request it "
        f"sends: raise it (Producer(max_request_size=...), `ember produce --max-request-size BYTES`); if the record "
        f"is also larger than the topic's max.message.bytes (`ember topics alter TOPIC --config "
        f"max.message.bytes=BYTES`), raise max.message.bytes on the topic or send smaller records")


def split_batches(table: pa.Table, max_request_size: int) -> list[pa.Table]:
    """The batches ``send_batch(topic, table, partition=p)`` sends for ``table``, in order."""
    return [chunk for chunk, _ in _chunks(table, _row_sizes(table), max_request_size - BATCH_OVERHEAD)]


def _check_identity(producer_id: int, producer_epoch: int, idempotent: bool) -> None:
    if not idempotent:
        raise ValueError("producer_id needs an idempotent producer (acks=1 or 'all', enable_idempotence not False)")
    if not 0 <= producer_id < 2**63:
        raise ValueError(f"producer_id must be in [0, 2**63), not {producer_id}")
    if not 0 <= producer_epoch < 2**15:
        raise ValueError(f"producer_epoch must be in [0, 2**15), not {producer_epoch}")


def _check_transactional(acks: int, idempotent: bool, producer_id: int | None) -> None:
    if acks != -1 or not idempotent:
        raise ValueError("a transactional producer is idempotent with acks='all' (leave acks and enable_idempotence "
                         "unset or set them so)")
    if producer_id is not None:
        raise ValueError("transactional_id and producer_id exclude each other: the transaction coordinator gives "
                         "a transactional producer its id")


def _gather(batches: list[ProducerBatch]) -> "Future[dict[TopicPartition, list[BatchMetadata]]]":
    """One future for many batches: the metadata per partition, or the first error."""
    result: Future[dict[TopicPartition, list[BatchMetadata]]] = Future()
    remaining = [len(batches)]
    lock = threading.Lock()

    def on_done(_: Future[ProduceResult]) -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0]:
                return
        out: dict[TopicPartition, list[BatchMetadata]] = {}
        for batch in batches:
            error = batch.future.exception()
            if error is not None:
                result.set_exception(error)
                return
            r = batch.future.result()
            out.setdefault(batch.tp, []).append(BatchMetadata(r.topic, r.partition, r.base_offset, batch.count))
        result.set_result(out)

    if not batches:
        result.set_result({})
    for batch in batches:
        batch.future.add_done_callback(on_done)
    return result
