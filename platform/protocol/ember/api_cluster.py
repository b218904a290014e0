"""Metadata of the ember protocol: live brokers, the controller and each topic's partitions. The
work is in ``ember.ingest.metadata_view`` (shared with the Kafka protocol); this is the JSON."""
from __future__ import annotations

from typing import Any

from ember.ingest.metadata_view import MetadataView, PartitionView
from ember.protocol.ember.dispatcher import Handler
from ember.wire import fields
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Request
from ember.wire.reply import OK, Reply, error_fields


def _partition_fields(view: PartitionView) -> dict[str, Any]:
    entry: dict[str, Any] = {"partition": view.index, "leader": view.leader, "leader_epoch": view.leader_epoch,
                             "replicas": view.replicas, "isr": view.isr,
                             **(error_fields(view.error) if view.error else OK)}
    if view.adding is not None:
        entry.update(adding_replicas=view.adding, removing_replicas=view.removing)
    return entry


class ClusterApis:
    def __init__(self, view: MetadataView) -> None:
        self.view = view

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.METADATA: self.metadata}

    async def metadata(self, request: Request) -> Reply:
        requested = fields.strings(request.body, "topics", None)
        cache = self.view.cache
        topics = cache.topics()
        live = cache.brokers()
        results = []
        for name in self.view.visible(topics) if requested is None else requested:
            try:
                meta = await self.view.topic(name, topics)
                results.append({"topic": name, **OK,
                                "partitions": [_partition_fields(p) for p in self.view.partitions(meta, live)]})
            except Exception as exc:
                results.append({"topic": name, **error_fields(exc), "partitions": []})
        return Reply({**OK, "brokers": [{"id": b.id, "host": b.host, "port": b.port}
                                        for b in sorted(live.values(), key=lambda b: b.id)],
                      "controller_id": cache.controller_id(), "topics": results})
