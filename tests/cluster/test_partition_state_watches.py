"""One topic's partition-state watches against a real ZooKeeper: reads in flight together and
stored in one update, partitions without a state znode in their initial state until one appears,
re-armed after each change, deletions, and a missed change read again when the connection comes
back."""
from __future__ import annotations

import threading
import time
from typing import Iterator

import pytest
from kazoo.client import KazooClient, TransactionRequest

from ember.cluster.partition_state_watches import PartitionStateWatches
from ember.cluster.records import ABSENT_VERSION, PartitionState
from ember.zk import zk_paths
from waiting import eventually

pytestmark = pytest.mark.integration

TOPIC = "states"


class Stored:
    """What the watches stored, update by update."""

    def __init__(self) -> None:
        self.updates: list[dict[int, PartitionState | None]] = []
        self.lock = threading.Lock()

    def __call__(self, loaded: dict[int, PartitionState | None]) -> None:
        with self.lock:
            self.updates.append(dict(loaded))

    def latest(self, index: int) -> PartitionState | None:
        with self.lock:
            return next(update[index] for update in reversed(self.updates) if index in update)


@pytest.fixture
def client(zookeeper) -> Iterator[KazooClient]:
    client = KazooClient(zookeeper.connect_string)
    client.start(timeout=10)
    client.ensure_path(zk_paths.TOPICS)
    yield client
    client.delete(zk_paths.topic(TOPIC), recursive=True)
    client.stop()
    client.close()


def state(leader: int, epoch: int) -> bytes:
    return PartitionState(leader, epoch, [1, 2, 3], 1).to_bytes()


def create_states(client: KazooClient, count: int, written: int | None = None) -> None:
    """A topic of ``count`` partitions, the first ``written`` (all) with a state znode."""
    tx = client.transaction()
    tx.create(zk_paths.topic(TOPIC), b"{}")
    tx.create(zk_paths.partitions(TOPIC))
    for index in range(count if written is None else written):
        add_state(tx, index, state(1 + index % 3, 0))
    assert not any(isinstance(result, Exception) for result in tx.commit())


def add_state(tx: TransactionRequest, index: int, data: bytes) -> None:
    tx.create(zk_paths.partition(TOPIC, index))
    tx.create(zk_paths.partition_state(TOPIC, index), data)


def replicas(count: int) -> dict[int, list[int]]:
    return {index: [3 - index % 3, 1, 2] for index in range(count)}


def watched(client: KazooClient, count: int, written: int | None = None) -> tuple[Stored, PartitionStateWatches]:
    """A topic of ``count`` partitions (the first ``written`` with a state znode), every one watched."""
    create_states(client, count, written)
    stored = Stored()
    watches = PartitionStateWatches(client, TOPIC, stored)
    watches.watch(replicas(count))
    return stored, watches


def test_a_new_topics_states_are_read_together_and_stored_in_one_update(client):
    stored, watches = watched(client, 200)
    assert len(stored.updates) == 1
    assert {index: (s.leader, s.version) for index, s in stored.updates[0].items() if s} == \
        {index: (1 + index % 3, 0) for index in range(200)}
    watches.stop()


def test_partitions_without_a_state_znode_are_stored_in_their_initial_state_in_the_same_update(client):
    stored, watches = watched(client, 6, written=2)
    assert len(stored.updates) == 1
    update = stored.updates[0]
    assert {index: (s.leader, s.version) for index, s in update.items() if index < 2} == {0: (1, 0), 1: (2, 0)}
    assert {index: update[index] for index in range(2, 6)} == \
        {index: PartitionState.initial(brokers) for index, brokers in replicas(6).items() if index >= 2}
    assert all(update[index].version == ABSENT_VERSION for index in range(2, 6))
    watches.stop()


def test_a_partitions_first_state_znode_is_read_when_it_appears_and_then_watched(client):
    stored, watches = watched(client, 3, written=0)
    tx = client.transaction()
    add_state(tx, 2, state(1, 1))
    tx.commit()
    first = eventually(lambda: (s := stored.latest(2)).version == 0 and s)
    assert (first.leader, first.leader_epoch) == (1, 1) and first.newer_than(PartitionState.initial([3, 1, 2]))
    client.set(zk_paths.partition_state(TOPIC, 2), state(2, 2))      # its data watch is armed too
    eventually(lambda: stored.latest(2).leader_epoch == 2)
    tx = client.transaction()
    add_state(tx, 0, state(3, 1))        # the children watch was re-armed
    tx.commit()
    eventually(lambda: stored.latest(0).version == 0)
    assert stored.latest(1).version == ABSENT_VERSION
    watches.stop()


