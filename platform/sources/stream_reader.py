"""Streaming reads (``spark.readStream.format("ember")``): micro-batches of offset ranges.

Offsets live in Spark's checkpoint as ``{"topic": {"partition": next_offset}}``; a restarted
query resumes from the last committed end, so every record is read once. Each trigger asks the
brokers for the current high watermarks, which also discovers new partitions and (with
``topicPattern``) new topics; a partition that appears mid-query is read from offset 0.

A partition whose high watermark is below the query's offset (the topic was deleted and
re-created, or its log truncated) fails the query with ``DataLossError`` (failOnDataLoss=true) or
is read again from its earliest offset (false), as Spark's Kafka source reports such data loss.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Iterator, Optional, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxRows, SupportsTriggerAvailableNow

from ember.client import Admin, TopicPartition
from ember.errors import EmberError
from ember.sources.fetch import read_task
from ember.sources.metadata import ClusterView, starting_offsets
from ember.sources.offsets import JsonOffsets, PartitionOffsets, offsets_from_json, offsets_to_json
from ember.sources.options import ReaderOptions
from ember.sources.planning import DataLossError, Task, check_data_loss, limit_records, plan_tasks
from ember.sources.schema import arrow_schema

NEW_PARTITION_START = 0
# A high watermark below the query's offset is asked again before it counts as data loss: a new
# leader's high watermark can trail its predecessor's for a moment after a failover (Spark's Kafka
# source retries the same way, fetchOffset.numRetries).
LATEST_RETRIES = 3
LATEST_RETRY_INTERVAL_S = 0.5
log = logging.getLogger(__name__)


class EmberStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Runs in Spark's long-lived planner process on the driver; ``read`` runs on executors.

    The broker connection is opened lazily and never pickled: Spark ships this object to the
    executors for ``read`` and those only need the options.
    """

    def __init__(self, options: ReaderOptions) -> None:
        self._options = options
        self._target = arrow_schema(options.include_headers)
        self._cluster: Optional[ClusterView] = None
        self._available_now_end: Optional[PartitionOffsets] = None
        self._latest: Optional[PartitionOffsets] = None
        self._admin: Optional[Admin] = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_cluster": None, "_admin": None}

    @property
    def cluster(self) -> ClusterView:
        if self._cluster is None:
            self._cluster = ClusterView(self._options)
        return self._cluster

    # -- offsets (driver) --------------------------------------------------------------------

    def initialOffset(self) -> JsonOffsets:
        partitions = self.cluster.replicas()
        return offsets_to_json(starting_offsets(self.cluster, self._options, partitions))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._options.max_records_per_trigger:
            return ReadMaxRows(self._options.max_records_per_trigger)
        if self._options.max_bytes_per_trigger:
            return ReadMaxBytes(self._options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an availableNow run: today's high watermarks, today's partitions."""
        self._available_now_end = self.cluster.latest(self.cluster.replicas())

    def latestOffset(self, start: JsonOffsets, limit: ReadLimit) -> JsonOffsets:
        begin = offsets_from_json(start)
        if self._available_now_end is not None:
            available = dict(self._available_now_end)
        else:
            available = self.cluster.latest(self.cluster.replicas())
        for tp in begin.keys() | available.keys():
            begin.setdefault(tp, NEW_PARTITION_START)
            # a partition that vanished (topic deleted, not re-created yet) holds still
            available.setdefault(tp, begin[tp])
        behind = self._behind(begin, available)
        if behind and self._options.fail_on_data_loss:
            raise DataLossError("; ".join(_behind_message(tp, begin[tp], available[tp]) for tp in sorted(behind)) +
                                ". Some data was lost, and resuming at the query's offset would skip the "
                                "partition's new records below it. Set failOnDataLoss=false to read such partitions "
                                "again from their earliest offset, or restart the query with a new checkpoint and a "
                                "valid startingOffsets.")
        # failOnDataLoss=false: such a partition is read again from its earliest offset; its end
        # offset stays below the checkpointed one, which is how partitions() recognises it
        admit_from = {**begin, **self.cluster.earliest(behind)} if behind else begin
        self._latest = available
        return offsets_to_json(self._admit(admit_from, available, limit))

    def _behind(self, begin: PartitionOffsets, available: PartitionOffsets) -> list[tuple[str, int]]:
        """Partitions whose high watermark is below the query's offset, asked again a few times (a
        new leader's high watermark may trail for a moment); ``available`` gets the last answers."""
        behind = [tp for tp in available if available[tp] < begin[tp]]
        for _ in range(LATEST_RETRIES - 1):
            if not behind:
                break
            time.sleep(LATEST_RETRY_INTERVAL_S)
            available.update(self.cluster.latest(behind))
            behind = [tp for tp in behind if available[tp] < begin[tp]]
        return behind

    def _admit(self, begin: PartitionOffsets, available: PartitionOffsets, limit: ReadLimit) -> PartitionOffsets:
        """Admission control: the end offsets of the next micro-batch under ``limit``."""
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if isinstance(limit, ReadMaxBytes):
            max_rows = self._rows_for_bytes(begin, available, limit.max_bytes)
        elif max_rows is not None and self._options.max_bytes_per_trigger:
            max_rows = min(max_rows, self._rows_for_bytes(begin, available, self._options.max_bytes_per_trigger))
        return available if max_rows is None else limit_records(begin, available, max_rows)

    def _rows_for_bytes(self, begin: PartitionOffsets, available: PartitionOffsets, max_bytes: int) -> int:
        """maxBytesPerTrigger as a record count, from the average record size near the start."""
        pending = [tp for tp in available if available[tp] > begin[tp]]
        if not pending:
            return 1
        average = self.cluster.average_record_bytes({tp: begin[tp] for tp in pending})
        return max(1, int(max_bytes // max(average, 1.0)))

    def reportLatestOffset(self) -> Optional[JsonOffsets]:
        return None if self._latest is None else offsets_to_json(self._latest)

    def partitions(self, start: JsonOffsets, end: JsonOffsets) -> Sequence[Task]:
        begin, stop = offsets_from_json(start), offsets_from_json(end)
        for tp in stop:
            begin.setdefault(tp, NEW_PARTITION_START)
        restart = [tp for tp in stop if stop[tp] < begin[tp]]  # only planned with failOnDataLoss=false
        if restart:
            earliest = self.cluster.earliest(restart)
            for tp in restart:
                log.warning("%s (failOnDataLoss=false): reading it again from its earliest offset %d",
                            _behind_message(tp, begin[tp], stop[tp], planned=True), earliest[tp])
                begin[tp] = earliest[tp]
        pending = [tp for tp in stop if stop[tp] > begin[tp]]
        if not pending:
            return []
        log_start = self.cluster.earliest(pending)
        for tp in pending:
            begin[tp] = check_data_loss(*tp, begin[tp], log_start[tp], self._options.fail_on_data_loss)
        return plan_tasks(begin, stop, self.cluster.replicas(), self._options.min_partitions,
                          self._options.max_partition_bytes, self.cluster.average_record_bytes)

    def commit(self, end: JsonOffsets) -> None:
        """Spark's checkpoint stays the source of truth; with ``groupId`` the finished offsets are
        also committed to that consumer group, so ``ember groups describe`` shows the query's lag.
        A failed group commit only warns: monitoring must never stop the query."""
        if not self._options.group_id:
            return
        offsets = {TopicPartition(topic, partition): offset
                   for (topic, partition), offset in offsets_from_json(end).items()}
        try:
            self.admin.commit_offsets(self._options.group_id, offsets, metadata="spark")
        except EmberError as exc:
            log.warning("could not commit offsets of group %r (lag shown by `ember groups` may be stale): %s",
                        self._options.group_id, exc)

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(bootstrap_servers=self._options.bootstrap, **self._options.security.options())
        return self._admin

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    # -- data (executors) --------------------------------------------------------------------

    # Spark hands read() the partitions that partitions() planned: a Task (the base says InputPartition).
    def read(self, partition: Task) -> Iterator[pa.RecordBatch]:   # type: ignore[override]
        return read_task(partition, self._options, self._target)


def _behind_message(tp: tuple[str, int], checkpointed: int, latest: int, planned: bool = False) -> str:
    topic, partition = tp
    now = "was planned to end" if planned else "now ends"
    return (f"topic {topic!r} partition {partition} {now} at offset {latest}, below the query's offset "
            f"{checkpointed} (the topic was deleted and re-created, or its log was truncated)")
