"""Batch reads (``spark.read.format("ember")``): one fixed offset range per partition."""
from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, InputPartition

from ember.sources.fetch import read_task
from ember.sources.metadata import ClusterView, ending_offsets, starting_offsets
from ember.sources.options import ReaderOptions
from ember.sources.planning import OffsetRange, RangeGroup, Task, check_data_loss, plan_tasks
from ember.sources.schema import arrow_schema


class EmberBatchReader(DataSourceReader):
    """Plans on the driver from the brokers' offsets; Spark pickles it to executors for ``read``."""

    def __init__(self, options: ReaderOptions) -> None:
        self._options = options
        self._target = arrow_schema(options.include_headers)

    def partitions(self) -> Sequence[Task]:
        options = self._options
        with ClusterView(options) as cluster:
            replicas = cluster.replicas()
            start = starting_offsets(cluster, options, replicas)
            end = ending_offsets(cluster, options, replicas)
            log_start = cluster.earliest(replicas)
            start = {tp: check_data_loss(*tp, offset, log_start[tp], options.fail_on_data_loss)
                     for tp, offset in start.items()}
            return plan_tasks(start, end, replicas, options.min_partitions, options.max_partition_bytes,
                              cluster.average_record_bytes)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # With no range planned (nothing to read), Spark still runs one task with a bare
        # InputPartition: it reads nothing.
        if not isinstance(partition, (OffsetRange, RangeGroup)):
            return iter(())
        batches = read_task(partition, self._options, self._target)
        return latest_by_key(batches, self._target) if self._options.latest_by_key else batches


def latest_by_key(batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Each key's latest record per topic partition, without tombstones (null values) or keyless
    records: a compacted topic read as a table. Columnar (a group-by over the task's records in
    offset order); no shuffle, since every record of a key is in one partition."""
    table = pa.Table.from_batches(list(batches), schema=schema)
    if table.num_rows == 0:
        return
    table = table.filter(pc.is_valid(table.column("key")))
    rows = table.append_column("__row", pa.array(range(table.num_rows), pa.int64()))
    latest = rows.group_by(["topic", "partition", "key"], use_threads=False).aggregate([("__row", "max")])
    last_rows = latest.column("__row_max")
    kept = table.take(pc.take(last_rows, pc.sort_indices(last_rows)))     # in the partitions' offset order
    kept = kept.filter(pc.is_valid(kept.column("value")))
    yield from kept.combine_chunks().to_batches()
