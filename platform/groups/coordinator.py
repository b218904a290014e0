"""The broker-side group coordinator: membership, rebalances and offset commits of the groups
this broker coordinates.

The coordinator of a group is ``sorted(live broker ids)[crc32(group) % n]`` (see
:func:`coordinator_id`), so groups spread over brokers and every broker answers FindCoordinator
alike. Membership lives in memory on the event loop (no locks: every change happens between
awaits); committed offsets and the group's generation are in ZooKeeper (:class:`GroupStore`), so a
new coordinator carries on after a broker dies (members rejoin it, offsets are intact).

The group document in ZooKeeper (``/groups/<group>``) is written before a generation is handed
out, with a compare-and-set on the znode version: a generation number is given out by exactly one
coordinator, even while two brokers briefly both think they coordinate the group. It lists the
members of the generation and their largest timeouts: a coordinator that loads a group whose last
generation had members starts it in PreparingRebalance and waits for those members to rejoin (up
to the rebalance timeout; a member that neither heartbeats nor joins within its session timeout is
dropped), so the next generation is never formed while members of the previous one still
consume.

States (Kafka's names): Empty → PreparingRebalance → Stable → PreparingRebalance ... A rebalance
starts when a member joins, leaves, changes its subscription or misses its session timeout. It
completes when every member has rejoined, or at the rebalance timeout (members that did not
rejoin are dropped); then the generation goes up, the assignor runs here (see docs/groups.md),
and every waiting JoinGroup is answered with its member's partitions.

Kafka's clients assign partitions themselves (the classic protocol): their members join with
their subscription as opaque protocol metadata (``metadata``), the generation is stored as above
without an assignment, the leader's JoinGroup answer carries every member's metadata, and the
group waits in CompletingRebalance until the leader's SyncGroup brings the assignment (stored in
ZooKeeper like ember's), which every member's SyncGroup then returns (:meth:`sync`). A group is
one kind or the other: ember and Kafka members never share a group.

Static members (Kafka's ``group.instance.id``, KIP-345): a member that joins with an instance id
and no member id while the group has a member with that instance id takes that member's place
under a new member id; the old id is fenced (FENCED_INSTANCE_ID on its next request). In a Stable
group whose protocol stays the same the replacement keeps the generation and the assignment (the
group document is rewritten with the new id), so a restarted consumer comes back without a
rebalance; otherwise the group rebalances as for any join. Static members leave by LeaveGroup
(naming the instance id) or their session timeout, not when their consumer closes.
"""
from __future__ import annotations

import asyncio
import logging
import re
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from ember.cluster.metadata_cache import MetadataCache
from ember.cluster.records import BrokerInfo
from ember.cluster.topic_admin import is_legal_topic_name
from ember.errors import (
    CoordinatorNotAvailable,
    FencedInstanceId,
    GroupIdNotFound,
    GroupSubscribedToTopic,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidGroupId,
    InvalidSessionTimeout,
    MemberIdRequired,
    NonEmptyGroup,
    NotCoordinator,
    RebalanceInProgress,
    UnknownMemberId,
    UnknownTopicOrPartition,
)
from ember.groups.assignors import ASSIGNORS
from ember.groups.store import CommittedOffset, GroupStore, MetadataConflict
from ember.security.authorizer.access import ALLOW_ALL, Access
from ember.security.authorizer.model import CLUSTER, Operation, Resource, ResourceType
from ember.wire.types import TopicPartition

log = logging.getLogger(__name__)

EMPTY, PREPARING, STABLE = "Empty", "PreparingRebalance", "Stable"
AWAITING_SYNC = "CompletingRebalance"     # client-assigned groups: waiting for the leader's SyncGroup
MAX_GROUP_ID_LENGTH = 249
#: Characters of the client id (or group.instance.id) a member id starts with: a client id may be
#: 32767 bytes, and with the UUID appended the id would not fit the legacy strings of older
#: DescribeGroups versions (a response that cannot be encoded; found by the Kafka fuzzer).
MEMBER_ID_PREFIX_LENGTH = 249
TICK_S = 0.1
EMPTY_GROUP_IDLE_S = 60.0        # an Empty group unused this long leaves memory (it reloads from ZooKeeper)
DEFAULT_REBALANCE_TIMEOUT_MS = 300000
DEFAULT_SESSION_TIMEOUT_MS = 10000
CLOSE_WAIT_S = 5.0


