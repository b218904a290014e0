"""The requests of a group's members: JoinGroup, Heartbeat, SyncGroup and LeaveGroup. Each checks
the member against the group (ACLs, member id, generation, instance id, protocols) and feeds the
rebalance state machine (:mod:`ember.groups.rebalance`).

Joining takes two steps (Kafka's MEMBER_ID_REQUIRED): a JoinGroup without a member id gets a new id
and no membership, so a retried first join leaves only an unused id behind, which expires.

Kafka's clients assign partitions themselves (the classic protocol): their members join with
their subscription as opaque protocol metadata (``metadata``), the leader's JoinGroup answer
carries every member's metadata, and the leader's SyncGroup brings the assignment, which every
member's SyncGroup then returns (:meth:`MemberRequests.sync`). A group is one kind or the other:
ember and Kafka members never share a group.

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
from typing import Optional

from ember.errors import (
    InconsistentGroupProtocol,
    InvalidSessionTimeout,
    MemberIdRequired,
    RebalanceInProgress,
    UnknownMemberId,
)
from ember.groups.assignors import ASSIGNORS
from ember.groups.group import (
    AWAITING_SYNC,
    PREPARING,
    STABLE,
    GroupLoader,
    JoinResult,
    Member,
    common_protocols,
    new_member_id,
    set_error,
)
from ember.groups.rebalance import Rebalancer
from ember.security.authorizer.access import Access
from ember.security.authorizer.model import Operation
from ember.wire.types import TopicPartition


class MemberRequests:
    def __init__(self, access: Access, load: GroupLoader, rebalancer: Rebalancer, max_session_timeout_ms: int) -> None:
        self.access = access
        self.load = load
        self.rebalancer = rebalancer
        self.max_session_timeout_ms = max_session_timeout_ms

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
        group = await self.load(group_id, create=True)
        if not protocols or (metadata is None and any(p not in ASSIGNORS for p in protocols)):
            raise InconsistentGroupProtocol(f"assignors must be among {sorted(ASSIGNORS)}, got {protocols}")
        others = [m for mid, m in group.members.items() if mid != member_id]
        if others and (others[0].metadata is None) != (metadata is None):
            raise InconsistentGroupProtocol(f"group {group_id!r} has {'ember' if metadata is not None else 'Kafka'} "
                                            f"consumers; ember's and Kafka's consumers cannot share a group")
        if others and group.protocol_type != protocol_type:
            raise InconsistentGroupProtocol(f"group {group_id!r} has protocol type {group.protocol_type!r}, "
                                            f"not {protocol_type!r}")
        if others and not common_protocols([m.protocols for m in others] + [protocols]):
            raise InconsistentGroupProtocol(f"assignors {protocols} share none with the group's members")
        loop = asyncio.get_running_loop()
        if member_id:
            group.check_instance(member_id, instance_id)
        admitted = False                    # a new static member: no two-step join
        if not member_id:
            static = group.static_member(instance_id)
            if static is not None:
                group.replace_static(static)
                static.client_id, static.client_host = client_id, client_host
                static.update(session_timeout_ms, rebalance_timeout_ms, topics, protocols, metadata)
                if group.state == STABLE and group.completing is None and \
                        common_protocols([m.protocols for m in group.members.values()])[0] == group.protocol:
                    return await self.rebalancer.keep_generation(group, static)
                return await self.rebalancer.await_rebalance(group, static)
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
                return group.join_result(member)
        member.update(session_timeout_ms, rebalance_timeout_ms, topics, protocols, metadata)
        return await self.rebalancer.await_rebalance(group, member)

    async def heartbeat(self, group_id: str, member_id: str, generation: int,
                        instance_id: Optional[str] = None) -> None:
        """Keep a member's session alive; tells it to rejoin while a rebalance is pending."""
        self.access.check_group(Operation.READ, group_id)
        group = await self.load(group_id, create=False)
        if group is None:
            raise UnknownMemberId(f"group {group_id!r} has no member {member_id!r}; rejoin")
        group.check_instance(member_id, instance_id)
        if member_id in group.expected:
            group.check_generation(generation)
            # alive: wait for its JoinGroup until the end of the rebalance
            group.expected[member_id] = max(group.expected[member_id], group.rebalance_deadline)
            raise RebalanceInProgress(f"group {group_id!r} is rebalancing (new coordinator); rejoin")
        member = group.member(member_id, generation)
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
        group = await self.load(group_id, create=False)
        if group is None:
            raise UnknownMemberId(f"group {group_id!r} has no member {member_id!r}; rejoin")
        group.check_instance(member_id, instance_id)
        member = group.member(member_id, generation)
        if member.metadata is None:
            raise InconsistentGroupProtocol("ember's consumers get their assignment from JoinGroup, not SyncGroup")
        if group.state == PREPARING:
            raise RebalanceInProgress(f"group {group_id!r} is rebalancing; rejoin")
        if group.state == AWAITING_SYNC and member_id == group.leader:
            await self.rebalancer.store_assignment(group, assignments)
        if group.state == STABLE:
            return member.assignment_data
        if member.sync is not None and not member.sync.done():
            set_error(member.sync, RebalanceInProgress(f"superseded by a newer SyncGroup of {member_id}"))
        member.sync = asyncio.get_running_loop().create_future()
        return await member.sync

    async def leave(self, group_id: str, member_id: str, instance_id: Optional[str] = None) -> None:
        """A member leaves; a static one may be named by its instance id alone (empty ``member_id``)."""
        self.access.check_group(Operation.READ, group_id)
        group = await self.load(group_id, create=False)
        if group is None:
            raise UnknownMemberId(f"group {group_id!r} has no member {member_id or instance_id!r}")
        static = group.static_member(instance_id)
        member_id = member_id or (static.member_id if static is not None else "")
        group.check_instance(member_id, instance_id)
        if group.expected.pop(member_id, None) is not None:
            self.rebalancer.maybe_complete(group)
            return
        if member_id not in group.members:
            raise UnknownMemberId(f"group {group_id!r} has no member {member_id or instance_id!r}")
        self.rebalancer.remove(group, [member_id], "left the group")
        if not group.members and group.completing is not None:
            # the last member: answer once the group is Empty (as Kafka does), so a describe right
            # after a consumer closed sees it so; shielded, a client gone does not stop the write
            await asyncio.shield(group.completing)
