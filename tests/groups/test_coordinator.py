"""The group coordinator in process, against an in-memory store: coordinator moves, two-step
joins, superseded joins, compare-and-set of the group document, idle groups, commit checks."""
from __future__ import annotations

import asyncio
import copy
from types import SimpleNamespace
from typing import Any, Optional

import pytest

from ember.errors import (
    FencedInstanceId,
    GroupSubscribedToTopic,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidSessionTimeout,
    MemberIdRequired,
    NonEmptyGroup,
    NotCoordinator,
    RebalanceInProgress,
    UnknownMemberId,
    UnknownTopicOrPartition,
)
from ember.groups import coordinator as coordinator_module
from ember.groups.coordinator import GroupCoordinator
from ember.groups.group import AWAITING_SYNC, EMPTY, PREPARING, STABLE
from ember.groups.store import MetadataConflict
from ember.wire.types import TopicPartition


class FakeCache:
    def __init__(self, partitions: int = 4) -> None:
        self.topic_partitions = {"t": partitions}

    def brokers(self) -> dict[int, Any]:
        return {1: SimpleNamespace(host="127.0.0.1", port=1)}

    def topics(self) -> dict[str, Any]:
        return {name: SimpleNamespace(partitions={p: [1] for p in range(n)})
                for name, n in self.topic_partitions.items()}


class FakeStore:
    """``/groups/<g>`` documents with znode versions, and committed offsets."""

    def __init__(self) -> None:
        self.docs: dict[str, tuple[dict[str, Any], int]] = {}
        self.offsets: dict[str, dict[TopicPartition, tuple[int, str]]] = {}
        self.saves: list[dict[str, Any]] = []

    def load_metadata_versioned(self, group_id: str) -> tuple[Optional[dict[str, Any]], Optional[int]]:
        if group_id not in self.docs:
            return None, None
        doc, version = self.docs[group_id]
        return copy.deepcopy(doc), version

    def save_metadata(self, group_id: str, doc: dict[str, Any], version: Optional[int] = None) -> int:
        current = self.docs.get(group_id)
        if (current is None) != (version is None) or (current is not None and current[1] != version):
            raise MetadataConflict(f"{group_id}: version {version}, stored {current and current[1]}")
        new = 0 if current is None else current[1] + 1
        self.docs[group_id] = (copy.deepcopy(doc), new)
        self.saves.append(copy.deepcopy(doc))
        return new

    def commit(self, group_id: str, offsets: dict[TopicPartition, tuple[int, str]]) -> None:
        self.offsets.setdefault(group_id, {}).update(offsets)

    def fetch(self, group_id: str, partitions: Any) -> dict:
        return {}

    def groups(self) -> list[str]:
        return sorted(self.docs)

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.offsets.get(group_id, {}).pop(tp, None)

    def delete(self, group_id: str) -> bool:
        return self.docs.pop(group_id, None) is not None


def run(coro_fn) -> None:
    asyncio.run(asyncio.wait_for(coro_fn(), 20))


def coordinator(store: FakeStore, delay_ms: int = 200) -> GroupCoordinator:
    coord = GroupCoordinator(1, FakeCache(), store, delay_ms)
    coord.start()
    return coord


async def join(coord: GroupCoordinator, member_id: str = "", topics=("t",), session_ms: int = 10000,
               rebalance_ms: int = 10000):
    """A client's join: the two-step dance for a new member."""
    if not member_id:
        with pytest.raises(MemberIdRequired) as required:
            await coord.join("g", "", "c", session_ms, rebalance_ms, list(topics), ["range"])
        member_id = required.value.member_id
    return await coord.join("g", member_id, "c", session_ms, rebalance_ms, list(topics), ["range"])


