"""Routing of transaction markers to partition leaders: the coordinator's :class:`MarkerWriter`.

Partitions this broker leads get their markers from the local writer (the partition side,
:mod:`ember.ingest.txn_markers`); the others are sent, one request per leader and all leaders at
once, to their leader over ember's protocol (WRITE_TXN_MARKERS on the inter-broker listener),
through one connection per broker kept between completions. A partition without a known leader,
or whose leader cannot be reached, fails with a retriable error the coordinator retries.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

from ember.cluster.metadata_cache import MetadataCache
from ember.errors import BrokerNotAvailable, EmberError, LeaderNotAvailable, UnknownTopicOrPartition, error_for_code
from ember.ingest.broker_client import BrokerClient, InterBroker
from ember.ingest.transactions.markers import MarkerWriter
from ember.ingest.transactions.state import Partition
from ember.wire.api_keys import ApiKey

log = logging.getLogger(__name__)

Results = dict[Partition, Optional[Exception]]


class MarkerRouter:
    def __init__(self, broker_id: int, cache: MetadataCache, local: MarkerWriter, inter_broker: InterBroker,
                 request_timeout_ms: int = 30000) -> None:
        self.broker_id = broker_id
        self.cache = cache
        self.local = local
        self.inter_broker = inter_broker
        self.request_timeout_ms = request_timeout_ms
        self._clients: dict[int, BrokerClient] = {}

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
        try:
            client = await self._client(leader)
            response = await client.call(ApiKey.WRITE_TXN_MARKERS, body, timeout_s=self.request_timeout_ms / 1000)
        except EmberError as exc:
            self._drop(leader)
            if not exc.retriable:
                raise
            return {p: exc for p in partitions}
        except (OSError, TimeoutError) as exc:
            self._drop(leader)
            return {p: BrokerNotAvailable(f"broker {leader}: {exc}") for p in partitions}
        return {(str(a["topic"]), int(a["partition"])): _error(a) for a in response.body.get("partitions", [])}

    async def _client(self, broker_id: int) -> BrokerClient:
        client = self._clients.get(broker_id)
        if client is not None and not client.closed:
            return client
        address = self.inter_broker.address(self.cache.brokers().get(broker_id))
        if address is None:
            raise BrokerNotAvailable(f"broker {broker_id} is not live")
        client = await self.inter_broker.connect(address, self.request_timeout_ms)
        self._clients[broker_id] = client
        return client

    def _drop(self, broker_id: int) -> None:
        client = self._clients.pop(broker_id, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        for broker_id in list(self._clients):
            self._drop(broker_id)


def _error(answer: dict[str, Any]) -> Optional[Exception]:
    code = int(answer.get("error_code", 0))
    return error_for_code(code, str(answer.get("error_message") or "")) if code else None
