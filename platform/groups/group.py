"""The state of one consumer group on its coordinator: members, generation, rebalance state, and
the group document it is stored as in ZooKeeper.

Kept apart from the code that changes it (``rebalance``, ``members``) so the protocol handlers can
read a described group (:class:`Group`, :class:`Member`, the state names) without the machinery.
States (Kafka's names): Empty → PreparingRebalance → Stable, and CompletingRebalance between the
last two for groups whose leader assigns (Kafka's classic protocol).
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Protocol, overload

from ember.errors import FencedInstanceId, IllegalGeneration, UnknownMemberId
from ember.wire.types import TopicPartition

log = logging.getLogger(__name__)

EMPTY, PREPARING, STABLE = "Empty", "PreparingRebalance", "Stable"
AWAITING_SYNC = "CompletingRebalance"     # client-assigned groups: waiting for the leader's SyncGroup
#: Characters of the client id (or group.instance.id) a member id starts with: a client id may be
#: 32767 bytes, and with the UUID appended the id would not fit the legacy strings of older
#: DescribeGroups versions (a response that cannot be encoded; found by the Kafka fuzzer).
MEMBER_ID_PREFIX_LENGTH = 249
DEFAULT_REBALANCE_TIMEOUT_MS = 300000
DEFAULT_SESSION_TIMEOUT_MS = 10000


@dataclass
class JoinResult:
    member_id: str
    generation: int
    protocol: str
    leader: str
    assignment: list[TopicPartition]
    #: client-assigned groups: (member id, instance id, metadata for the chosen protocol) of every
    #: member, for the leader only
    members: list[tuple[str, Optional[str], bytes]] = field(default_factory=list)
    #: the leader need not assign: a static leader replaced in a Stable group (JoinGroup v9+)
    skip_assignment: bool = False


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
    join: Optional[asyncio.Future[JoinResult]] = None   # a JoinGroup waiting for the rebalance to end
    #: client-assigned (Kafka) members: protocol name -> subscription metadata; None for ember's
    metadata: Optional[dict[str, bytes]] = None
    assignment_data: bytes = b""                # the leader's assignment for this member, as sent
    sync: Optional[asyncio.Future[bytes]] = None   # a SyncGroup waiting for the leader's
    instance_id: Optional[str] = None           # group.instance.id of a static member
    client_host: str = ""                       # where its requests come from, for describe

    @property
    def waiting(self) -> bool:
        return (self.join is not None and not self.join.done()) or (self.sync is not None and not self.sync.done())

    def update(self, session_timeout_ms: int, rebalance_timeout_ms: int, topics: list[str], protocols: list[str],
               metadata: Optional[dict[str, bytes]]) -> None:
        """Take the timeouts and subscription of the member's latest JoinGroup."""
        self.session_timeout_s = session_timeout_ms / 1000
        self.rebalance_timeout_s = rebalance_timeout_ms / 1000
        self.topics, self.protocols, self.metadata = list(topics), list(protocols), metadata


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
    version: Optional[int] = None               # znode version of /groups/<group> (None: absent)
    # members of the stored generation (loaded from ZooKeeper) that have not rejoined this
    # coordinator yet -> the loop time by which they must heartbeat or join
    expected: dict[str, float] = field(default_factory=dict)
    expected_session_s: float = DEFAULT_SESSION_TIMEOUT_MS / 1000
    pending_ids: dict[str, float] = field(default_factory=dict)   # MEMBER_ID_REQUIRED ids -> expiry
    completing: Optional[asyncio.Task[None]] = None   # the generation being written to ZooKeeper
    protocol_type: str = "consumer"
    sync_deadline: float = 0.0                  # AWAITING_SYNC: the leader's SyncGroup is due by then
    changed: bool = False                       # a JoinGroup arrived while completing
    last_used: float = 0.0
    saving: asyncio.Lock = field(default_factory=asyncio.Lock)   # one write of /groups/<group> at a time

    @classmethod
    def loaded(cls, group_id: str, doc: dict[str, Any], version: Optional[int]) -> Group:
        """The group stored as ``doc`` (at znode ``version``), as a new coordinator takes it over."""
        assignment = {m: [TopicPartition(*tp) for tp in tps] for m, tps in (doc.get("assignment") or {}).items()}
        group = cls(group_id, generation=int(doc.get("generation", 0)), protocol=doc.get("protocol", ""),
                    leader=doc.get("leader", ""), previous=assignment, version=version)
        members = list(doc.get("members") or assignment)
        if members and any(assignment.values()):
            # The stored generation's members may still be consuming (the previous coordinator
            # died or the group moved): hand nothing out before they rejoin or time out.
            now = asyncio.get_running_loop().time()
            rebalance_s = int(doc.get("rebalance_timeout_ms", DEFAULT_REBALANCE_TIMEOUT_MS)) / 1000
            group.expected_session_s = int(doc.get("session_timeout_ms", DEFAULT_SESSION_TIMEOUT_MS)) / 1000
            group.state = PREPARING
            group.rebalance_deadline = now + max(rebalance_s, group.expected_session_s)
            group.expected = {m: now + group.expected_session_s for m in members}
            log.info("group %s: loaded generation %d with %d member(s); waiting for them to rejoin",
                     group_id, group.generation, len(members))
        return group

    def document(self, members: dict[str, Member], assignment: dict[str, list[TopicPartition]],
                 generation: int, leader: Optional[str] = None) -> dict[str, Any]:
        """The group document stored in ZooKeeper for ``generation`` (a new generation's leader
        is its smallest member id)."""
        return {"protocol_type": self.protocol_type, "protocol": self.protocol, "generation": generation,
                "leader": min(members, default="") if leader is None else leader, "members": sorted(members),
                "rebalance_timeout_ms": int(max((m.rebalance_timeout_s for m in members.values()), default=0) * 1000),
                "session_timeout_ms": int(max((m.session_timeout_s for m in members.values()), default=0) * 1000),
                "assignment": {m: [list(tp) for tp in tps] for m, tps in assignment.items()}}

    @property
    def client_assigned(self) -> bool:
        """Kafka's classic protocol: the group's leader assigns (a group never mixes both kinds)."""
        return any(m.metadata is not None for m in self.members.values())

    def member(self, member_id: str, generation: int) -> Member:
        """The member ``member_id`` of the current generation (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION)."""
        member = self.members.get(member_id)
        if member is None:
            raise UnknownMemberId(f"group {self.group_id!r} has no member {member_id!r}; rejoin")
        self.check_generation(generation)
        return member

    def check_generation(self, generation: int) -> None:
        if generation != self.generation:
            raise IllegalGeneration(f"generation {generation} of group {self.group_id!r} is stale "
                                    f"(current {self.generation}); rejoin")

    def static_member(self, instance_id: Optional[str]) -> Optional[Member]:
        """The member holding ``group.instance.id`` ``instance_id`` (None for dynamic members)."""
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def check_instance(self, member_id: str, instance_id: Optional[str]) -> None:
        """FENCED_INSTANCE_ID for a static member whose instance id another member took over."""
        holder = self.static_member(instance_id)
        if holder is not None and holder.member_id != member_id:
            raise FencedInstanceId(f"member {member_id!r} of group {self.group_id!r} was replaced by "
                                   f"{holder.member_id!r}, which joined with group.instance.id {instance_id!r}")

    def replace_static(self, member: Member) -> None:
        """Give a static member a new member id: its old id is fenced, as are the old id's
        pending JoinGroup and SyncGroup; its place (leadership, assignment) stays."""
        old_id, new_id = member.member_id, new_member_id(member.instance_id or "")
        fenced = FencedInstanceId(f"member {old_id} was replaced by {new_id}, which joined group "
                                  f"{self.group_id!r} with group.instance.id {member.instance_id!r}")
        for waiter in (member.join, member.sync):
            if waiter is not None and not waiter.done():
                set_error(waiter, fenced)
        member.join = member.sync = None
        del self.members[old_id]
        member.member_id = new_id
        self.members[new_id] = member
        if self.leader == old_id:
            self.leader = new_id
        if old_id in self.previous:
            self.previous[new_id] = self.previous.pop(old_id)
        log.info("group %s: static member %s (%s) replaced by %s", self.group_id, old_id, member.instance_id, new_id)

    def join_result(self, member: Member) -> JoinResult:
        """The JoinGroup answer of ``member`` in the current generation."""
        leads = member.metadata is not None and member.member_id == self.leader
        members = [(m.member_id, m.instance_id, (m.metadata or {}).get(self.protocol, b""))
                   for m in self.members.values()] if leads else []
        return JoinResult(member.member_id, self.generation, self.protocol, self.leader, list(member.assignment),
                          members)

    def fail_joins(self, error: Exception) -> None:
        """Answer every waiting JoinGroup and SyncGroup with ``error``."""
        for member in self.members.values():
            if member.join is not None and not member.join.done():
                set_error(member.join, error)
        self.fail_syncs(error)

    def fail_syncs(self, error: Exception) -> None:
        for member in self.members.values():
            if member.sync is not None and not member.sync.done():
                set_error(member.sync, error)
            member.sync = None


class GroupLoader(Protocol):
    """How the coordinator's parts get a group this broker coordinates: from memory, else loaded
    from ZooKeeper (None if unknown there, unless ``create``); NOT_COORDINATOR for another broker's."""

    @overload
    async def __call__(self, group_id: str, create: Literal[True]) -> Group: ...

    @overload
    async def __call__(self, group_id: str, create: bool) -> Optional[Group]: ...


def set_error(future: asyncio.Future[Any], error: Exception) -> None:
    """Answer a pending JoinGroup with ``error`` (marked retrieved: its connection may be gone)."""
    future.set_exception(error)
    future.add_done_callback(lambda f: f.exception())


def new_member_id(prefix: str) -> str:
    """Kafka's member id, ``<client id>-<UUID>``, with the prefix capped so every version can carry it."""
    return f"{prefix[:MEMBER_ID_PREFIX_LENGTH]}-{uuid.uuid4()}"


def common_protocols(preferences: list[list[str]]) -> list[str]:
    """Assignors every member supports, in the first member's order of preference."""
    common = set.intersection(*(set(p) for p in preferences))
    return [p for p in preferences[0] if p in common]
