"""Cluster metadata against a real ZooKeeper (no broker processes): topic admin writes, watch-
driven caches on several sessions, controller election and failover, offline replicas reported by
brokers, producer-id blocks."""
from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any, Callable, Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.protocol.states import Callback

from ember.cluster import topic_admin
from ember.cluster.controller import Controller
from ember.cluster.metadata_cache import MetadataCache
from ember.cluster.offline_replicas import OfflineReplicaWriter, read_offline_replicas
from ember.cluster.partition_state_store import TopicRecords, add_compare_and_set, read_state
from ember.cluster.producer_ids import ProducerIdAllocator
from ember.cluster.records import BrokerInfo, OfflineReplica, PartitionState, TopicRecord
from ember.cluster.registration import BrokerRegistration
from ember.cluster.topic_admin import TopicAdmin
from ember.errors import InvalidConfig, TopicAlreadyExists, UnknownTopicOrPartition
from ember.ingest.broker_config import BrokerConfig, TopicConfigPolicy
from ember.ingest.isr import IsrWriter
from ember.zk import zk_paths
from ember.zk.zk_session import ZkSession
from waiting import eventually

pytestmark = pytest.mark.integration


class Node:
    """A broker's ZooKeeper side only: session, registration, cache, controller."""

    def __init__(self, connect: str, broker_id: int) -> None:
        self.session = ZkSession(connect, 2000)
        self.session.start()
        self.cache = MetadataCache(self.session)
        self.cache.start()
        self.registration = BrokerRegistration(self.session, BrokerInfo(broker_id, "127.0.0.1", 9000 + broker_id), 2000)
        self.registration.register()
        self.controller = Controller(self.session, self.cache, broker_id)
        self.controller.start()
        self.admin = TopicAdmin(self.session, TopicConfigPolicy(BrokerConfig.from_properties({})))

    def close(self) -> None:
        self.controller.close()
        self.session.close()


@pytest.fixture
def nodes(zookeeper) -> Iterator[dict[int, Node]]:
    started = {i: Node(zookeeper.connect_string, i) for i in (1, 2, 3)}
    yield started
    for node in started.values():
        try:
            node.close()
        except Exception:
            pass
    cleanup = ZkSession(zookeeper.connect_string, 2000)
    cleanup.start()
    cleanup.client.delete(zk_paths.TOPICS, recursive=True)
    cleanup.client.delete(zk_paths.OFFLINE_REPLICAS, recursive=True)
    cleanup.close()


def write_state(client: KazooClient, topic: str, index: int,
                change: Callable[[PartitionState], PartitionState] = lambda state: state) -> PartitionState:
    """Compare-and-set ``change(current)`` as the partition's state (creating its znode, for a
    partition still in its initial state), as a leader or the controller would; the state read."""
    stored = read_state(client, topic, index)
    assert stored is not None
    tx = client.transaction()
    add_compare_and_set(tx, topic, index, stored, change(stored.state))
    assert not any(isinstance(result, Exception) for result in tx.commit())
    return stored.state


def test_topic_lifecycle_reaches_every_cache(nodes, topic_name):
    admin = nodes[1].admin
    record = admin.create_topic(topic_name, 4, 3, {"retention.ms": "1000"})
    for node in nodes.values():
        meta = eventually(lambda: (m := node.cache.topic(topic_name)) and len(m.states) == 4 and m)
        assert meta.topic_id == record.topic_id and meta.record.config == {"retention.ms": "1000"}
        assert all(meta.states[p].leader == r[0] and meta.states[p].isr == r for p, r in meta.partitions.items())
    with pytest.raises(TopicAlreadyExists):
        nodes[2].admin.create_topic(topic_name, 1, 1, {})

    admin.alter_config(topic_name, {"segment.bytes": "4096"}, ["retention.ms"])
    eventually(lambda: nodes[3].cache.topic(topic_name).record.config == {"segment.bytes": "4096"})
    with pytest.raises(InvalidConfig):
        admin.alter_config(topic_name, {"segment.bytes": "nope"}, [])
    with pytest.raises(InvalidConfig):
        admin.alter_config(topic_name, {}, ["no.such.config"])

    nodes[2].admin.delete_topic(topic_name)
    for node in nodes.values():
        eventually(lambda: node.cache.topic(topic_name) is None)
    with pytest.raises(UnknownTopicOrPartition):
        admin.delete_topic(topic_name)

    # Re-created under the same name: caches see the new topic id, not stale state.
    again = admin.create_topic(topic_name, 1, 1, {})
    assert again.topic_id != record.topic_id
    eventually(lambda: (m := nodes[3].cache.topic(topic_name)) and m.topic_id == again.topic_id and 0 in m.states)


