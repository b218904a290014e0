"""Topic creation, growth, deletion and configs as a broker serves them, for both wire protocols.

The ZooKeeper work runs on a thread (kazoo is blocking); the caller then waits, bounded, until
this broker knows of the change. A new topic or partition counts as created, as in Kafka, once
this broker's metadata names a leader for each partition: the leaders open their logs a moment
later (1,000 partitions take each broker a second or more), and until then a produce or fetch
gets LEADER_NOT_AVAILABLE, which clients retry. A wait that times out is no error: the change
is in ZooKeeper and every broker applies it soon.
"""
from __future__ import annotations

import asyncio
from typing import Callable, Mapping, Sequence

from ember.cluster.metadata_cache import MetadataCache
from ember.cluster.records import TopicRecord
from ember.cluster.topic_admin import TopicAdmin, validate_topic_name
from ember.errors import UnknownTopicOrPartition
from ember.ingest.broker_config import BrokerConfig
from ember.ingest.replica_manager import ReplicaManager
from ember.ingest.signals import wait_any
from ember.security.authorizer.access import ALLOW_ALL, Access
from ember.security.authorizer.model import Operation
from ember.wire.config_def import ConfigEntry

DEFAULT_TIMEOUT_MS = 10000


class TopicChanges:
    def __init__(self, admin: TopicAdmin, cache: MetadataCache, replicas: ReplicaManager,
                 config: BrokerConfig, access: Access = ALLOW_ALL) -> None:
        self.admin = admin
        #: Kafka's topic ACLs: Create (on the cluster or the topic), Alter, Delete, Describe/AlterConfigs.
        self.access = access
        self.cache = cache
        self.replicas = replicas
        self.config = config

    async def create(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     config: Mapping[str, str] | None = None, validate_only: bool = False,
                     timeout_s: float | None = None,
                     assignment: Mapping[int, Sequence[int]] | None = None) -> TopicRecord:
        """Create a topic (-1 = the broker's default partitions / replication factor, or a manual
        ``assignment``); with ``timeout_s``, wait up to that long until this broker's metadata
        names each partition's leader."""
        self.access.check_topic_or_cluster(Operation.CREATE, name)
        record = await asyncio.to_thread(
            self.admin.create_topic, name,
            self.config.num_partitions if partitions == -1 else partitions,
            self.config.default_replication_factor if replication_factor == -1 else replication_factor,
            dict(config or {}), validate_only, assignment)
        if timeout_s is not None and not validate_only:
            await self.until(lambda: self._led(name, record.topic_id), timeout_s, metadata=True)
        return record

    async def create_partitions(self, name: str, count: int, assignment: Sequence[Sequence[int]] | None = None,
                                validate_only: bool = False, timeout_s: float | None = None) -> TopicRecord:
        """Grow a topic to ``count`` partitions (``assignment``: one replica list per new
        partition); with ``timeout_s``, wait up to that long until this broker's metadata names
        their leaders."""
        self.access.check_topic(Operation.ALTER, name)
        record = await asyncio.to_thread(self.admin.create_partitions, name, count, assignment, validate_only)
        if timeout_s is not None and not validate_only:
            await self.until(lambda: self._led(name, record.topic_id, count), timeout_s, metadata=True)
        return record

    async def delete(self, name: str, timeout_s: float) -> None:
        self.access.check_topic(Operation.DELETE, name)
        await asyncio.to_thread(self.admin.delete_topic, name)
        await self.until(lambda: not any(t == name for t, _ in self.replicas.partitions), timeout_s)

    def describe_config(self, name: str) -> list[ConfigEntry]:
        """Topic ``name``'s DescribeConfigs entries (:meth:`BrokerConfig.describe_topic_config`)."""
        validate_topic_name(name)
        self.access.check_topic(Operation.DESCRIBE_CONFIGS, name)
        meta = self.cache.topic(name)
        if meta is None:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        return self.config.describe_topic_config(meta.record.config)

    async def alter_config(self, name: str, updates: Mapping[str, str], deletes: list[str],
                           validate_only: bool, timeout_s: float) -> None:
        self.access.check_topic(Operation.ALTER_CONFIGS, name)
        record = await asyncio.to_thread(self.admin.alter_config, name, updates, deletes, validate_only)
        if not validate_only:
            expected = self.config.log_config(record.config)
            await self.until(lambda: all(p.config == expected for (t, _), p in self.replicas.partitions.items()
                                         if t == name), timeout_s)

    def _led(self, name: str, topic_id: str, partitions: int = 0) -> bool:
        """This broker's metadata has the topic (this very one, not an older of the name) with
        ``partitions`` or more partitions, each with a live leader: what a client is told next."""
        meta = self.cache.topic(name)
        if meta is None or meta.topic_id != topic_id or len(meta.partitions) < partitions:
            return False
        live = self.cache.brokers()
        return all((state := meta.shown_state(index)) is not None and state.leader in live for index in meta.partitions)

    async def until(self, done: Callable[[], bool], timeout_s: float, metadata: bool = False) -> None:
        """Wait (bounded) until ``done``: looked at after each reconciliation (whose work, such as
        deleting a log, is then finished), and with ``metadata`` also as soon as the metadata
        cache tells of a change."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        signals = [self.replicas.reconciled, self.replicas.metadata_noticed] if metadata else [self.replicas.reconciled]
        while not done() and loop.time() < deadline:
            await wait_any(signals, deadline - loop.time())