def coordinator_id(group_id: str, live_broker_ids: Iterable[int]) -> Optional[int]:
    """The broker that coordinates ``group_id`` given the live brokers (None if there are none)."""
    ids = sorted(live_broker_ids)
    return ids[zlib.crc32(group_id.encode()) % len(ids)] if ids else None


#: Characters ZooKeeper refuses in a path (control characters, surrogates, private use, specials).
_ZK_ILLEGAL = re.compile("[\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff]")


def validate_group_id(group_id: str) -> None:
    """Group ids become ZooKeeper path segments: no '/' nor any character ZooKeeper refuses,
    not '.' or '..', not empty."""
    if (not group_id or group_id in (".", "..") or "/" in group_id or len(group_id) > MAX_GROUP_ID_LENGTH
            or _ZK_ILLEGAL.search(group_id)):
        shown = repr(group_id) if len(group_id) <= MAX_GROUP_ID_LENGTH else f"of {len(group_id)} characters"
        raise InvalidGroupId(f"group id {shown} is not allowed (non-empty, no '/' or control characters, "
                             f"at most {MAX_GROUP_ID_LENGTH} characters)")


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
    join: Optional[asyncio.Future] = None       # a JoinGroup waiting for the rebalance to end
    #: client-assigned (Kafka) members: protocol name -> subscription metadata; None for ember's
    metadata: Optional[dict[str, bytes]] = None
    assignment_data: bytes = b""                # the leader's assignment for this member, as sent
    sync: Optional[asyncio.Future] = None       # a SyncGroup waiting for the leader's
    instance_id: Optional[str] = None           # group.instance.id of a static member
    client_host: str = ""                       # where its requests come from, for describe

    @property
    def waiting(self) -> bool:
        return (self.join is not None and not self.join.done()) or (self.sync is not None and not self.sync.done())


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
    completing: Optional[asyncio.Task] = None   # the generation being written to ZooKeeper
    protocol_type: str = "consumer"
    sync_deadline: float = 0.0                  # AWAITING_SYNC: the leader's SyncGroup is due by then
    changed: bool = False                       # a JoinGroup arrived while completing
    last_used: float = 0.0
    saving: asyncio.Lock = field(default_factory=asyncio.Lock)   # one write of /groups/<group> at a time

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