def test_a_new_topic_is_two_znodes_however_many_partitions_and_every_cache_shows_its_leaders(nodes, topic_name):
    record = nodes[1].admin.create_topic(topic_name, 300, 3, {})
    client = nodes[1].session.client
    assert client.get_children(zk_paths.partitions(topic_name)) == []
    for node in nodes.values():
        meta = eventually(lambda: (m := node.cache.topic(topic_name)) and len(m.states) == 300 and m)
        assert meta.states == {index: PartitionState.initial(replicas) for index, replicas in record.assignment.items()}


def test_a_partitions_first_change_writes_its_state_znode_and_every_cache_reads_it(nodes, topic_name):
    record = nodes[1].admin.create_topic(topic_name, 3, 3, {})
    for node in nodes.values():
        eventually(lambda: (m := node.cache.topic(topic_name)) and len(m.states) == 3)
    leader = record.assignment[1][0]
    written = IsrWriter(nodes[1].session, leader).update(topic_name, 1, record.topic_id, 0, lambda isr: isr[:2])
    assert written is not None and (written.leader, written.leader_epoch, written.version) == (leader, 0, 0)
    assert nodes[1].session.client.get_children(zk_paths.partitions(topic_name)) == ["1"]
    for node in nodes.values():
        eventually(lambda: node.cache.topic(topic_name).states[1].isr == record.assignment[1][:2])
        assert node.cache.topic(topic_name).states[0] == PartitionState.initial(record.assignment[0])


def test_a_move_writes_a_partitions_initial_state_before_its_replicas_change(nodes, topic_name):
    """Reordering a new partition's replicas must not silently make another broker its leader at
    the same epoch (a partition without a state znode is led by its first replica)."""
    record = nodes[1].admin.create_topic(topic_name, 2, 3, {})
    first, *others = record.assignment[0]
    controller = active_controller(nodes)
    eventually(lambda: (m := controller.cache.topic(topic_name)) and len(m.states) == 2)
    assert controller.call(lambda: controller.reassign([(topic_name, 0, others + [first])])).result(10) == [None]
    stored = read_state(nodes[1].session.client, topic_name, 0)
    assert not stored.absent and (stored.state.leader, stored.state.leader_epoch) == (first, 0)
    meta = eventually(lambda: (m := nodes[2].cache.topic(topic_name)) and m.partitions[0][0] != first and
                      m.states[0].version == 0 and m)
    assert meta.states[0].leader == first
    assert read_state(nodes[1].session.client, topic_name, 1).absent     # an unmoved partition keeps none


def test_initial_states_parse_a_topic_record_once_per_version_of_its_znode(nodes, topic_name):
    """A failover writing 1,000 first states must not parse the topic's record 1,000 times, nor
    take a record of a topic created again under the name (its version restarts at 0)."""
    client, admin = nodes[1].session.client, nodes[1].admin
    records = TopicRecords()
    first = admin.create_topic(topic_name, 3, 3, {})
    kept, version = records.read(client, topic_name)
    assert kept.topic_id == first.topic_id and records.read(client, topic_name)[0] is kept
    assert read_state(client, topic_name, 2, records=records).state == PartitionState.initial(first.assignment[2])
    admin.delete_topic(topic_name)
    again = admin.create_topic(topic_name, 3, 3, {})
    renewed, renewed_version = records.read(client, topic_name)
    assert renewed.topic_id == again.topic_id and renewed_version == version == 0
    assert read_state(client, topic_name, 0, first.topic_id, records) is None
    admin.alter_config(topic_name, {"retention.ms": "1000"}, [])
    changed, changed_version = records.read(client, topic_name)
    assert changed.config == {"retention.ms": "1000"} and changed_version == 1
    admin.delete_topic(topic_name)
    assert records.read(client, topic_name) is None


