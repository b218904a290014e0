"""Metadata, DescribeCluster, DescribeTopicPartitions and DescribeLogDirs over Kafka's protocol:
the brokers' addresses on the listener the client connected to, the controller, each topic's
partitions from the broker core's :class:`MetadataView` (the same answer the ember protocol
gives, auto-creation included for Metadata), and this broker's replicas in each of its log
directories."""
from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Any

from ember.cluster.metadata_cache import TopicMetadata
from ember.cluster.records import BrokerInfo
from ember.errors import InvalidRequest, StorageError, UnsupportedEndpointType
from ember.ingest.core import BrokerCore
from ember.protocol.kafka.codec import EncodedResponse, KafkaRequest, build, response_class
from ember.protocol.kafka.dispatcher import Api
from ember.protocol.kafka.metadata_response import (
    EncodedTopic,
    PartitionTemplates,
    TopicEntryCache,
    assemble,
    encode_topic,
    partition_values,
    topic_class,
)
from ember.protocol.kafka.names import ZERO_UUID, TopicNames
from ember.security.authorizer.model import Operation
from ember.wire.api_keys import ApiKey
from ember.wire.reply import OK, error_fields

#: Kafka's "authorized operations not requested" value
NO_OPERATIONS = -(1 << 31)
#: DescribeCluster's endpoint type of brokers (2 would be KRaft controllers)
BROKER_ENDPOINTS = 1
#: Most partitions one DescribeTopicPartitions response lists (Kafka's
#: ``max.request.partition.size.limit`` default); the cursor says where the next one starts.
MAX_RESPONSE_PARTITIONS = 2000


