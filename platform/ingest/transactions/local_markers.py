"""The :class:`MarkerWriter` of the partitions this broker leads: the partition side of markers
(:func:`ember.ingest.txn_markers.write_txn_markers`), shared by the coordinator's routing and
the WriteTxnMarkers APIs of both listeners."""
from __future__ import annotations

from ember.ingest.replica_manager import ReplicaManager
from ember.ingest.transactions.state import Partition
from ember.ingest.txn_markers import TxnMarker, write_txn_markers

#: Kafka's default request.timeout.ms: how long a marker may wait for the in-sync replicas.
MARKER_TIMEOUT_S = 30.0


class LeaderMarkers:
    def __init__(self, replicas: ReplicaManager, timeout_s: float = MARKER_TIMEOUT_S) -> None:
        self.replicas = replicas
        self.timeout_s = timeout_s

    async def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                            partitions: list[Partition]) -> dict[Partition, Exception | None]:
        marker = TxnMarker(producer_id, producer_epoch, coordinator_epoch, commit, tuple(partitions))
        return (await write_txn_markers(self.replicas, [marker], self.timeout_s))[0]

    async def write_many(self, markers: list[TxnMarker]) -> list[dict[Partition, Exception | None]]:
        """Several producers' markers at once (Kafka's WriteTxnMarkers request carries a list)."""
        return await write_txn_markers(self.replicas, markers, self.timeout_s)