def test_a_topic_with_more_states_than_one_transaction_is_deleted_chunk_by_chunk(nodes, topic_name, monkeypatch):
    monkeypatch.setattr(topic_admin, "PARTITIONS_PER_TRANSACTION", 10)
    nodes[1].admin.create_topic(topic_name, 35, 3, {})
    for index in range(25):
        write_state(nodes[1].session.client, topic_name, index)
    for node in nodes.values():
        eventually(lambda: (m := node.cache.topic(topic_name)) and sum(s.version == 0 for s in m.states.values()) == 25)
    nodes[2].admin.delete_topic(topic_name)
    assert not nodes[1].session.client.exists(zk_paths.topic(topic_name))
    for node in nodes.values():
        eventually(lambda: node.cache.topic(topic_name) is None)


def active_controller(nodes: dict[int, Node]) -> Controller:
    return eventually(lambda: next((n.controller for n in nodes.values() if n.controller.active), None))


def test_the_controller_unmarks_a_topic_an_older_creator_left_marked_creating(nodes, topic_name):
    """An older ember wrote a large topic's partition nodes chunk by chunk behind a record marked
    creating, and died half-way: no broker serves the topic until the controller unmarks it (the
    missing nodes are not needed: those partitions are in their initial state)."""
    client = nodes[1].session.client
    record = TopicRecord("old-creator", {index: [1, 2, 3] for index in range(25)}, {}, creating=True)
    tx = client.transaction()
    tx.create(zk_paths.topic(topic_name), record.to_bytes())
    tx.create(zk_paths.partitions(topic_name))
    for index in range(10):      # the one chunk it got to write
        tx.create(zk_paths.partition(topic_name, index))
        tx.create(zk_paths.partition_state(topic_name, index), PartitionState(2, 1, [1, 2, 3], 1).to_bytes())
    tx.commit()
    eventually(lambda: topic_name in nodes[3].cache.incomplete_topics())
    assert nodes[3].cache.topic(topic_name) is None
    controller = active_controller(nodes)
    eventually(lambda: topic_name in controller.cache.incomplete_topics())    # its cache may lag
    assert controller.call(lambda: controller.finish_incomplete_topics(3600)).result(10) == []   # not yet
    assert controller.call(lambda: controller.finish_incomplete_topics(0)).result(10) == [topic_name]
    for node in nodes.values():
        meta = eventually(lambda: (m := node.cache.topic(topic_name)) and len(m.states) == 25 and m)
        assert topic_name not in node.cache.incomplete_topics()
        assert [meta.states[index].leader for index in (0, 9, 10, 24)] == [2, 2, 1, 1]


def test_the_controller_finishes_a_topic_its_deleter_left_half_deleted(nodes, topic_name):
    nodes[1].admin.create_topic(topic_name, 4, 3, {})
    eventually(lambda: (m := nodes[2].cache.topic(topic_name)) and len(m.states) == 4)
    client = nodes[1].session.client
    data, stat = client.get(zk_paths.topic(topic_name))
    client.set(zk_paths.topic(topic_name), replace(TopicRecord.from_bytes(data), deleting=True).to_bytes())
    client.delete(zk_paths.partition(topic_name, 0), recursive=True)
    for node in nodes.values():
        eventually(lambda: node.cache.topic(topic_name) is None)
    controller = active_controller(nodes)
    eventually(lambda: topic_name in controller.cache.incomplete_topics())
    assert controller.call(lambda: controller.finish_incomplete_topics(0)).result(10) == [topic_name]
    assert not client.exists(zk_paths.topic(topic_name))
    with pytest.raises(UnknownTopicOrPartition):
        nodes[1].admin.delete_topic(topic_name)
    nodes[1].admin.create_topic(topic_name, 2, 3, {})      # the name is free again
    eventually(lambda: (m := nodes[2].cache.topic(topic_name)) and len(m.states) == 2)


