"""CreateTopics, CreatePartitions, DeleteTopics, DeleteRecords and InitProducerId over Kafka's
protocol: translation only, the work is the broker core's (``ember.ingest.topic_changes``, the
partitions' leaders, the cluster's producer-id allocator, the transaction coordinator)."""
from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from ember.cluster.producer_ids import PRODUCER_EPOCH
from ember.errors import InvalidRequest
from ember.ingest.core import BrokerCore
from ember.protocol.kafka.codec import KafkaRequest, build, millis, response_class
from ember.protocol.kafka.dispatcher import Api
from ember.protocol.kafka.handlers_configs import kafka_config
from ember.protocol.kafka.handlers_transactions import producer_error
from ember.protocol.kafka.names import ZERO_UUID, TopicNames
from ember.security.authorizer.model import Operation
from ember.wire.api_keys import ApiKey
from ember.wire.reply import OK, error_fields


class AdminHandlers:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    def apis(self) -> dict[int, Api]:
        return {ApiKey.CREATE_TOPICS: Api(2, 7, self.create_topics),
                ApiKey.CREATE_PARTITIONS: Api(0, 3, self.create_partitions),
                ApiKey.DELETE_TOPICS: Api(1, 6, self.delete_topics),
                ApiKey.DELETE_RECORDS: Api(0, 2, self.delete_records),
                ApiKey.INIT_PRODUCER_ID: Api(0, 6, self.init_producer_id)}

    async def create_topics(self, request: KafkaRequest) -> Any:
        body = request.body
        timeout_s = millis(body.timeout) / 1000
        results = []
        for topic in body.topics:
            try:
                assignment = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
                if assignment and (topic.num_partitions != -1 or topic.replication_factor != -1):
                    raise InvalidRequest(f"{topic.name}: give either a replica assignment or num_partitions and "
                                         f"replication_factor, with the other as -1")
                record = await self.core.topics.create(
                    topic.name, topic.num_partitions, topic.replication_factor,
                    {c.name: c.value for c in topic.configs if c.value is not None}, body.validate_only,
                    timeout_s, assignment)
                configs = [kafka_config(c, False, False, False) for c in self.core.config.describe_topic_config(record.config)]
                replicas = next(iter(record.assignment.values()))
                results.append({**OK, "name": topic.name, "topic_id": record.topic_id,
                                "num_partitions": len(record.assignment), "replication_factor": len(replicas),
                                "configs": configs})
            except Exception as exc:
                results.append({**error_fields(exc), "name": topic.name, "topic_id": ZERO_UUID,
                                "num_partitions": -1, "replication_factor": -1, "configs": None})
        return build(response_class(ApiKey.CREATE_TOPICS, request.api_version), {"topics": results})

    async def create_partitions(self, request: KafkaRequest) -> Any:
        body = request.body
        timeout_s = millis(body.timeout) / 1000
        repeated = Counter(topic.name for topic in body.topics)
        results = []
        for topic in body.topics:
            try:
                if repeated[topic.name] > 1:
                    raise InvalidRequest(f"topic {topic.name[:300]!r} is listed more than once")
                assignment = None if topic.assignments is None else [list(a.broker_ids) for a in topic.assignments]
                await self.core.topics.create_partitions(topic.name, topic.count, assignment, body.validate_only,
                                                         timeout_s)
                results.append({**OK, "name": topic.name, "error_message": None})
            except Exception as exc:
                results.append({**error_fields(exc), "name": topic.name})
        return build(response_class(ApiKey.CREATE_PARTITIONS, request.api_version), {"results": results})

    async def delete_records(self, request: KafkaRequest) -> Any:
        """Each partition's log start moves up at its leader (this broker); the low watermark
        answered is the leader's new log start (Kafka waits for every replica's: ember's
        followers move theirs on their next fetch)."""
        topics = []
        for topic in request.body.topics:
            partitions = []
            for item in topic.partitions:
                try:
                    self.core.access.check_topic(Operation.DELETE, topic.name)
                    partition = self.core.replicas.leader_partition(topic.name, item.partition_index)
                    low = await partition.delete_records(item.offset)
                    partitions.append({**OK, "partition_index": item.partition_index, "low_watermark": low})
                except Exception as exc:
                    partitions.append({**error_fields(exc), "partition_index": item.partition_index,
                                       "low_watermark": -1})
            topics.append({"name": topic.name, "partitions": partitions})
        return build(response_class(ApiKey.DELETE_RECORDS, request.api_version), {"topics": topics})

    async def delete_topics(self, request: KafkaRequest) -> Any:
        body = request.body
        timeout_s = millis(body.timeout) / 1000
        names = TopicNames(self.core.cache.topics())
        wanted = list(getattr(body, "topic_names", ())) or list(getattr(body, "topics", ()))
        results = []
        for item in wanted:
            try:
                name = item if isinstance(item, str) else names.name_of(item)
            except Exception as exc:
                results.append({**error_fields(exc), "name": None, "topic_id": item.topic_id})
                continue
            ref = names.ref(name)
            try:
                await self.core.topics.delete(name, timeout_s)
                results.append({**OK, **ref, "error_message": None})
            except Exception as exc:
                results.append({**error_fields(exc), **ref})
        return build(response_class(ApiKey.DELETE_TOPICS, request.api_version), {"responses": results})

    async def init_producer_id(self, request: KafkaRequest) -> Any:
        """A fresh producer id for an idempotent producer (also when it asks to bump the epoch of
        its old one: a new id is a valid answer, KIP-360); with a transactional id, the
        transaction coordinator's (fencing the id's previous producer)."""
        body = request.body
        cls = response_class(ApiKey.INIT_PRODUCER_ID, request.api_version)
        if body.transactional_id is not None:
            try:
                if getattr(body, "enable2_pc", False):
                    raise InvalidRequest("two-phase commit (KIP-939) is not supported")
                producer_id, epoch = await self.core.transactions.init_producer_id(
                    body.transactional_id, millis(body.transaction_timeout), getattr(body, "producer_id", -1),
                    getattr(body, "producer_epoch", -1))
            except Exception as exc:
                return build(cls, {**producer_error(exc, ApiKey.INIT_PRODUCER_ID, request.api_version),
                                   "producer_id": -1, "producer_epoch": -1})
            return build(cls, {**OK, "producer_id": producer_id, "producer_epoch": epoch})
        try:
            self.core.access.check_idempotent_write()
        except Exception as exc:
            return build(cls, {**error_fields(exc), "producer_id": -1, "producer_epoch": -1})
        producer_id = await asyncio.to_thread(self.core.producer_ids.next_id)
        return build(cls, {**OK, "producer_id": producer_id, "producer_epoch": PRODUCER_EPOCH})
