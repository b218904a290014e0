"""The driver's questions to the cluster: which partitions a source reads, and their offsets.

Answered by the brokers through ``ember.client`` (never by ZooKeeper or the storage root), so the
planned offsets are the ones consumers see: high watermark as the end, log start as the beginning.
Everything asked needs only what a Kafka consumer needs on the topic: Describe (Metadata,
ListOffsets) and Read (Fetch); topic configs are never read.
"""
from __future__ import annotations

from typing import Collection, Iterable, Mapping

from ember.client import Admin, Consumer, TopicPartition
from ember.sources.offsets import EARLIEST, LATEST, PartitionOffsets
from ember.sources.offsets import TopicPartition as TP
from ember.sources.options import OffsetSpec, OptionError, ReaderOptions

UNKNOWN_RECORD_BYTES = 1024.0  # size assumed when no record could be sampled


class ClusterView:
    """Topic layout and offsets of the partitions a reader subscribes to; close when done."""

    def __init__(self, options: ReaderOptions) -> None:
        self._options = options
        self._admin = Admin(bootstrap_servers=options.bootstrap, **options.security.options())
        self._consumer = Consumer(bootstrap_servers=options.bootstrap, enable_auto_commit=False,
                                  isolation_level=options.isolation_level, **options.security.options())

    def close(self) -> None:
        self._consumer.close()
        self._admin.close()

    def __enter__(self) -> "ClusterView":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def replicas(self) -> dict[TP, tuple[int, ...]]:
        """Every subscribed partition, mapped to its readable copies: leader first, then the rest of the ISR."""
        if self._options.topic_pattern is not None:
            topics = sorted(t for t in self._admin.list_topics() if self._options.subscribes(t))
        else:
            topics = list(self._options.topics)
        layout: dict[TP, tuple[int, ...]] = {}
        for topic in topics:
            # Only the layout: no DescribeConfigs, so a reader needs just Read (+ Describe) on the topic, and no
            # offsets (latest() asks for them once), so planning does not wait twice on a dead leader.
            for p in self._admin.describe_topic(topic, configs=False, offsets=False).partitions:
                layout[(topic, p.partition)] = (p.leader, *(b for b in p.isr if b != p.leader))
        return layout

    def earliest(self, partitions: Iterable[TP]) -> PartitionOffsets:
        """Log start offsets (the first offset retention has kept)."""
        partitions = list(partitions)
        if not partitions:
            return {}
        return _plain(self._consumer.beginning_offsets([TopicPartition(*tp) for tp in partitions]))

    def latest(self, partitions: Iterable[TP]) -> PartitionOffsets:
        """Where reading ends now: high watermarks, or last stable offsets for read_committed."""
        partitions = list(partitions)
        if not partitions:
            return {}
        return _plain(self._consumer.end_offsets([TopicPartition(*tp) for tp in partitions]))

    def offsets_for_time(self, partitions: Iterable[TP], timestamp_ms: int) -> PartitionOffsets:
        """First offset with a timestamp >= ``timestamp_ms``; the high watermark where none is."""
        partitions = list(partitions)
        found = self._consumer.offsets_for_times({TopicPartition(*tp): timestamp_ms for tp in partitions})
        latest = self.latest(partitions)
        return {tp: at.offset if (at := found.get(TopicPartition(*tp))) else latest[tp] for tp in partitions}

    def average_record_bytes(self, positions: dict[TP, int], timeout_ms: int = 2000) -> float:
        """Mean key + value bytes of the records at ``positions`` (one fetch of each partition):
        the estimate that turns maxBytesPerTrigger into a record count."""
        sampler = Consumer(bootstrap_servers=self._options.bootstrap, enable_auto_commit=False,
                           auto_offset_reset="earliest", max_partition_fetch_bytes=256 * 1024,
                           **self._options.security.options())
        try:
            sampler.assign([TopicPartition(*tp) for tp in positions])
            for tp, offset in positions.items():
                sampler.seek(TopicPartition(*tp), offset)
            batches = list(sampler.poll_batches(timeout_ms=timeout_ms).values())
        finally:
            sampler.close()
        records = sum(b.num_rows for b in batches)
        size = sum(b.column("key").nbytes + b.column("value").nbytes for b in batches)
        return size / records if records else UNKNOWN_RECORD_BYTES


def _plain(offsets: Mapping[TopicPartition, int]) -> PartitionOffsets:
    return {(tp.topic, tp.partition): int(offset) for tp, offset in offsets.items()}


def starting_offsets(cluster: ClusterView, options: ReaderOptions, partitions: Collection[TP]) -> PartitionOffsets:
    """Where a new query starts: startingTimestamp if set, else startingOffsets; partitions a
    JSON spec leaves out start at the earliest offset."""
    if options.starting_timestamp is not None:
        return cluster.offsets_for_time(partitions, options.starting_timestamp)
    return _resolve(cluster, options.starting, partitions, EARLIEST, "startingOffsets")


def ending_offsets(cluster: ClusterView, options: ReaderOptions, partitions: Collection[TP]) -> PartitionOffsets:
    """Where a batch read ends: endingOffsets, capped at the high watermark (nothing above it is
    committed); partitions a JSON spec leaves out end at the latest offset."""
    latest = cluster.latest(partitions)
    wanted = _resolve(cluster, options.ending, partitions, LATEST, "endingOffsets", latest=latest)
    return {tp: min(wanted[tp], latest[tp]) for tp in partitions}


def _resolve(cluster: ClusterView, spec: OffsetSpec, partitions: Collection[TP], default: int, name: str,
             latest: PartitionOffsets | None = None) -> PartitionOffsets:
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - set(partitions))
        if unknown:
            raise OptionError(f"{name} names partitions this source does not read: "
                              f"{', '.join(f'{t}/{p}' for t, p in unknown)}")
        wanted = {tp: spec.get(tp, default) for tp in partitions}
    else:
        wanted = {tp: EARLIEST if spec == "earliest" else LATEST for tp in partitions}
    earliest = cluster.earliest([tp for tp, o in wanted.items() if o == EARLIEST])
    if latest is None:
        latest = cluster.latest([tp for tp, o in wanted.items() if o == LATEST])
    return {tp: earliest[tp] if o == EARLIEST else latest[tp] if o == LATEST else o for tp, o in wanted.items()}