def test_a_cache_lagging_behind_a_delete_and_recreate_still_gets_the_new_leader(nodes, topic_name):
    """A broker's watch thread held up (a loaded machine) while a topic is deleted, created again
    and given a leader: the deleted state's event comes first (the delete removes states before
    the topic) and reads the *new* state, stored under the old record, which the topic's event then
    replaces. The cache must still end with the new topic's leader, not without one for minutes."""
    lagging = nodes[3]
    first = nodes[1].admin.create_topic(topic_name, 1, 1, {})
    eventually(lambda: (m := lagging.cache.topic(topic_name)) and 0 in m.states)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        release.wait(30)
    lagging.session.client.handler.dispatch_callback(Callback("watch", hold, ()))
    assert held.wait(10)
    try:
        nodes[1].admin.delete_topic(topic_name)
        again = nodes[1].admin.create_topic(topic_name, 1, 1, {})
        eventually(lambda: (m := nodes[1].cache.topic(topic_name)) and m.topic_id == again.topic_id
                   and m.states.get(0) is not None and m.states[0].leader >= 0)
    finally:
        release.set()
    assert again.topic_id != first.topic_id
    meta = eventually(lambda: (m := lagging.cache.topic(topic_name)) and m.topic_id == again.topic_id
                      and m.states.get(0) is not None and m.states[0].leader >= 0 and m, timeout_s=10)
    assert meta.states[0].leader == again.assignment[0][0]


def test_controller_failover_elects_new_leaders(nodes, topic_name):
    controller_id = eventually(lambda: nodes[1].cache.controller_id() > 0 and nodes[1].cache.controller_id())
    assert sum(node.controller.active for node in nodes.values()) == 1
    nodes[1].admin.create_topic(topic_name, 3, 2, {})
    meta = eventually(lambda: (m := nodes[1].cache.topic(topic_name)) and len(m.states) == 3 and m)
    led = [p for p, state in meta.states.items() if state.leader == controller_id]

    nodes[controller_id].session.close()          # the controller's session ends: it "dies"
    survivor = next(node for i, node in nodes.items() if i != controller_id)
    new_id = eventually(lambda: survivor.cache.controller_id() not in (-1, controller_id) and survivor.cache.controller_id())
    assert nodes[new_id].controller.epoch > 1
    for p in led:
        state = eventually(lambda: (s := survivor.cache.topic(topic_name).states[p]).leader != controller_id and s)
        assert state.leader in meta.partitions[p] and state.leader_epoch == meta.states[p].leader_epoch + 1
        assert controller_id not in state.isr
        assert state.controller_epoch == nodes[new_id].controller.epoch



def test_the_controller_checks_a_new_topics_partitions_in_one_batch_of_reads(nodes, topic_name, monkeypatch):
    """1,000 partition states read one round trip after another took the controller 2-3 s on every
    new topic and every broker change; a state that needs no change is not read a second time."""
    controller_id = eventually(lambda: nodes[1].cache.controller_id() > 0 and nodes[1].cache.controller_id())
    client = nodes[controller_id].session.client
    reads: dict[str, list[str]] = {"get": [], "get_async": []}     # the controller's: no watch (the cache's set one)

    def counted(name: str) -> Callable[..., Any]:
        real = getattr(client, name)

        def read(path: str, *args: Any, **kwargs: Any) -> Any:
            if path.startswith(zk_paths.partitions(topic_name)) and not args and kwargs.get("watch") is None:
                reads[name].append(path)
            return real(path, *args, **kwargs)
        return read
    for name in reads:
        monkeypatch.setattr(client, name, counted(name))
    nodes[1].admin.create_topic(topic_name, 50, 3, {})
    eventually(lambda: len(reads["get_async"]) >= 50)
    time.sleep(0.5)     # a sequential check would be reading one state after another by now
    assert set(reads["get_async"]) == {zk_paths.partition_state(topic_name, i) for i in range(50)}
    assert reads["get"] == []

def test_producer_id_blocks_never_overlap(nodes):
    allocators = [ProducerIdAllocator(node.session, i, block_size=5) for i, node in nodes.items()]
    ids = [allocator.next_id() for _ in range(12) for allocator in allocators]
    assert len(ids) == len(set(ids))


def test_expired_session_reregisters_and_keeps_watching(nodes, zookeeper, topic_name):
    node = nodes[2]
    before = f"{topic_name}-before"
    nodes[1].admin.create_topic(before, 1, 3, {})
    eventually(lambda: (m := node.cache.topic(before)) is not None and 0 in m.states)
    old_session = node.session.session_id
    # Closing a second client that shares the session id and password expires the session.
    twin = KazooClient(hosts=zookeeper.connect_string, client_id=node.session.client.client_id)
    twin.start(timeout=10)
    twin.stop()
    twin.close()

    def reregistered() -> bool:
        try:
            stat = node.session.client.exists(zk_paths.broker(2))
        except KazooException:      # still reconnecting
            return False
        return bool(stat) and node.session.session_id != old_session and \
            stat.ephemeralOwner == node.session.session_id
    eventually(reregistered)
    eventually(lambda: 2 in nodes[1].cache.brokers())
    nodes[1].admin.create_topic(topic_name, 1, 1, {})
    eventually(lambda: node.cache.topic(topic_name) is not None)
    # The expired session took the partition-state watches with it: the new one re-arms them.
    write_state(nodes[1].session.client, before, 0, lambda state: replace(state, leader_epoch=5))
    eventually(lambda: node.cache.topic(before).states[0].leader_epoch == 5)


