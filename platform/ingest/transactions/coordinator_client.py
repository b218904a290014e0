"""Verification of a transactional batch before a leader appends it (KIP-890's server-side
defence): is the partition in the producer's ongoing transaction? Asked of the transactional id's
coordinator, in process when that is this broker, otherwise over ember's protocol
(ADD_PARTITIONS_TO_TXN with ``verify_only``, the inter-broker form of Kafka's AddPartitionsToTxn
v4+). A leader that appends only verified batches cannot start a transaction at a partition the
coordinator will never send a marker to (a hanging transaction).
"""
from __future__ import annotations

from typing import Iterable

from ember.cluster.metadata_cache import MetadataCache
from ember.errors import CoordinatorNotAvailable
from ember.groups.coordinator import coordinator_id
from ember.ingest.transactions.coordinator import TransactionCoordinator
from ember.ingest.transactions.peers import Peers, Results
from ember.ingest.transactions.state import Partition
from ember.wire.api_keys import ApiKey


class PartitionVerifier:
    def __init__(self, broker_id: int, cache: MetadataCache, coordinator: TransactionCoordinator,
                 peers: Peers) -> None:
        self.broker_id = broker_id
        self.cache = cache
        self.coordinator = coordinator
        self.peers = peers

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Iterable[Partition]) -> Results:
        """Per partition None (in the producer's ongoing transaction) or the error to answer the
        producer with: INVALID_TXN_STATE (not added), PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING,
        or a retriable one (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE) while the coordinator moves."""
        wanted = list(dict.fromkeys(partitions))
        node = coordinator_id(transactional_id, self.cache.brokers())
        if node is None:
            error = CoordinatorNotAvailable("no live broker coordinates transactions")
            return {p: error for p in wanted}
        if node == self.broker_id:
            return await self.coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, wanted)
        body = {"transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
                "verify_only": True, "partitions": [{"topic": t, "partition": p} for t, p in wanted]}
        return await self.peers.partition_call(node, ApiKey.ADD_PARTITIONS_TO_TXN, body, wanted)
