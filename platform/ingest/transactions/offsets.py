"""TxnOffsetCommit: offsets a transactional producer commits for a consumer group, on the group's
coordinator. The group coordinator checks the member and generation as for a commit; the offsets
then wait in the transaction's ZooKeeper node (not in the group's committed offsets) until the
transaction coordinator commits them with the transaction, or drops them when it aborts.

They are stored under the group (``/groups/<group>/pending_txn_offsets/<transactional id>``), so
the group's OffsetFetch with require_stable finds them. The write is conditional on the
transaction's znode version read here: it lands only while the
transaction is Ongoing for this producer with the group added (AddOffsetsToTxn), so offsets never
slip in after the transaction was decided.
"""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Optional

from ember.errors import ConcurrentTransactions, InvalidProducerIdMapping, InvalidTxnState, ProducerFenced
from ember.groups.coordinator import GroupCoordinator
from ember.groups.store import PendingOffsets
from ember.ingest.transactions.coordinator import validate_transactional_id
from ember.ingest.transactions.state import TxnState
from ember.ingest.transactions.store import TransactionConflict, TransactionStore
from ember.security.authorizer.access import ALLOW_ALL, Access
from ember.security.authorizer.model import Operation, Resource, ResourceType

#: Adds a group to a transaction at its coordinator: (transactional id, producer id, epoch, group).
AddGroup = Callable[[str, int, int, str], Awaitable[None]]

#: Writes of the transaction's znode (its coordinator adding partitions) racing a commit.
ATTEMPTS = 5


class TransactionalOffsets:
    def __init__(self, store: TransactionStore, groups: GroupCoordinator, access: Access = ALLOW_ALL,
                 add_group: Optional[AddGroup] = None) -> None:
        self.store = store
        self.groups = groups
        self.access = access
        self.add_group = add_group

    async def commit(self, transactional_id: str, group_id: str, producer_id: int, producer_epoch: int,
                     member_id: str, generation: int, offsets: PendingOffsets,
                     instance_id: str | None = None, add_group: bool = False) -> None:
        """Add ``offsets`` to the group's offsets pending in the producer's transaction
        (Kafka's ACLs: Write on the transactional id, Read on the group and the topics).
        ``add_group`` (TxnOffsetCommit v5, transaction version 2): the group joins the
        transaction here, at its coordinator, instead of by the client's AddOffsetsToTxn."""
        validate_transactional_id(transactional_id)
        self.access.check(Operation.WRITE, Resource(ResourceType.TRANSACTIONAL_ID, transactional_id))
        await self.groups.check_commit(group_id, member_id, generation, list(offsets), instance_id,
                                       transactional=True)
        if add_group:
            if self.add_group is None:
                raise InvalidTxnState("this broker cannot add a group to a transaction (use AddOffsetsToTxn)")
            await self.add_group(transactional_id, producer_id, producer_epoch, group_id)
        for _ in range(ATTEMPTS):
            meta, version = await asyncio.to_thread(self.store.load, transactional_id)
            if meta is None or version is None or meta.producer_id != producer_id:
                raise InvalidProducerIdMapping(f"producer {producer_id} does not hold transactional id "
                                               f"{transactional_id!r}")
            if meta.producer_epoch != producer_epoch:
                raise ProducerFenced(f"producer {producer_id} epoch {producer_epoch} of {transactional_id!r} "
                                     f"was fenced (current epoch {meta.producer_epoch})")
            if meta.state != TxnState.ONGOING or group_id not in meta.groups:
                raise InvalidTxnState(f"group {group_id!r} is not in an ongoing transaction of "
                                      f"{transactional_id!r} (AddOffsetsToTxn first)")
            try:
                await asyncio.to_thread(self.store.add_offsets, transactional_id, version, group_id, offsets)
                return
            except TransactionConflict:
                continue
        raise ConcurrentTransactions(f"the transaction of {transactional_id!r} changed {ATTEMPTS} times while "
                                     f"offsets were committed to it; retry")