def test_new_coordinator_waits_for_the_stored_members_before_the_next_generation() -> None:
    async def scenario() -> None:
        store = FakeStore()
        old = coordinator(store)
        a, b = await asyncio.gather(join(old), join(old))
        assert a.generation == b.generation == 1
        assert set(store.docs["g"][0]["members"]) == {a.member_id, b.member_id}
        await old.close()                                   # the coordinator dies; members keep consuming

        new = coordinator(store)
        newcomer = asyncio.ensure_future(join(new))         # a third consumer arrives first
        await asyncio.sleep(0.5)
        assert not newcomer.done()                          # no generation without a and b
        group = new.groups["g"]
        assert group.state == PREPARING and set(group.expected) == {a.member_id, b.member_id}
        with pytest.raises(RebalanceInProgress):            # a's heartbeat: rejoin
            await new.heartbeat("g", a.member_id, a.generation)
        await new.commit("g", a.member_id, a.generation, {TopicPartition("t", 0): (5, "")})  # revoke-time commit
        a2 = asyncio.ensure_future(join(new, a.member_id))
        await asyncio.sleep(0.3)
        assert not newcomer.done() and not a2.done()        # b is still expected
        b2 = await join(new, b.member_id)
        results = [await newcomer, await a2, b2]
        assert {r.generation for r in results} == {2}
        owned = [tp for r in results for tp in r.assignment]
        assert sorted(owned) == [TopicPartition("t", p) for p in range(4)]   # each partition once
        await new.close()
    run(scenario)


def test_stored_member_that_never_returns_is_dropped_after_its_session_timeout() -> None:
    async def scenario() -> None:
        store = FakeStore()
        old = coordinator(store)
        a, b = await asyncio.gather(join(old, session_ms=1000), join(old, session_ms=1000))
        await old.close()
        new = coordinator(store)
        with pytest.raises(RebalanceInProgress):
            await new.heartbeat("g", a.member_id, a.generation)      # a is alive, b died with the old broker
        a2 = await asyncio.wait_for(join(new, a.member_id, session_ms=1000), 5)
        assert a2.generation == 2 and len(a2.assignment) == 4
        await new.close()
    run(scenario)


def test_first_join_returns_member_id_required_and_a_retry_leaves_no_phantom() -> None:
    async def scenario() -> None:
        coord = coordinator(FakeStore())
        for _ in range(2):                                   # the first JoinGroup, retried
            with pytest.raises(MemberIdRequired):
                await coord.join("g", "", "c", 10000, 10000, ["t"], ["range"])
        assert not coord.groups["g"].members
        result = await join(coord)
        assert list(coord.groups["g"].members) == [result.member_id] and len(result.assignment) == 4
        with pytest.raises(UnknownMemberId):                 # ids are handed out, not guessed
            await coord.join("g", "c-made-up", "c", 10000, 10000, ["t"], ["range"])
        await coord.close()
    run(scenario)


def test_superseded_join_is_answered_with_an_error_not_cancelled() -> None:
    async def scenario() -> None:
        coord = coordinator(FakeStore())
        a = await join(coord)
        with pytest.raises(MemberIdRequired) as required:
            await coord.join("g", "", "c", 10000, 10000, ["t"], ["range"])
        b_id = required.value.member_id
        first = asyncio.ensure_future(coord.join("g", b_id, "c", 10000, 10000, ["t"], ["range"]))
        await asyncio.sleep(0.1)
        second = asyncio.ensure_future(coord.join("g", b_id, "c", 10000, 10000, ["t"], ["range"]))
        await asyncio.sleep(0.1)
        assert first.done() and not first.cancelled()
        assert isinstance(first.exception(), RebalanceInProgress)
        a2 = await join(coord, a.member_id)
        assert (await second).generation == a2.generation == a.generation + 1
        await coord.close()
    run(scenario)


