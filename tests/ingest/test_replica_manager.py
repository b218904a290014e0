"""``ReplicaManager`` in process: partitions opened from metadata, leadership applied from
partition states, leader lookups and per-partition leader answers, follower fetches moving the
high watermark and the ISR, replica fetchers started and stopped. Metadata comes from a fake
cache, ISR writes go to a fake writer, inter-broker requests to a fake client; logs are real."""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from ingest_fakes import (
    FakeAccess,
    FakeInterBroker,
    FakeIsrWriter,
    FakeMetadataCache,
    answer_to,
    batch,
    broker_info,
    leader_broker,
    replica_manager,
    run,
    until,
)

from ember.cluster.records import NO_LEADER, PartitionState, Reassignment
from ember.errors import (
    FencedLeaderEpoch,
    LeaderNotAvailable,
    MessageTooLarge,
    NotEnoughReplicas,
    NotLeaderOrFollower,
    OffsetOutOfRange,
    StorageError,
    TopicAuthorizationFailed,
    UnknownLeaderEpoch,
    UnknownTopicOrPartition,
)
from ember.ingest import replica_manager as replica_manager_module
from ember.ingest.broker_config import BrokerConfig
from ember.ingest.isr import now_ms
from ember.ingest.log_manager import LogManager
from ember.ingest.partition import Partition
from ember.ingest.produce import Produced, ProduceEntry, append_at_leaders
from ember.ingest.replica_manager import LeaderAnswer, LeaderQuery, ReplicaManager
from ember.security.authorizer.model import Operation
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Response

TOPIC = "orders"
ME, OTHER, THIRD = 1, 2, 3
def state(leader: int, epoch: int, isr: list[int], version: int) -> PartitionState:
    return PartitionState(leader, epoch, isr, 1, version)


async def reconcile(replicas: ReplicaManager, topic: str) -> None:
    """Tell the manager ``topic`` changed (as the cache's watch does) and wait until applied."""
    applied = replicas.reconciled.future()
    replicas.notify(topic)
    await asyncio.wait_for(applied, 5)


def partition_of(replicas: ReplicaManager, index: int = 0) -> Partition:
    return replicas.partitions[(TOPIC, index)]


def isr_writes(replicas: ReplicaManager) -> list[tuple[str, int, int, list[int] | None]]:
    writer = replicas.isr.writer
    assert isinstance(writer, FakeIsrWriter)
    return writer.calls


async def plus_one(partition: Partition, argument: int) -> int:
    """An answer that proves it ran on the right partition."""
    return partition.log.log_end_offset + argument


def led_here_and_elsewhere() -> FakeMetadataCache:
    """Partition 0 led by this broker (epoch 5), 1 by broker 2, 2 not assigned here."""
    cache = FakeMetadataCache()
    cache.put_topic(TOPIC, {0: [ME, OTHER], 1: [OTHER, ME], 2: [OTHER, THIRD]},
                    states={0: state(ME, 5, [ME, OTHER], 7), 1: state(OTHER, 2, [OTHER, ME], 3),
                            2: state(OTHER, 0, [OTHER, THIRD], 0)})
    return cache


# -- reconciliation and apply_state -------------------------------------------------------------

def test_start_opens_the_partitions_assigned_here_with_their_leadership(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path, led_here_and_elsewhere()) as replicas:
            assert sorted(replicas.partitions) == [(TOPIC, 0), (TOPIC, 1)]
            leader, follower = partition_of(replicas, 0), partition_of(replicas, 1)
            assert (leader.is_leader, leader.leader_epoch, leader.replicas) == (True, 5, [ME, OTHER])
            assert (follower.is_leader, follower.state.leader, follower.leader_epoch) == (False, OTHER, 2)
            assert (tmp_path / f"{TOPIC}-0").is_dir() and not (tmp_path / f"{TOPIC}-2").exists()

    run(scenario())



def state_lines(caplog: pytest.LogCaptureFixture) -> tuple[list[str], list[str]]:
    """(per-partition INFO lines, all INFO lines) the replica manager logged."""
    lines = [r.getMessage() for r in caplog.records
             if r.levelno == logging.INFO and r.name == replica_manager_module.__name__]
    return [line for line in lines if line.startswith(f"{TOPIC}-") and ": leader " in line], lines