def test_a_deposed_controller_cannot_write_partition_state(nodes, topic_name):
    """Writes are fenced by /controller_epoch: a controller that has not yet noticed a successor
    (here: the epoch moved under it) changes nothing and steps down."""
    from dataclasses import replace

    controller_id = eventually(lambda: nodes[1].cache.controller_id() > 0 and nodes[1].cache.controller_id())
    controller = nodes[controller_id].controller
    nodes[1].admin.create_topic(topic_name, 1, 3, {})
    eventually(lambda: (m := nodes[1].cache.topic(topic_name)) and len(m.states) == 1)
    zk = nodes[1].session.client
    epoch, _ = zk.get(zk_paths.CONTROLLER_EPOCH)
    zk.set(zk_paths.CONTROLLER_EPOCH, str(int(epoch) + 1).encode())   # a successor was elected

    shrink = lambda state: replace(state, isr=state.isr[:1])   # noqa: E731
    assert controller.call(lambda: controller._transition(topic_name, 0, "test", shrink)).result(10) is None
    assert not controller.active
    assert zk.get_children(zk_paths.partitions(topic_name)) == []     # still its initial state


def test_a_topic_deleted_between_read_and_write_is_an_unknown_topic_not_a_zookeeper_error(nodes, topic_name):
    """Every read-modify-write of a topic's znodes (partitions added, config altered, ISR or leader
    changed) may lose the topic to a concurrent DeleteTopics between its read and its write; the
    caller gets UNKNOWN_TOPIC_OR_PARTITION or "topic gone", never kazoo's NoNodeError."""
    from dataclasses import replace

    def recreate() -> None:
        nodes[1].admin.create_topic(topic_name, 1, 3, {})

    def delete_after(read: Callable[[str], Any]) -> Callable[[str], Any]:
        def read_then_delete(name: str) -> Any:
            result = read(name)
            nodes[2].admin.delete_topic(name)
            return result
        return read_then_delete

    for change in (lambda admin: admin.create_partitions(topic_name, 2),
                   lambda admin: admin.alter_config(topic_name, {"retention.ms": "1000"}, [])):
        recreate()
        racing = TopicAdmin(nodes[1].session, nodes[1].admin.policy)
        racing._read = delete_after(racing._read)     # type: ignore[method-assign]
        with pytest.raises(UnknownTopicOrPartition, match="deleted"):
            change(racing)
        assert nodes[1].session.client.exists(zk_paths.topic(topic_name)) is None

    controller_id = eventually(lambda: nodes[1].cache.controller_id() > 0 and nodes[1].cache.controller_id())
    controller = nodes[controller_id].controller

    def shrink_while_deleted(state):
        nodes[2].admin.delete_topic(topic_name)
        return replace(state, isr=state.isr[:1])
    recreate()
    assert controller.call(lambda: controller._transition(topic_name, 0, "test", shrink_while_deleted)
                           ).result(10) is None
    assert controller.active

    def expand_while_deleted(isr: list[int]) -> list[int]:
        nodes[2].admin.delete_topic(topic_name)
        return isr[:1]
    for written in (False, True):       # the state znode's creation, then its compare-and-set
        recreate()
        leader = write_state(nodes[1].session.client, topic_name, 0) if written else \
            read_state(nodes[1].session.client, topic_name, 0).state
        topic_id = nodes[1].admin._read(topic_name)[0].topic_id
        assert IsrWriter(nodes[1].session, leader.leader).update(topic_name, 0, topic_id, leader.leader_epoch,
                                                                expand_while_deleted) is None


