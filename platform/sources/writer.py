"""Writes (``df.write/writeStream.format("ember")``): Arrow batches straight into ``Producer.send_batch``.

Each Spark task sends its rows columnar (no Python per row) with ``acks=all`` by default and
returns only once every batch is acknowledged, so a task that succeeds has its rows durably in
the log. Batch writes are at-least-once: a retried task sends its rows again. Streaming writes are
exactly-once by default (option ``exactlyOnce``): a task sends the same batches under the same
producer ids on every run of its micro-batch, so the broker drops a re-run's batches as duplicates
(docs/spark.md, "Exactly-once streaming writes").
"""
from __future__ import annotations

import hashlib
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Iterator, List, Optional

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from ember.client import BatchMetadata, Producer, TopicPartition
from ember.client.partitioner import partitions_for_keys
from ember.client.producer import split_batches
from ember.log.producer_state import MAX_CACHED_BATCHES
from ember.sources.options import OptionError, WriterOptions
from ember.sources.schema import HEADERS_TYPE

_COLUMN_TYPES = {"value": (BinaryType(), StringType()), "key": (BinaryType(), StringType()),
                 "topic": (StringType(),), "partition": (IntegerType(),), "headers": (HEADERS_TYPE,)}
_MAX_REQUEST_SIZE = 1024 * 1024
_POSITION = "__ember_position"   # a row's position in its task (exactly-once placement of null keys)
_Sent = Future[dict[TopicPartition, list[BatchMetadata]]]   # what Producer.send_batch returns


@dataclass
class WriteResult(WriterCommitMessage):
    """Rows a task wrote, per topic (the driver sums them for logs and tests)."""
    rows: dict[str, int] = field(default_factory=dict)


def check_write_schema(schema: StructType, options: WriterOptions) -> None:
    """Fail on the driver, before any task runs, when the DataFrame cannot be written."""
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise OptionError(f"writing to ember needs a 'value' column (binary or string); the DataFrame has {sorted(types)}")
    if options.topic is None and "topic" not in types:
        raise OptionError("no destination topic: set the option 'topic' or add a 'topic' string column")
    for name, allowed in _COLUMN_TYPES.items():
        if name in types and types[name] not in allowed:
            raise OptionError(f"column {name!r} is {types[name].simpleString()}; ember needs "
                              f"{' or '.join(t.simpleString() for t in allowed)}")


class _ArrowWriteMixin:
    """The task-side write shared by batch and streaming writers."""

    def __init__(self, options: WriterOptions, schema: StructType) -> None:
        check_write_schema(schema, options)
        self._options = options

    def _exactly_once(self) -> bool:
        return False

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        if self._exactly_once():
            return ExactlyOnceWrite(self._options, TaskIdentity.current()).run(iterator)
        return _write_at_least_once(self._options, iterator)


class EmberBatchWriter(_ArrowWriteMixin, DataSourceArrowWriter):
    """``df.write.format("ember")``: at-least-once (a retried task sends its rows again)."""