@pytest.mark.parametrize("partitions", [3, 30])
def test_partition_states_are_logged_one_line_each_unless_many_are_applied_at_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, partitions: int) -> None:
    """1,000 INFO lines per topic creation cost a broker about 0.2 s of CPU while it opens the
    logs; a later change of one partition of the big topic is still logged on its own line."""
    async def scenario() -> None:
        cache = FakeMetadataCache()
        async with replica_manager(tmp_path, cache) as replicas:
            assignment = {i: [ME, OTHER] if i % 2 else [OTHER, ME] for i in range(partitions)}
            states = {i: state(ME if i % 2 else OTHER, 0, [ME, OTHER], 0) for i in range(partitions)}
            cache.put_topic(TOPIC, assignment, states=states)
            with caplog.at_level(logging.INFO, logger=replica_manager_module.__name__):
                await reconcile(replicas, TOPIC)
                per_partition, lines = state_lines(caplog)
                if partitions <= replica_manager_module.LOGGED_STATES:
                    assert len(per_partition) == partitions
                else:
                    assert per_partition == []
                    assert f"{TOPIC}: applied {partitions} partition state(s); this broker leads " \
                           f"{partitions // 2} of its {partitions} replica(s) (each at DEBUG)" in lines
                caplog.clear()
                cache.put_topic(TOPIC, assignment, states={**states, 0: state(ME, 1, [ME, OTHER], 1)})
                await reconcile(replicas, TOPIC)
                assert state_lines(caplog)[0] == [f"{TOPIC}-0: leader {ME} epoch 1 isr [{ME}, {OTHER}]"]

    run(scenario())

