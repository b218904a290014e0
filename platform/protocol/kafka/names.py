"""Topic names and ids in Kafka requests: requests name topics by name, or (Produce v13, Fetch
v13+, Metadata v10+, OffsetCommit/OffsetFetch v10) by topic id, ember's topic id as a UUID."""
from __future__ import annotations

import uuid
from typing import Any

from ember.cluster.metadata_cache import TopicMetadata
from ember.errors import UnknownTopicId

ZERO_UUID = uuid.UUID(int=0)


class TopicNames:
    """Names and ids of one snapshot of the metadata cache."""

    def __init__(self, topics: dict[str, TopicMetadata]) -> None:
        self.topics = topics
        self._names = {uuid.UUID(hex=meta.topic_id): name for name, meta in topics.items()}

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
        return uuid.UUID(hex=meta.topic_id) if meta is not None else ZERO_UUID

    def ref(self, name: str) -> dict[str, Any]:
        """Both ways a response may name a topic; each version keeps the field it has."""
        return {"name": name, "topic": name, "topic_id": self.id_of(name)}