def test_generation_stored_by_another_coordinator_hands_the_group_over() -> None:
    async def scenario() -> None:
        store = FakeStore()
        coord = coordinator(store)
        a = await join(coord)
        doc, version = store.docs["g"]
        store.docs["g"] = ({**doc, "generation": doc["generation"] + 1, "members": []}, version + 1)  # another broker
        with pytest.raises(NotCoordinator):                  # its next generation is refused, not forked
            await coord.join("g", a.member_id, "c", 10000, 10000, ["t", "u"], ["range"])
        assert "g" not in coord.groups                       # reloaded from ZooKeeper next time
        assert store.saves[-1]["generation"] == a.generation
        await coord.close()
    run(scenario)


def test_saves_are_ordered_and_close_awaits_them() -> None:
    async def scenario() -> None:
        store = FakeStore()
        coord = coordinator(store)
        a = await join(coord)
        await coord.leave("g", a.member_id)
        await coord.close()
        assert [d["generation"] for d in store.saves] == [1, 2]
        assert store.saves[-1]["members"] == [] and store.docs["g"][1] == 1
    run(scenario)


def test_idle_empty_group_leaves_memory_and_reloads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coordinator_module, "EMPTY_GROUP_IDLE_S", 0.2)

    async def scenario() -> None:
        store = FakeStore()
        coord = coordinator(store)
        a = await join(coord)
        await coord.leave("g", a.member_id)
        await asyncio.sleep(0.6)
        assert "g" not in coord.groups
        group = await coord.describe("g")
        assert group.state == EMPTY and group.generation == 2
        await coord.close()
    run(scenario)


def test_commit_checks_partitions_and_membership() -> None:
    async def scenario() -> None:
        store = FakeStore()
        coord = coordinator(store)
        with pytest.raises(UnknownTopicOrPartition):
            await coord.commit("g", "", -1, {TopicPartition("t", 9): (1, "")})
        with pytest.raises(UnknownTopicOrPartition):
            await coord.commit("g", "", -1, {TopicPartition("gone", 0): (1, "")})
        await coord.commit("g", "", -1, {TopicPartition("t", 1): (1, "")})
        a = await join(coord)
        assert coord.groups["g"].state == STABLE
        with pytest.raises(NonEmptyGroup):
            await coord.commit("g", "", -1, {TopicPartition("t", 1): (2, "")})
        with pytest.raises(IllegalGeneration):
            await coord.commit("g", a.member_id, a.generation - 1, {TopicPartition("t", 1): (2, "")})
        assert store.offsets["g"] == {TopicPartition("t", 1): (1, "")}
        await coord.close()
    run(scenario)


def test_join_with_a_session_timeout_above_the_broker_maximum_is_refused() -> None:
    """group.max.session.timeout.ms: no member id handed out, nothing kept for its session."""
    async def scenario() -> None:
        coord = GroupCoordinator(1, FakeCache(), FakeStore(), 0, max_session_timeout_ms=30000)
        coord.start()
        with pytest.raises(InvalidSessionTimeout):
            await coord.join("g", "", "c", 30001, 10000, ["t"], ["range"])
        assert "g" not in coord.groups
        member = await join(coord, session_ms=30000)
        assert member.generation == 1
        await coord.close()
    run(scenario)


async def kafka_join(coord: GroupCoordinator, member_id: str = "", rebalance_ms: int = 10000,
                     instance_id: Optional[str] = None):
    """A Kafka consumer's join: protocol metadata instead of a server-side assignor; a static
    member (``instance_id``) joins in one step."""
    args = ("c", 10000, rebalance_ms, ["t"], ["range"])
    metadata = {"range": f"subscription of {member_id or 'new'}".encode()}
    if instance_id is not None:
        return await coord.join("g", member_id, *args, metadata=metadata, instance_id=instance_id)
    if not member_id:
        with pytest.raises(MemberIdRequired) as required:
            await coord.join("g", "", *args, metadata=metadata)
        member_id = required.value.member_id
    return await coord.join("g", member_id, *args, metadata={"range": f"sub-{member_id}".encode()})


