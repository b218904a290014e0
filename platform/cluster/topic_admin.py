"""Creating, deleting and reconfiguring topics in ZooKeeper.

Any broker may run these (they are plain ZooKeeper writes): creation writes the topic node (and
its empty ``partitions`` node) in one transaction, adding partitions and config changes are
compare-and-sets on the topic node, and deletion removes the topic with the state znodes its
partitions got since (a partition has none until its first change:
:mod:`ember.cluster.partition_state_store`), in one transaction or chunk by chunk. So creating
a topic costs the same at 1 and 10,000 partitions. Brokers learn of the result through their
watches (see :mod:`ember.cluster.metadata_cache`).
"""
from __future__ import annotations

import re
import uuid
from dataclasses import replace
from typing import Iterable, Mapping, Protocol, Sequence

from kazoo.client import TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from ember.cluster.assignment import assign_replicas, check_assignment, check_replicas
from ember.cluster.records import TopicRecord
from ember.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidReplicaAssignment,
    InvalidTopic,
    RequestTimedOut,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from ember.zk import zk_paths
from ember.zk.zk_session import ZkSession, multi_failure

_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")
MAX_NAME_LENGTH = 249
#: Partitions whose state nodes one ZooKeeper transaction deletes (two nodes each): a
#: transaction is one request, bounded by ZooKeeper's jute.maxbuffer (1 MB by default). A topic
#: with more is deleted chunk by chunk behind a record marked deleting.
PARTITIONS_PER_TRANSACTION = 1000
#: The topic record lists every partition's replicas in one znode (jute.maxbuffer again).
MAX_PARTITIONS = 20_000
_CAS_ATTEMPTS = 5


class TopicConfigPolicy(Protocol):
    """How topic config overrides are checked (the broker backs this with ``ember.log``)."""

    def validate(self, overrides: Mapping[str, str]) -> None: ...

    def is_known(self, name: str) -> bool: ...


def is_legal_topic_name(name: str) -> bool:
    try:
        validate_topic_name(name)
    except InvalidTopic:
        return False
    return True


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise InvalidTopic(f"topic name {name!r} is not allowed")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopic(f"topic name is {len(name)} characters long")
    if not _LEGAL_NAME.fullmatch(name):
        raise InvalidTopic(f"topic name {name!r} has illegal characters")