class EmberStreamWriter(_ArrowWriteMixin, DataSourceStreamArrowWriter):
    """``df.writeStream.format("ember")``: each micro-batch's rows are acknowledged before Spark
    commits the batch; a re-run batch is deduplicated by the brokers (exactly-once), or sent
    again with ``exactlyOnce=false`` (at-least-once)."""

    def __init__(self, options: WriterOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        if options.exactly_once and options.acks == "0":
            raise OptionError("exactlyOnce needs acks=1 or all (acks=0 gets no answer to deduplicate by); "
                              "set exactlyOnce=false to write with acks=0")

    def _exactly_once(self) -> bool:
        return self._options.exactly_once

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        """Nothing to do: rows are durable once each task returned."""

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        """Nothing to undo: acknowledged rows stay in the log (a re-run of the batch repeats them,
        deduplicated when exactly-once)."""


def _write_at_least_once(options: WriterOptions, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
    """Send every row through one broker-assigned idempotent producer (a re-run sends them again)."""
    rows: dict[str, int] = {}
    pending: list[_Sent] = []
    producer = Producer(bootstrap_servers=options.bootstrap, acks=options.acks, linger_ms=0, **options.security.options())
    try:
        for batch in iterator:
            for topic, partition, records in split_by_destination(batch, options.topic):
                pending.append(producer.send_batch(topic, records, partition=partition))
                rows[topic] = rows.get(topic, 0) + records.num_rows
        producer.flush()
        for future in pending:
            future.result()  # raises the first delivery error: the task fails and Spark retries it
    finally:
        producer.close()
    return WriteResult(rows)


@dataclass(frozen=True)
class TaskIdentity:
    """What a task's output is named after: the same for every attempt and every re-run of the
    task's micro-batch (the query id is kept in the checkpoint), different for anything else."""
    query_id: str
    batch_id: int
    partition_id: int

    @classmethod
    def current(cls) -> "TaskIdentity":
        """The running task's identity, from the local properties Spark sets for streaming jobs."""
        context = TaskContext.get()
        query_id = context.getLocalProperty("sql.streaming.queryId") if context else None
        batch_id = context.getLocalProperty("streaming.sql.batchId") if context else None
        if context is None or query_id is None or batch_id is None:
            raise OptionError("exactly-once writes need a streaming query's id and batch id; "
                               "this task has none (set the option exactlyOnce=false)")
        return cls(query_id, int(batch_id), context.partitionId())

    def producer_id(self, chunk: int) -> int:
        """A 63-bit id in [2^62, 2^63): brokers assign ids from 0 up, so the two never meet."""
        name = f"{self.query_id}/{self.batch_id}/{self.partition_id}/{chunk}".encode()
        return (1 << 62) | int.from_bytes(hashlib.blake2b(name, digest_size=8).digest(), "big") >> 2


@dataclass
class _Destination:
    """A task's output to one topic-partition: batches sent so far, rows not yet a full batch, and
    the futures of the batches sent in the current chunk."""
    topic: str
    partition: int
    batches: int = 0
    pending: Optional[pa.Table] = None
    chunk_futures: list[_Sent] = field(default_factory=list)

    @property
    def chunk(self) -> int:
        """The producer id index of the next batch: a new id every MAX_CACHED_BATCHES batches,
        so every batch a re-run repeats is still in the broker's duplicate cache."""
        return self.batches // MAX_CACHED_BATCHES

    @property
    def mid_chunk(self) -> bool:
        return self.batches % MAX_CACHED_BATCHES != 0


@dataclass
class _ChunkProducer:
    """The open producer of one chunk's id, and the futures of every batch sent through it."""
    producer: Producer
    futures: list[_Sent] = field(default_factory=list)

    def drained(self) -> bool:
        return all(future.done() for future in self.futures)


class ExactlyOnceWrite:
    """One task's exactly-once write: on every run of the task, the same batches (cut greedily per
    destination partition, independent of Spark's Arrow batch boundaries) go out under the same
    producer ids and sequences, so the broker answers a repeated batch with its original offsets.

    Within a chunk a partition's batches go through one producer, which keeps them in order; a
    destination's first batch of chunk c > 0 goes through another producer (its own connection),
    so it is sent only once chunk c-1's batches of that destination are acknowledged: the rows of
    a partition land in the order the task was given them."""

    def __init__(self, options: WriterOptions, identity: TaskIdentity,
                 max_request_size: int = _MAX_REQUEST_SIZE) -> None:
        self._options = options
        self._identity = identity
        self._max_request_size = max_request_size
        self._destinations: dict[tuple[str, int], _Destination] = {}
        self._producers: dict[int, _ChunkProducer] = {}   # chunk -> open producer with that chunk's id
        self._retired: list[_ChunkProducer] = []   # no destination is in their chunk: closed once drained
        self._futures: list[_Sent] = []
        self._partition_counts: dict[str, int] = {}
        self._position = identity.partition_id   # tasks start their null-key round-robin apart

    def run(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        rows: dict[str, int] = {}
        try:
            for batch in iterator:
                for topic, partition, records in self._route(batch):
                    self._append(topic, partition, records)
                    rows[topic] = rows.get(topic, 0) + records.num_rows
            for destination in self._destinations.values():
                if destination.pending is not None:
                    self._send(destination, destination.pending)
            for chunk in self._producers.values():
                chunk.producer.flush()
            for future in self._futures:
                future.result()  # raises the first delivery error: the task fails, a re-run repeats it
        finally:
            for chunk in [*self._retired, *self._producers.values()]:
                chunk.producer.close()
            self._retired.clear()
            self._producers.clear()
        return WriteResult(rows)

    def _route(self, batch: pa.RecordBatch) -> Iterator[tuple[str, int, pa.Table]]:
        """Rows per (topic, partition), every row placed deterministically (never sticky)."""
        if batch.num_rows == 0:
            return
        table = pa.Table.from_batches([batch]).append_column(_POSITION, _positions(self._position, batch.num_rows))
        self._position += batch.num_rows
        for topic, rows in _by_topic(table, self._options.topic):
            placed = place_rows(rows, self._partition_count(topic))
            # place_rows gave every row a partition: _split_partitions yields no None partition here
            yield from _split_partitions(topic, _set_column(rows, "partition", placed))   # type: ignore[misc]

    def _partition_count(self, topic: str) -> int:
        if topic not in self._partition_counts:
            self._partition_counts[topic] = len(self._chunk_producer(0).producer.partitions_for(topic))
        return self._partition_counts[topic]

    def _append(self, topic: str, partition: int, records: pa.Table) -> None:
        """Add rows to the destination and send every batch that can no longer grow."""
        destination = self._destinations.setdefault((topic, partition), _Destination(topic, partition))
        table = records if destination.pending is None else pa.concat_tables([destination.pending, records])
        *full, destination.pending = split_batches(table, self._max_request_size)
        for batch in full:
            self._send(destination, batch)

    def _send(self, destination: _Destination, batch: pa.Table) -> None:
        chunk = destination.chunk
        if chunk and not destination.mid_chunk:
            # The first batch of a new chunk goes through another producer and connection than the
            # previous chunk's: wait until those are acknowledged, or it could land before them.
            for future in destination.chunk_futures:
                future.result()   # a delivery error fails the task here (a re-run repeats it)
            destination.chunk_futures = []
            self._close_drained()
        sender = self._chunk_producer(chunk)
        future = sender.producer.send_batch(destination.topic, batch, partition=destination.partition)
        sender.futures.append(future)
        destination.chunk_futures.append(future)
        self._futures.append(future)
        destination.batches += 1
        if not any(d.chunk == chunk and d.mid_chunk for d in self._destinations.values()):
            # The destination finished the chunk and nobody else is in the middle of its id's
            # sequences: retire the producer. A destination starting the chunk later gets a fresh
            # one (sequence 0 on a partition this id never wrote to).
            self._retired.append(self._producers.pop(chunk))

    def _close_drained(self) -> None:
        """Close the retired producers whose batches are all answered (closing one that is not
        would wait for its answers)."""
        retired, self._retired = self._retired, []
        for chunk in retired:
            if chunk.drained():
                chunk.producer.close()
            else:
                self._retired.append(chunk)

    def _chunk_producer(self, chunk: int) -> _ChunkProducer:
        if chunk not in self._producers:
            self._producers[chunk] = _ChunkProducer(Producer(
                bootstrap_servers=self._options.bootstrap, acks=self._options.acks, linger_ms=0,
                max_request_size=self._max_request_size, producer_id=self._identity.producer_id(chunk),
                **self._options.security.options()))
        return self._producers[chunk]


def place_rows(rows: pa.Table, count: int) -> pa.Array:
    """Every row's partition, the same on every run over the same rows: the ``partition`` column,
    else murmur2 of the key, else round-robin by the row's position in the task."""
    placed = pc.cast(pc.remainder(rows.column(_POSITION), count), pa.int32())
    if "key" in rows.column_names:
        placed = pc.coalesce(partitions_for_keys(rows.column("key"), count), placed)
    if "partition" in rows.column_names:
        placed = pc.coalesce(rows.column("partition"), placed)
    return placed


def split_by_destination(batch: pa.RecordBatch, default_topic: Optional[str]) -> Iterator[tuple[str, Optional[int], pa.Table]]:
    """Rows grouped by (topic, partition) as producer-ready tables (columns key, value, headers);
    rows with a null ``partition`` are left to the producer's partitioner (partition None)."""
    for topic, rows in _by_topic(pa.Table.from_batches([batch]), default_topic):
        yield from _split_partitions(topic, rows)


def _by_topic(table: pa.Table, default_topic: Optional[str]) -> Iterator[tuple[str, pa.Table]]:
    """Rows per destination topic: the ``topic`` option wins over a ``topic`` column (as in Spark's
    Kafka sink)."""
    if default_topic is not None or "topic" not in table.column_names:
        yield default_topic, table   # type: ignore[misc]  # not None: check_write_schema wants a topic option or column
        return
    topics = table.column("topic")
    if topics.null_count:
        raise OptionError("a row has a null 'topic' and no 'topic' option is set; give every row a topic")
    for topic in pc.unique(topics).to_pylist():
        yield topic, table.filter(pc.equal(topics, topic))


def _split_partitions(topic: str, table: pa.Table) -> Iterator[tuple[str, Optional[int], pa.Table]]:
    if "partition" not in table.column_names or table.column("partition").null_count == table.num_rows:
        yield topic, None, _records(table)
        return
    partitions = table.column("partition")
    for partition in pc.unique(partitions).to_pylist():
        mask = pc.is_null(partitions) if partition is None else pc.fill_null(pc.equal(partitions, partition), False)
        yield topic, partition, _records(table.filter(mask))


def _positions(first: int, count: int) -> pa.Array:
    """first, first + 1, ..., first + count - 1 (int64), without a Python loop."""
    return pc.cumulative_sum(pa.nulls(count, pa.int64()).fill_null(1), start=first - 1)


def _set_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    index = table.schema.get_field_index(name)
    return table.set_column(index, name, values) if index >= 0 else table.append_column(name, values)


def _records(table: pa.Table) -> pa.Table:
    """The producer's columns: key/value as binary (strings are UTF-8 encoded), headers as is."""
    columns = {name: table.column(name) for name in ("key", "value", "headers") if name in table.column_names}
    for name in ("key", "value"):
        if name in columns and not pa.types.is_binary(columns[name].type):
            columns[name] = columns[name].cast(pa.binary())
    return pa.table(columns)
