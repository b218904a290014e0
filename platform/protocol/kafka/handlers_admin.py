"""CreateTopics, DeleteTopics and InitProducerId over Kafka's protocol: translation only, the work
is the broker core's (``ember.ingest.topic_changes``, the cluster's producer-id allocator)."""
from __future__ import annotations

import asyncio
from typing import Any

from ember.cluster.producer_ids import PRODUCER_EPOCH
from ember.errors import InvalidRequest
from ember.ingest.core import BrokerCore
from ember.protocol.ember.wire import ApiKey
from ember.protocol.ember.reply import OK, error_fields
from ember.protocol.kafka.codec import KafkaRequest, build, millis, response_class
from ember.protocol.kafka.dispatcher import Api
from ember.protocol.kafka.names import ZERO_UUID, TopicNames

#: DescribeConfigs' config sources, as CreateTopics v5+ reports them
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5


class AdminHandlers:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    def apis(self) -> dict[int, Api]:
        return {ApiKey.CREATE_TOPICS: Api(2, 7, self.create_topics),
                ApiKey.DELETE_TOPICS: Api(1, 6, self.delete_topics),
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
                configs = [{"name": c["name"], "value": c["value"], "read_only": False, "is_sensitive": False,
                            "config_source": DEFAULT_CONFIG if c["default"] else DYNAMIC_TOPIC_CONFIG}
                           for c in self.core.config.describe_topic_config(record.config)]
                replicas = next(iter(record.assignment.values()))
                results.append({**OK, "name": topic.name, "topic_id": record.topic_id,
                                "num_partitions": len(record.assignment), "replication_factor": len(replicas),
                                "configs": configs})
            except Exception as exc:
                results.append({**error_fields(exc), "name": topic.name, "topic_id": ZERO_UUID,
                                "num_partitions": -1, "replication_factor": -1, "configs": None})
        return build(response_class(ApiKey.CREATE_TOPICS, request.api_version), {"topics": results})

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
        its old one: a new id is a valid answer, KIP-360). Transactions are refused."""
        cls = response_class(ApiKey.INIT_PRODUCER_ID, request.api_version)
        if request.body.transactional_id is not None:
            error = InvalidRequest("transactions are not supported: ember has no transaction coordinator; "
                                   "use an idempotent producer without transactional.id")
            return build(cls, {**error_fields(error), "producer_id": -1, "producer_epoch": -1})
        producer_id = await asyncio.to_thread(self.core.producer_ids.next_id)
        return build(cls, {**OK, "producer_id": producer_id, "producer_epoch": PRODUCER_EPOCH})
