"""Topic names and ids in Kafka requests: requests name topics by name, or (Produce v13, Fetch
v13+, Metadata v10+, OffsetCommit/OffsetFetch v10) by topic id, ember's topic id as a UUID."""
from __future__ import annotations

import functools
import uuid
from typing import Any

from ember.cluster.metadata_cache import TopicMetadata
from ember.errors import UnknownTopicId
from ember.protocol.kafka.codec import topic_uuid

ZERO_UUID = uuid.UUID(int=0)


class TopicNames:
    """Names and ids of one snapshot of the metadata cache. Built for every Produce and Fetch:
    the map from ids back to names is built only when a request names a topic by id (it took
    one UUID per topic in the cluster, for every request)."""

    def __init__(self, topics: dict[str, TopicMetadata]) -> None:
        self.topics = topics

    @functools.cached_property
    def _names(self) -> dict[uuid.UUID, str]:
        return {topic_uuid(meta.topic_id): name for name, meta in self.topics.items()}

    def name_of(self, item: Any) -> str:
        """The topic an entity of a request names (its ``name``/``topic`` or ``topic_id`` field)."""
        name = getattr(item, "name", None)
        name = getattr(item, "topic", None) if name is None else name
        if name is not None:     # even "": the topic-name check refuses it with INVALID_TOPIC_EXCEPTION
            return str(name)
        topic_id = getattr(item, "topic_id", None)
        if topic_id in self._names:
            return self._names[topic_id]
        raise UnknownTopicId(f"no topic has id {topic_id}")

    def id_of(self, name: str) -> uuid.UUID:
        meta = self.topics.get(name)
        return topic_uuid(meta.topic_id) if meta is not None else ZERO_UUID

    def ref(self, name: str) -> dict[str, Any]:
        """Both ways a response may name a topic; each version keeps the field it has."""
        return {"name": name, "topic": name, "topic_id": self.id_of(name)}