def test_kafka_members_get_their_leaders_assignment_through_sync() -> None:
    async def scenario() -> None:
        store = FakeStore()
        coord = coordinator(store)
        a, b = await asyncio.gather(kafka_join(coord), kafka_join(coord))
        leader, follower = (a, b) if a.member_id == a.leader else (b, a)
        assert {m for m, _, _ in leader.members} == {a.member_id, b.member_id} and follower.members == []
        assert {m: data for m, _, data in leader.members}[follower.member_id] == f"sub-{follower.member_id}".encode()
        assert coord.groups["g"].state == AWAITING_SYNC and leader.assignment == []
        waiting = asyncio.ensure_future(coord.sync("g", follower.member_id, follower.generation, {}))
        await asyncio.sleep(0.1)
        assert not waiting.done()                            # the follower waits for the leader's SyncGroup
        plan = {leader.member_id: (b"L", [TopicPartition("t", 0), TopicPartition("t", 1)]),
                follower.member_id: (b"F", [TopicPartition("t", 2), TopicPartition("t", 3)])}
        assert await coord.sync("g", leader.member_id, leader.generation, plan) == b"L"
        assert await waiting == b"F"
        assert coord.groups["g"].state == STABLE
        assert store.docs["g"][0]["assignment"][follower.member_id] == [["t", 2], ["t", 3]]
        described = await coord.describe("g")
        assert described.members[follower.member_id].assignment == [TopicPartition("t", 2), TopicPartition("t", 3)]
        await coord.close()
    run(scenario)


def test_a_rebalance_answers_waiting_syncs_and_a_silent_leader_is_removed() -> None:
    async def scenario() -> None:
        coord = coordinator(FakeStore())
        a, b = await asyncio.gather(kafka_join(coord, rebalance_ms=500), kafka_join(coord, rebalance_ms=500))
        leader, follower = (a, b) if a.member_id == a.leader else (b, a)
        waiting = asyncio.ensure_future(coord.sync("g", follower.member_id, follower.generation, {}))
        with pytest.raises(RebalanceInProgress):             # the leader never syncs: after the rebalance
            await waiting                                    # timeout it is removed, the group rebalances
        assert leader.member_id not in coord.groups["g"].members
        rejoined = await kafka_join(coord, follower.member_id)
        assert rejoined.generation == follower.generation + 1 and rejoined.leader == follower.member_id
        await coord.close()
    run(scenario)


def test_ember_and_kafka_consumers_never_share_a_group() -> None:
    async def scenario() -> None:
        coord = coordinator(FakeStore())
        await kafka_join(coord)
        with pytest.raises(InconsistentGroupProtocol, match="cannot share a group"):
            await join(coord)
        await coord.close()
    run(scenario)


async def stable_static_pair(coord: GroupCoordinator) -> tuple[Any, Any]:
    """Two static members (instances "a" and "b") of a Stable group: (leader's, follower's) join results."""
    a, b = await asyncio.gather(kafka_join(coord, instance_id="a"), kafka_join(coord, instance_id="b"))
    leader, follower = (a, b) if a.member_id == a.leader else (b, a)
    plan = {leader.member_id: (b"L", [TopicPartition("t", 0)]), follower.member_id: (b"F", [TopicPartition("t", 1)])}
    follower_sync = asyncio.ensure_future(coord.sync("g", follower.member_id, follower.generation, {}))
    assert await coord.sync("g", leader.member_id, leader.generation, plan) == b"L"
    assert await follower_sync == b"F"
    return leader, follower


