"""Committed offsets: OffsetCommit and OffsetFetch. Who may commit (a member of the current
generation, a stored member not rejoined yet, or anyone while the group has no active members),
which partitions (known ones only), and which offsets a principal may see; the offsets themselves
are written to and read from ZooKeeper by :class:`~ember.groups.store.GroupStore`.
"""
from __future__ import annotations

import asyncio
from typing import Optional

from ember.cluster.metadata_cache import MetadataCache
from ember.cluster.topic_admin import is_legal_topic_name
from ember.errors import NonEmptyGroup, UnknownTopicOrPartition
from ember.groups.group import GroupLoader
from ember.groups.store import CommittedOffset, GroupStore
from ember.security.authorizer.access import Access
from ember.security.authorizer.model import Operation
from ember.wire.types import TopicPartition


class OffsetManager:
    def __init__(self, access: Access, cache: MetadataCache, store: GroupStore, load: GroupLoader) -> None:
        self.access = access
        self.cache = cache
        self.store = store
        self.load = load

    async def commit(self, group_id: str, member_id: str, generation: int,
                     offsets: dict[TopicPartition, tuple[int, str]], instance_id: Optional[str] = None) -> None:
        """Store offsets for a member of the current generation (also while a rebalance is
        pending, so members can commit as their partitions are revoked), or, with
        generation -1 and no member id, for a group without active members (manual assignment,
        ``ember groups reset-offsets``). Offsets of unknown topics or partitions are refused. Kafka's
        ACLs: Read on the group and on every topic. Here a refused topic refuses the whole commit;
        the Kafka listener checks first and commits the allowed topics, as Kafka does."""
        await self.check_commit(group_id, member_id, generation, list(offsets), instance_id)
        await asyncio.to_thread(self.store.commit, group_id, offsets)

    async def check_commit(self, group_id: str, member_id: str, generation: int, partitions: list[TopicPartition],
                           instance_id: Optional[str] = None, transactional: bool = False) -> None:
        """Raise what :meth:`commit` would refuse; also the check of a transactional commit
        (TxnOffsetCommit), whose offsets wait in the transaction until it commits. A transactional
        commit without member id and generation (producers before KIP-447) is not checked against
        the members, as in Kafka."""
        self.access.check_group(Operation.READ, group_id)
        for topic in sorted({tp.topic for tp in partitions}):
            self.access.check_topic(Operation.READ, topic)
        group = await self.load(group_id, create=True)
        group.check_instance(member_id, instance_id)
        if generation < 0 and not member_id:
            active = len(group.members) + len(group.expected)
            if active and not transactional:
                raise NonEmptyGroup(f"group {group_id!r} has {active} active member(s); only its members may commit")
        elif member_id in group.expected:
            # a member of the stored generation, not rejoined yet: it still owns its partitions
            group.check_generation(generation)
        else:
            group.member(member_id, generation)
        topics = self.cache.topics()
        unknown = [tp for tp in partitions
                   if tp.topic not in topics or tp.partition not in topics[tp.topic].partitions]
        if unknown:
            raise UnknownTopicOrPartition("cannot commit offsets of unknown partitions: "
                                          + ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(unknown)))

    async def fetch(self, group_id: str, partitions: Optional[list[TopicPartition]]) -> dict[TopicPartition, CommittedOffset]:
        """Committed offsets (Kafka's ACLs: Describe on the group; of all partitions, only those of
        topics the principal may Describe; a listed topic it may not refuses the request)."""
        self.access.check_group(Operation.DESCRIBE, group_id)
        await self.load(group_id, create=False)
        if partitions is not None:   # a name no topic can have has no commit (and is no ZooKeeper path)
            for topic in sorted({tp.topic for tp in partitions}):
                self.access.check_topic(Operation.DESCRIBE, topic)
            partitions = [tp for tp in partitions if is_legal_topic_name(tp.topic)]
        found = await asyncio.to_thread(self.store.fetch, group_id, partitions)
        visible = set(self.access.visible_topics(sorted({tp.topic for tp in found})))
        return {tp: offset for tp, offset in found.items() if tp.topic in visible}

    async def unstable(self, group_id: str) -> set[TopicPartition]:
        """Partitions whose offsets open transactions are committing (require_stable refuses them)."""
        self.access.check_group(Operation.DESCRIBE, group_id)
        return await asyncio.to_thread(self.store.unstable, group_id)
