"""Transaction metadata in ZooKeeper, written by compare-and-set.

Layout (under the ``/ember`` chroot): ``/transactions/<id>`` holds one transactional id's
:class:`TransactionMetadata` as JSON; ``/groups/<group>/pending_txn_offsets/<id>`` the offsets of
that group pending in the id's open transaction (TxnOffsetCommit), moved to the group's committed
offsets when the transaction commits (the group's OffsetFetch with require_stable sees them).
Every write of the metadata names the znode version it read: a coordinator that lost the id to
another broker (which wrote since) is refused, so a stale coordinator never overwrites a newer
decision. Pending offsets are written in one ZooKeeper multi
with a version check of the metadata, so they land only while the transaction is as verified.
Blocking (kazoo): callers on an event loop run these methods with ``asyncio.to_thread``.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, Optional, TypeVar

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ember.errors import CoordinatorNotAvailable
from ember.groups.store import ZK_UNREACHABLE, PendingOffsets, pending_from_bytes, pending_to_bytes
from ember.ingest.transactions.state import TransactionMetadata
from ember.zk import zk_paths
from ember.zk.zk_session import ZkSession, multi_failure

F = TypeVar("F", bound=Callable[..., Any])

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
        """Remove an expired id if its znode is still at ``version``."""
        try:
            self.client.delete(zk_paths.transaction(transactional_id), version=version)
        except (BadVersionError, NoNodeError) as exc:
            raise TransactionConflict(f"transactional id {transactional_id!r} changed while it was deleted "
                                      f"({type(exc).__name__})") from exc

    @_retriable_while_unreachable
    def add_offsets(self, transactional_id: str, txn_version: int, group_id: str, offsets: PendingOffsets) -> None:
        """Merge ``offsets`` into the group's offsets pending in the transaction, only if the
        transaction's znode is still at ``txn_version`` (:class:`TransactionConflict` otherwise)."""
        path = zk_paths.group_pending_offset(group_id, transactional_id)
        try:
            data, stat = self.client.get(path)
            pending, version = pending_from_bytes(data), stat.version
        except NoNodeError:
            self.client.ensure_path(zk_paths.group_pending_offsets(group_id))
            pending, version = {}, None
        pending.update(offsets)
        txn = self.client.transaction()
        txn.check(zk_paths.transaction(transactional_id), txn_version)
        if version is None:
            txn.create(path, pending_to_bytes(pending))
        else:
            txn.set_data(path, pending_to_bytes(pending), version=version)
        failure = multi_failure(txn.commit())
        if failure is not None:
            raise TransactionConflict(f"{path}: the transaction or its offsets changed "
                                      f"({type(failure).__name__})")

    @_retriable_while_unreachable
    def pending_offsets(self, transactional_id: str, groups: Iterable[str]) -> dict[str, PendingOffsets]:
        """The offsets each of ``groups`` has pending in the transaction."""
        reads = {g: self.client.get_async(zk_paths.group_pending_offset(g, transactional_id)) for g in groups}
        found = {}
        for group_id, result in reads.items():
            try:
                found[group_id] = pending_from_bytes(result.get()[0])
            except NoNodeError:
                continue
        return found

    @_retriable_while_unreachable
    def drop_offsets(self, transactional_id: str, groups: Iterable[str]) -> None:
        for result in [self.client.delete_async(zk_paths.group_pending_offset(g, transactional_id)) for g in groups]:
            try:
                result.get()
            except NoNodeError:
                continue