class ClusterHandlers:
    def __init__(self, core: BrokerCore, listener: str) -> None:
        self.core = core
        self.listener = listener
        self.entries = TopicEntryCache()
        self.partition_templates = PartitionTemplates()

    def apis(self) -> dict[int, Api]:
        return {ApiKey.METADATA: Api(0, 13, self.metadata),
                ApiKey.DESCRIBE_CLUSTER: Api(0, 2, self.describe_cluster),
                ApiKey.DESCRIBE_TOPIC_PARTITIONS: Api(0, 0, self.describe_topic_partitions),
                ApiKey.DESCRIBE_LOG_DIRS: Api(1, 5, self.describe_log_dirs)}

    def brokers(self) -> dict[int, BrokerInfo]:
        """Live brokers that have this listener (the only ones its clients can reach)."""
        return {i: b for i, b in self.core.cache.brokers().items() if b.endpoint(self.listener) is not None}

    async def metadata(self, request: KafkaRequest) -> EncodedResponse:
        """Each topic's entry comes from :class:`TopicEntryCache` while its metadata is unchanged;
        only what a request asks and may see is decided here, per request."""
        body = request.body
        version = request.api_version
        view = self.core.view
        topics = self.core.cache.topics()
        names = TopicNames(topics)
        live = self.brokers()
        live_ids = frozenset(live)
        requested = body.topics
        if requested is None or (version == 0 and not requested):   # all topics
            wanted: list[Any] = view.visible(topics)
        else:   # each topic once, as Kafka answers (a set): a request naming one topic 10^5 times is no bigger answer
            wanted = list(dict.fromkeys(requested))
        allow_auto_create = getattr(body, "allow_auto_topic_creation", True)
        entry_class = topic_class(version)
        results: list[EncodedTopic] = []
        for item in wanted:
            try:
                name = item if isinstance(item, str) else names.name_of(item)
            except Exception as exc:
                given = getattr(item, "name", None)      # None: asked by id; v10-11 answer a name, never null
                results.append(encode_topic(build(entry_class, {
                    **error_fields(exc), "name": "" if given is None and version < 12 else given,
                    "topic_id": getattr(item, "topic_id", ZERO_UUID), "partitions": []})))
                continue
            try:
                meta = await view.topic(name, topics, allow_auto_create)
                results.append(self.entries.get(version, meta, live_ids,
                                                functools.partial(self._topic_entry, version, meta, names, live)))
            except Exception as exc:
                results.append(encode_topic(build(entry_class, {**error_fields(exc), "name": name,
                                                                "topic_id": ZERO_UUID, "partitions": []})))
        self.entries.prune(topics)
        return assemble(version, {
            **OK, "brokers": self._addresses(live), "cluster_id": self.core.cluster_id,
            "controller_id": self.core.cache.controller_id(), "cluster_authorized_operations": NO_OPERATIONS},
            results)

    def _topic_entry(self, version: int, meta: TopicMetadata, names: TopicNames,
                     live: dict[int, BrokerInfo]) -> EncodedTopic:
        fields = {**OK, **names.ref(meta.name), "is_internal": False, "topic_authorized_operations": NO_OPERATIONS}
        return self.partition_templates.topic_entry(version, fields, self.core.view.partitions(meta, live), live)

    def _addresses(self, live: dict[int, BrokerInfo]) -> list[dict[str, Any]]:
        """Each broker's address on this listener (both ways Kafka's responses name a broker id)."""
        return [  # type: ignore[misc]  # b.endpoint() is never None: brokers() keeps only the brokers with this listener
            {"node_id": b.id, "broker_id": b.id, "host": host, "port": port, "rack": None, "is_fenced": False}
            for b in sorted(live.values(), key=lambda b: b.id) for host, port in [b.endpoint(self.listener)]]

    async def describe_cluster(self, request: KafkaRequest) -> Any:
        cls = response_class(ApiKey.DESCRIBE_CLUSTER, request.api_version)
        endpoint_type = getattr(request.body, "endpoint_type", BROKER_ENDPOINTS)     # v1+
        fields = {"endpoint_type": endpoint_type, "cluster_id": self.core.cluster_id,
                  "controller_id": self.core.cache.controller_id(), "cluster_authorized_operations": NO_OPERATIONS}
        if endpoint_type != BROKER_ENDPOINTS:
            error = UnsupportedEndpointType(f"endpoint type {endpoint_type} is not served: ember brokers list brokers (1)")
            return build(cls, {**error_fields(error), **fields, "brokers": []})
        return build(cls, {**OK, "error_message": None, **fields, "brokers": self._addresses(self.brokers())})

    async def describe_topic_partitions(self, request: KafkaRequest) -> Any:
        """Topics' partitions in name and partition order, at most ``response_partition_limit``
        of them per response (and at most 2000); ``next_cursor`` names the first one left out.
        No topics asked: every topic (unknown ones asked by name get an error each)."""
        body = request.body
        cls = response_class(ApiKey.DESCRIBE_TOPIC_PARTITIONS, request.api_version)
        topics = self.core.cache.topics()
        names = TopicNames(topics)
        live = self.brokers()
        cursor = body.cursor
        start = cursor.topic_name if cursor is not None else ""
        every = not body.topics
        # every topic: only those the principal may Describe (a cursor must not name the others)
        wanted = sorted({name for name in (self.core.view.visible(topics) if every else (t.name for t in body.topics))
                         if name >= start})
        if cursor is not None and (cursor.partition_index < 0 or (not every and cursor.topic_name not in wanted)):
            error = InvalidRequest(f"the cursor ({cursor.topic_name[:100]!r}, {cursor.partition_index}) must name a "
                                   f"requested topic and a partition index of at least 0")
            return build(cls, {"topics": [{**error_fields(error), "name": n, "topic_id": ZERO_UUID, "partitions": []}
                                          for n in wanted], "next_cursor": None})
        room = max(1, min(body.response_partition_limit, MAX_RESPONSE_PARTITIONS))
        results: list[dict[str, Any]] = []
        next_cursor = None
        for name in wanted:
            if room == 0:
                next_cursor = {"topic_name": name, "partition_index": 0}
                break
            try:
                meta = await self.core.view.topic(name, topics, allow_auto_create=False)
            except Exception as exc:
                if not every:
                    results.append({**error_fields(exc), "name": name, "topic_id": ZERO_UUID, "partitions": []})
                continue
            first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
            views = [p for p in self.core.view.partitions(meta, live) if p.index >= first]
            if len(views) > room:
                next_cursor = {"topic_name": name, "partition_index": views[room].index}
                views = views[:room]
            room -= len(views)
            results.append({**OK, **names.ref(name), "is_internal": False,
                            "partitions": [partition_values(p, live) for p in views],
                            "topic_authorized_operations": NO_OPERATIONS})
            if next_cursor is not None:
                break
        return build(cls, {"topics": results, "next_cursor": next_cursor})


    async def describe_log_dirs(self, request: KafkaRequest) -> Any:
        """This broker's log directories (``log.dirs``) with the size of every replica each one
        hosts of the asked partitions (null: all) and how far each is behind its high watermark
        (``kafka-log-dirs``; ``kafka-reassign-partitions`` reads where replicas are). A directory
        that failed at start-up answers KAFKA_STORAGE_ERROR, as Kafka's offline directories do."""
        try:
            self.core.access.check_cluster(Operation.DESCRIBE)
        except Exception as exc:
            return build(response_class(ApiKey.DESCRIBE_LOG_DIRS, request.api_version),
                         {**error_fields(exc), "results": []})
        asked = request.body.topics
        wanted = None if asked is None else {(t.topic, p) for t in asked for p in t.partitions}
        by_dir: dict[Path, dict[str, list[dict[str, Any]]]] = {}
        for (name, index), partition in sorted(self.core.replicas.partitions.items()):
            if wanted is None or (name, index) in wanted:
                log = partition.log
                by_dir.setdefault(log.directory.parent, {}).setdefault(name, []).append({
                    "partition_index": index, "partition_size": log.size_in_bytes,
                    "offset_lag": max(0, log.high_watermark - log.log_end_offset), "is_future_key": False})
        results = []
        for directory in self.core.replicas.logs.dirs.dirs:
            if not directory.online:
                results.append({**error_fields(StorageError(f"{directory.path} is offline: {directory.offline_reason}")),
                                "log_dir": str(directory.path), "total_bytes": -1, "usable_bytes": -1, "topics": []})
                continue
            usage = shutil.disk_usage(directory.path)
            topics = by_dir.get(directory.path, {})
            results.append({**OK, "log_dir": str(directory.path), "total_bytes": usage.total,
                            "usable_bytes": usage.free,
                            "topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()]})
        return build(response_class(ApiKey.DESCRIBE_LOG_DIRS, request.api_version), {**OK, "results": results})
