"""The broker-side group coordinator: membership, rebalances and offset commits of the groups
this broker coordinates.

The coordinator of a group is ``sorted(live broker ids)[crc32(group) % n]`` (see
:func:`coordinator_id`), so groups spread over brokers and every broker answers FindCoordinator
alike. Membership lives in memory on the event loop (no locks: every change happens between
awaits); committed offsets and the group's generation are in ZooKeeper (:class:`GroupStore`), so a
new coordinator carries on after a broker dies (members rejoin it, offsets are intact).

States (Kafka's names): Empty → PreparingRebalance → Stable → PreparingRebalance ... A rebalance
starts when a member joins, leaves, changes its subscription or misses its session timeout. It
completes when every member has rejoined, or at the rebalance timeout (members that did not
rejoin are dropped); then the generation goes up, the assignor runs here (see docs/groups.md),
and every waiting JoinGroup is answered with its member's partitions.
"""
from __future__ import annotations

import asyncio
import logging
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from ember.cluster.metadata_cache import MetadataCache
from ember.errors import (CoordinatorNotAvailable, GroupIdNotFound, IllegalGeneration,
                          InconsistentGroupProtocol, InvalidGroupId, NonEmptyGroup, NotCoordinator,
                          RebalanceInProgress, UnknownMemberId)
from ember.groups.assignors import ASSIGNORS
from ember.groups.store import CommittedOffset, GroupStore
from ember.ingest.client_types import TopicPartition

log = logging.getLogger(__name__)

EMPTY, PREPARING, STABLE = "Empty", "PreparingRebalance", "Stable"
MAX_GROUP_ID_LENGTH = 249
TICK_S = 0.1


def coordinator_id(group_id: str, live_broker_ids: Iterable[int]) -> Optional[int]:
    """The broker that coordinates ``group_id`` given the live brokers (None if there are none)."""
    ids = sorted(live_broker_ids)
    return ids[zlib.crc32(group_id.encode()) % len(ids)] if ids else None


def validate_group_id(group_id: str) -> None:
    """Group ids become ZooKeeper path segments: no '/', not '.' or '..', not empty."""
    if not group_id or group_id in (".", "..") or "/" in group_id or len(group_id) > MAX_GROUP_ID_LENGTH:
        raise InvalidGroupId(f"group id {group_id!r} is not allowed (non-empty, no '/', "
                             f"at most {MAX_GROUP_ID_LENGTH} characters)")


@dataclass
class JoinResult:
    member_id: str
    generation: int
    protocol: str
    leader: str
    assignment: list[TopicPartition]


@dataclass
class Member:
    member_id: str
    client_id: str
    session_timeout_s: float
    rebalance_timeout_s: float
    topics: list[str]
    protocols: list[str]
    assignment: list[TopicPartition] = field(default_factory=list)
    deadline: float = 0.0                       # session expiry, loop time
    join: Optional[asyncio.Future] = None       # a JoinGroup waiting for the rebalance to end


@dataclass
class Group:
    group_id: str
    generation: int = 0
    protocol: str = ""
    leader: str = ""
    state: str = EMPTY
    members: dict[str, Member] = field(default_factory=dict)
    previous: dict[str, list[TopicPartition]] = field(default_factory=dict)
    not_before: float = 0.0                     # initial rebalance delay, loop time
    rebalance_deadline: float = 0.0


