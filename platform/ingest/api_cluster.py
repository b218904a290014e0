"""Metadata: live brokers, the controller and each topic's partitions, answered from the
broker's watch-driven cache (no ZooKeeper round trip per request)."""
from __future__ import annotations

from typing import Any, Awaitable, Callable

from ember.cluster.metadata_cache import MetadataCache, TopicMetadata
from ember.cluster.topic_admin import validate_topic_name
from ember.errors import LeaderNotAvailable, TopicAlreadyExists, UnknownTopicOrPartition
from ember.ingest import fields
from ember.ingest.dispatcher import Handler
from ember.ingest.protocol import ApiKey, Request
from ember.ingest.reply import OK, Reply, error_fields

AutoCreate = Callable[[str], Awaitable[Any]]
UnavailableReason = Callable[[TopicMetadata, int], str]


class ClusterApis:
    def __init__(self, cache: MetadataCache, auto_create: AutoCreate | None,
                 unavailable_reason: UnavailableReason) -> None:
        self.cache = cache
        self.auto_create = auto_create
        self.unavailable_reason = unavailable_reason

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.METADATA: self.metadata}

    async def metadata(self, request: Request) -> Reply:
        requested = fields.strings(request.body, "topics", None)
        topics = self.cache.topics()
        live = self.cache.brokers()
        names = sorted(topics) if requested is None else requested
        results = []
        for name in names:
            try:
                validate_topic_name(name)
                meta = topics.get(name)
                if meta is None:
                    await self._missing(name)
                results.append({"topic": name, **OK, "partitions": self._partitions(meta, live)})
            except Exception as exc:
                results.append({"topic": name, **error_fields(exc), "partitions": []})
        return Reply({**OK, "brokers": [{"id": b.id, "host": b.host, "port": b.port}
                                        for b in sorted(live.values(), key=lambda b: b.id)],
                      "controller_id": self.cache.controller_id(), "topics": results})

    async def _missing(self, name: str) -> None:
        """Raise the error for an unknown topic, creating it first if auto-create is on."""
        if self.auto_create is None:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        try:
            await self.auto_create(name)
        except TopicAlreadyExists:
            pass
        raise LeaderNotAvailable(f"topic {name!r} is being created; retry")

    def _partitions(self, meta: TopicMetadata, live: dict[int, Any]) -> list[dict[str, Any]]:
        partitions = []
        for index, replicas in meta.partitions.items():
            state = meta.states.get(index)
            leader = state.leader if state is not None and state.leader in live else -1
            entry: dict[str, Any] = {
                "partition": index, "leader": leader,
                "leader_epoch": state.leader_epoch if state else -1,
                "replicas": replicas, "isr": state.isr if state else [], **OK}
            if leader < 0:
                entry.update(error_fields(LeaderNotAvailable(self.unavailable_reason(meta, index))))
            move = meta.record.reassignments.get(index)
            if move is not None:
                entry.update(adding_replicas=move.adding, removing_replicas=move.removing)
            partitions.append(entry)
        return partitions
