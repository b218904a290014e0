"""Writes (``df.write/writeStream.format("ember")``): Arrow batches straight into ``Producer.send_batch``.

Each Spark task sends its rows columnar (no Python per row) through one idempotent producer with
``acks=all`` by default and returns only once every batch is acknowledged, so a task that
succeeds has its rows durably in the log. A task that Spark retries, or a micro-batch a restarted
query runs again, sends its rows again: delivery is at-least-once (docs/spark.md explains why and
what exactly-once needs from the producer).
"""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Iterator, List, Optional

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from ember.client import Producer
from ember.sources.options import OptionError, WriterOptions
from ember.sources.schema import HEADERS_TYPE

_COLUMN_TYPES = {"value": (BinaryType(), StringType()), "key": (BinaryType(), StringType()),
                 "topic": (StringType(),), "partition": (IntegerType(),), "headers": (HEADERS_TYPE,)}


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

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        rows: dict[str, int] = {}
        pending: list[Future] = []
        producer = Producer(bootstrap_servers=self._options.bootstrap, acks=self._options.acks, linger_ms=0)
        try:
            for batch in iterator:
                for topic, partition, records in split_by_destination(batch, self._options.topic):
                    pending.append(producer.send_batch(topic, records, partition=partition))
                    rows[topic] = rows.get(topic, 0) + records.num_rows
            producer.flush()
            for future in pending:
                future.result()  # raises the first delivery error: the task fails and Spark retries it
        finally:
            producer.close()
        return WriteResult(rows)


class EmberBatchWriter(_ArrowWriteMixin, DataSourceArrowWriter):
    """``df.write.format("ember")``: at-least-once (a retried task sends its rows again)."""


class EmberStreamWriter(_ArrowWriteMixin, DataSourceStreamArrowWriter):
    """``df.writeStream.format("ember")``: each micro-batch's rows are acknowledged before Spark
    commits the batch; a re-run batch is sent again (at-least-once)."""

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        """Nothing to do: rows are durable once each task returned."""

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        """Nothing to undo: acknowledged rows stay in the log (readers see them; at-least-once)."""


def split_by_destination(batch: pa.RecordBatch, default_topic: Optional[str]) -> Iterator[tuple[str, Optional[int], pa.Table]]:
    """Rows grouped by (topic, partition) as producer-ready tables (columns key, value, headers).

    The ``topic`` option wins over a ``topic`` column (as in Spark's Kafka sink); rows with a null
    ``partition`` are placed by the producer's partitioner (murmur2 of the key).
    """
    table = pa.Table.from_batches([batch])
    records = _records(table)
    if default_topic is not None or "topic" not in table.column_names:
        yield from _split_partitions(default_topic, table, records)
        return
    topics = table.column("topic")
    if topics.null_count:
        raise ValueError("a row has a null 'topic' and no 'topic' option is set; give every row a topic")
    for topic in pc.unique(topics).to_pylist():
        mask = pc.equal(topics, topic)
        yield from _split_partitions(topic, table.filter(mask), records.filter(mask))


def _split_partitions(topic: str, table: pa.Table, records: pa.Table) -> Iterator[tuple[str, Optional[int], pa.Table]]:
    if "partition" not in table.column_names or table.column("partition").null_count == table.num_rows:
        yield topic, None, records
        return
    partitions = table.column("partition")
    for partition in pc.unique(partitions).to_pylist():
        mask = pc.is_null(partitions) if partition is None else pc.fill_null(pc.equal(partitions, partition), False)
        yield topic, partition, records.filter(mask)


def _records(table: pa.Table) -> pa.Table:
    """The producer's columns: key/value as binary (strings are UTF-8 encoded), headers as is."""
    columns = {name: table.column(name) for name in ("key", "value", "headers") if name in table.column_names}
    for name in ("key", "value"):
        if name in columns and not pa.types.is_binary(columns[name].type):
            columns[name] = columns[name].cast(pa.binary())
    return pa.table(columns)
