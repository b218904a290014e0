"""What Metadata answers, for both wire protocols: a topic's partitions with their live leader,
replicas and ISR, read from the broker's watch-driven cache (no ZooKeeper round trip), and the
creation of unknown topics when ``auto.create.topics.enable`` is on."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from ember.cluster.metadata_cache import MetadataCache, TopicMetadata
from ember.cluster.records import BrokerInfo
from ember.cluster.topic_admin import validate_topic_name
from ember.errors import LeaderNotAvailable, TopicAlreadyExists, UnknownTopicOrPartition
from ember.security.authorizer.access import ALLOW_ALL, Access
from ember.security.authorizer.model import Operation

AutoCreate = Callable[[str], Awaitable[Any]]
UnavailableReason = Callable[[TopicMetadata, int], str]


@dataclass(frozen=True)
class PartitionView:
    index: int
    leader: int                 # -1 when no live broker leads it
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    error: LeaderNotAvailable | None = None     # why there is no leader
    adding: list[int] | None = None             # set while the partition is being reassigned
    removing: list[int] | None = None


class MetadataView:
    def __init__(self, cache: MetadataCache, auto_create: AutoCreate | None,
                 unavailable_reason: UnavailableReason, access: Access = ALLOW_ALL) -> None:
        self.cache = cache
        #: Metadata shows only topics the principal may Describe; auto-creation needs Create.
        self.access = access
        self.auto_create = auto_create
        self.unavailable_reason = unavailable_reason

    async def topic(self, name: str, topics: dict[str, TopicMetadata], allow_auto_create: bool = True) -> TopicMetadata:
        """The topic's metadata (from ``topics``, one snapshot of the cache), else the error for an
        unknown topic, creating it first if auto-create is on and allowed (and the principal may
        Describe it: else TOPIC_AUTHORIZATION_FAILED, whether it exists or not)."""
        validate_topic_name(name)
        self.access.check_topic(Operation.DESCRIBE, name)
        meta = topics.get(name)
        if meta is not None:
            return meta
        if self.auto_create is None or not allow_auto_create:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        try:
            await self.auto_create(name)
        except TopicAlreadyExists:
            pass
        raise LeaderNotAvailable(f"topic {name!r} is being created; retry")

    def visible(self, topics: dict[str, TopicMetadata]) -> list[str]:
        """The names a request for all topics lists: those the principal may Describe, sorted."""
        return self.access.visible_topics(sorted(topics))

    def partitions(self, meta: TopicMetadata, live: dict[int, BrokerInfo]) -> list[PartitionView]:
        views = []
        for index, replicas in meta.partitions.items():
            state = meta.shown_state(index)
            leader = state.leader if state is not None and state.leader in live else -1
            move = meta.record.reassignments.get(index)
            views.append(PartitionView(
                index, leader, state.leader_epoch if state else -1, replicas, state.isr if state else [],
                LeaderNotAvailable(self.unavailable_reason(meta, index)) if leader < 0 else None,
                move.adding if move else None, move.removing if move else None))
        return views
