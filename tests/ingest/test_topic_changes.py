"""``TopicChanges`` in process over a real ``ReplicaManager`` and real logs: when CreateTopics
answers. Metadata comes from a fake cache standing in for the ZooKeeper watches; the ZooKeeper
write is a fake admin that puts the topic into that cache, as the watch would a moment later."""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

from ingest_fakes import FakeMetadataCache, replica_manager, run

from ember.cluster.assignment import assign_replicas
from ember.cluster.records import PartitionState, TopicRecord
from ember.ingest.broker_config import BrokerConfig
from ember.ingest.log_manager import LogManager
from ember.ingest.replica_manager import ReplicaManager
from ember.ingest.topic_changes import TopicChanges

ME = 1


class FakeAdmin:
    """Writes the topic "to ZooKeeper" (``create_topic`` runs on a worker thread, like kazoo's):
    with ``watched``, the cache learns of it on the loop's next turn, without partition states
    (their reads still in flight), and the replica manager is told, as the watch would."""

    def __init__(self, cache: FakeMetadataCache, replicas: ReplicaManager, watched: bool = True) -> None:
        self.cache, self.replicas, self.watched = cache, replicas, watched
        self.loop = asyncio.get_running_loop()

    def create_topic(self, name: str, partitions: int, replication_factor: int, config: Mapping[str, str],
                     validate_only: bool = False, assignment: Mapping[int, Sequence[int]] | None = None) -> TopicRecord:
        record = TopicRecord(f"id-{name}", assign_replicas([1, 2, 3], partitions, replication_factor), dict(config))
        if self.watched:
            self.loop.call_soon_threadsafe(self.watch_fired, name, record)
        return record

    def watch_fired(self, name: str, record: TopicRecord) -> None:
        self.cache.put_topic(name, record.assignment, topic_id=record.topic_id)
        self.replicas.notify(name)


def topic_changes(cache: FakeMetadataCache, replicas: ReplicaManager, watched: bool = True) -> TopicChanges:
    admin = FakeAdmin(cache, replicas, watched)
    return TopicChanges(admin, cache, replicas, BrokerConfig.from_properties({}))  # type: ignore[arg-type]


def test_create_answers_once_metadata_names_the_leaders_while_the_logs_still_open(tmp_path: Path,
                                                                                    monkeypatch: Any) -> None:
    """As in Kafka, a created topic's leaders open their logs after CreateTopics answers (1,000
    partitions take each broker a second or more); clients retry LEADER_NOT_AVAILABLE meanwhile."""
    opening, may_open = threading.Event(), threading.Event()
    real_open = LogManager.open_log

    def slow_open(self: LogManager, *args: Any) -> Any:
        opening.set()
        assert may_open.wait(30)
        return real_open(self, *args)
    monkeypatch.setattr(LogManager, "open_log", slow_open)

    async def scenario() -> None:
        cache = FakeMetadataCache()
        async with replica_manager(tmp_path, cache) as replicas:
            try:
                changes = topic_changes(cache, replicas)
                record = await asyncio.wait_for(changes.create("orders", 6, 3, timeout_s=30), 10)
                meta = cache.topic("orders")
                assert meta is not None and meta.partitions == record.assignment
                assert await asyncio.to_thread(opening.wait, 10)
                assert not replicas.partitions           # no log opened yet, the answer given
            finally:
                may_open.set()
    run(scenario())


def test_create_waits_until_this_brokers_metadata_has_the_topic(tmp_path: Path) -> None:
    async def scenario() -> None:
        cache = FakeMetadataCache()
        async with replica_manager(tmp_path, cache) as replicas:
            changes = topic_changes(cache, replicas, watched=False)
            task = asyncio.create_task(changes.create("orders", 2, 1, timeout_s=30))
            await asyncio.sleep(0.3)
            assert not task.done()                      # the watch has not fired here yet
            changes.admin.watch_fired("orders", TopicRecord("id-orders", {0: [ME], 1: [2]}, {}))  # type: ignore[attr-defined]
            await asyncio.wait_for(task, 10)
    run(scenario())


def test_create_waits_for_a_live_leader_of_every_partition(tmp_path: Path) -> None:
    """A partition whose first replica is down has no leader to show until the controller
    elects one: CreateTopics waits for it (bounded by its timeout), as Kafka's did."""
    async def scenario() -> None:
        cache = FakeMetadataCache(brokers=(1, 2))          # broker 3 is down
        async with replica_manager(tmp_path, cache) as replicas:
            changes = topic_changes(cache, replicas, watched=False)
            task = asyncio.create_task(changes.create("orders", 2, 2, timeout_s=30))
            await asyncio.sleep(0.1)
            changes.admin.watch_fired("orders", TopicRecord("id-orders", {0: [1, 2], 1: [3, 1]}, {}))  # type: ignore[attr-defined]
            await asyncio.sleep(0.3)
            assert not task.done()                      # partition 1 shows no live leader yet
            cache.set_state("orders", 1, PartitionState(1, 1, [1], 1, 1))     # the controller moved it
            replicas.notify("orders")
            await asyncio.wait_for(task, 10)
    run(scenario())
