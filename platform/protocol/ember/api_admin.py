"""Topic administration and producer ids of the ember protocol: CreateTopics, CreatePartitions,
DeleteTopics, DescribeConfigs, AlterConfigs, InitProducerId. Any broker serves these (InitProducerId
with a ``transactional_id``: its transaction coordinator only); the work is in
``ember.ingest.topic_changes`` and ``ember.ingest.transactions`` (shared with the Kafka protocol),
this module is the JSON format."""
from __future__ import annotations

import asyncio
from typing import Any

from ember.cluster.metadata_cache import MetadataCache
from ember.cluster.producer_ids import PRODUCER_EPOCH, ProducerIdAllocator
from ember.errors import InvalidRequest
from ember.ingest.topic_changes import DEFAULT_TIMEOUT_MS, TopicChanges
from ember.ingest.transactions.coordinator import TransactionCoordinator
from ember.protocol.ember.dispatcher import Handler
from ember.wire import fields
from ember.wire.api_keys import ApiKey
from ember.wire.config_def import ConfigEntry
from ember.wire.frame import Request
from ember.wire.reply import OK, Reply, error_fields


class AdminApis:
    def __init__(self, topics: TopicChanges, cache: MetadataCache, producer_ids: ProducerIdAllocator,
                 transactions: TransactionCoordinator | None = None) -> None:
        self.topics = topics
        self.cache = cache
        self.producer_ids = producer_ids
        self.transactions = transactions

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.CREATE_TOPICS: self.create_topics, ApiKey.CREATE_PARTITIONS: self.create_partitions,
                ApiKey.DELETE_TOPICS: self.delete_topics,
                ApiKey.DESCRIBE_CONFIGS: self.describe_configs, ApiKey.ALTER_CONFIGS: self.alter_configs,
                ApiKey.INIT_PRODUCER_ID: self.init_producer_id}

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
                await self.topics.create(name, partitions, replication_factor, config, validate_only, timeout_s)
                results.append({"topic": name, **OK})
            except Exception as exc:
                results.append({"topic": name, **error_fields(exc)})
        return Reply({**OK, "topics": results})

    async def create_partitions(self, request: Request) -> Reply:
        """Grow topics to ``count`` partitions; ``assignments`` (optional) gives each new
        partition's replicas."""
        body = request.body
        validate_only = fields.boolean(body, "validate_only", False)
        timeout_s = fields.integer(body, "timeout_ms", DEFAULT_TIMEOUT_MS) / 1000
        topics = [(fields.string(e, "topic"), fields.integer(e, "count"),
                   None if (listed := fields.objects(e, "assignments", None)) is None else
                   [fields.integers(a, "replicas") for a in listed])
                  for e in fields.objects(body, "topics")]
        results = []
        for name, count, assignment in fields.unique(topics, lambda t: t[0], "topics"):
            try:
                await self.topics.create_partitions(name, count, assignment, validate_only, timeout_s)
                results.append({"topic": name, **OK})
            except Exception as exc:
                results.append({"topic": name, **error_fields(exc)})
        return Reply({**OK, "topics": results})

    async def delete_topics(self, request: Request) -> Reply:
        timeout_s = fields.integer(request.body, "timeout_ms", DEFAULT_TIMEOUT_MS) / 1000
        results = []
        for name in fields.strings(request.body, "topics"):
            try:
                await self.topics.delete(name, timeout_s)
                results.append({"topic": name, **OK})
            except Exception as exc:
                results.append({"topic": name, **error_fields(exc)})
        return Reply({**OK, "topics": results})

    async def describe_configs(self, request: Request) -> Reply:
        names = fields.strings(request.body, "topics", None)
        results = []
        for name in (self.topics.access.visible_topics(sorted(self.cache.topics())) if names is None else names):
            try:
                results.append({"topic": name, **OK,
                                "configs": [config_fields(e) for e in self.topics.describe_config(name)]})
            except Exception as exc:
                results.append({"topic": name, **error_fields(exc), "configs": []})
        return Reply({**OK, "topics": results})

    async def alter_configs(self, request: Request) -> Reply:
        body = request.body
        await self.topics.alter_config(fields.string(body, "topic"), fields.string_map(body, "set"),
                                       fields.strings(body, "delete", []),
                                       fields.boolean(body, "validate_only", False), DEFAULT_TIMEOUT_MS / 1000)
        return Reply(dict(OK))

    async def init_producer_id(self, request: Request) -> Reply:
        """An idempotent producer's new id; with ``transactional_id`` (and ``transaction_timeout_ms``)
        the transaction coordinator's id and bumped epoch, which fence the id's previous producer
        (``producer_id``/``producer_epoch``: the caller's current ones, KIP-360)."""
        body = request.body
        transactional_id = fields.string(body, "transactional_id", None)
        if transactional_id is not None and self.transactions is not None:
            producer_id, epoch = await self.transactions.init_producer_id(
                transactional_id, fields.integer(body, "transaction_timeout_ms"),
                fields.integer(body, "producer_id", -1, bits=fields.INT64),
                fields.integer(body, "producer_epoch", -1, bits=fields.INT16))
            return Reply({**OK, "producer_id": producer_id, "producer_epoch": epoch})
        if transactional_id is not None:
            raise InvalidRequest("this broker has no transaction coordinator")
        self.topics.access.check_idempotent_write()
        producer_id = await asyncio.to_thread(self.producer_ids.next_id)
        return Reply({**OK, "producer_id": producer_id, "producer_epoch": PRODUCER_EPOCH})


def config_fields(entry: ConfigEntry) -> dict[str, Any]:
    """One DescribeConfigs entry in ember's JSON (``sensitive`` only for a secret)."""
    out: dict[str, Any] = {"name": entry.name, "value": entry.value, "default": entry.default, "doc": entry.doc,
                           "type": entry.type, "source": entry.source,
                           "synonyms": [{"name": s.name, "value": s.value, "source": s.source} for s in entry.synonyms]}
    if entry.sensitive:
        out["sensitive"] = True
    return out
