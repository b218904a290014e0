"""A consumer's group membership as a transactional producer needs it (Kafka's ConsumerGroupMetadata):
``send_offsets_to_transaction`` passes it with TxnOffsetCommit so the group coordinator refuses
offsets from a member that was fenced or rebalanced out, as it refuses its plain commits."""
from __future__ import annotations

from typing import NamedTuple, Optional

NO_GENERATION = -1


class ConsumerGroupMetadata(NamedTuple):
    group_id: str
    generation_id: int = NO_GENERATION
    member_id: str = ""
    group_instance_id: Optional[str] = None
