"""Turning offset ranges into Spark tasks: splitting for minPartitions, rate limits, data loss.

Everything here is pure (no network), so the rules are unit-tested without a cluster; the readers
feed it offsets they fetched from the brokers.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Union

from pyspark.sql.datasource import InputPartition

from ember.errors import EmberError, ErrorCode
from ember.sources.offsets import PartitionOffsets, TopicPartition

log = logging.getLogger(__name__)


class DataLossError(EmberError, RuntimeError):
    """Offsets a query still needs are gone (retention deleted them, or the topic was recreated).

    Still a ``RuntimeError`` (what it was first) for existing handlers.
    """
    code = ErrorCode.OFFSET_OUT_OF_RANGE


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark task: offsets ``[start, end)`` of one topic partition.

    ``replicas`` lists broker ids whose copy may be read directly, leader first, then the other
    in-sync replicas: below the high watermark every in-sync copy holds the same records.
    """
    topic: str
    partition: int
    start: int
    end: int
    replicas: tuple[int, ...] = ()

    @property
    def size(self) -> int:
        return self.end - self.start


def plan_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                replicas: Mapping[TopicPartition, tuple[int, ...]],
                min_partitions: Optional[int] = None) -> list[OffsetRange]:
    """Non-empty ranges from ``start`` to ``end`` per partition, split to reach ``min_partitions``.

    As in Spark's Kafka source, a large range is cut into pieces in proportion to its share of
    all offsets; small partitions are never merged (one partition's offsets stay in order).
    """
    ranges = [OffsetRange(topic, partition, start[(topic, partition)], stop, replicas.get((topic, partition), ()))
              for (topic, partition), stop in sorted(end.items()) if stop > start[(topic, partition)]]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    return [piece for r in ranges for piece in _split(r, max(1, round(r.size / total * min_partitions)))]


#: Partitions sampled for the average record size that turns maxPartitionBytes into records.
SIZE_SAMPLES = 8


@dataclass(frozen=True)
class RangeGroup(InputPartition):
    """One Spark task reading several small offset ranges, one after the other (each range's
    records in offset order; checkpoints keep exact offsets per partition, not per task)."""
    ranges: tuple[OffsetRange, ...]


Task = Union[OffsetRange, RangeGroup]


def plan_tasks(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
               replicas: Mapping[TopicPartition, tuple[int, ...]], min_partitions: Optional[int],
               max_partition_bytes: int, record_bytes: Callable[[dict[TopicPartition, int]], float]) -> list[Task]:
    """The Spark tasks of a read: ``plan_ranges``, then ranges packed into tasks of about
    ``max_partition_bytes`` (0: no packing), ``record_bytes`` estimating the mean record size from
    a sample of start positions; never fewer tasks than ``min_partitions``."""
    ranges = plan_ranges(start, end, replicas, min_partitions)
    if not max_partition_bytes or len(ranges) <= 1:
        return list(ranges)
    step = max(1, len(ranges) // SIZE_SAMPLES)
    average = record_bytes({(r.topic, r.partition): r.start for r in ranges[::step][:SIZE_SAMPLES]})
    max_records = max(1, int(max_partition_bytes // max(average, 1.0)))
    if min_partitions:
        max_records = min(max_records, -(-sum(r.size for r in ranges) // min_partitions))
    return pack_ranges(ranges, max_records)


def pack_ranges(ranges: list[OffsetRange], max_records: int) -> list[Task]:
    """Consecutive ranges packed into tasks of at most ``max_records`` records; a range of more
    stays a task of its own (``minPartitions`` is what splits ranges)."""
    tasks: list[Task] = []
    group: list[OffsetRange] = []
    count = 0
    for r in ranges:
        if group and count + r.size > max_records:
            tasks.append(group[0] if len(group) == 1 else RangeGroup(tuple(group)))
            group, count = [], 0
        group.append(r)
        count += r.size
    if group:
        tasks.append(group[0] if len(group) == 1 else RangeGroup(tuple(group)))
    return tasks


def _split(r: OffsetRange, parts: int) -> list[OffsetRange]:
    parts = min(parts, r.size)
    bounds = [r.start + r.size * i // parts for i in range(parts + 1)]
    return [OffsetRange(r.topic, r.partition, lo, hi, r.replicas) for lo, hi in zip(bounds, bounds[1:])]


def limit_records(start: Mapping[TopicPartition, int], available: Mapping[TopicPartition, int],
                  max_records: int) -> PartitionOffsets:
    """End offsets admitting at most ``max_records`` in total, shared in proportion to each
    partition's backlog (as Spark's Kafka source does); always admits at least one record when
    any is available, so a query never stalls."""
    backlog = {tp: max(0, end - start[tp]) for tp, end in available.items()}
    total = sum(backlog.values())
    if total <= max_records:
        return dict(available)
    share = {tp: size * max_records // total for tp, size in backlog.items()}
    leftover = max_records - sum(share.values())
    for tp in sorted(backlog, key=lambda tp: backlog[tp] - share[tp], reverse=True)[:leftover]:
        share[tp] += 1
    return {tp: start[tp] + min(share[tp], backlog[tp]) for tp in available}


def check_data_loss(topic: str, partition: int, wanted: int, log_start: int, fail: bool) -> int:
    """The offset to read from when ``wanted`` may already be deleted (log start ``log_start``).

    With failOnDataLoss=true the query stops naming the missing range; with false it skips ahead
    to the log start and logs a warning, as Spark's Kafka source does.
    """
    if wanted >= log_start:
        return wanted
    missing = f"offsets [{wanted}, {log_start}) of topic {topic!r} partition {partition}"
    if fail:
        raise DataLossError(
            f"{missing} are no longer available (deleted by retention, or the topic was recreated). "
            "Some data was lost. Set failOnDataLoss=false to skip ahead and continue, or restart the "
            "query with a new checkpoint and a valid startingOffsets.")
    log.warning("%s were deleted before they were read; skipping to offset %d (failOnDataLoss=false)",
                missing, log_start)
    return log_start
