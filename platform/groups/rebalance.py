"""The rebalance state machine: when a group rebalances, when the rebalance ends, and how the next
generation is formed, stored and handed out.

States (Kafka's names): Empty → PreparingRebalance → Stable → PreparingRebalance ... A rebalance
starts when a member joins, leaves, changes its subscription or misses its session timeout. It
completes when every member has rejoined, or at the rebalance timeout (members that did not
rejoin are dropped); then the generation goes up, the assignor runs here (see docs/groups.md),
and every waiting JoinGroup is answered with its member's partitions. Groups whose leader assigns
(Kafka's classic protocol) store the generation without an assignment and wait in
CompletingRebalance until the leader's SyncGroup brings it (:meth:`Rebalancer.store_assignment`).

The group document in ZooKeeper (``/groups/<group>``) is written before a generation is handed
out, with a compare-and-set on the znode version: a generation number is given out by exactly one
coordinator, even while two brokers briefly both think they coordinate the group; a coordinator
whose write loses hands the group over (NOT_COORDINATOR). The document lists the members of the
generation and their largest timeouts: a coordinator that loads a group whose last generation had
members starts it in PreparingRebalance and waits for those members to rejoin (up to the rebalance
timeout; a member that neither heartbeats nor joins within its session timeout is dropped), so the
next generation is never formed while members of the previous one still consume.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from ember.cluster.metadata_cache import MetadataCache
from ember.errors import CoordinatorNotAvailable, NotCoordinator, RebalanceInProgress, UnknownMemberId
from ember.groups.assignors import ASSIGNORS
from ember.groups.group import (
    AWAITING_SYNC,
    EMPTY,
    PREPARING,
    STABLE,
    Group,
    JoinResult,
    Member,
    common_protocols,
    set_error,
)
from ember.groups.store import GroupStore, MetadataConflict
from ember.wire.types import TopicPartition

log = logging.getLogger(__name__)

CLOSE_WAIT_S = 5.0


class Rebalancer:
    def __init__(self, cache: MetadataCache, store: GroupStore, groups: dict[str, Group],
                 initial_rebalance_delay_ms: int) -> None:
        self.cache = cache
        self.store = store
        #: the coordinator's groups in memory (it adds the groups it loads; a lost group is removed here)
        self.groups = groups
        self.initial_delay_s = initial_rebalance_delay_ms / 1000
        self._tasks: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        """Let generations being stored finish (their joins get answers), then answer every other
        waiting JoinGroup and SyncGroup."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=CLOSE_WAIT_S)
        for group in self.groups.values():
            group.fail_joins(CoordinatorNotAvailable("the coordinator is shutting down"))

    async def await_rebalance(self, group: Group, member: Member) -> JoinResult:
        """Start a rebalance unless one is pending, then wait for its end (the member's answer)."""
        loop = asyncio.get_running_loop()
        member_id = member.member_id
        if member.join is not None and not member.join.done():
            # a retried JoinGroup of the same member: answer the old one (not cancel(): the
            # server would take that for a shutdown and close the old request's connection)
            set_error(member.join, RebalanceInProgress(f"superseded by a newer JoinGroup of {member_id}"))
        member.join = loop.create_future()
        if group.completing is not None:
            group.changed = True
        if group.state != PREPARING:
            self._prepare(group, f"member {member_id} joined")
        waiter = member.join
        self.maybe_complete(group)
        return await waiter

    async def keep_generation(self, group: Group, member: Member) -> JoinResult:
        """A static member replaced in a Stable group: store the generation under its new id and
        answer with the current generation and assignment (no rebalance). A leader gets the
        members with ``skip_assignment`` (its SyncGroup gets the assignment in force)."""
        generation = group.generation
        doc = group.document(dict(group.members), group.previous, generation, leader=group.leader)
        await self._save_or_lose(group, doc, "the replaced static member")
        moved_on = group.state != STABLE or group.generation != generation
        if moved_on or group.members.get(member.member_id) is not member:
            return await self.await_rebalance(group, member)     # the group moved on meanwhile
        member.deadline = asyncio.get_running_loop().time() + member.session_timeout_s
        result = group.join_result(member)
        result.skip_assignment = member.member_id == group.leader
        return result

    async def store_assignment(self, group: Group, assignments: dict[str, tuple[bytes, list[TopicPartition]]]) -> None:
        """Store the leader's assignment with the generation (compare-and-set), then answer the
        waiting SyncGroups."""
        generation = group.generation
        members = dict(group.members)
        assignment = {mid: assignments.get(mid, (b"", []))[1] for mid in members}
        await self._save_or_lose(group, group.document(members, assignment, generation, leader=group.leader),
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

    def expire(self, group: Group, now: float) -> None:
        """The group's timeouts at loop time ``now``: unused member ids, silent members, a leader's
        late SyncGroup, a rebalance whose time is up."""
        for member_id in [m for m, until in group.pending_ids.items() if now > until]:
            del group.pending_ids[member_id]
        expired = [mid for mid, m in group.members.items() if not m.waiting and now > m.deadline]
        if expired:
            self.remove(group, expired, "missed the session timeout")
        if group.state == AWAITING_SYNC and now > group.sync_deadline and group.leader in group.members:
            self.remove(group, [group.leader], "(the leader) did not send its SyncGroup in time")
        self.maybe_complete(group)

    def _prepare(self, group: Group, reason: str) -> None:
        group.fail_syncs(RebalanceInProgress(f"group {group.group_id!r} is rebalancing: {reason}; rejoin"))
        loop = asyncio.get_running_loop()
        if group.state == EMPTY:
            group.not_before = loop.time() + self.initial_delay_s
        deadline = loop.time() + max((m.rebalance_timeout_s for m in group.members.values()), default=0)
        group.rebalance_deadline = max(deadline, group.rebalance_deadline) if group.expected else deadline
        group.state = PREPARING
        log.info("group %s: rebalancing (generation %d): %s", group.group_id, group.generation, reason)

    def remove(self, group: Group, member_ids: list[str], reason: str) -> None:
        """Remove members (their waiting JoinGroups get UNKNOWN_MEMBER_ID) and rebalance the rest."""
        for member_id in member_ids:
            member = group.members.pop(member_id)
            if member.join is not None and not member.join.done():
                set_error(member.join, UnknownMemberId(f"member {member_id} {reason}"))
        if group.state in (STABLE, AWAITING_SYNC) and group.members:
            self._prepare(group, f"{', '.join(member_ids)} {reason}")
        elif group.state in (STABLE, AWAITING_SYNC, EMPTY):
            group.state = PREPARING                 # the last member left: an Empty generation
            group.rebalance_deadline = 0.0
        if group.completing is not None:
            group.changed = True
        self.maybe_complete(group)

    def maybe_complete(self, group: Group) -> None:
        """End the pending rebalance if every member has rejoined or its time is up."""
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
        group.protocol = common_protocols([m.protocols for m in group.members.values()])[0]
        if group.client_assigned:
            return {}                               # the leader assigns (SyncGroup)
        topics = self.cache.topics()
        counts = {t: len(topics[t].partitions) for m in group.members.values() for t in m.topics if t in topics}
        subscriptions = {mid: m.topics for mid, m in group.members.items()}
        return ASSIGNORS[group.protocol](subscriptions, counts, group.previous)

    def _start_completion(self, group: Group) -> None:
        """Compute the next generation, store it (compare-and-set), then answer the JoinGroups."""
        assignment = self._assign(group)
        members = dict(group.members)
        doc = group.document(members, assignment, group.generation + 1)
        group.changed = False
        task = asyncio.get_running_loop().create_task(self._complete(group, assignment, members, doc))
        group.completing = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
            self.lose(group, NotCoordinator(f"group {group.group_id!r}: generation {doc['generation']} "
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
                member.join.set_result(group.join_result(member))
            member.join = None
        group.state = STABLE if group.members else EMPTY
        if group.members and group.client_assigned:
            group.state = AWAITING_SYNC
            group.sync_deadline = now + max((m.rebalance_timeout_s for m in members.values()), default=0)
        log.info("group %s: generation %d, %s, %d member(s)", group.group_id, group.generation,
                 group.state, len(members))
        if not self._holds(group):
            return                                  # dropped meanwhile (moved, deleted)
        if group.changed or set(group.members) != set(members):
            group.changed = False
            if group.members:
                self._prepare(group, "membership changed while the generation was stored")
            else:
                group.state = PREPARING
            self.maybe_complete(group)

    async def _save(self, group: Group, doc: dict[str, Any]) -> None:
        """Write ``doc`` if ``/groups/<group>`` is unchanged since this coordinator read or wrote
        it (writes of one group take turns); a concurrent write that did not advance the generation
        (an offset commit creating the znode) is retried, one that did means another coordinator
        owns the group. Keeps the znode's new version."""
        async with group.saving:
            version = group.version
            for _ in range(3):
                try:
                    group.version = await asyncio.to_thread(self.store.save_metadata, group.group_id, doc, version)
                    return
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
            self.lose(group, NotCoordinator(f"group {group.group_id!r}: {what} could not be stored; "
                                            f"find the coordinator again"))
            raise NotCoordinator(f"group {group.group_id!r}: {what} could not be stored") from None

    def lose(self, group: Group, error: Exception) -> None:
        """Forget the group (its joins get ``error``): the next request reloads it from ZooKeeper."""
        group.fail_joins(error)
        if self._holds(group):
            del self.groups[group.group_id]

    def _holds(self, group: Group) -> bool:
        """``group`` is still the coordinator's (not dropped, nor replaced by a reload)."""
        return self.groups.get(group.group_id) is group
