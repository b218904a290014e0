"""Reading partitions at their leaders with a long poll: the Fetch work of both wire protocols.

A fetch answers once ``min_bytes`` are readable, a partition fails, or ``max_wait`` passes;
waiting parks on the partitions' ``changed`` signals (woken by appends and high-watermark moves).
The result is a list of segment slices; the ember protocol sends them with ``sendfile``, the
Kafka protocol converts the batches they hold into Kafka record batches (in memory).

A fetch reads at most ``min(request max_bytes, broker fetch.max.bytes)`` over all its partitions
and each partition at most its own ``max_bytes``, but always the first batch of the first
partition that has one (so a batch larger than the limits still makes progress), as Kafka's
``KafkaApis.handleFetchRequest``/``ReplicaManager.readFromLog`` do; ``min_bytes`` is capped by the
same limit. Without the broker's cap a request asking for 2 GiB read that much from segments.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Sequence

from ember.ingest.partition import LogOffsets, Partition
from ember.ingest.replica_manager import ReplicaManager
from ember.ingest.signals import wait_any
from ember.log import FetchSlice
from ember.security.authorizer.model import Operation


@dataclass(frozen=True)
class FetchTarget:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    leader_epoch: int | None = None


@dataclass
class FetchResult:
    target: FetchTarget
    error: Exception | None = None
    slice: FetchSlice | None = None
    leader: Partition | None = None
    offsets: LogOffsets = LogOffsets()   # all -1 on an error

    @property
    def size(self) -> int:
        return self.slice.size if self.slice is not None else 0


def response_limit(replicas: ReplicaManager, max_bytes: int) -> int:
    """Bytes a fetch may read over all its partitions: the request's ``max_bytes`` capped by the
    broker's ``fetch.max.bytes`` (Kafka's ``fetchMaxBytes``); never negative."""
    return max(0, min(max_bytes, replicas.config.fetch_max_bytes))


async def fetch_at_leaders(replicas: ReplicaManager, targets: Sequence[FetchTarget], replica_id: int,
                           min_bytes: int, max_bytes: int, max_wait_s: float) -> list[FetchResult]:
    """Long poll: read every target, again whenever one changes, until there is enough."""
    loop = asyncio.get_running_loop()
    max_bytes = response_limit(replicas, max_bytes)
    min_bytes = min(min_bytes, max_bytes)
    deadline = loop.time() + max_wait_s
    while True:
        results = await _read_all(replicas, targets, replica_id, max_bytes)
        remaining = deadline - loop.time()
        if sum(r.size for r in results) >= min_bytes or remaining <= 0 or any(r.error for r in results):
            _count_sent(results, replica_id)
            return results
        await wait_any([r.leader.changed for r in results if r.leader is not None], remaining)


async def _read_all(replicas: ReplicaManager, targets: Sequence[FetchTarget], replica_id: int,
                    max_bytes: int) -> list[FetchResult]:
    """At least one whole batch (of the first partition that has one), then up to ``max_bytes`` in
    all and each partition's own ``max_bytes`` (a negative one reads nothing but that first batch)."""
    results: list[FetchResult] = []
    room = max_bytes
    for target in targets:
        try:
            operation = replicas.access.follower_or_topic(replica_id, Operation.READ)
            if operation is not None:
                replicas.access.check_topic(operation, target.topic)
            partition = replicas.leader_partition(target.topic, target.partition)
            partition.check_leader(target.leader_epoch)
            if replica_id >= 0:
                await replicas.follower_fetched(partition, replica_id, target.offset)
            piece, offsets = await partition.read(
                target.offset, max(0, min(target.max_bytes, room)), not any(r.size for r in results), replica_id)
        except Exception as exc:
            results.append(FetchResult(target, error=exc))
            continue
        result = FetchResult(target, slice=piece, leader=partition, offsets=offsets)
        room = max(0, room - result.size)
        results.append(result)
    return results


def _count_sent(results: Sequence[FetchResult], replica_id: int) -> None:
    """Bytes out per topic (metrics on), consumers and followers apart."""
    for result in results:
        if result.leader is not None and result.leader.stats is not None and result.size:
            result.leader.stats.sent(result.size, replica_id >= 0)
