"""A partition's state znode, which a partition gets at its first change, not at its creation.

Creating a topic writes its record alone (two znodes however many partitions: 2,002 znodes in
one transaction took 0.1-0.2 s at 1,000 partitions). A partition without a state znode is in its
*initial state*, the one its assignment implies (:meth:`PartitionState.initial`: led by its first
replica at epoch 0, every replica in sync, version ``ABSENT_VERSION``). The first change (an
election, an ISR change, the start of a move) creates the znode, in a transaction that checks
the topic node's version, so a topic deleted or reconfigured since the read is not written to
(a version cannot tell a node created again under the name: readers pass the topic id they act
for, and the window is one round trip); a racing first writer makes the creation fail like any
lost compare-and-set.

A partition's assignment never changes while it has no state znode (its first replica would
silently become another leader at the same epoch): the controller writes the state of each
partition it is about to move first (:func:`ember.cluster.controller`'s reassignments).
"""
from __future__ import annotations

from dataclasses import dataclass

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ember.cluster.records import PartitionState, TopicRecord
from ember.zk import zk_paths

#: What a compare-and-set lost to: another write (re-read and retry).
LOST_RACE = (BadVersionError, NodeExistsError)


@dataclass(frozen=True)
class StoredState:
    """A partition's state as read for a compare-and-set: ``state.version`` is its znode's
    version, or ``ABSENT_VERSION`` with ``topic_version`` the version of the topic node whose
    assignment implied it."""
    state: PartitionState
    topic_version: int = -1

    @property
    def absent(self) -> bool:
        return self.topic_version >= 0


class TopicRecords:
    """The topic records initial states were derived from, each kept with its znode's creation
    zxid and version: a failover that writes the first states of 1,000 partitions reads the
    topic node's stat 1,000 times but parses its record (2 ms at 1,000 partitions, 25 ms at
    10,000) once. Safe to share between threads (at worst a record is parsed twice)."""

    def __init__(self) -> None:
        self._records: dict[str, tuple[int, int, TopicRecord]] = {}

    def read(self, client: KazooClient, topic: str) -> tuple[TopicRecord, int] | None:
        """The topic's record and its znode version; None when the topic is gone."""
        path = zk_paths.topic(topic)
        stat = client.exists(path)
        kept = self._records.get(topic)
        if stat is not None and kept is not None and kept[:2] == (stat.czxid, stat.version):
            return kept[2], stat.version
        try:
            data, stat = client.get(path)
        except NoNodeError:
            self._records.pop(topic, None)
            return None
        record = TopicRecord.from_bytes(data)
        self._records[topic] = (stat.czxid, stat.version, record)
        return record, stat.version


def read_state(client: KazooClient, topic: str, index: int, topic_id: str | None = None,
               records: TopicRecords | None = None) -> StoredState | None:
    """The partition's state from its znode, else its initial state (its topic's record read
    through ``records``, if given); None when the topic is gone, lacks the partition, is half
    created or deleted, or (with ``topic_id``) is another topic of the name."""
    try:
        data, stat = client.get(zk_paths.partition_state(topic, index))
        return StoredState(PartitionState.from_bytes(data, stat.version, stat.czxid))
    except NoNodeError:
        pass
    found = (records or TopicRecords()).read(client, topic)
    if found is None:
        return None
    record, topic_version = found
    replicas = record.assignment.get(index)
    if not replicas or not record.complete or (topic_id is not None and record.topic_id != topic_id):
        return None
    return StoredState(PartitionState.initial(replicas), topic_version)


def add_compare_and_set(tx: TransactionRequest, topic: str, index: int, stored: StoredState,
                        target: PartitionState) -> None:
    """Add to ``tx`` the write of ``target`` over ``stored``: a set at the znode's version, or
    (an absent znode) its creation, checked against the topic node's version. The transaction
    fails with one of ``LOST_RACE`` when another write came first, NoNodeError when the topic is
    gone."""
    if stored.absent:
        tx.check(zk_paths.topic(topic), stored.topic_version)
        tx.create(zk_paths.partition(topic, index))
        tx.create(zk_paths.partition_state(topic, index), target.to_bytes())
    else:
        tx.set_data(zk_paths.partition_state(topic, index), target.to_bytes(), version=stored.state.version)


def written_version(stored: StoredState) -> int:
    """The znode version a successful :func:`add_compare_and_set` over ``stored`` left."""
    return 0 if stored.absent else stored.state.version + 1
