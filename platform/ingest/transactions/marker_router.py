"""Routing of transaction markers to partition leaders: the coordinator's :class:`MarkerWriter`.

Partitions this broker leads get their markers from the local writer (the partition side,
:mod:`ember.ingest.txn_markers`); the others are sent, one request per leader and all leaders at
once, to their leader over ember's protocol (WRITE_TXN_MARKERS on the inter-broker listener),
through :class:`Peers` (one connection per broker, kept between completions). A partition without a known leader,
or whose leader cannot be reached, fails with a retriable error the coordinator retries.
"""
from __future__ import annotations

import asyncio
import logging

from ember.cluster.metadata_cache import MetadataCache
from ember.errors import LeaderNotAvailable, UnknownTopicOrPartition
from ember.ingest.transactions.markers import MarkerWriter
from ember.ingest.transactions.peers import Peers, Results
from ember.ingest.transactions.state import Partition
from ember.wire.api_keys import ApiKey

log = logging.getLogger(__name__)


class MarkerRouter:
    def __init__(self, broker_id: int, cache: MetadataCache, local: MarkerWriter, peers: Peers) -> None:
        self.broker_id = broker_id
        self.cache = cache
        self.local = local
        self.peers = peers

    async def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                            partitions: list[Partition]) -> Results:
        results: Results = {}
        by_leader: dict[int, list[Partition]] = {}
        topics = self.cache.topics()
        for topic, index in partitions:
            metadata = topics.get(topic)
            state = metadata.shown_state(index) if metadata is not None else None
            if metadata is None or index not in metadata.partitions:
                results[(topic, index)] = UnknownTopicOrPartition(f"{topic}-{index} does not exist")
            elif state is None or state.leader < 0:
                results[(topic, index)] = LeaderNotAvailable(f"{topic}-{index} has no leader")
            else:
                by_leader.setdefault(state.leader, []).append((topic, index))
        marker = (producer_id, producer_epoch, coordinator_epoch, commit)
        sends = [self.local.write_markers(*marker, parts) if leader == self.broker_id
                 else self._remote(leader, marker, parts) for leader, parts in by_leader.items()]
        for parts, answer in zip(by_leader.values(), await asyncio.gather(*sends, return_exceptions=True)):
            if isinstance(answer, BaseException):
                if isinstance(answer, asyncio.CancelledError):
                    raise answer
                results.update({p: answer if isinstance(answer, Exception) else RuntimeError(str(answer))
                                for p in parts})
            else:
                results.update({p: answer.get(p, RuntimeError("no answer")) for p in parts})
        return results

    async def _remote(self, leader: int, marker: tuple[int, int, int, bool], partitions: list[Partition]) -> Results:
        producer_id, producer_epoch, coordinator_epoch, commit = marker
        body = {"producer_id": producer_id, "producer_epoch": producer_epoch,
                "coordinator_epoch": coordinator_epoch, "commit": commit,
                "partitions": [{"topic": t, "partition": p} for t, p in partitions]}
        return await self.peers.partition_call(leader, ApiKey.WRITE_TXN_MARKERS, body, partitions)

    def close(self) -> None:
        self.peers.close()
