"""How the coordinator completes a transaction: it asks a :class:`MarkerWriter` to append a
commit or abort marker to every partition of the transaction (the partitions' leaders do it)."""
from __future__ import annotations

from typing import Protocol

from ember.ingest.transactions.state import Partition


class MarkerWriter(Protocol):
    async def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                            partitions: list[Partition]) -> dict[Partition, Exception | None]:
        """Write the marker to each partition; per partition None (written and replicated) or the
        error (a retriable one, such as NOT_LEADER_OR_FOLLOWER, is retried by the coordinator)."""
        ...
