"""Transaction metadata in ZooKeeper, written by compare-and-set.

Layout (under the ``/ember`` chroot): ``/transactions/<id>`` holds one transactional id's
:class:`TransactionMetadata` as JSON; its children ``/transactions/<id>/<group>`` hold the offsets
of that group pending in the open transaction (TxnOffsetCommit), moved to the group's committed
offsets when the transaction commits. Every write of the metadata names the znode version it read:
a coordinator that lost the id to another broker (which wrote since) is refused, so a stale
coordinator never overwrites a newer decision. Pending offsets are written in one ZooKeeper multi
with a version check of the metadata, so they land only while the transaction is as verified.
Blocking (kazoo): callers on an event loop run these methods with ``asyncio.to_thread``.
"""
from __future__ import annotations

import functools
import json
from typing import Any, Callable, Optional, TypeVar

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from ember.errors import CoordinatorNotAvailable
from ember.groups.store import ZK_UNREACHABLE
from ember.ingest.transactions.state import TransactionMetadata
from ember.wire.types import TopicPartition
from ember.zk import zk_paths
from ember.zk.zk_session import ZkSession, multi_failure

F = TypeVar("F", bound=Callable[..., Any])

#: Offsets of one group pending in a transaction: {partition: (offset, metadata)}.
PendingOffsets = dict[TopicPartition, tuple[int, str]]


class TransactionConflict(Exception):
    """The transaction's znode changed since it was read (another coordinator wrote it)."""


def _retriable_while_unreachable(method: F) -> F:
    """ZooKeeper unreachable: COORDINATOR_NOT_AVAILABLE, which transactional clients retry."""
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except ZK_UNREACHABLE as exc:
            raise CoordinatorNotAvailable(f"the transaction coordinator cannot reach ZooKeeper "
                                          f"({type(exc).__name__}); retry shortly") from exc
    return call  # type: ignore[return-value]


class TransactionStore:
    def __init__(self, session: ZkSession) -> None:
        self.client = session.client

    @_retriable_while_unreachable
    def ids(self) -> list[str]:
        try:
            return sorted(zk_paths.transactional_id(n) for n in self.client.get_children(zk_paths.TRANSACTIONS))
        except NoNodeError:
            return []

    @_retriable_while_unreachable
    def load(self, transactional_id: str) -> tuple[Optional[TransactionMetadata], Optional[int]]:
        """(metadata, znode version); (None, None) for an unknown id."""
        try:
            data, stat = self.client.get(zk_paths.transaction(transactional_id))
        except NoNodeError:
            return None, None
        return TransactionMetadata.from_bytes(data), stat.version

    @_retriable_while_unreachable
    def save(self, meta: TransactionMetadata, version: Optional[int]) -> int:
        """Write ``meta`` if its znode is still at ``version`` (None: it must not exist); the new
        version, or :class:`TransactionConflict`."""
        path = zk_paths.transaction(meta.transactional_id)
        try:
            if version is None:
                self.client.create(path, meta.to_bytes(), makepath=True)
                return 0
            return int(self.client.set(path, meta.to_bytes(), version=version).version)
        except (BadVersionError, NodeExistsError, NoNodeError) as exc:
            raise TransactionConflict(f"{path} changed since it was read ({type(exc).__name__})") from exc

    @_retriable_while_unreachable
    def delete(self, transactional_id: str, version: int) -> None:
        """Remove an expired id (and leftover pending offsets) if its znode is still at ``version``."""
        path = zk_paths.transaction(transactional_id)
        txn = self.client.transaction()
        for child in self._children(path):
            txn.delete(f"{path}/{child}")
        txn.delete(path, version=version)
        failure = multi_failure(txn.commit())
        if failure is not None:
            raise TransactionConflict(f"{path} changed while it was deleted ({type(failure).__name__})")

    @_retriable_while_unreachable
    def add_offsets(self, transactional_id: str, txn_version: int, group_id: str, offsets: PendingOffsets) -> None:
        """Merge ``offsets`` into the group's pending offsets of the transaction, only if the
        transaction's znode is still at ``txn_version`` (:class:`TransactionConflict` otherwise)."""
        path = zk_paths.transaction_offsets(transactional_id, group_id)
        try:
            data, stat = self.client.get(path)
            pending, version = _offsets_from_bytes(data), stat.version
        except NoNodeError:
            pending, version = {}, None
        pending.update(offsets)
        txn = self.client.transaction()
        txn.check(zk_paths.transaction(transactional_id), txn_version)
        if version is None:
            txn.create(path, _offsets_to_bytes(pending))
        else:
            txn.set_data(path, _offsets_to_bytes(pending), version=version)
        failure = multi_failure(txn.commit())
        if failure is not None:
            raise TransactionConflict(f"{path}: the transaction or its offsets changed "
                                      f"({type(failure).__name__})")

    @_retriable_while_unreachable
    def pending_offsets(self, transactional_id: str) -> dict[str, PendingOffsets]:
        """Every group's offsets pending in the transaction."""
        path = zk_paths.transaction(transactional_id)
        reads = {zk_paths.transactional_id(child): self.client.get_async(f"{path}/{child}")
                 for child in self._children(path)}
        found = {}
        for group_id, result in reads.items():
            try:
                found[group_id] = _offsets_from_bytes(result.get()[0])
            except NoNodeError:
                continue
        return found

    @_retriable_while_unreachable
    def drop_offsets(self, transactional_id: str) -> None:
        path = zk_paths.transaction(transactional_id)
        for result in [self.client.delete_async(f"{path}/{child}") for child in self._children(path)]:
            try:
                result.get()
            except (NoNodeError, NotEmptyError):
                continue

    def _children(self, path: str) -> list[str]:
        try:
            return list(self.client.get_children(path))
        except NoNodeError:
            return []


def _offsets_to_bytes(offsets: PendingOffsets) -> bytes:
    doc: dict[str, dict[str, list[Any]]] = {}
    for tp, (offset, metadata) in sorted(offsets.items()):
        doc.setdefault(tp.topic, {})[str(tp.partition)] = [offset, metadata]
    return json.dumps(doc).encode()


def _offsets_from_bytes(data: bytes) -> PendingOffsets:
    return {TopicPartition(topic, int(p)): (int(offset), str(metadata))
            for topic, parts in json.loads(data).items() for p, (offset, metadata) in parts.items()}
