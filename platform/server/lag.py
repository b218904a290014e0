"""Consumer-group lag, exported by each group's coordinator.

Every group whose committed offsets live in ZooKeeper and that this broker coordinates gets, per
partition, its committed offset and its lag (high watermark − committed offset): ember consumer
groups, Spark queries reading with ``groupId`` (they commit each finished micro-batch) and, once
it lands, the Kafka listener's groups all show up here, in one place. The names follow the
common Kafka exporter's (``kafka_consumergroup_lag``).

Read when scraped (:meth:`GroupLagCollector.refresh`, awaited by the endpoint before it
renders): the committed offsets from ZooKeeper on a thread, the high watermarks of partitions
led here from the logs, the others with one ListOffsets per leader (bounded by
``timeout_s``; a partition whose leader does not answer has no lag sample this time).
Reading group state never loads a group into the coordinator, so scraping cannot start a rebalance.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Callable, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ember.ingest.broker_client import BrokerClient, InterBroker
from ember.ingest.partition import LATEST_TIMESTAMP
from ember.wire.api_keys import ApiKey
from ember.wire.isolation import READ_COMMITTED, READ_UNCOMMITTED
from ember.wire.types import TopicPartition

if TYPE_CHECKING:
    from prometheus_client import Metric

    from ember.cluster.metadata_cache import MetadataCache
    from ember.groups.coordinator import GroupCoordinator
    from ember.ingest.partition import Partition

log = logging.getLogger(__name__)

Committed = dict[str, dict[TopicPartition, int]]


class GroupLagCollector(Collector):
    def __init__(self, coordinator: "GroupCoordinator", cache: "MetadataCache",
                 partitions: Callable[[], Mapping[tuple[str, int], "Partition"]], timeout_s: float,
                 inter_broker: InterBroker) -> None:
        self.coordinator = coordinator
        self.inter_broker = inter_broker
        self.cache = cache
        self.partitions = partitions
        self.timeout_s = timeout_s
        self._committed: Committed = {}
        self._ends: dict[TopicPartition, int] = {}
        self._stable: dict[TopicPartition, int] = {}
        self._members: dict[str, int] = {}
        self._clients: dict[int, BrokerClient] = {}
        self._refreshing = asyncio.Lock()   # concurrent scrapes share the leader connections

    async def refresh(self) -> None:
        """Read committed offsets and high watermarks for the next :meth:`collect`."""
        async with self._refreshing:
            await self._refresh()

    async def _refresh(self) -> None:
        committed = await asyncio.to_thread(self._read_committed)
        wanted = {tp for offsets in committed.values() for tp in offsets}
        self._ends, self._stable = await self._high_watermarks(wanted)
        self._committed = committed
        self._members = {group: len(state.members) for group, state in self.coordinator.groups.items()}

    def _read_committed(self) -> Committed:
        store = self.coordinator.store
        return {group: {tp: c.offset for tp, c in store.fetch(group, None).items()}
                for group in store.groups() if self.coordinator.owns(group)}

    async def _high_watermarks(self, wanted: set[TopicPartition]
                               ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """(high watermarks, last stable offsets) of the partitions (those whose leader answers)."""
        ends: dict[TopicPartition, int] = {}
        stable: dict[TopicPartition, int] = {}
        local = self.partitions()
        remote: dict[int, list[TopicPartition]] = {}
        topics = self.cache.topics()
        for tp in wanted:
            partition = local.get((tp.topic, tp.partition))
            if partition is not None and partition.is_leader:
                ends[tp] = partition.log.high_watermark
                stable[tp] = partition.log.last_stable_offset
                continue
            meta = topics.get(tp.topic)
            state = meta.states.get(tp.partition) if meta is not None else None
            if state is not None and state.leader >= 0:
                remote.setdefault(state.leader, []).append(tp)
        answers = await asyncio.gather(*(self._list_offsets(leader, tps, isolation)
                                         for leader, tps in remote.items() for isolation in (READ_UNCOMMITTED, READ_COMMITTED)))
        for answer, target in zip(answers, [found for _ in remote for found in (ends, stable)]):
            target.update(answer)
        return ends, stable

    async def _list_offsets(self, leader: int, tps: list[TopicPartition], isolation: int) -> dict[TopicPartition, int]:
        """High watermarks (last stable offsets for READ_COMMITTED) from ``leader``; {} when it does
        not answer in time."""
        body = {"isolation_level": isolation,
                "partitions": [{"topic": tp.topic, "partition": tp.partition, "timestamp": LATEST_TIMESTAMP} for tp in tps]}
        try:
            client = self._clients.get(leader)
            if client is None or client.closed:
                address = self.inter_broker.address(self.cache.brokers().get(leader))
                if address is None:
                    return {}
                client = self._clients[leader] = await asyncio.wait_for(
                    self.inter_broker.connect(address, int(self.timeout_s * 1000)), self.timeout_s)
            response = await asyncio.wait_for(client.call(ApiKey.LIST_OFFSETS, body, self.timeout_s), self.timeout_s)
        except Exception as exc:
            log.debug("lag: no high watermarks from broker %d (%s)", leader, exc)
            self._drop(leader)
            return {}
        return {TopicPartition(p["topic"], p["partition"]): p["offset"]
                for p in response.body.get("partitions", []) if not p.get("error_code") and p["offset"] >= 0}

    def _drop(self, leader: int) -> None:
        client = self._clients.pop(leader, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        for leader in list(self._clients):
            self._drop(leader)

    def collect(self) -> Iterator["Metric"]:
        labels = ["group", "topic", "partition"]
        offset = GaugeMetricFamily("ember_consumergroup_current_offset", "Committed offset of the group.", labels=labels)
        lag = GaugeMetricFamily("ember_consumergroup_lag",
                                "High watermark minus the committed offset: records the group has not read.",
                                labels=labels)
        stable_lag = GaugeMetricFamily("ember_consumergroup_lag_stable",
                                       "Last stable offset minus the committed offset: what a read_committed group "
                                       "can read now (the rest waits for open transactions to end).", labels=labels)
        for group, offsets in sorted(self._committed.items()):
            for tp, committed in sorted(offsets.items()):
                key = [group, tp.topic, str(tp.partition)]
                offset.add_metric(key, committed)
                end = self._ends.get(tp)
                if end is not None:
                    lag.add_metric(key, max(0, end - committed))
                stable = self._stable.get(tp)
                if stable is not None:
                    stable_lag.add_metric(key, max(0, stable - committed))
        members = GaugeMetricFamily("ember_consumergroup_members", "Members of a group this broker coordinates.",
                                    labels=["group"])
        for group, count in sorted(self._members.items()):
            members.add_metric([group], count)
        yield from (offset, lag, stable_lag, members)