def test_a_restarted_static_member_takes_its_place_without_a_rebalance_and_fences_the_old_id() -> None:
    async def scenario() -> None:
        store = FakeStore()
        coord = coordinator(store)
        leader, follower = await stable_static_pair(coord)
        instance = coord.groups["g"].members[leader.member_id].instance_id
        saves = len(store.saves)
        again = await kafka_join(coord, instance_id=instance)       # the leader's consumer restarted
        group = coord.groups["g"]
        assert again.member_id != leader.member_id and again.generation == leader.generation
        assert group.state == STABLE and again.leader == again.member_id and again.skip_assignment
        assert {m for m, _, _ in again.members} == {again.member_id, follower.member_id}
        assert await coord.sync("g", again.member_id, again.generation, {}, instance_id=instance) == b"L"
        assert store.docs["g"][0]["members"] == sorted([again.member_id, follower.member_id])
        assert len(store.saves) == saves + 1 and store.docs["g"][0]["generation"] == leader.generation
        await coord.heartbeat("g", follower.member_id, follower.generation, "b")   # the other member: no rebalance
        with pytest.raises(FencedInstanceId):
            await coord.heartbeat("g", leader.member_id, leader.generation, instance)
        with pytest.raises(FencedInstanceId):
            await coord.commit("g", leader.member_id, leader.generation, {TopicPartition("t", 0): (1, "")}, instance)
        with pytest.raises(FencedInstanceId):
            await kafka_join(coord, leader.member_id, instance_id=instance)
        await coord.leave("g", "", "b")                               # a static member named by its instance id
        assert follower.member_id not in group.members and group.state == PREPARING
        await coord.close()
    run(scenario)


def test_a_static_member_replaced_while_the_leader_assigns_fences_the_old_sync_and_rebalances() -> None:
    async def scenario() -> None:
        coord = coordinator(FakeStore())
        a, b = await asyncio.gather(kafka_join(coord, instance_id="a", rebalance_ms=2000),
                                    kafka_join(coord, instance_id="b", rebalance_ms=2000))
        follower = b if a.member_id == a.leader else a
        instance = coord.groups["g"].members[follower.member_id].instance_id
        waiting = asyncio.ensure_future(coord.sync("g", follower.member_id, follower.generation, {}))
        await asyncio.sleep(0.05)
        replaced = asyncio.ensure_future(kafka_join(coord, instance_id=instance, rebalance_ms=2000))
        with pytest.raises(FencedInstanceId):
            await waiting
        assert coord.groups["g"].state == PREPARING
        leader = b if follower is a else a
        rejoined, new = await asyncio.gather(kafka_join(coord, leader.member_id, rebalance_ms=2000), replaced)
        assert new.generation == rejoined.generation == a.generation + 1 and new.member_id != follower.member_id
        await coord.close()
    run(scenario)


def test_offset_delete_keeps_the_offsets_of_subscribed_topics() -> None:
    async def scenario() -> None:
        store = FakeStore()
        coord = coordinator(store)
        member = await join(coord)
        offsets = {TopicPartition("t", 0): (5, ""), TopicPartition("old", 0): (7, "")}
        store.offsets["g"] = dict(offsets)
        refused = await coord.delete_offsets("g", list(offsets))
        assert list(refused) == [TopicPartition("t", 0)] and isinstance(refused[TopicPartition("t", 0)], GroupSubscribedToTopic)
        assert store.offsets["g"] == {TopicPartition("t", 0): (5, "")}
        await coord.leave("g", member.member_id)
        assert coord.groups["g"].state == EMPTY              # the last member is answered once it is so
        assert await coord.delete_offsets("g", [TopicPartition("t", 0)]) == {} and store.offsets["g"] == {}
        await coord.close()
    run(scenario)


def test_a_member_id_stays_short_enough_for_every_version_whatever_the_client_id() -> None:
    async def scenario() -> None:
        coord = coordinator(FakeStore())
        long_client_id = "c" * 32767          # the longest a request header can carry
        with pytest.raises(MemberIdRequired) as required:
            await coord.join("g", "", long_client_id, 10000, 10000, ["t"], ["range"])
        member_id = required.value.member_id
        assert member_id.startswith("c" * 249 + "-") and len(member_id) == 249 + 1 + 36
        await coord.close()
    run(scenario)