def hold_second_chunk(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Replicas open 2 per chunk, and the opening of partition 2 (the second chunk's first) waits
    for the returned ``may_open``; the returned ``opening`` is set when it starts."""
    monkeypatch.setattr(replica_manager_module, "OPEN_CHUNK", 2)
    opening, may_open = threading.Event(), threading.Event()
    real_open = LogManager.open_log

    def open_log(self: LogManager, topic: str, index: int, *args: Any) -> Any:
        if index == 2:
            opening.set()
            assert may_open.wait(10)
        return real_open(self, topic, index, *args)
    monkeypatch.setattr(LogManager, "open_log", open_log)
    return opening, may_open


def test_a_large_topic_is_led_chunk_by_chunk_while_its_later_logs_still_open(tmp_path: Path, monkeypatch) -> None:
    """A new topic's first chunk of replicas serves (its leadership applied) before the next
    chunk's logs are opened, so a big topic is not unavailable until its last log opens."""
    third_opening, may_open = hold_second_chunk(monkeypatch)

    async def scenario() -> None:
        cache = FakeMetadataCache()
        async with replica_manager(tmp_path, cache) as replicas:
            cache.put_topic(TOPIC, {i: [ME, OTHER] for i in range(5)},
                            states={i: state(ME, 1, [ME, OTHER], 0) for i in range(5)})
            applied = replicas.reconciled.future()
            replicas.notify(TOPIC)
            try:
                assert await asyncio.to_thread(third_opening.wait, 5)
                assert sorted(replicas.partitions) == [(TOPIC, 0), (TOPIC, 1)]
                assert partition_of(replicas, 0).is_leader and partition_of(replicas, 1).is_leader
            finally:
                may_open.set()
            await asyncio.wait_for(applied, 5)
            assert all(partition_of(replicas, i).is_leader for i in range(5))

    run(scenario())


def test_a_topic_deleted_while_its_chunks_open_has_no_later_chunk_applied(tmp_path: Path, monkeypatch) -> None:
    """Deleted (or re-created) between two chunks: the old topic's remaining replicas are never
    led, so no write to the name can land in a log about to be deleted."""
    second_chunk, may_open = hold_second_chunk(monkeypatch)
    applied: list[int] = []
    real_apply = ReplicaManager.apply_state

    async def apply_state(self: ReplicaManager, partition: Partition, new: PartitionState, quiet: bool = False) -> bool:
        applied.append(partition.index)
        return await real_apply(self, partition, new, quiet)
    monkeypatch.setattr(ReplicaManager, "apply_state", apply_state)

    async def scenario() -> None:
        cache = FakeMetadataCache()
        async with replica_manager(tmp_path, cache) as replicas:
            cache.put_topic(TOPIC, {i: [ME, OTHER] for i in range(6)},
                            states={i: state(ME, 1, [ME, OTHER], 0) for i in range(6)})
            replicas.notify(TOPIC)
            try:
                assert await asyncio.to_thread(second_chunk.wait, 5)
                cache.remove_topic(TOPIC)
                applied_before = replicas.reconciled.future()
            finally:
                may_open.set()
            replicas.notify(TOPIC)
            await asyncio.wait_for(applied_before, 5)
            await until(lambda: not replicas.partitions, "the deleted topic's replicas gone")
            assert sorted(applied) == [0, 1]

    run(scenario())


def test_start_deletes_local_partitions_whose_topic_is_gone_or_moved_away(tmp_path: Path) -> None:
    """A broker that was down while a topic was deleted (or its partition moved) must not keep
    serving the old data."""
    async def scenario() -> None:
        cache = FakeMetadataCache()
        cache.put_topic(TOPIC, {0: [OTHER, THIRD]}, states={0: state(OTHER, 0, [OTHER, THIRD], 0)})
        logs = LogManager(tmp_path, ME)
        for topic, index in (("gone", 0), (TOPIC, 0)):
            logs.open_log(topic, index, f"id-{topic}", BrokerConfig.from_properties().log_config()).close()
        logs.close()
        async with replica_manager(tmp_path, cache) as replicas:
            assert replicas.partitions == {}
            assert not (tmp_path / "gone-0").exists() and not (tmp_path / f"{TOPIC}-0").exists()

    run(scenario())


def test_a_stale_partition_state_is_ignored(tmp_path: Path) -> None:
    """States arrive from the watch and from this broker's own ISR writes in any order: only a
    newer znode version may change leadership."""
    async def scenario() -> None:
        async with replica_manager(tmp_path, led_here_and_elsewhere()) as replicas:
            partition = partition_of(replicas)
            await replicas.apply_state(partition, state(OTHER, 4, [OTHER], 6))     # older version
            await replicas.apply_state(partition, state(OTHER, 6, [OTHER], 7))     # same version
            assert (partition.is_leader, partition.leader_epoch, partition.state.version) == (True, 5, 7)
            await replicas.apply_state(partition, state(OTHER, 6, [OTHER], 8))
            assert (partition.is_leader, partition.leader_epoch) == (False, 6)

    run(scenario())


def test_a_state_for_a_partition_no_longer_hosted_here_is_ignored(tmp_path: Path) -> None:
    """An ISR write that finishes after its topic was deleted must not revive the partition."""
    async def scenario() -> None:
        cache = led_here_and_elsewhere()
        async with replica_manager(tmp_path, cache) as replicas:
            partition = partition_of(replicas)
            cache.remove_topic(TOPIC)
            await reconcile(replicas, TOPIC)
            assert replicas.partitions == {}
            await replicas.apply_state(partition, state(ME, 6, [ME], 99))
            assert not partition.is_leader and partition.state.leader == NO_LEADER

    run(scenario())


def test_a_deleted_topic_deletes_its_local_partitions(tmp_path: Path) -> None:
    async def scenario() -> None:
        cache = led_here_and_elsewhere()
        async with replica_manager(tmp_path, cache) as replicas:
            log = partition_of(replicas).log
            cache.remove_topic(TOPIC)
            await reconcile(replicas, TOPIC)
            assert replicas.partitions == {} and log.closed
            assert not (tmp_path / f"{TOPIC}-0").exists() and not (tmp_path / f"{TOPIC}-1").exists()
            with pytest.raises(UnknownTopicOrPartition):
                replicas.leader_partition(TOPIC, 0)

    run(scenario())


def test_a_recreated_topic_starts_over_with_an_empty_log(tmp_path: Path) -> None:
    """Same name, new topic id: the old records must not show up in the new topic."""
    async def scenario() -> None:
        cache = FakeMetadataCache()
        cache.put_topic(TOPIC, {0: [ME]}, states={0: state(ME, 0, [ME], 0)})
        async with replica_manager(tmp_path, cache) as replicas:
            old = partition_of(replicas)
            await old.append(memoryview(batch(3)), 1)
            cache.put_topic(TOPIC, {0: [ME]}, topic_id="id-2", states={0: state(ME, 0, [ME], 0)})
            await reconcile(replicas, TOPIC)
            new = partition_of(replicas)
            assert new is not old and new.topic_id == "id-2" and old.log.closed
            assert (new.is_leader, new.log.log_end_offset) == (True, 0)

    run(scenario())


def test_a_partition_moved_away_is_deleted_here(tmp_path: Path) -> None:
    async def scenario() -> None:
        cache = led_here_and_elsewhere()
        async with replica_manager(tmp_path, cache) as replicas:
            cache.put_topic(TOPIC, {0: [OTHER, THIRD], 1: [OTHER, ME], 2: [OTHER, THIRD]})
            await reconcile(replicas, TOPIC)
            assert sorted(replicas.partitions) == [(TOPIC, 1)]
            assert not (tmp_path / f"{TOPIC}-0").exists()

    run(scenario())


def test_a_deleted_topic_leaves_nothing_on_disk_once_its_directories_are_removed(tmp_path: Path) -> None:
    async def scenario() -> None:
        cache = led_here_and_elsewhere()
        async with replica_manager(tmp_path, cache) as replicas:
            await partition_of(replicas).append(memoryview(batch(3)), 1)
            cache.remove_topic(TOPIC)
            await reconcile(replicas, TOPIC)
            await until(lambda: not any(p.name.startswith(f"{TOPIC}-") for p in tmp_path.iterdir()),
                        "the renamed directories removed")

    run(scenario())


def test_every_partition_of_a_deleted_topic_stops_leading_before_any_log_is_closed(
        tmp_path: Path, monkeypatch) -> None:
    """Found at 5,000 partitions: deleted one at a time, the partitions not reached yet went on
    leading (and shrinking their ISRs in ZooKeeper) for minutes."""
    async def scenario() -> None:
        cache = FakeMetadataCache()
        cache.put_topic(TOPIC, {i: [ME] for i in range(30)}, states={i: state(ME, 0, [ME], 0) for i in range(30)})
        async with replica_manager(tmp_path, cache) as replicas:
            doomed = list(replicas.partitions.values())
            assert len(doomed) == 30 and all(p.is_leader for p in doomed)
            leading_at_close: list[int] = []
            real = replica_manager_module.Log.rename_for_delete

            def rename(log: Any) -> Path:
                leading_at_close.append(sum(p.is_leader for p in doomed))
                return real(log)
            monkeypatch.setattr(replica_manager_module.Log, "rename_for_delete", rename)
            cache.remove_topic(TOPIC)
            await reconcile(replicas, TOPIC)
            assert leading_at_close == [0] * 30

    run(scenario())


def test_a_topic_recreated_at_once_gets_empty_logs_while_the_old_directories_are_removed(tmp_path: Path) -> None:
    """The old directories are renamed before the new ones open: the re-created partitions never
    see the old records, whenever the background removal runs."""
    async def scenario() -> None:
        cache = FakeMetadataCache()
        cache.put_topic(TOPIC, {i: [ME] for i in range(3)}, states={i: state(ME, 0, [ME], 0) for i in range(3)})
        async with replica_manager(tmp_path, cache) as replicas:
            for i in range(3):
                await partition_of(replicas, i).append(memoryview(batch(3)), 1)
            cache.put_topic(TOPIC, {i: [ME] for i in range(3)}, topic_id="id-2",
                            states={i: state(ME, 0, [ME], 0) for i in range(3)})
            await reconcile(replicas, TOPIC)
            assert [partition_of(replicas, i).log.log_end_offset for i in range(3)] == [0, 0, 0]
            await until(lambda: not any(p.name.endswith("-delete") for p in tmp_path.iterdir()),
                        "the old directories removed")
            assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(TOPIC)) == \
                [f"{TOPIC}-{i}" for i in range(3)]

    run(scenario())


def test_start_removes_deleted_partition_directories_a_previous_process_left(tmp_path: Path) -> None:
    """A broker stopped while removing a deleted topic's directories: the next start neither
    opens them as partitions nor leaves them behind."""
    async def scenario() -> None:
        cache = FakeMetadataCache()
        cache.put_topic(TOPIC, {0: [ME]}, states={0: state(ME, 0, [ME], 0)})
        logs = LogManager(tmp_path, ME)
        log = logs.open_log(TOPIC, 0, f"id-{TOPIC}", BrokerConfig.from_properties().log_config())
        log.append_as_leader(memoryview(batch(3)), 0)
        renamed = log.rename_for_delete()
        logs.close()
        assert renamed.name.startswith(f"{TOPIC}-0.") and renamed.name.endswith("-delete")
        async with replica_manager(tmp_path, cache) as replicas:
            assert partition_of(replicas).log.log_end_offset == 0
            await until(lambda: not renamed.exists(), "the leftover directory removed")

    run(scenario())


def test_topic_config_overrides_reach_the_partition(tmp_path: Path) -> None:
    """min.insync.replicas set on the topic (then altered) governs acks=all at the leader."""
    async def scenario() -> None:
        cache = FakeMetadataCache()
        cache.put_topic(TOPIC, {0: [ME, OTHER]}, config={"min.insync.replicas": "2"},
                        states={0: state(ME, 0, [ME], 0)})
        async with replica_manager(tmp_path, cache) as replicas:
            entry = ProduceEntry(TOPIC, 0, batch(1))
            [refused] = await append_at_leaders(replicas, [entry], -1, 1.0)
            assert isinstance(refused, NotEnoughReplicas)
            cache.put_topic(TOPIC, {0: [ME, OTHER]}, config={"min.insync.replicas": "1"})
            await reconcile(replicas, TOPIC)
            assert partition_of(replicas).config.min_insync_replicas == 1
            [produced] = await append_at_leaders(replicas, [entry], -1, 1.0)
            assert isinstance(produced, Produced) and produced.base_offset == 0

    run(scenario())


def test_a_replica_being_reassigned_away_is_marked_removing(tmp_path: Path) -> None:
    async def scenario() -> None:
        cache = FakeMetadataCache()
        cache.put_topic(TOPIC, {0: [ME, THIRD, OTHER]}, reassignments={0: Reassignment([THIRD], [OTHER])},
                        states={0: state(ME, 0, [ME, OTHER], 0)})
        async with replica_manager(tmp_path, cache) as replicas:
            assert partition_of(replicas).removing == frozenset({OTHER})

    run(scenario())


# -- leader_partition --------------------------------------------------------------------------

def test_leader_partition_returns_a_partition_led_here(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path, led_here_and_elsewhere()) as replicas:
            assert replicas.leader_partition(TOPIC, 0) is partition_of(replicas, 0)

    run(scenario())


def test_leader_partition_names_the_leader_of_a_partition_led_elsewhere(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path, led_here_and_elsewhere()) as replicas:
            for index in (1, 2):                                  # followed here / not hosted here
                with pytest.raises(NotLeaderOrFollower, match="broker 2 does"):
                    replicas.leader_partition(TOPIC, index)

    run(scenario())


def test_leader_partition_reports_unknown_topics_and_partitions(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path, led_here_and_elsewhere()) as replicas:
            for topic, index in (("nope", 0), (TOPIC, 3)):
                with pytest.raises(UnknownTopicOrPartition):
                    replicas.leader_partition(topic, index)

    run(scenario())


def test_leader_partition_reports_leader_not_available_with_the_reason(tmp_path: Path) -> None:
    async def scenario() -> None:
        cache = FakeMetadataCache(brokers=[ME])
        cache.put_topic(TOPIC, {0: [OTHER, ME], 1: [THIRD, OTHER]}, states={0: state(NO_LEADER, 3, [OTHER], 4)})
        async with replica_manager(tmp_path, cache) as replicas:
            with pytest.raises(LeaderNotAvailable, match="offline: no in-sync replica is alive"):
                replicas.leader_partition(TOPIC, 0)
            with pytest.raises(LeaderNotAvailable, match="topic is being created"):
                replicas.leader_partition(TOPIC, 1)           # no state yet

    run(scenario())


def test_leader_partition_reports_a_partition_still_being_opened_here(tmp_path: Path) -> None:
    """Metadata already names this broker, but its log is not open yet: retriable, not
    NOT_LEADER (which would send the client to... this broker)."""
    async def scenario() -> None:
        async with replica_manager(tmp_path, led_here_and_elsewhere(), start=False) as replicas:
            with pytest.raises(LeaderNotAvailable, match="still being opened"):
                replicas.leader_partition(TOPIC, 0)

    run(scenario())


# -- answer_at_leader --------------------------------------------------------------------------

def test_answer_at_leader_answers_for_a_partition_led_here(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path, led_here_and_elsewhere()) as replicas:
            await partition_of(replicas).append(memoryview(batch(4)), 1)
            answers = await replicas.answer_at_leader([LeaderQuery(TOPIC, 0, None, 10)], plus_one)
            assert answers == [LeaderAnswer(TOPIC, 0, 14)]

    run(scenario())


def test_answer_at_leader_reports_not_leader_for_a_partition_led_elsewhere(tmp_path: Path) -> None:
    async def scenario() -> None:
        asked: list[Partition] = []

        async def answer(partition: Partition, argument: int) -> int:
            asked.append(partition)
            return argument

        async with replica_manager(tmp_path, led_here_and_elsewhere()) as replicas:
            [answer_1, answer_2] = await replicas.answer_at_leader(
                [LeaderQuery(TOPIC, 1, None, 0), LeaderQuery(TOPIC, 2, None, 0)], answer)
            assert asked == []
            for index, reply in ((1, answer_1), (2, answer_2)):
                assert (reply.topic, reply.partition, reply.value) == (TOPIC, index, None)
                assert isinstance(reply.error, NotLeaderOrFollower)

    run(scenario())


def test_answer_at_leader_checks_the_current_leader_epoch(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path, led_here_and_elsewhere()) as replicas:
            answers = await replicas.answer_at_leader(
                [LeaderQuery(TOPIC, 0, epoch, 1) for epoch in (4, 5, 6, -1)], plus_one)
            assert [type(a.error) for a in answers] == [FencedLeaderEpoch, type(None), UnknownLeaderEpoch, type(None)]
            assert [a.value for a in answers] == [None, 1, None, 1]

    run(scenario())


def test_answer_at_leader_keeps_each_answer_with_its_query(tmp_path: Path) -> None:
    """One failing partition (unknown, led elsewhere, or its answer raising) must not cost the
    others theirs; the answers come back in the queries' order."""
    async def scenario() -> None:
        async with replica_manager(tmp_path, led_here_and_elsewhere()) as replicas:
            await partition_of(replicas).append(memoryview(batch(4)), 1)
            await replicas.follower_fetched(partition_of(replicas), OTHER, 4)           # high watermark 4
            queries = [LeaderQuery("nope", 0, None, 0), LeaderQuery(TOPIC, 0, None, 3),
                       LeaderQuery(TOPIC, 0, None, 5), LeaderQuery(TOPIC, 1, None, 0)]
            answers = await replicas.answer_at_leader(queries, Partition.delete_records, Operation.DELETE)
            assert [(a.topic, a.partition) for a in answers] == [(q.topic, q.partition) for q in queries]
            assert [type(a.error) for a in answers] == [UnknownTopicOrPartition, type(None), OffsetOutOfRange,
                                                        NotLeaderOrFollower]
            assert answers[1].value == 3 == partition_of(replicas).log.log_start_offset

    run(scenario())


def test_answer_at_leader_checks_the_topic_acl_unless_the_caller_did(tmp_path: Path) -> None:
    async def scenario() -> None:
        access = FakeAccess(denied=[TOPIC])
        async with replica_manager(tmp_path, led_here_and_elsewhere(), access=access) as replicas:
            [refused] = await replicas.answer_at_leader([LeaderQuery(TOPIC, 0, None, 1)], plus_one, Operation.DELETE)
            assert isinstance(refused.error, TopicAuthorizationFailed) and refused.value is None
            assert access.checked == [(Operation.DELETE, TOPIC)]
            [answered] = await replicas.answer_at_leader([LeaderQuery(TOPIC, 0, None, 1)], plus_one, None)
            assert (answered.error, answered.value) == (None, 1)
            assert len(access.checked) == 1

    run(scenario())


# -- follower fetches: high watermark and ISR ---------------------------------------------------

def test_follower_fetched_moves_the_high_watermark_and_wakes_acks_all(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path, led_here_and_elsewhere()) as replicas:
            entry = ProduceEntry(TOPIC, 0, batch(3))
            produce = asyncio.create_task(append_at_leaders(replicas, [entry], -1, 5.0))
            partition = partition_of(replicas)
            await until(lambda: partition.log.log_end_offset == 3, "the leader's append")
            await asyncio.sleep(0.01)
            assert not produce.done() and partition.log.high_watermark == 0
            await replicas.follower_fetched(partition, OTHER, 3)
            assert partition.log.high_watermark == 3
            [produced] = await asyncio.wait_for(produce, 1)
            assert isinstance(produced, Produced) and produced.base_offset == 0

    run(scenario())


def test_a_follower_fetch_from_a_stranger_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with replica_manager(tmp_path, led_here_and_elsewhere()) as replicas:
            partition = partition_of(replicas)
            await partition.append(memoryview(batch(2)), 1)
            with pytest.raises(NotLeaderOrFollower):
                await replicas.follower_fetched(partition, THIRD, 2)
            assert partition.log.high_watermark == 0 and isr_writes(replicas) == []

    run(scenario())


def test_a_caught_up_follower_is_written_back_into_the_isr(tmp_path: Path) -> None:
    async def scenario() -> None:
        cache = FakeMetadataCache()
        cache.put_topic(TOPIC, {0: [ME, OTHER]}, states={0: state(ME, 0, [ME], 0)})
        async with replica_manager(tmp_path, cache) as replicas:
            partition = partition_of(replicas)
            await partition.append(memoryview(batch(2)), 1)
            await replicas.follower_fetched(partition, OTHER, 1)  # behind: stays out
            await asyncio.sleep(0.01)
            assert isr_writes(replicas) == []
            await replicas.follower_fetched(partition, OTHER, 2)
            await until(lambda: partition.state.isr == [ME, OTHER], "the ISR expansion to be applied")
            assert isr_writes(replicas) == [(TOPIC, 0, 0, [ME, OTHER])]
            assert partition.state.version == 1 and partition.joining_isr == set()

    run(scenario())


def test_an_isr_follower_that_stops_fetching_is_dropped_and_the_high_watermark_moves_on(tmp_path: Path) -> None:
    """The shrink applies through ``apply_state``, which must advance the high watermark the
    lagging follower held back, so an acks=1 write becomes visible to consumers."""
    async def scenario() -> None:
        async with replica_manager(tmp_path, led_here_and_elsewhere()) as replicas:
            partition = partition_of(replicas)
            await partition.append(memoryview(batch(2)), 1)
            assert partition.log.high_watermark == 0
            replicas.isr.shrink(now_ms() + replicas.config.replica_lag_time_max_ms + 1_000)
            await until(lambda: partition.state.isr == [ME], "the ISR shrink to be applied")
            assert isr_writes(replicas) == [(TOPIC, 0, 5, [ME])]
            assert partition.log.high_watermark == 2

    run(scenario())


def test_an_isr_write_that_finds_a_newer_leader_makes_this_broker_step_down(tmp_path: Path) -> None:
    """The controller moved leadership before this broker heard of it: its ISR write is not
    made, and the state it found is applied instead."""
    async def scenario() -> None:
        cache = FakeMetadataCache()
        cache.put_topic(TOPIC, {0: [ME, OTHER]}, states={0: state(ME, 0, [ME], 0)})
        async with replica_manager(tmp_path, cache) as replicas:
            partition = partition_of(replicas)
            cache.next_state(TOPIC, 0, leader=OTHER)              # not yet notified
            await replicas.follower_fetched(partition, OTHER, 0)
            await until(lambda: not partition.is_leader, "the newer state to be applied")
            assert (partition.state.leader, partition.leader_epoch) == (OTHER, 1)
            assert isr_writes(replicas) == [(TOPIC, 0, 0, None)]

    run(scenario())


# -- becoming follower / leader: replica fetchers ----------------------------------------------

def test_apply_state_becoming_follower_starts_fetching_from_the_new_leader(tmp_path: Path) -> None:
    async def scenario() -> None:
        cache = led_here_and_elsewhere()
        inter_broker = FakeInterBroker()
        async with replica_manager(tmp_path, cache, inter_broker=inter_broker) as replicas:
            partition = partition_of(replicas)
            leader_address = broker_info(OTHER).endpoint("EMBER")
            await until(lambda: inter_broker.fetched(leader_address, TOPIC, 1), "fetches of partition 1")
            assert not inter_broker.fetched(leader_address, TOPIC, 0)
            await replicas.apply_state(partition, cache.next_state(TOPIC, 0, leader=OTHER))
            assert not partition.is_leader
            fetches = await until(lambda: inter_broker.fetched(leader_address, TOPIC, 0), "fetches of partition 0")
            assert fetches[0]["current_leader_epoch"] == 6 and fetches[0]["fetch_offset"] == 0
            with pytest.raises(NotLeaderOrFollower, match="broker 2 does"):
                replicas.leader_partition(TOPIC, 0)

    run(scenario())


def test_apply_state_becoming_leader_stops_fetching(tmp_path: Path) -> None:
    async def scenario() -> None:
        cache = FakeMetadataCache()
        cache.put_topic(TOPIC, {0: [OTHER, ME]}, states={0: state(OTHER, 0, [OTHER, ME], 0)})
        inter_broker = FakeInterBroker()
        async with replica_manager(tmp_path, cache, inter_broker=inter_broker) as replicas:
            partition = partition_of(replicas)
            await until(lambda: inter_broker.clients, "a connection to the leader")
            await replicas.apply_state(partition, cache.next_state(TOPIC, 0, leader=ME, isr=[ME]))
            assert replicas.leader_partition(TOPIC, 0) is partition
            await until(lambda: all(c.closed for c in inter_broker.clients), "the fetcher to disconnect")
            sent = len(inter_broker.requests)
            await asyncio.sleep(0.05)
            assert len(inter_broker.requests) == sent
            [answer] = await replicas.answer_at_leader([LeaderQuery(TOPIC, 0, 1, 0)], plus_one)
            assert (answer.error, answer.value) == (None, 0)

    run(scenario())


# -- two replica managers, one event loop ------------------------------------------------------

def test_acks_all_completes_once_the_follower_broker_has_fetched_the_write(tmp_path: Path) -> None:
    """The whole replication loop in process: the follower's fetcher long-polls the leader's
    Fetch path, appends, and its next fetch offset moves the leader's high watermark."""
    async def scenario() -> None:
        cache = FakeMetadataCache()
        cache.put_topic(TOPIC, {0: [ME, OTHER]}, states={0: state(ME, 0, [ME, OTHER], 0)})
        async with replica_manager(tmp_path / "b1", cache, ME) as leader, \
                replica_manager(tmp_path / "b2", cache, OTHER,
                                inter_broker=FakeInterBroker(leader_broker(leader))) as follower:
            entries = [ProduceEntry(TOPIC, 0, batch(3)), ProduceEntry(TOPIC, 0, batch(2))]
            outcomes = await append_at_leaders(leader, entries, -1, 5.0)
            assert [o.base_offset for o in outcomes if isinstance(o, Produced)] == [0, 3]
            assert partition_of(leader).log.high_watermark == 5
            copy = partition_of(follower)
            await until(lambda: copy.log.high_watermark == 5, "the follower to learn the high watermark")
            assert copy.log.log_end_offset == 5 and copy.log.latest_epoch == 0

    run(scenario())


def test_a_deposed_leader_truncates_what_the_new_leader_never_had(tmp_path: Path) -> None:
    """Broker 1 appended records nobody replicated, then lost leadership to broker 2: before
    fetching it truncates back to where the new leader's log agrees, then copies the new
    leader's records at the same offsets."""
    async def scenario() -> None:
        cache = FakeMetadataCache()
        cache.put_topic(TOPIC, {0: [ME, OTHER]}, states={0: state(ME, 0, [ME, OTHER], 0)})
        async with replica_manager(tmp_path / "b2", cache, OTHER, start=False) as new_leader:
            async with replica_manager(tmp_path / "b1", cache, ME,
                                       inter_broker=FakeInterBroker(leader_broker(new_leader))) as old_leader:
                await partition_of(old_leader).append(memoryview(batch(2)), 1)
                # Broker 2 never fetched those two records; the controller makes it leader.
                cache.next_state(TOPIC, 0, leader=OTHER, isr=[OTHER])
                await new_leader.start()
                led = partition_of(new_leader)
                await led.append(memoryview(batch(1, timestamp=7_000)), 1)
                await reconcile(old_leader, TOPIC)
                deposed = partition_of(old_leader)
                await until(lambda: deposed.log.high_watermark == 1, "the deposed leader to follow")
                assert (deposed.log.log_end_offset, deposed.log.latest_epoch) == (1, 1)
                assert await deposed.offset_for_timestamp(7_000, OTHER) == (0, 7_000)

    run(scenario())


def test_closing_on_a_failing_disk_says_so_once_per_partition_without_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A broker stopping on a full or failing disk: its logs' last flush fails; each is closed
    anyway, with one WARNING line (not an ERROR with a traceback per partition)."""
    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    async def scenario() -> None:
        async with replica_manager(tmp_path, led_here_and_elsewhere()) as replicas:
            await partition_of(replicas, 0).append(memoryview(batch(2)), 1)
            monkeypatch.setattr(os, "fsync", failing_fsync)
            closing = list(replicas.partitions.values())
        assert all(p.log.closed for p in closing)

    with caplog.at_level(logging.INFO, logger="ember.ingest.replica_manager"):
        run(scenario())
    lines = [r for r in caplog.records if r.name == "ember.ingest.replica_manager" and "closing" in r.getMessage()]
    assert len(lines) == 2, [r.getMessage() for r in lines]
    assert all(r.levelno == logging.WARNING and r.exc_info is None and "its last flush failed" in r.getMessage()
               for r in lines)


def test_an_append_that_would_leave_less_than_the_minimum_free_space_is_refused_as_a_full_disk(
        tmp_path: Path) -> None:
    """log.dir.min.free.bytes: the broker stops appending before the disk is full, so a ZooKeeper
    on the same file system keeps room to record the failover (seen in the fault tests: ZooKeeper
    died at its first transaction on the full disk, and no leader moved)."""
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize

    async def scenario() -> None:
        async with replica_manager(tmp_path / "data", led_here_and_elsewhere(),
                                   config={"log.dir.min.free.bytes": str(free * 2)}) as replicas:
            partition = partition_of(replicas, 0)
            with pytest.raises(StorageError, match="log.dir.min.free.bytes"):
                await partition.append(memoryview(batch(2)), 1)
            assert partition.log.offline and partition.log.log_end_offset == 0

    run(scenario())


def test_a_batch_over_max_message_bytes_is_refused_as_too_large_not_as_a_full_disk(tmp_path: Path) -> None:
    """Near the free-space minimum, an oversized batch must get MESSAGE_TOO_LARGE (not retriable)
    and leave the log online: refused as a full disk it would take a healthy replica offline, and
    the client's retry at the next leader that one too."""
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    cache = FakeMetadataCache()
    cache.put_topic(TOPIC, {0: [ME, OTHER]}, config={"max.message.bytes": "200"},
                    states={0: state(ME, 5, [ME, OTHER], 7)})

    async def scenario() -> None:
        async with replica_manager(tmp_path / "data", cache, config={"log.dir.min.free.bytes": str(free * 2)}) as replicas:
            partition = partition_of(replicas, 0)
            with pytest.raises(MessageTooLarge):
                await partition.append(memoryview(batch(40)), 1)
            assert not partition.log.offline

    run(scenario())


def test_a_partition_followed_anew_restarts_the_fetch_session_so_the_leader_tells_it_everything(
        tmp_path: Path) -> None:
    """A followed partition's new leader epoch replaces its follow: the leader's session still holds
    what it last told the old one (high watermark, log start) and would never say it again, so the
    next fetch is a full one (epoch 0), naming every partition."""
    async def scenario() -> None:
        cache = led_here_and_elsewhere()
        requests: list[dict[str, Any]] = []

        async def sessions_leader(api_key: ApiKey, body: dict[str, Any]) -> Response:
            assert api_key == ApiKey.FETCH
            requests.append(body)
            await asyncio.sleep(0.01)
            return Response(0, {"session_id": 42, "partitions": [
                answer_to(p, high_watermark=0, log_start_offset=0, log_end_offset=0, size=0)
                for p in body["partitions"]]})

        async with replica_manager(tmp_path, cache, inter_broker=FakeInterBroker(sessions_leader)) as replicas:
            await until(lambda: any(r["session_epoch"] >= 2 for r in requests), "incremental fetches")
            assert requests[0]["session_epoch"] == 0 and [p["partition"] for p in requests[0]["partitions"]] == [1]
            assert all(not r["partitions"] for r in requests[1:])          # nothing moved: nothing named
            seen = len(requests)
            await replicas.apply_state(partition_of(replicas, 1), cache.next_state(TOPIC, 1, leader=OTHER))
            await until(lambda: len(requests) > seen + 1, "fetches after the new epoch")
            restarted = requests[seen]
            assert restarted["session_epoch"] == 0 and restarted["session_id"] == 42   # names the old one: closed
            assert [(p["partition"], p["current_leader_epoch"]) for p in restarted["partitions"]] == [(1, 3)]

    run(scenario())