@pytest.mark.parametrize("written", [False, True], ids=["creating-the-state-znode", "setting-it"])
def test_a_controller_that_loses_a_write_race_retries_and_stays_the_controller(nodes, topic_name, written):
    """A partition state written by its leader (an ISR change) between the controller's read and
    its fenced write fails only the write: the controller re-reads and writes, and is not deposed
    (a failed multi reports its epoch check as rolled back, not as failed)."""
    controller_id = eventually(lambda: nodes[1].cache.controller_id() > 0 and nodes[1].cache.controller_id())
    controller = nodes[controller_id].controller
    nodes[1].admin.create_topic(topic_name, 1, 3, {})
    eventually(lambda: (m := nodes[1].cache.topic(topic_name)) and len(m.states) == 1)
    zk = nodes[1].session.client
    if written:
        write_state(zk, topic_name, 0)
    calls = []

    def shrink_after_a_racing_write(state):
        calls.append(state.version)
        if len(calls) == 1:
            write_state(zk, topic_name, 0)          # the leader's ISR write lands first
        return replace(state, isr=state.isr[:1])
    before, after = controller.call(lambda: controller._transition(topic_name, 0, "test",
                                                                   shrink_after_a_racing_write)).result(10)
    assert len(calls) == 2 and calls[1] == calls[0] + 1
    assert controller.active and after.isr == before.isr[:1]
    assert read_state(zk, topic_name, 0).state.isr == before.isr[:1]


def test_the_controller_moves_offline_replicas_out_of_leadership_and_the_isr(nodes, topic_name):
    """A broker's report in ``/brokers/offline_replicas/<id>`` makes the controller move leadership of
    exactly those partitions to another ISR member and drop the replica from their ISR (fenced by the
    controller epoch); a cleared report leaves the state alone (the leader re-adds a caught-up replica)."""
    eventually(lambda: any(node.controller.active for node in nodes.values()))
    writers = {i: OfflineReplicaWriter(node.session, i) for i, node in nodes.items()}
    admin = nodes[1].admin
    record = admin.create_topic(topic_name, 3, 3, {})
    cache = nodes[1].cache
    meta = eventually(lambda: (m := cache.topic(topic_name)) and len(m.states) == 3 and m)
    leader0 = meta.states[0].leader
    others = {p: meta.states[p] for p in (1, 2)}

    # the leader of partition 0 loses that log: leadership moves, the ISR shrinks; others stay
    writers[leader0].write([OfflineReplica(topic_name, 0, record.topic_id)])
    state = eventually(lambda: (s := cache.topic(topic_name).states[0]).leader != leader0 and s, timeout_s=10)
    assert state.leader in meta.states[0].isr and state.leader_epoch == meta.states[0].leader_epoch + 1
    assert leader0 not in state.isr and sorted(state.isr) == sorted(b for b in meta.states[0].isr if b != leader0)
    assert state.controller_epoch == next(n.controller.epoch for n in nodes.values() if n.controller.active)
    for p, before in others.items():
        after = cache.topic(topic_name).states[p]
        assert (after.leader, after.leader_epoch, after.isr) == (before.leader, before.leader_epoch, before.isr)

    # a follower's report only shrinks the ISR; a report of another topic id is ignored
    follower1 = next(b for b in meta.partitions[1] if b != meta.states[1].leader)
    writers[follower1].write([OfflineReplica(topic_name, 1, record.topic_id),
                                    OfflineReplica(topic_name, 2, "an-older-topic-id")])
    state1 = eventually(lambda: (s := cache.topic(topic_name).states[1]) and follower1 not in s.isr and s,
                        timeout_s=10)
    assert (state1.leader, state1.leader_epoch) == (others[1].leader, others[1].leader_epoch)
    time.sleep(0.3)
    assert cache.topic(topic_name).states[2].isr == others[2].isr
    assert read_offline_replicas(nodes[1].session.client)[follower1] == (
        OfflineReplica(topic_name, 1, record.topic_id), OfflineReplica(topic_name, 2, "an-older-topic-id"))

    # cleared reports delete the znodes; the controller does not re-add anyone (the leader does)
    writers[leader0].write([])
    writers[follower1].write([])
    assert read_offline_replicas(nodes[1].session.client) == {}
    assert nodes[1].session.client.exists(zk_paths.offline_replicas(leader0)) is None
    time.sleep(0.3)
    assert cache.topic(topic_name).states[0].isr == state.isr