def test_a_first_state_znode_is_read_even_when_a_later_listing_is_taken_first(client):
    """The children event of partition 0's new znode waits behind a busy callback thread while
    the topic grows and its new partition is watched: that listing already shows 0, and the
    event's listing, taken after, must still read 0's state."""
    stored, watches = watched(client, 1, written=0)
    client.handler.callback_queue.put(lambda: time.sleep(1.0))      # other watches' callbacks
    tx = client.transaction()
    add_state(tx, 0, state(2, 1))
    tx.commit()
    time.sleep(0.2)
    watches.watch({1: [2, 3, 1]})
    eventually(lambda: stored.latest(0).version == 0)
    assert stored.latest(0).leader_epoch == 1 and stored.latest(1) == PartitionState.initial([2, 3, 1])
    watches.stop()


def test_a_topic_created_again_is_watched_afresh(client):
    stored, watches = watched(client, 4)
    client.delete(zk_paths.topic(TOPIC), recursive=True)
    create_states(client, 2, written=0)
    watches.reset()
    watches.watch({0: [2, 1, 3], 1: [3, 2, 1]})
    assert watches.indexes == {0, 1}
    tx = client.transaction()
    add_state(tx, 1, state(3, 4))      # a partition the old topic had written: new here
    tx.commit()
    eventually(lambda: stored.latest(1).leader_epoch == 4)
    watches.rewatch()
    assert all(index < 2 for update in stored.updates[1:] for index in update)
    watches.stop()


def test_every_change_is_read_and_the_watch_rearmed(client):
    stored, watches = watched(client, 3)
    for epoch in (1, 2, 3):     # a one-shot watch not re-armed would miss the second change
        client.set(zk_paths.partition_state(TOPIC, 1), state(3, epoch))
        eventually(lambda: (s := stored.latest(1)) is not None and s.leader_epoch == epoch)
    assert stored.latest(1).version == 3
    assert stored.latest(0).leader_epoch == 0
    watches.stop()


def test_a_deleted_state_is_not_stored(client):
    """State nodes go only with their topic (whose record's watch drops it): nothing to store."""
    stored, watches = watched(client, 2)
    client.delete(zk_paths.partition(TOPIC, 0), recursive=True)
    client.set(zk_paths.partition_state(TOPIC, 1), state(2, 1))
    eventually(lambda: stored.latest(1).leader_epoch == 1)
    assert all(0 not in update for update in stored.updates[1:])
    watches.stop()


def test_a_recreated_state_node_reads_as_newer_than_the_old_one_whatever_its_version(client):
    stored, watches = watched(client, 1)
    for epoch in (1, 2):
        client.set(zk_paths.partition_state(TOPIC, 0), state(2, epoch))
    old = eventually(lambda: (s := stored.latest(0)).version == 2 and s)
    client.delete(zk_paths.topic(TOPIC), recursive=True)
    create_states(client, 1)
    watches.rewatch()
    new = eventually(lambda: (s := stored.latest(0)).version == 0 and s)
    assert new.newer_than(old) and not old.newer_than(new)
    watches.stop()


def test_a_change_missed_while_disconnected_is_read_on_reconnection(client):
    stored, watches = watched(client, 2)
    # The event of this change is lost, as when a session expires with its watches.
    client._data_watchers.pop(zk_paths.partition_state(TOPIC, 1))
    client.set(zk_paths.partition_state(TOPIC, 1), state(2, 7))
    time.sleep(0.3)
    assert stored.latest(1).leader_epoch == 0
    watches.rewatch()
    eventually(lambda: stored.latest(1).leader_epoch == 7)
    watches.stop()


def test_a_stopped_watch_stores_nothing(client):
    stored, watches = watched(client, 1)
    watches.stop()
    client.set(zk_paths.partition_state(TOPIC, 0), state(2, 1))
    watches.rewatch()
    time.sleep(0.3)
    assert len(stored.updates) == 1
