"""Durable group state in ZooKeeper: committed offsets and group metadata.

Layout (under the ``/ember`` chroot, the seeds' layout): ``/groups/<group>`` holds the group's
metadata (protocol, generation, last assignment) as JSON; ``/groups/<group>/offsets/<topic>/<p>``
holds one committed offset. Writes of one commit are issued as parallel async ZooKeeper
operations, so a commit of N partitions costs about one round trip, not N. Blocking (kazoo):
callers on an event loop run these methods with ``asyncio.to_thread``.
"""
from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, TypeVar

from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
)

from ember.errors import CoordinatorNotAvailable, NonEmptyGroup
from ember.wire.types import TopicPartition
from ember.zk import zk_paths
from ember.zk.zk_session import ZkSession

F = TypeVar("F", bound=Callable[..., Any])

#: Recursive deletes of a group raced by commits that write new offsets under it.
DELETE_ATTEMPTS = 5
#: kazoo's failures that say ZooKeeper is unreachable for now, not that the request is wrong.
ZK_UNREACHABLE = (ConnectionLoss, SessionExpiredError, OperationTimeoutError, ConnectionClosedError)


def _retriable_while_unreachable(method: F) -> F:
    """A store call that fails because ZooKeeper is unreachable raises CoordinatorNotAvailable,
    which clients retry (Kafka's answer while a coordinator cannot reach its storage), instead of
    an unexpected error that a committing consumer would give up on."""
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except ZK_UNREACHABLE as exc:
            raise CoordinatorNotAvailable(f"the group coordinator cannot reach ZooKeeper "
                                          f"({type(exc).__name__}); retry shortly") from exc
    return call  # type: ignore[return-value]


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    metadata: str
    commit_timestamp: int

    def to_bytes(self) -> bytes:
        return json.dumps({"offset": self.offset, "metadata": self.metadata,
                           "commit_timestamp": self.commit_timestamp}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "CommittedOffset":
        doc = json.loads(data)
        return cls(int(doc["offset"]), str(doc.get("metadata", "")), int(doc.get("commit_timestamp", -1)))


#: Offsets of one group committed in a transaction (TxnOffsetCommit): {partition: (offset, metadata)}.
PendingOffsets = dict[TopicPartition, tuple[int, str]]


def pending_to_bytes(offsets: PendingOffsets) -> bytes:
    doc: dict[str, dict[str, list[Any]]] = {}
    for tp, (offset, metadata) in sorted(offsets.items()):
        doc.setdefault(tp.topic, {})[str(tp.partition)] = [offset, metadata]
    return json.dumps(doc).encode()


def pending_from_bytes(data: bytes) -> PendingOffsets:
    return {TopicPartition(topic, int(p)): (int(offset), str(metadata))
            for topic, parts in json.loads(data).items() for p, (offset, metadata) in parts.items()}


class MetadataConflict(Exception):
    """``/groups/<group>`` changed since it was read: another coordinator wrote it."""


class GroupStore:
    def __init__(self, session: ZkSession) -> None:
        self.client = session.client

    @_retriable_while_unreachable
    def commit(self, group_id: str, offsets: dict[TopicPartition, tuple[int, str]]) -> None:
        """Store every offset; znodes missing so far are created (their parents too)."""
        now = int(time.time() * 1000)
        docs = {tp: CommittedOffset(offset, metadata, now).to_bytes() for tp, (offset, metadata) in offsets.items()}
        pending = {tp: self.client.set_async(zk_paths.group_offset(group_id, *tp), data) for tp, data in docs.items()}
        for tp, result in pending.items():
            try:
                result.get()
            except NoNodeError:
                self._create_or_set(zk_paths.group_offset(group_id, *tp), docs[tp])

    def _create_or_set(self, path: str, data: bytes) -> None:
        """Create or overwrite ``path``; a DeleteGroups racing in may remove it or its parents
        between the two steps, so a few attempts are made before the commit is refused."""
        for _ in range(DELETE_ATTEMPTS):
            try:
                self.client.create(path, data, makepath=True)
                return
            except NodeExistsError:
                try:
                    self.client.set(path, data)
                    return
                except NoNodeError:
                    continue
            except NoNodeError:
                continue
        raise CoordinatorNotAvailable(f"{path} was deleted {DELETE_ATTEMPTS} times while it was written "
                                      f"(the group is being deleted); retry the commit")

    @_retriable_while_unreachable
    def fetch(self, group_id: str, partitions: Optional[Iterable[TopicPartition]]) -> dict[TopicPartition, CommittedOffset]:
        """Committed offsets of ``partitions`` (all of the group's when None); absent ones are left out.
        Only offsets that exist are read: a new group asking for 1,000 partitions costs one
        listing per topic, not 1,000 reads of missing nodes (0.3 s before a consumer's first fetch)."""
        asked = None if partitions is None else list(partitions)
        stored = self._all_partitions(group_id, None if asked is None else {tp.topic for tp in asked})
        known = frozenset(stored)
        wanted = stored if asked is None else [tp for tp in asked if tp in known]
        pending = {tp: self.client.get_async(zk_paths.group_offset(group_id, *tp)) for tp in wanted}
        found = {}
        for tp, result in pending.items():
            try:
                data, _ = result.get()
            except NoNodeError:
                continue
            found[tp] = CommittedOffset.from_bytes(data)
        return found

    @_retriable_while_unreachable
    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        """Remove the committed offsets of ``partitions`` (absent ones are skipped)."""
        pending = [self.client.delete_async(zk_paths.group_offset(group_id, *tp)) for tp in partitions]
        for result in pending:
            try:
                result.get()
            except NoNodeError:
                continue

    @_retriable_while_unreachable
    def unstable(self, group_id: str) -> set[TopicPartition]:
        """Partitions whose offsets open transactions are committing (written there by the
        transaction coordinator's store, ``/groups/<group>/pending_txn_offsets/<transactional id>``)."""
        parent = zk_paths.group_pending_offsets(group_id)
        try:
            reads = [self.client.get_async(f"{parent}/{child}") for child in self.client.get_children(parent)]
        except NoNodeError:
            return set()
        found: set[TopicPartition] = set()
        for result in reads:
            try:
                found.update(pending_from_bytes(result.get()[0]))
            except NoNodeError:
                continue
        return found

    def _all_partitions(self, group_id: str, topics: Optional[set[str]] = None) -> list[TopicPartition]:
        """The partitions the group has committed offsets for (of ``topics`` only, unless None),
        listed with one pipelined request per topic."""
        if topics is None:
            try:
                topics = set(self.client.get_children(zk_paths.group_offsets(group_id)))
            except NoNodeError:
                return []
        listings = {topic: self.client.get_children_async(f"{zk_paths.group_offsets(group_id)}/{topic}")
                    for topic in sorted(topics)}
        out = []
        for topic, listing in listings.items():
            try:
                out += [TopicPartition(topic, int(p)) for p in listing.get()]
            except NoNodeError:
                continue
        return out

    @_retriable_while_unreachable
    def load_metadata(self, group_id: str) -> Optional[dict[str, Any]]:
        """The group's metadata document; ``{}`` for a group known only by its offsets, None if unknown."""
        return self.load_metadata_versioned(group_id)[0]

    @_retriable_while_unreachable
    def load_metadata_versioned(self, group_id: str) -> tuple[Optional[dict[str, Any]], Optional[int]]:
        """(document, znode version) of the group's metadata; (None, None) if the group is unknown."""
        try:
            data, stat = self.client.get(zk_paths.group(group_id))
        except NoNodeError:
            return None, None
        return (json.loads(data) if data else {}), stat.version

    @_retriable_while_unreachable
    def save_metadata(self, group_id: str, doc: dict[str, Any], version: Optional[int] = None) -> int:
        """Write the metadata document if the znode is still at ``version`` (None: must not exist);
        returns the new version, raises :class:`MetadataConflict` otherwise."""
        data = json.dumps(doc).encode()
        path = zk_paths.group(group_id)
        try:
            if version is None:
                self.client.create(path, data, makepath=True)
                return 0
            return self.client.set(path, data, version=version).version
        except (BadVersionError, NodeExistsError, NoNodeError) as exc:
            raise MetadataConflict(f"{path} changed since it was read ({type(exc).__name__})") from exc

    @_retriable_while_unreachable
    def groups(self) -> list[str]:
        try:
            return sorted(self.client.get_children(zk_paths.GROUPS))
        except NoNodeError:
            return []

    @_retriable_while_unreachable
    def delete(self, group_id: str) -> bool:
        """Remove the group and its offsets; False if it did not exist."""
        path = zk_paths.group(group_id)
        for _ in range(DELETE_ATTEMPTS):
            # kazoo's recursive delete succeeds quietly on a missing node, so look first (a group
            # deleted between the look and the delete was there: True is right then too)
            if self.client.exists(path) is None:
                return False
            try:
                self.client.delete(path, recursive=True)
                return True
            except NoNodeError:
                return False
            except NotEmptyError:   # a commit raced in; deleting again takes it too
                continue
        raise NonEmptyGroup(f"offsets of group {group_id!r} are being committed while it is deleted "
                            f"({DELETE_ATTEMPTS} attempts); stop its committers and retry")