class TopicAdmin:
    def __init__(self, session: ZkSession, policy: TopicConfigPolicy) -> None:
        self.session = session
        self.policy = policy

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     config: Mapping[str, str], validate_only: bool = False,
                     assignment: Mapping[int, Sequence[int]] | None = None) -> TopicRecord:
        """Spread replicas over the brokers registered right now (read from ZooKeeper, not a
        cache, so a broker that registered a moment ago counts), or take ``assignment``
        (``{partition: [broker ids]}``, preferred leader first) instead."""
        validate_topic_name(name)
        if max(partitions, len(assignment or ())) > MAX_PARTITIONS:
            raise InvalidPartitions(f"{partitions} partitions requested; at most {MAX_PARTITIONS} per topic")
        overrides = {str(k): str(v) for k, v in config.items()}
        self.policy.validate(overrides)
        client = self.session.client
        live = [int(child) for child in client.get_children(zk_paths.BROKER_IDS)]
        if assignment:
            check_assignment(name, assignment, live)
            replicas = {int(index): [int(b) for b in brokers] for index, brokers in sorted(assignment.items())}
        else:
            replicas = assign_replicas(live, partitions, replication_factor)
        record = TopicRecord(uuid.uuid4().hex, replicas, overrides)
        if client.exists(zk_paths.topic(name)):
            raise TopicAlreadyExists(f"topic {name!r} already exists")
        if validate_only:
            return record
        tx = client.transaction()
        tx.create(zk_paths.topic(name), record.to_bytes())
        tx.create(zk_paths.partitions(name))
        failure = multi_failure(tx.commit())
        if isinstance(failure, NodeExistsError):
            raise TopicAlreadyExists(f"topic {name!r} already exists")
        if failure is not None:
            raise failure
        return record

    def create_partitions(self, name: str, count: int, assignment: Sequence[Sequence[int]] | None = None,
                          validate_only: bool = False) -> TopicRecord:
        """Grow topic ``name`` to ``count`` partitions. The new ones get replicas as CreateTopics
        spreads them (over the brokers registered now, as many as the topic's replication factor)
        or ``assignment`` (one replica list per new partition, preferred leader first), and start
        led by their first replica (their initial state); brokers open them when their topic
        watch fires."""
        client = self.session.client
        for _ in range(_CAS_ATTEMPTS):
            record, version = self._read(name)
            current = len(record.assignment)
            if count <= current:
                raise InvalidPartitions(f"topic {name!r} has {current} partitions; partitions can only be added "
                                        f"(asked for {count})")
            if count > MAX_PARTITIONS:
                raise InvalidPartitions(f"{count} partitions requested; at most {MAX_PARTITIONS} per topic")
            if not record.complete:
                raise UnknownTopicOrPartition(f"topic {name!r} is being created or deleted; retry")
            live = [int(child) for child in client.get_children(zk_paths.BROKER_IDS)]
            replication_factor = len(next(iter(record.assignment.values())))
            added = self._new_replicas(name, current, count, replication_factor, live, assignment)
            updated = replace(record, assignment={**record.assignment, **added})
            if validate_only:
                return updated
            try:
                client.set(zk_paths.topic(name), updated.to_bytes(), version=version)
            except BadVersionError:
                continue
            except NoNodeError:
                raise UnknownTopicOrPartition(f"topic {name!r} was deleted while partitions were added") from None
            return updated
        raise RequestTimedOut(f"topic {name!r} kept changing while partitions were added; retry")

    @staticmethod
    def _new_replicas(name: str, current: int, count: int, replication_factor: int, live: list[int],
                      assignment: Sequence[Sequence[int]] | None) -> dict[int, list[int]]:
        """Replicas of partitions ``current``..``count``-1: given (checked) or spread like a new topic's."""
        if assignment is None:
            spread = assign_replicas(live, count, replication_factor)
            return {index: spread[index] for index in range(current, count)}
        if len(assignment) != count - current:
            raise InvalidReplicaAssignment(f"{name}: {len(assignment)} replica lists given for "
                                           f"{count - current} new partitions")
        added = {current + i: [int(b) for b in replicas] for i, replicas in enumerate(assignment)}
        for index, replicas in added.items():
            check_replicas(f"{name}-{index}", replicas, live)
            if len(replicas) != replication_factor:
                raise InvalidReplicaAssignment(f"{name}-{index}: {len(replicas)} replicas given; the topic's "
                                               f"replication factor is {replication_factor}")
        return added

    def delete_topic(self, name: str) -> None:
        """Delete the topic in one transaction, or (too large for one, or half created) mark it
        deleting, so no broker serves it, and delete its partitions chunk by chunk."""
        client = self.session.client
        for _ in range(_CAS_ATTEMPTS):
            record, version = self._read(name)
            try:
                written = _written_partitions(self.session, name)
            except NoNodeError:
                raise UnknownTopicOrPartition(f"topic {name!r} does not exist") from None
            if record.complete and len(written) <= PARTITIONS_PER_TRANSACTION:
                tx = client.transaction()
                _delete_partition_nodes(tx, name, written)
                tx.delete(zk_paths.partitions(name))
                tx.delete(zk_paths.topic(name), version)
                results = tx.commit()
                if not any(isinstance(r, Exception) for r in results):
                    return
                continue
            try:
                client.set(zk_paths.topic(name), replace(record, creating=False, deleting=True).to_bytes(),
                           version=version)
            except BadVersionError:
                continue
            except NoNodeError:
                raise UnknownTopicOrPartition(f"topic {name!r} does not exist") from None
            finish_deletion(self.session, name, record.topic_id)
            return
        raise RequestTimedOut(f"topic {name!r} kept changing while it was being deleted; retry")

    def alter_config(self, name: str, set_: Mapping[str, str], delete: Sequence[str],
                     validate_only: bool = False) -> TopicRecord:
        unknown = [key for key in delete if not self.policy.is_known(key)]
        if unknown:
            raise InvalidConfig(f"unknown topic config(s) {', '.join(sorted(unknown))}")
        for _ in range(_CAS_ATTEMPTS):
            record, version = self._read(name)
            if not record.complete:
                raise UnknownTopicOrPartition(f"topic {name!r} is being created or deleted; retry")
            overrides = {k: v for k, v in record.config.items() if k not in delete}
            overrides.update({str(k): str(v) for k, v in set_.items()})
            self.policy.validate(overrides)
            updated = replace(record, config=overrides)
            if validate_only:
                return updated
            try:
                self.session.client.set(zk_paths.topic(name), updated.to_bytes(), version=version)
                return updated
            except BadVersionError:
                continue
            except NoNodeError:
                raise UnknownTopicOrPartition(f"topic {name!r} was deleted while its config was altered") from None
        raise RequestTimedOut(f"topic {name!r} kept changing while its config was altered; retry")

    def _read(self, name: str) -> tuple[TopicRecord, int]:
        validate_topic_name(name)
        try:
            data, stat = self.session.client.get(zk_paths.topic(name))
        except NoNodeError:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist") from None
        return TopicRecord.from_bytes(data), stat.version


