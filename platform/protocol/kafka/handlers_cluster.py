"""Metadata over Kafka's protocol: the brokers' addresses on the listener the client connected to,
the controller, and each topic's partitions from the broker core's :class:`MetadataView` (the same
answer the ember protocol gives, auto-creation included)."""
from __future__ import annotations

from typing import Any

from ember.cluster.records import BrokerInfo
from ember.ingest.core import BrokerCore
from ember.ingest.metadata_view import PartitionView
from ember.protocol.ember.wire import ApiKey
from ember.protocol.ember.reply import OK, error_fields
from ember.protocol.kafka.codec import KafkaRequest, build, response_class
from ember.protocol.kafka.dispatcher import Api
from ember.protocol.kafka.names import ZERO_UUID, TopicNames

#: Kafka's "authorized operations not requested" value
NO_OPERATIONS = -(1 << 31)


def _partition(view: PartitionView, live: dict[int, BrokerInfo]) -> dict[str, Any]:
    return {**(error_fields(view.error) if view.error else OK), "partition_index": view.index,
            "leader_id": view.leader, "leader_epoch": view.leader_epoch, "replica_nodes": view.replicas,
            "isr_nodes": view.isr, "offline_replicas": [r for r in view.replicas if r not in live]}


class ClusterHandlers:
    def __init__(self, core: BrokerCore, listener: str) -> None:
        self.core = core
        self.listener = listener

    def apis(self) -> dict[int, Api]:
        return {ApiKey.METADATA: Api(0, 13, self.metadata)}

    def brokers(self) -> dict[int, BrokerInfo]:
        """Live brokers that have this listener (the only ones its clients can reach)."""
        return {i: b for i, b in self.core.cache.brokers().items() if b.endpoint(self.listener) is not None}

    async def metadata(self, request: KafkaRequest) -> Any:
        body = request.body
        view = self.core.view
        topics = self.core.cache.topics()
        names = TopicNames(topics)
        live = self.brokers()
        requested = body.topics
        if requested is None or (request.api_version == 0 and not requested):   # all topics
            wanted: list[Any] = sorted(topics)
        else:
            wanted = list(requested)
        allow_auto_create = getattr(body, "allow_auto_topic_creation", True)
        results = []
        for item in wanted:
            try:
                name = item if isinstance(item, str) else names.name_of(item)
            except Exception as exc:
                name = getattr(item, "name", None)      # None: asked by id; v10-11 answer a name, never null
                results.append({**error_fields(exc), "name": "" if name is None and request.api_version < 12 else name,
                                "topic_id": getattr(item, "topic_id", ZERO_UUID), "partitions": []})
                continue
            try:
                meta = await view.topic(name, topics, allow_auto_create)
                results.append({**OK, **names.ref(name), "is_internal": False,
                                "partitions": [_partition(p, live) for p in view.partitions(meta, live)],
                                "topic_authorized_operations": NO_OPERATIONS})
            except Exception as exc:
                results.append({**error_fields(exc), "name": name, "topic_id": ZERO_UUID, "partitions": []})
        brokers = [{"node_id": b.id, "host": b.endpoint(self.listener)[0], "port": b.endpoint(self.listener)[1]}
                   for b in sorted(live.values(), key=lambda b: b.id)]
        return build(response_class(ApiKey.METADATA, request.api_version), {
            **OK, "brokers": brokers, "cluster_id": self.core.cluster_id,
            "controller_id": self.core.cache.controller_id(), "topics": results,
            "cluster_authorized_operations": NO_OPERATIONS})

