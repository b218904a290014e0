"""What partition leaders and group coordinators ask of a transactional id's coordinator: in
process when that is this broker, otherwise over ember's protocol on the inter-broker listener
(Kafka's AddPartitionsToTxnManager).

- **Verification** before a leader appends a producer's first transactional batch at a partition
  (KIP-890's server-side defence, transaction version 1: AddPartitionsToTxn ``verify_only``): is
  the partition in the producer's ongoing transaction? A leader that appends only verified
  batches cannot start a transaction at a partition the coordinator will never send a marker to
  (a hanging transaction).
- **Adding** the partition instead (transaction version 2, Produce v12+: the client sends no
  AddPartitionsToTxn), and the group of a TxnOffsetCommit v5 (no AddOffsetsToTxn).

The caller authorized the producer's request; the coordinator takes these on its word
(``on_behalf``; over the wire, the broker's ClusterAction).
"""
from __future__ import annotations

from typing import Iterable

from ember.cluster.metadata_cache import MetadataCache
from ember.errors import BrokerNotAvailable, CoordinatorNotAvailable, EmberError
from ember.groups.coordinator import coordinator_id
from ember.ingest.transactions.coordinator import TransactionCoordinator
from ember.ingest.transactions.peers import Peers, Results
from ember.ingest.transactions.state import Partition
from ember.wire.api_keys import ApiKey


class TxnCoordinatorClient:
    def __init__(self, broker_id: int, cache: MetadataCache, coordinator: TransactionCoordinator,
                 peers: Peers) -> None:
        self.broker_id = broker_id
        self.cache = cache
        self.coordinator = coordinator
        self.peers = peers

    def _coordinator_of(self, transactional_id: str) -> int:
        node = coordinator_id(transactional_id, self.cache.brokers())
        if node is None:
            raise CoordinatorNotAvailable("no live broker coordinates transactions")
        return node

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Iterable[Partition], add: bool = False) -> Results:
        """Per partition None (in the producer's ongoing transaction; with ``add``: now added to
        it) or the error to answer the producer with: INVALID_TXN_STATE (not added),
        PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING, or a retriable one (NOT_COORDINATOR,
        COORDINATOR_NOT_AVAILABLE while the coordinator moves, CONCURRENT_TRANSACTIONS while the
        producer's previous transaction completes)."""
        wanted = list(dict.fromkeys(partitions))
        try:
            node = self._coordinator_of(transactional_id)
        except CoordinatorNotAvailable as exc:
            return {p: exc for p in wanted}
        try:
            if node != self.broker_id:
                body = {"transactional_id": transactional_id, "producer_id": producer_id,
                        "producer_epoch": producer_epoch, "verify_only": not add, "on_behalf": add,
                        "partitions": [{"topic": t, "partition": p} for t, p in wanted]}
                return await self.peers.partition_call(node, ApiKey.ADD_PARTITIONS_TO_TXN, body, wanted)
            if add:
                return await self.coordinator.add_partitions_to_txn(transactional_id, producer_id, producer_epoch,
                                                                    wanted, on_behalf=True)
            return await self.coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, wanted)
        except EmberError as exc:      # the producer's (fenced, unknown id, ...): every partition's answer
            return {p: exc for p in wanted}

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> None:
        """Add ``group_id`` to the producer's transaction (a TxnOffsetCommit v5); raises the
        coordinator's error."""
        node = self._coordinator_of(transactional_id)
        if node == self.broker_id:
            await self.coordinator.add_offsets_to_txn(transactional_id, producer_id, producer_epoch, group_id,
                                                      on_behalf=True)
            return
        try:
            await self.peers.call(node, ApiKey.ADD_OFFSETS_TO_TXN,
                                  {"transactional_id": transactional_id, "producer_id": producer_id,
                                   "producer_epoch": producer_epoch, "group_id": group_id, "on_behalf": True})
        except BrokerNotAvailable as exc:      # what the producer's client retries a TxnOffsetCommit on
            raise CoordinatorNotAvailable(f"transaction coordinator {node} not reachable: {exc}") from exc