class GroupCoordinator:
    def __init__(self, broker_id: int, cache: MetadataCache, store: GroupStore,
                 initial_rebalance_delay_ms: int, max_session_timeout_ms: int = 1800000,
                 access: Access = ALLOW_ALL) -> None:
        self.broker_id = broker_id
        #: Kafka's group ACLs: Read to be a member or commit, Describe to look, Delete to delete.
        self.access = access
        self.cache = cache
        self.store = store
        self.initial_delay_s = initial_rebalance_delay_ms / 1000
        self.max_session_timeout_ms = max_session_timeout_ms
        self.groups: dict[str, Group] = {}
        self._ticker: Optional[asyncio.Task] = None
        self._tasks: set[asyncio.Task] = set()

    def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        if self._tasks:     # generations being stored: let them finish (their joins get answers)
            await asyncio.wait(list(self._tasks), timeout=CLOSE_WAIT_S)
        for group in self.groups.values():
            self._fail_joins(group, CoordinatorNotAvailable("the coordinator is shutting down"))
        self.groups.clear()

    # -- ownership ---------------------------------------------------------------------------

    def coordinator_broker(self, group_id: str) -> BrokerInfo:
        """The live broker that coordinates ``group_id`` (what FindCoordinator answers)."""
        validate_group_id(group_id)
        self.access.check_group(Operation.DESCRIBE, group_id)
        brokers = self.cache.brokers()
        node = coordinator_id(group_id, brokers)
        if node is None:
            raise CoordinatorNotAvailable("no live broker can coordinate groups")
        return brokers[node]

    def owns(self, group_id: str) -> bool:
        return coordinator_id(group_id, self.cache.brokers()) == self.broker_id

    async def _group(self, group_id: str, create: bool) -> Optional[Group]:
        """This broker's state of ``group_id``, loaded from ZooKeeper on first use."""
        validate_group_id(group_id)
        if not self.owns(group_id):
            raise NotCoordinator(f"broker {self.broker_id} is not the coordinator of group {group_id!r}")
        loop = asyncio.get_running_loop()
        group = self.groups.get(group_id)
        if group is not None:
            group.last_used = loop.time()
            return group
        doc, version = await asyncio.to_thread(self.store.load_metadata_versioned, group_id)
        if doc is None and not create:
            return None
        group = self.groups.get(group_id)   # another request may have loaded it meanwhile
        if group is None:
            group = self._loaded(group_id, doc or {}, version)
            self.groups[group_id] = group
        group.last_used = loop.time()
        return group

    def _loaded(self, group_id: str, doc: dict[str, Any], version: Optional[int]) -> Group:
        assignment = {m: [TopicPartition(*tp) for tp in tps] for m, tps in (doc.get("assignment") or {}).items()}
        group = Group(group_id, generation=int(doc.get("generation", 0)), protocol=doc.get("protocol", ""),
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

    # -- membership --------------------------------------------------------------------------

    async def join(self, group_id: str, member_id: str, client_id: str, session_timeout_ms: int,
                   rebalance_timeout_ms: int, topics: list[str], protocols: list[str],
                   metadata: Optional[dict[str, bytes]] = None, protocol_type: str = "consumer",
                   instance_id: Optional[str] = None, client_host: str = "") -> JoinResult:
        """Join (or rejoin) and wait for the rebalance to end. ``metadata`` (protocol name ->
        subscription bytes) marks a client-assigned member (Kafka's classic protocol): its group's
        leader assigns, see :meth:`sync`; ember's members leave it None and get their partitions
        from the assignor named by ``protocols``. ``instance_id`` makes the member static (see the
        module's docstring); static members join in one step (no MEMBER_ID_REQUIRED)."""
        if session_timeout_ms > self.max_session_timeout_ms:
            raise InvalidSessionTimeout(f"session timeout {session_timeout_ms} ms is longer than "
                                        f"group.max.session.timeout.ms={self.max_session_timeout_ms}")
        self.access.check_group(Operation.READ, group_id)
        group = await self._group(group_id, create=True)
        if not protocols or (metadata is None and any(p not in ASSIGNORS for p in protocols)):
            raise InconsistentGroupProtocol(f"assignors must be among {sorted(ASSIGNORS)}, got {protocols}")
        others = [m for mid, m in group.members.items() if mid != member_id]
        if others and (others[0].metadata is None) != (metadata is None):
            raise InconsistentGroupProtocol(f"group {group_id!r} has {'ember' if metadata is not None else 'Kafka'} "
                                            f"consumers; ember's and Kafka's consumers cannot share a group")
        if others and group.protocol_type != protocol_type:
            raise InconsistentGroupProtocol(f"group {group_id!r} has protocol type {group.protocol_type!r}, "
                                            f"not {protocol_type!r}")
        if others and not _common_protocols([m.protocols for m in others] + [protocols]):
            raise InconsistentGroupProtocol(f"assignors {protocols} share none with the group's members")
        loop = asyncio.get_running_loop()
        if member_id:
            group.check_instance(member_id, instance_id)
        admitted = False                    # a new static member: no two-step join
        if not member_id:
            static = group.static_member(instance_id)
            if static is not None:
                self._replace_static(group, static)
                static.client_id, static.client_host = client_id, client_host
                self._update(static, session_timeout_ms, rebalance_timeout_ms, topics, protocols, metadata)
                if group.state == STABLE and group.completing is None and \
                        _common_protocols([m.protocols for m in group.members.values()])[0] == group.protocol:
                    return await self._keep_generation(group, static)
                return await self._await_rebalance(group, static)
            if instance_id is None:
                # Two-step join (Kafka's MEMBER_ID_REQUIRED): hand out an id, add nobody yet.
                member_id = new_member_id(client_id)
                group.pending_ids[member_id] = loop.time() + max(session_timeout_ms / 1000, 1.0)
                raise MemberIdRequired(member_id=member_id)
            member_id, admitted = new_member_id(instance_id), True
        member = group.members.get(member_id)
        if member is None:
            if not admitted and member_id not in group.pending_ids and member_id not in group.expected:
                raise UnknownMemberId(f"member {member_id!r} is not in group {group_id!r}; join as a new member")
            group.pending_ids.pop(member_id, None)
            group.expected.pop(member_id, None)
            member = Member(member_id, client_id, 0, 0, topics, protocols, metadata=metadata,
                            instance_id=instance_id, client_host=client_host)
            group.members[member_id] = member
            group.protocol_type = protocol_type
        else:
            unchanged = member.topics == topics and member.protocols == protocols and member.metadata == metadata
            if group.state in (STABLE, AWAITING_SYNC) and unchanged:
                member.deadline = loop.time() + member.session_timeout_s
                return self._result(group, member)
        self._update(member, session_timeout_ms, rebalance_timeout_ms, topics, protocols, metadata)
        return await self._await_rebalance(group, member)

    @staticmethod
    def _update(member: Member, session_timeout_ms: int, rebalance_timeout_ms: int, topics: list[str],
                protocols: list[str], metadata: Optional[dict[str, bytes]]) -> None:
        member.session_timeout_s = session_timeout_ms / 1000
        member.rebalance_timeout_s = rebalance_timeout_ms / 1000
        member.topics, member.protocols, member.metadata = list(topics), list(protocols), metadata

    async def _await_rebalance(self, group: Group, member: Member) -> JoinResult:
        """Start a rebalance unless one is pending, then wait for its end (the member's answer)."""
        loop = asyncio.get_running_loop()
        member_id = member.member_id
        if member.join is not None and not member.join.done():
            # a retried JoinGroup of the same member: answer the old one (not cancel(): the
            # server would take that for a shutdown and close the old request's connection)
            _set_error(member.join, RebalanceInProgress(f"superseded by a newer JoinGroup of {member_id}"))
        member.join = loop.create_future()
        if group.completing is not None:
            group.changed = True
        if group.state != PREPARING:
            self._prepare(group, f"member {member_id} joined")
        waiter = member.join
        self._maybe_complete(group)
        return await waiter

    @staticmethod
    def _replace_static(group: Group, member: Member) -> None:
        """Give a static member a new member id: its old id is fenced, as are the old id's
        pending JoinGroup and SyncGroup; its place (leadership, assignment) stays."""
        old_id, new_id = member.member_id, new_member_id(member.instance_id or "")
        fenced = FencedInstanceId(f"member {old_id} was replaced by {new_id}, which joined group "
                                  f"{group.group_id!r} with group.instance.id {member.instance_id!r}")
        for waiter in (member.join, member.sync):
            if waiter is not None and not waiter.done():
                _set_error(waiter, fenced)
        member.join = member.sync = None
        del group.members[old_id]
        member.member_id = new_id
        group.members[new_id] = member
        if group.leader == old_id:
            group.leader = new_id
        if old_id in group.previous:
            group.previous[new_id] = group.previous.pop(old_id)
        log.info("group %s: static member %s (%s) replaced by %s", group.group_id, old_id, member.instance_id, new_id)

    async def _keep_generation(self, group: Group, member: Member) -> JoinResult:
        """A static member replaced in a Stable group: store the generation under its new id and
        answer with the current generation and assignment (no rebalance). A leader gets the
        members with ``skip_assignment`` (its SyncGroup gets the assignment in force)."""
        generation = group.generation
        doc = self._doc(group, dict(group.members), group.previous, generation, leader=group.leader)
        await self._save_or_lose(group, doc, "the replaced static member")
        moved_on = group.state != STABLE or group.generation != generation
        if moved_on or group.members.get(member.member_id) is not member:
            return await self._await_rebalance(group, member)     # the group moved on meanwhile
        member.deadline = asyncio.get_running_loop().time() + member.session_timeout_s
        result = self._result(group, member)
        result.skip_assignment = member.member_id == group.leader
        return result

    async def heartbeat(self, group_id: str, member_id: str, generation: int,
                        instance_id: Optional[str] = None) -> None:
        """Keep a member's session alive; tells it to rejoin while a rebalance is pending."""
        self.access.check_group(Operation.READ, group_id)
        group = await self._group(group_id, create=False)
        if group is None:
            raise UnknownMemberId(f"group {group_id!r} has no member {member_id!r}; rejoin")
        group.check_instance(member_id, instance_id)
        if member_id in group.expected:
            if generation != group.generation:
                raise IllegalGeneration(f"generation {generation} of group {group_id!r} is stale "
                                        f"(current {group.generation}); rejoin")
            # alive: wait for its JoinGroup until the end of the rebalance
            group.expected[member_id] = max(group.expected[member_id], group.rebalance_deadline)
            raise RebalanceInProgress(f"group {group_id!r} is rebalancing (new coordinator); rejoin")
        member = self._member(group, member_id, generation)
        member.deadline = asyncio.get_running_loop().time() + member.session_timeout_s
        if group.state == PREPARING:
            raise RebalanceInProgress(f"group {group_id!r} is rebalancing; rejoin")

    async def sync(self, group_id: str, member_id: str, generation: int,
                   assignments: dict[str, tuple[bytes, list[TopicPartition]]],
                   instance_id: Optional[str] = None) -> bytes:
        """SyncGroup of a client-assigned member: its assignment in the current generation. The
        leader's brings everyone's (opaque bytes, and the partitions they name for describe and
        ZooKeeper); the others wait for it. A rebalance meanwhile answers REBALANCE_IN_PROGRESS."""
        self.access.check_group(Operation.READ, group_id)
        group = await self._group(group_id, create=False)
        if group is None:
            raise UnknownMemberId(f"group {group_id!r} has no member {member_id!r}; rejoin")
        group.check_instance(member_id, instance_id)
        member = self._member(group, member_id, generation)
        if member.metadata is None:
            raise InconsistentGroupProtocol("ember's consumers get their assignment from JoinGroup, not SyncGroup")
        if group.state == PREPARING:
            raise RebalanceInProgress(f"group {group_id!r} is rebalancing; rejoin")
        if group.state == AWAITING_SYNC and member_id == group.leader:
            await self._store_assignment(group, assignments)
        if group.state == STABLE:
            return member.assignment_data
        if member.sync is not None and not member.sync.done():
            _set_error(member.sync, RebalanceInProgress(f"superseded by a newer SyncGroup of {member_id}"))
        member.sync = asyncio.get_running_loop().create_future()
        return await member.sync

    async def _store_assignment(self, group: Group, assignments: dict[str, tuple[bytes, list[TopicPartition]]]) -> None:
        """Store the leader's assignment with the generation (compare-and-set), then answer the
        waiting SyncGroups."""
        generation = group.generation
        members = dict(group.members)
        assignment = {mid: assignments.get(mid, (b"", []))[1] for mid in members}
        await self._save_or_lose(group, self._doc(group, members, assignment, generation, leader=group.leader),
                                 "the assignment")
        if group.state != AWAITING_SYNC or group.generation != generation:
            raise RebalanceInProgress(f"group {group.group_id!r} started rebalancing; rejoin")
        now = asyncio.get_running_loop().time()
        group.previous = assignment
        for member_id, member in group.members.items():
            member.assignment_data, member.assignment = assignments.get(member_id, (b"", []))
            member.deadline = now + member.session_timeout_s
            if member.sync is not None and not member.sync.done():
                member.sync.set_result(member.assignment_data)
            member.sync = None
        group.state = STABLE
        log.info("group %s: generation %d assigned by its leader %s", group.group_id, generation, group.leader)

    async def leave(self, group_id: str, member_id: str, instance_id: Optional[str] = None) -> None:
        """A member leaves; a static one may be named by its instance id alone (empty ``member_id``)."""
        self.access.check_group(Operation.READ, group_id)
        group = await self._group(group_id, create=False)
        if group is None:
            raise UnknownMemberId(f"group {group_id!r} has no member {member_id or instance_id!r}")
        static = group.static_member(instance_id)
        member_id = member_id or (static.member_id if static is not None else "")
        group.check_instance(member_id, instance_id)
        if group.expected.pop(member_id, None) is not None:
            self._maybe_complete(group)
            return
        if member_id not in group.members:
            raise UnknownMemberId(f"group {group_id!r} has no member {member_id or instance_id!r}")
        self._remove(group, [member_id], "left the group")
        if not group.members and group.completing is not None:
            # the last member: answer once the group is Empty (as Kafka does), so a describe right
            # after a consumer closed sees it so; shielded, a client gone does not stop the write
            await asyncio.shield(group.completing)

    def _member(self, group: Group, member_id: str, generation: int) -> Member:
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberId(f"group {group.group_id!r} has no member {member_id!r}; rejoin")
        if generation != group.generation:
            raise IllegalGeneration(f"generation {generation} of group {group.group_id!r} is stale "
                                    f"(current {group.generation}); rejoin")
        return member

    def _prepare(self, group: Group, reason: str) -> None:
        self._fail_syncs(group, RebalanceInProgress(f"group {group.group_id!r} is rebalancing: {reason}; rejoin"))
        loop = asyncio.get_running_loop()
        if group.state == EMPTY:
            group.not_before = loop.time() + self.initial_delay_s
        deadline = loop.time() + max((m.rebalance_timeout_s for m in group.members.values()), default=0)
        group.rebalance_deadline = max(deadline, group.rebalance_deadline) if group.expected else deadline
        group.state = PREPARING
        log.info("group %s: rebalancing (generation %d): %s", group.group_id, group.generation, reason)

    def _remove(self, group: Group, member_ids: list[str], reason: str) -> None:
        for member_id in member_ids:
            member = group.members.pop(member_id)
            if member.join is not None and not member.join.done():
                _set_error(member.join, UnknownMemberId(f"member {member_id} {reason}"))
        if group.state in (STABLE, AWAITING_SYNC) and group.members:
            self._prepare(group, f"{', '.join(member_ids)} {reason}")
        elif group.state in (STABLE, AWAITING_SYNC, EMPTY):
            group.state = PREPARING                 # the last member left: an Empty generation
            group.rebalance_deadline = 0.0
        if group.completing is not None:
            group.changed = True
        self._maybe_complete(group)

    def _maybe_complete(self, group: Group) -> None:
        if group.state != PREPARING or group.completing is not None:
            return
        now = asyncio.get_running_loop().time()
        gone = [mid for mid, until in group.expected.items() if now > until]
        for member_id in gone:
            del group.expected[member_id]
        if gone:
            log.info("group %s: %s did not come back to the new coordinator", group.group_id, ", ".join(gone))
        if now < group.not_before and group.members:
            return
        waiting = [m for m in group.members.values() if m.join is not None and not m.join.done()]
        if (len(waiting) == len(group.members) and not group.expected) or now >= group.rebalance_deadline:
            late = [mid for mid, m in group.members.items() if m not in waiting]
            for member_id in late:
                del group.members[member_id]
            if late:
                log.info("group %s: dropped %s (did not rejoin in time)", group.group_id, ", ".join(late))
            if group.expected:
                log.info("group %s: dropped %s (did not rejoin the new coordinator in time)",
                         group.group_id, ", ".join(group.expected))
                group.expected.clear()
            self._start_completion(group)

    def _assign(self, group: Group) -> dict[str, list[TopicPartition]]:
        if not group.members:
            return {}
        group.protocol = _common_protocols([m.protocols for m in group.members.values()])[0]
        if _client_assigned(group):
            return {}                               # the leader assigns (SyncGroup)
        topics = self.cache.topics()
        counts = {t: len(topics[t].partitions) for m in group.members.values() for t in m.topics if t in topics}
        subscriptions = {mid: m.topics for mid, m in group.members.items()}
        return ASSIGNORS[group.protocol](subscriptions, counts, group.previous)

    def _start_completion(self, group: Group) -> None:
        """Compute the next generation, store it (compare-and-set), then answer the JoinGroups."""
        assignment = self._assign(group)
        members = dict(group.members)
        doc = self._doc(group, members, assignment, group.generation + 1)
        group.changed = False
        task = asyncio.get_running_loop().create_task(self._complete(group, assignment, members, doc))
        group.completing = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _doc(group: Group, members: dict[str, Member], assignment: dict[str, list[TopicPartition]],
             generation: int, leader: Optional[str] = None) -> dict[str, Any]:
        """The group document stored in ZooKeeper for ``generation`` (a new generation's leader
        is its smallest member id)."""
        return {"protocol_type": group.protocol_type, "protocol": group.protocol, "generation": generation,
                "leader": min(members, default="") if leader is None else leader, "members": sorted(members),
                "rebalance_timeout_ms": int(max((m.rebalance_timeout_s for m in members.values()), default=0) * 1000),
                "session_timeout_ms": int(max((m.session_timeout_s for m in members.values()), default=0) * 1000),
                "assignment": {m: [list(tp) for tp in tps] for m, tps in assignment.items()}}

    async def _complete(self, group: Group, assignment: dict[str, list[TopicPartition]],
                        members: dict[str, Member], doc: dict[str, Any]) -> None:
        try:
            await self._save(group, doc)
        except Exception as exc:
            group.completing = None
            if isinstance(exc, MetadataConflict):
                log.warning("group %s: generation %d was stored by another coordinator; handing the group over",
                            group.group_id, doc["generation"])
            else:
                log.exception("group %s: could not store generation %d in ZooKeeper", group.group_id, doc["generation"])
            self._lose(group, NotCoordinator(f"group {group.group_id!r}: generation {doc['generation']} "
                                             f"could not be stored ({type(exc).__name__}); find the coordinator again"))
            return
        group.completing = None
        group.generation = doc["generation"]
        group.leader = doc["leader"]
        group.previous = assignment
        now = asyncio.get_running_loop().time()
        for member_id, member in members.items():
            member.assignment = assignment.get(member_id, [])
            member.deadline = now + member.session_timeout_s
            if member.join is not None and not member.join.done():
                member.join.set_result(self._result(group, member))
            member.join = None
        group.state = STABLE if group.members else EMPTY
        if group.members and _client_assigned(group):
            group.state = AWAITING_SYNC
            group.sync_deadline = now + max((m.rebalance_timeout_s for m in members.values()), default=0)
        log.info("group %s: generation %d, %s, %d member(s)", group.group_id, group.generation,
                 group.state, len(members))
        if self.groups.get(group.group_id) is not group:
            return                                  # dropped meanwhile (moved, deleted)
        if group.changed or set(group.members) != set(members):
            group.changed = False
            if group.members:
                self._prepare(group, "membership changed while the generation was stored")
            else:
                group.state = PREPARING
            self._maybe_complete(group)

    async def _save(self, group: Group, doc: dict[str, Any]) -> int:
        """Write ``doc`` if ``/groups/<group>`` is unchanged since this coordinator read or wrote
        it (writes of one group take turns); a concurrent write that did not advance the generation
        (an offset commit creating the znode) is retried, one that did means another coordinator
        owns the group. Returns (and keeps) the znode's new version."""
        async with group.saving:
            version = group.version
            for _ in range(3):
                try:
                    group.version = await asyncio.to_thread(self.store.save_metadata, group.group_id, doc, version)
                    return group.version
                except MetadataConflict:
                    stored, version = await asyncio.to_thread(self.store.load_metadata_versioned, group.group_id)
                    if stored is not None and int(stored.get("generation", 0)) >= doc["generation"]:
                        raise
            raise MetadataConflict(f"/groups/{group.group_id} keeps changing")

    async def _save_or_lose(self, group: Group, doc: dict[str, Any], what: str) -> None:
        """Store ``doc`` for the current generation; on failure the group is handed over."""
        try:
            await self._save(group, doc)
        except Exception as exc:
            log.warning("group %s: could not store %s of generation %d: %s", group.group_id, what,
                        doc["generation"], exc)
            self._lose(group, NotCoordinator(f"group {group.group_id!r}: {what} could not be stored; "
                                             f"find the coordinator again"))
            raise NotCoordinator(f"group {group.group_id!r}: {what} could not be stored") from None

    def _lose(self, group: Group, error: Exception) -> None:
        """Forget the group (its joins get ``error``): the next request reloads it from ZooKeeper."""
        self._fail_joins(group, error)
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    @staticmethod
    def _result(group: Group, member: Member) -> JoinResult:
        leads = member.metadata is not None and member.member_id == group.leader
        members = [(m.member_id, m.instance_id, (m.metadata or {}).get(group.protocol, b""))
                   for m in group.members.values()] if leads else []
        return JoinResult(member.member_id, group.generation, group.protocol, group.leader, list(member.assignment),
                          members)

    @staticmethod
    def _fail_joins(group: Group, error: Exception) -> None:
        for member in group.members.values():
            if member.join is not None and not member.join.done():
                _set_error(member.join, error)
        GroupCoordinator._fail_syncs(group, error)

    @staticmethod
    def _fail_syncs(group: Group, error: Exception) -> None:
        for member in group.members.values():
            if member.sync is not None and not member.sync.done():
                _set_error(member.sync, error)
            member.sync = None

    async def _tick_forever(self) -> None:
        """Expire silent members, end rebalances whose time is up, hand off groups we lost,
        forget idle Empty groups."""
        while True:
            await asyncio.sleep(TICK_S)
            self.tick()

    def tick(self) -> None:
        now = asyncio.get_running_loop().time()
        for group_id, group in list(self.groups.items()):
            try:
                if not self.owns(group_id):
                    self._lose(group, NotCoordinator(f"group {group_id!r} moved to another broker"))
                    continue
                for member_id in [m for m, until in group.pending_ids.items() if now > until]:
                    del group.pending_ids[member_id]
                expired = [mid for mid, m in group.members.items() if not m.waiting and now > m.deadline]
                if expired:
                    self._remove(group, expired, "missed the session timeout")
                if group.state == AWAITING_SYNC and now > group.sync_deadline and group.leader in group.members:
                    self._remove(group, [group.leader], "(the leader) did not send its SyncGroup in time")
                self._maybe_complete(group)
                if (group.state == EMPTY and not group.members and not group.expected and not group.pending_ids
                        and group.completing is None and now - group.last_used > EMPTY_GROUP_IDLE_S):
                    del self.groups[group_id]
            except Exception:
                log.exception("group %s: coordinator tick failed", group_id)

    # -- offsets -----------------------------------------------------------------------------

    async def commit(self, group_id: str, member_id: str, generation: int,
                     offsets: dict[TopicPartition, tuple[int, str]], instance_id: Optional[str] = None) -> None:
        """Store offsets for a member of the current generation (also while a rebalance is
        pending, so members can commit as their partitions are revoked), or, with
        generation -1 and no member id, for a group without active members (manual assignment,
        ``ember groups reset-offsets``). Offsets of unknown topics or partitions are refused. Kafka's
        ACLs: Read on the group and on every topic. Here a refused topic refuses the whole commit;
        the Kafka listener checks first and commits the allowed topics, as Kafka does."""
        self.access.check_group(Operation.READ, group_id)
        for topic in sorted({tp.topic for tp in offsets}):
            self.access.check_topic(Operation.READ, topic)
        group = await self._group(group_id, create=True)
        group.check_instance(member_id, instance_id)
        if generation < 0 and not member_id:
            active = len(group.members) + len(group.expected)
            if active:
                raise NonEmptyGroup(f"group {group_id!r} has {active} active member(s); only its members may commit")
        elif member_id in group.expected:
            # a member of the stored generation, not rejoined yet: it still owns its partitions
            if generation != group.generation:
                raise IllegalGeneration(f"generation {generation} of group {group_id!r} is stale "
                                        f"(current {group.generation}); rejoin")
        else:
            self._member(group, member_id, generation)
        topics = self.cache.topics()
        unknown = [tp for tp in offsets if tp.topic not in topics or tp.partition not in topics[tp.topic].partitions]
        if unknown:
            raise UnknownTopicOrPartition("cannot commit offsets of unknown partitions: "
                                          + ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(unknown)))
        await asyncio.to_thread(self.store.commit, group_id, offsets)

    async def fetch(self, group_id: str, partitions: Optional[list[TopicPartition]]) -> dict[TopicPartition, CommittedOffset]:
        """Committed offsets (Kafka's ACLs: Describe on the group; of all partitions, only those of
        topics the principal may Describe; a listed topic it may not refuses the request)."""
        self.access.check_group(Operation.DESCRIBE, group_id)
        await self._group(group_id, create=False)
        if partitions is not None:   # a name no topic can have has no commit (and is no ZooKeeper path)
            for topic in sorted({tp.topic for tp in partitions}):
                self.access.check_topic(Operation.DESCRIBE, topic)
            partitions = [tp for tp in partitions if is_legal_topic_name(tp.topic)]
        found = await asyncio.to_thread(self.store.fetch, group_id, partitions)
        visible = set(self.access.visible_topics(sorted({tp.topic for tp in found})))
        return {tp: offset for tp, offset in found.items() if tp.topic in visible}

    # -- administration ----------------------------------------------------------------------

    async def describe(self, group_id: str) -> Group:
        self.access.check_group(Operation.DESCRIBE, group_id)
        group = await self._group(group_id, create=False)
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
        group = await self._group(group_id, create=False)
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
        group = await self._group(group_id, create=False)
        if group is not None and (group.members or group.expected or group.completing is not None):
            raise NonEmptyGroup(f"group {group_id!r} has {len(group.members) + len(group.expected)} active member(s)")
        self.groups.pop(group_id, None)
        if not await asyncio.to_thread(self.store.delete, group_id) and group is None:
            raise GroupIdNotFound(f"group {group_id!r} does not exist")


def _set_error(future: asyncio.Future, error: Exception) -> None:
    """Answer a pending JoinGroup with ``error`` (marked retrieved: its connection may be gone)."""
    future.set_exception(error)
    future.add_done_callback(lambda f: f.exception())


def _client_assigned(group: Group) -> bool:
    """Kafka's classic protocol: the group's leader assigns (a group never mixes both kinds)."""
    return any(m.metadata is not None for m in group.members.values())


def new_member_id(prefix: str) -> str:
    """Kafka's member id, ``<client id>-<UUID>``, with the prefix capped so every version can carry it."""
    return f"{prefix[:MEMBER_ID_PREFIX_LENGTH]}-{uuid.uuid4()}"


def _common_protocols(preferences: list[list[str]]) -> list[str]:
    """Assignors every member supports, in the first member's order of preference."""
    common = set.intersection(*(set(p) for p in preferences))
    return [p for p in preferences[0] if p in common]
