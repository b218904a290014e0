"""The ember protocol's replication messages, typed once: what a follower's replica fetcher sends
to its leader (Fetch, ListOffsets and OffsetForLeaderEpoch with its ``replica_id``) and what the
leader answers per partition. The fetcher (``ember.ingest.replica_fetcher``) builds requests and
reads answers with these types; the leader's handlers (``ember.protocol.ember.api_records``,
``api_replication``) parse the same field names with ``ember.wire.fields`` (a request is untrusted
input) and answer in these shapes."""
from __future__ import annotations

from typing import Any, NotRequired, TypedDict, cast


class PartitionTarget(TypedDict):
    """A partition of a request, with the leader epoch the follower follows (fencing)."""
    topic: str
    partition: int
    current_leader_epoch: int


class FetchPartition(PartitionTarget):
    fetch_offset: int
    max_bytes: int


class TopicPartitionRef(TypedDict):
    topic: str
    partition: int


class FetchRequest(TypedDict):
    """A fetch; with ``session_epoch`` 0, 1, 2, ... one of a fetch session (KIP-227): epoch 0
    opens it and names every partition, later ones name only partitions that moved and those
    ``forgotten``; -1 (the default) is sessionless."""
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partitions: list[FetchPartition]
    session_id: NotRequired[int]
    session_epoch: NotRequired[int]
    forgotten: NotRequired[list[TopicPartitionRef]]


class EpochQuery(PartitionTarget):
    leader_epoch: int


class OffsetForLeaderEpochRequest(TypedDict):
    replica_id: int
    partitions: list[EpochQuery]


class TimestampQuery(PartitionTarget):
    timestamp: int


class ListOffsetsRequest(TypedDict):
    replica_id: int
    partitions: list[TimestampQuery]


class PartitionAnswer(TypedDict):
    """Every per-partition answer: which partition, and its error (0: none)."""
    topic: str
    partition: int
    error_code: int
    error_message: NotRequired[str]


class FetchedPartition(PartitionAnswer):
    """A Fetch answer; ``size`` bytes of the response payload are this partition's batches."""
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    size: int


class EpochEnd(PartitionAnswer):
    """Where the largest epoch ≤ the asked one ended in the leader's log."""
    leader_epoch: int
    end_offset: int


class OffsetAnswer(PartitionAnswer):
    offset: int
    timestamp: int


def fetched_partitions(body: dict[str, Any]) -> list[FetchedPartition]:
    """A Fetch response's partitions, as the leader's handler writes them."""
    return cast(list[FetchedPartition], body["partitions"])


def epoch_ends(body: dict[str, Any]) -> list[EpochEnd]:
    """An OffsetForLeaderEpoch response's partitions."""
    return cast(list[EpochEnd], body["partitions"])


def offset_answers(body: dict[str, Any]) -> list[OffsetAnswer]:
    """A ListOffsets response's partitions."""
    return cast(list[OffsetAnswer], body["partitions"])
