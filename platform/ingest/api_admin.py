"""Topic administration and producer ids: CreateTopics, DeleteTopics, DescribeConfigs,
AlterConfigs, InitProducerId. Any broker serves these; the ZooKeeper work runs on a thread
(kazoo is blocking) and the reply waits, bounded, until this broker has applied the change."""
from __future__ import annotations

import asyncio
from typing import Callable

from ember.cluster.metadata_cache import MetadataCache
from ember.cluster.producer_ids import ProducerIdAllocator
from ember.cluster.topic_admin import TopicAdmin, validate_topic_name
from ember.errors import UnknownTopicOrPartition
from ember.ingest import fields
from ember.ingest.broker_config import BrokerConfig
from ember.ingest.dispatcher import Handler
from ember.ingest.protocol import ApiKey, Request
from ember.ingest.replica_manager import ReplicaManager
from ember.ingest.reply import OK, Reply, error_fields
from ember.ingest.signals import wait_any

DEFAULT_TIMEOUT_MS = 10000
PRODUCER_EPOCH = 0


class AdminApis:
    def __init__(self, admin: TopicAdmin, cache: MetadataCache, replicas: ReplicaManager,
                 config: BrokerConfig, producer_ids: ProducerIdAllocator) -> None:
        self.admin = admin
        self.cache = cache
        self.replicas = replicas
        self.config = config
        self.producer_ids = producer_ids

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.CREATE_TOPICS: self.create_topics, ApiKey.DELETE_TOPICS: self.delete_topics,
                ApiKey.DESCRIBE_CONFIGS: self.describe_configs, ApiKey.ALTER_CONFIGS: self.alter_configs,
                ApiKey.INIT_PRODUCER_ID: self.init_producer_id}

    async def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                           config: dict[str, str] | None = None, validate_only: bool = False) -> str:
        """Create a topic (-1 = the broker's default partitions / replication factor); returns its id."""
        record = await asyncio.to_thread(
            self.admin.create_topic, name,
            self.config.num_partitions if partitions == -1 else partitions,
            self.config.default_replication_factor if replication_factor == -1 else replication_factor,
            config or {}, validate_only)
        return record.topic_id

    async def create_topics(self, request: Request) -> Reply:
        body = request.body
        validate_only = fields.boolean(body, "validate_only", False)
        timeout_s = fields.integer(body, "timeout_ms", DEFAULT_TIMEOUT_MS) / 1000
        topics = [(fields.string(e, "topic"), fields.integer(e, "partitions", -1),
                   fields.integer(e, "replication_factor", -1, bits=fields.INT16), fields.string_map(e, "config"))
                  for e in fields.objects(body, "topics")]
        results = []
        for name, partitions, replication_factor, config in fields.unique(topics, lambda t: t[0], "topics"):
            try:
                topic_id = await self.create_topic(name, partitions, replication_factor, config, validate_only)
                if not validate_only:
                    await self._until(lambda: self._applied(name, topic_id), timeout_s)
                results.append({"topic": name, **OK})
            except Exception as exc:
                results.append({"topic": name, **error_fields(exc)})
        return Reply({**OK, "topics": results})

    async def delete_topics(self, request: Request) -> Reply:
        timeout_s = fields.integer(request.body, "timeout_ms", DEFAULT_TIMEOUT_MS) / 1000
        results = []
        for name in fields.strings(request.body, "topics"):
            try:
                await asyncio.to_thread(self.admin.delete_topic, name)
                await self._until(lambda: not any(t == name for t, _ in self.replicas.partitions), timeout_s)
                results.append({"topic": name, **OK})
            except Exception as exc:
                results.append({"topic": name, **error_fields(exc)})
        return Reply({**OK, "topics": results})

    async def describe_configs(self, request: Request) -> Reply:
        names = fields.strings(request.body, "topics", None)
        results = []
        for name in (sorted(self.cache.topics()) if names is None else names):
            try:
                validate_topic_name(name)
                meta = self.cache.topic(name)
                if meta is None:
                    raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
                results.append({"topic": name, **OK,
                                "configs": self.config.describe_topic_config(meta.record.config)})
            except Exception as exc:
                results.append({"topic": name, **error_fields(exc), "configs": []})
        return Reply({**OK, "topics": results})

    async def alter_configs(self, request: Request) -> Reply:
        body = request.body
        name = fields.string(body, "topic")
        updates = fields.string_map(body, "set")
        deletes = fields.strings(body, "delete", [])
        validate_only = fields.boolean(body, "validate_only", False)
        record = await asyncio.to_thread(self.admin.alter_config, name, updates, deletes, validate_only)
        if not validate_only:
            expected = self.config.log_config(record.config)
            await self._until(lambda: all(p.config == expected for (t, _), p in self.replicas.partitions.items()
                                          if t == name), DEFAULT_TIMEOUT_MS / 1000)
        return Reply(dict(OK))

    async def init_producer_id(self, _request: Request) -> Reply:
        producer_id = await asyncio.to_thread(self.producer_ids.next_id)
        return Reply({**OK, "producer_id": producer_id, "producer_epoch": PRODUCER_EPOCH})

    def _applied(self, name: str, topic_id: str) -> bool:
        meta = self.cache.topic(name)
        if meta is None or meta.topic_id != topic_id:
            return False
        return all((name, index) in self.replicas.partitions
                   for index, replicas in meta.partitions.items() if self.replicas.broker_id in replicas)

    async def _until(self, done: Callable[[], bool], timeout_s: float) -> None:
        """Wait (bounded) until this broker has applied a metadata change; a timeout is not an
        error: the change is in ZooKeeper and every broker applies it soon."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not done() and loop.time() < deadline:
            await wait_any([self.replicas.reconciled], deadline - loop.time())
