"""Batch reads (``spark.read.format("ember")``): one fixed offset range per partition."""
from __future__ import annotations

from typing import Iterator, Sequence

import pyarrow as pa
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
        return read_task(partition, self._options, self._target)