def _chunks(indexes: Sequence[int]) -> list[Sequence[int]]:
    return [indexes[i:i + PARTITIONS_PER_TRANSACTION] for i in range(0, len(indexes), PARTITIONS_PER_TRANSACTION)]


def _written_partitions(session: ZkSession, name: str) -> list[int]:
    """The partitions of topic ``name`` that have a state node."""
    return sorted(int(child) for child in session.client.get_children(zk_paths.partitions(name)))


def _delete_partition_nodes(tx: TransactionRequest, name: str, indexes: Iterable[int]) -> None:
    for index in indexes:
        tx.delete(zk_paths.partition_state(name, index))
        tx.delete(zk_paths.partition(name, index))


def finish_creation(session: ZkSession, name: str, topic_id: str) -> bool:
    """Unmark topic ``topic_id``, left marked creating by an older ember that wrote a large
    topic's partition nodes chunk by chunk (they are not needed: a partition without one is in
    its initial state). False: the topic is gone, another one, or no longer creating."""
    client = session.client
    for _ in range(_CAS_ATTEMPTS):
        try:
            data, stat = client.get(zk_paths.topic(name))
        except NoNodeError:
            return False
        record = TopicRecord.from_bytes(data)
        if record.topic_id != topic_id or not record.creating:
            return False
        try:
            client.set(zk_paths.topic(name), replace(record, creating=False).to_bytes(), version=stat.version)
            return True
        except (BadVersionError, NoNodeError):
            continue
    raise RequestTimedOut(f"topic {name!r} kept changing while its creation was finished; retry")


def finish_deletion(session: ZkSession, name: str, topic_id: str) -> None:
    """Delete topic ``topic_id``, marked deleting: its partition nodes a chunk per transaction,
    then the topic node. Its deleter does this, and the controller for a deleter that died
    half-way. Every transaction checks the topic node's version: a topic created again under the
    name since is never touched."""
    client = session.client
    for _ in range(_CAS_ATTEMPTS):
        try:
            data, stat = client.get(zk_paths.topic(name))
            present = _written_partitions(session, name)
        except NoNodeError:
            return            # finished by the other deleter
        record = TopicRecord.from_bytes(data)
        if record.topic_id != topic_id or not record.deleting:
            return
        raced = False
        for chunk in _chunks(present):
            tx = client.transaction()
            tx.check(zk_paths.topic(name), stat.version)
            _delete_partition_nodes(tx, name, chunk)
            if multi_failure(tx.commit()) is not None:
                raced = True      # the other deleter took some: look again
                break
        if raced:
            continue
        tx = client.transaction()
        tx.delete(zk_paths.partitions(name))
        tx.delete(zk_paths.topic(name), stat.version)
        failure = multi_failure(tx.commit())
        if failure is None:
            return
        if not isinstance(failure, (NotEmptyError, NoNodeError, BadVersionError)):
            raise failure
    raise RequestTimedOut(f"topic {name!r} kept changing while its deletion was finished; retry")
