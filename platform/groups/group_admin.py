"""Administration of the groups this broker coordinates: describe, list, delete a group, delete
some of its offsets (what ``ember groups`` and Kafka's admin tools ask for). Separate from the
members' requests: these look at or remove a group from outside, and refuse to remove one whose
members are active.
"""
from __future__ import annotations

import asyncio
from typing import Callable

from ember.cluster.topic_admin import is_legal_topic_name
from ember.errors import GroupIdNotFound, GroupSubscribedToTopic, NonEmptyGroup
from ember.groups.group import EMPTY, Group, GroupLoader
from ember.groups.store import GroupStore
from ember.security.authorizer.access import Access
from ember.security.authorizer.model import CLUSTER, Operation, Resource, ResourceType
from ember.wire.types import TopicPartition


class GroupAdministration:
    def __init__(self, access: Access, store: GroupStore, groups: dict[str, Group], owns: Callable[[str], bool],
                 load: GroupLoader) -> None:
        self.access = access
        self.store = store
        self.groups = groups        # the coordinator's groups in memory
        self.owns = owns
        self.load = load

    async def describe(self, group_id: str) -> Group:
        self.access.check_group(Operation.DESCRIBE, group_id)
        group = await self.load(group_id, create=False)
        if group is None:
            raise GroupIdNotFound(f"group {group_id!r} does not exist")
        return group

    async def list_groups(self) -> list[dict[str, str]]:
        """Groups this broker coordinates: the ones in memory and the ones in ZooKeeper (Kafka's ACLs:
        all with Describe on the cluster, else those the principal may Describe)."""
        names = set(await asyncio.to_thread(self.store.groups)) | set(self.groups)
        if not self.access.allowed(Operation.DESCRIBE, CLUSTER, log_refusal=False):
            names = {n for n in names if self.access.allowed(Operation.DESCRIBE, Resource(ResourceType.GROUP, n),
                                                             log_refusal=False)}
        loaded = {name: (g.protocol_type, g.state) for name, g in self.groups.items()}
        return [{"group_id": name, "protocol_type": kind, "state": state}
                for name in sorted(names) if self.owns(name)
                for kind, state in [loaded.get(name, ("consumer", EMPTY))]]

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> dict[TopicPartition, Exception]:
        """Forget the committed offsets of ``partitions`` (Kafka's OffsetDelete), except those of
        topics the group's members subscribe to: ``{partition: GroupSubscribedToTopic}`` for these.
        Kafka's ACLs: Delete on the group, Read on the topics."""
        self.access.check_group(Operation.DELETE, group_id)
        for topic in sorted({tp.topic for tp in partitions}):
            self.access.check_topic(Operation.READ, topic)
        group = await self.load(group_id, create=False)
        if group is None:
            raise GroupIdNotFound(f"group {group_id!r} does not exist")
        if group.expected or (group.members and group.protocol_type != "consumer"):
            raise NonEmptyGroup(f"group {group_id!r} has members whose subscriptions are not known here yet"
                                if group.expected else f"group {group_id!r} of protocol type "
                                f"{group.protocol_type!r} has active members")
        subscribed = {topic for m in group.members.values() for topic in m.topics}
        refused: dict[TopicPartition, Exception] = {
            tp: GroupSubscribedToTopic(f"members of group {group_id!r} subscribe to {tp.topic!r}")
            for tp in partitions if tp.topic in subscribed}
        await asyncio.to_thread(self.store.delete_offsets, group_id,
                                [tp for tp in partitions if tp not in refused and is_legal_topic_name(tp.topic)])
        return refused

    async def delete(self, group_id: str) -> None:
        self.access.check_group(Operation.DELETE, group_id)
        group = await self.load(group_id, create=False)
        if group is not None and (group.members or group.expected or group.completing is not None):
            raise NonEmptyGroup(f"group {group_id!r} has {len(group.members) + len(group.expected)} active member(s)")
        self.groups.pop(group_id, None)
        if not await asyncio.to_thread(self.store.delete, group_id) and group is None:
            raise GroupIdNotFound(f"group {group_id!r} does not exist")