class GroupCoordinator:
    def __init__(self, broker_id: int, cache: MetadataCache, store: GroupStore,
                 initial_rebalance_delay_ms: int) -> None:
        self.broker_id = broker_id
        self.cache = cache
        self.store = store
        self.initial_delay_s = initial_rebalance_delay_ms / 1000
        self.groups: dict[str, Group] = {}
        self._ticker: Optional[asyncio.Task] = None

    def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        for group in self.groups.values():
            self._fail_joins(group, CoordinatorNotAvailable("the coordinator is shutting down"))
        self.groups.clear()

    # -- ownership ---------------------------------------------------------------------------

    def owns(self, group_id: str) -> bool:
        return coordinator_id(group_id, self.cache.brokers()) == self.broker_id

    async def _group(self, group_id: str, create: bool) -> Optional[Group]:
        """This broker's state of ``group_id``, loaded from ZooKeeper on first use."""
        validate_group_id(group_id)
        if not self.owns(group_id):
            raise NotCoordinator(f"broker {self.broker_id} is not the coordinator of group {group_id!r}")
        group = self.groups.get(group_id)
        if group is not None:
            return group
        doc = await asyncio.to_thread(self.store.load_metadata, group_id)
        if doc is None and not create:
            return None
        group = self.groups.get(group_id)   # another request may have loaded it meanwhile
        if group is None:
            doc = doc or {}
            group = Group(group_id, generation=int(doc.get("generation", 0)), protocol=doc.get("protocol", ""),
                          previous={m: [TopicPartition(*tp) for tp in tps]
                                    for m, tps in (doc.get("assignment") or {}).items()})
            self.groups[group_id] = group
        return group

    # -- membership --------------------------------------------------------------------------

    async def join(self, group_id: str, member_id: str, client_id: str, session_timeout_ms: int,
                   rebalance_timeout_ms: int, topics: list[str], protocols: list[str]) -> JoinResult:
        group = await self._group(group_id, create=True)
        if not protocols or any(p not in ASSIGNORS for p in protocols):
            raise InconsistentGroupProtocol(f"assignors must be among {sorted(ASSIGNORS)}, got {protocols}")
        others = [m for mid, m in group.members.items() if mid != member_id]
        if others and not _common_protocols([m.protocols for m in others] + [protocols]):
            raise InconsistentGroupProtocol(f"assignors {protocols} share none with the group's members")
        loop = asyncio.get_running_loop()
        if member_id:
            member = group.members.get(member_id)
            if member is None:
                raise UnknownMemberId(f"member {member_id!r} is not in group {group_id!r}; join as a new member")
            unchanged = member.topics == topics and member.protocols == protocols
            if group.state == STABLE and unchanged:
                member.deadline = loop.time() + member.session_timeout_s
                return self._result(group, member)
        else:
            member_id = f"{client_id}-{uuid.uuid4()}"
            member = Member(member_id, client_id, 0, 0, topics, protocols)
            group.members[member_id] = member
        member.session_timeout_s = session_timeout_ms / 1000
        member.rebalance_timeout_s = rebalance_timeout_ms / 1000
        member.topics, member.protocols = list(topics), list(protocols)
        if member.join is not None and not member.join.done():
            member.join.cancel()
        member.join = loop.create_future()
        if group.state != PREPARING:
            self._prepare(group, f"member {member_id} joined")
        waiter = member.join
        self._maybe_complete(group)
        return await waiter

    async def heartbeat(self, group_id: str, member_id: str, generation: int) -> None:
        """Keep a member's session alive; tells it to rejoin while a rebalance is pending."""
        group = await self._group(group_id, create=False)
        if group is None:
            raise UnknownMemberId(f"group {group_id!r} has no member {member_id!r}; rejoin")
        member = self._member(group, member_id, generation)
        member.deadline = asyncio.get_running_loop().time() + member.session_timeout_s
        if group.state == PREPARING:
            raise RebalanceInProgress(f"group {group_id!r} is rebalancing; rejoin")

    async def leave(self, group_id: str, member_id: str) -> None:
        group = await self._group(group_id, create=False)
        if group is None or member_id not in group.members:
            raise UnknownMemberId(f"group {group_id!r} has no member {member_id!r}")
        self._remove(group, [member_id], "left the group")

    def _member(self, group: Group, member_id: str, generation: int) -> Member:
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberId(f"group {group.group_id!r} has no member {member_id!r}; rejoin")
        if generation != group.generation:
            raise IllegalGeneration(f"generation {generation} of group {group.group_id!r} is stale "
                                    f"(current {group.generation}); rejoin")
        return member

    def _prepare(self, group: Group, reason: str) -> None:
        loop = asyncio.get_running_loop()
        if group.state == EMPTY:
            group.not_before = loop.time() + self.initial_delay_s
        group.state = PREPARING
        group.rebalance_deadline = loop.time() + max((m.rebalance_timeout_s for m in group.members.values()),
                                                     default=0)
        log.info("group %s: rebalancing (generation %d): %s", group.group_id, group.generation, reason)

    def _remove(self, group: Group, member_ids: list[str], reason: str) -> None:
        for member_id in member_ids:
            member = group.members.pop(member_id)
            if member.join is not None and not member.join.done():
                member.join.cancel()
        if not group.members:
            self._finish(group, {})
        elif group.state == STABLE:
            self._prepare(group, f"{', '.join(member_ids)} {reason}")
        else:
            self._maybe_complete(group)

    def _maybe_complete(self, group: Group) -> None:
        if group.state != PREPARING:
            return
        now = asyncio.get_running_loop().time()
        if now < group.not_before:
            return
        waiting = [m for m in group.members.values() if m.join is not None and not m.join.done()]
        if len(waiting) == len(group.members) or now >= group.rebalance_deadline:
            late = [mid for mid, m in group.members.items() if m not in waiting]
            for member_id in late:
                del group.members[member_id]
            if late:
                log.info("group %s: dropped %s (did not rejoin in time)", group.group_id, ", ".join(late))
            self._finish(group, self._assign(group))

    def _assign(self, group: Group) -> dict[str, list[TopicPartition]]:
        if not group.members:
            return {}
        group.protocol = _common_protocols([m.protocols for m in group.members.values()])[0]
        topics = self.cache.topics()
        counts = {t: len(topics[t].partitions) for m in group.members.values() for t in m.topics if t in topics}
        subscriptions = {mid: m.topics for mid, m in group.members.items()}
        return ASSIGNORS[group.protocol](subscriptions, counts, group.previous)

    def _finish(self, group: Group, assignment: dict[str, list[TopicPartition]]) -> None:
        """Start the next generation with ``assignment`` and answer every waiting JoinGroup."""
        now = asyncio.get_running_loop().time()
        group.generation += 1
        group.state = STABLE if group.members else EMPTY
        group.leader = min(group.members, default="")
        group.previous = assignment
        for member_id, member in group.members.items():
            member.assignment = assignment.get(member_id, [])
            member.deadline = now + member.session_timeout_s
            if member.join is not None and not member.join.done():
                member.join.set_result(self._result(group, member))
            member.join = None
        log.info("group %s: generation %d, %s, %d member(s)", group.group_id, group.generation,
                 group.state, len(group.members))
        doc = {"protocol_type": "consumer", "protocol": group.protocol, "generation": group.generation,
               "leader": group.leader, "assignment": {m: [list(tp) for tp in tps] for m, tps in assignment.items()}}
        asyncio.get_running_loop().create_task(self._save(group.group_id, doc))

    async def _save(self, group_id: str, doc: dict[str, Any]) -> None:
        try:
            await asyncio.to_thread(self.store.save_metadata, group_id, doc)
        except Exception:
            log.exception("group %s: could not store generation %s in ZooKeeper", group_id, doc["generation"])

    @staticmethod
    def _result(group: Group, member: Member) -> JoinResult:
        return JoinResult(member.member_id, group.generation, group.protocol, group.leader, list(member.assignment))

    @staticmethod
    def _fail_joins(group: Group, error: Exception) -> None:
        for member in group.members.values():
            if member.join is not None and not member.join.done():
                member.join.set_exception(error)

    async def _tick_forever(self) -> None:
        """Expire silent members, end rebalances whose time is up, hand off groups we lost."""
        while True:
            await asyncio.sleep(TICK_S)
            now = asyncio.get_running_loop().time()
            for group_id, group in list(self.groups.items()):
                try:
                    if not self.owns(group_id):
                        self._fail_joins(group, NotCoordinator(f"group {group_id!r} moved to another broker"))
                        del self.groups[group_id]
                        continue
                    expired = [mid for mid, m in group.members.items() if m.join is None and now > m.deadline]
                    if expired:
                        self._remove(group, expired, "missed the session timeout")
                    self._maybe_complete(group)
                except Exception:
                    log.exception("group %s: coordinator tick failed", group_id)

    # -- offsets -----------------------------------------------------------------------------

    async def commit(self, group_id: str, member_id: str, generation: int,
                     offsets: dict[TopicPartition, tuple[int, str]]) -> None:
        """Store offsets for a member of the current generation (also while a rebalance is
        pending, so members can commit as their partitions are revoked), or, with
        generation -1 and no member id, for a group without active members (manual assignment,
        ``ember groups reset-offsets``)."""
        group = await self._group(group_id, create=True)
        if generation < 0 and not member_id:
            if group.members:
                raise NonEmptyGroup(f"group {group_id!r} has {len(group.members)} active member(s); "
                                    f"only its members may commit")
        else:
            self._member(group, member_id, generation)
        await asyncio.to_thread(self.store.commit, group_id, offsets)

    async def fetch(self, group_id: str, partitions: Optional[list[TopicPartition]]) -> dict[TopicPartition, CommittedOffset]:
        await self._group(group_id, create=False)
        return await asyncio.to_thread(self.store.fetch, group_id, partitions)

    # -- administration ----------------------------------------------------------------------

    async def describe(self, group_id: str) -> Group:
        group = await self._group(group_id, create=False)
        if group is None:
            raise GroupIdNotFound(f"group {group_id!r} does not exist")
        return group

    async def list_groups(self) -> list[dict[str, str]]:
        """Groups this broker coordinates: the ones in memory and the ones in ZooKeeper."""
        names = set(await asyncio.to_thread(self.store.groups)) | set(self.groups)
        return [{"group_id": name, "protocol_type": "consumer",
                 "state": self.groups[name].state if name in self.groups else EMPTY}
                for name in sorted(names) if self.owns(name)]

    async def delete(self, group_id: str) -> None:
        group = await self._group(group_id, create=False)
        if group is not None and group.members:
            raise NonEmptyGroup(f"group {group_id!r} has {len(group.members)} active member(s)")
        self.groups.pop(group_id, None)
        if not await asyncio.to_thread(self.store.delete, group_id) and group is None:
            raise GroupIdNotFound(f"group {group_id!r} does not exist")


def _common_protocols(preferences: list[list[str]]) -> list[str]:
    """Assignors every member supports, in the first member's order of preference."""
    common = set.intersection(*(set(p) for p in preferences))
    return [p for p in preferences[0] if p in common]
