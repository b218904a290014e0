"""OffsetForLeaderEpoch (key 23): where a leader epoch ended in the leader's log.

A follower asks before fetching from a new leader, with its own latest epoch, and truncates to
the smaller of the answer and its own end of that epoch (see ``ember.ingest.replica_fetcher``).
"""
from __future__ import annotations

from typing import Any

from ember.protocol.ember import fields
from ember.protocol.ember.dispatcher import Handler
from ember.protocol.ember.wire import ApiKey, Request
from ember.ingest.partition import CONSUMER_REPLICA_ID, Partition
from ember.protocol.ember.reply import OK, Reply
from ember.ingest.replica_manager import ReplicaManager
from ember.security.authorizer.model import Operation


async def epoch_end(partition: Partition, leader_epoch: int) -> dict[str, Any]:
    """One partition's answer (both protocols' field names): the largest epoch ≤ ``leader_epoch``
    in the leader's log and where it ended."""
    epoch, end_offset = await partition.end_offset_for_epoch(leader_epoch)
    return {"leader_epoch": epoch, "end_offset": end_offset}


class ReplicationApis:
    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch}

    async def offset_for_leader_epoch(self, request: Request) -> Reply:
        replica_id = fields.integer(request.body, "replica_id", CONSUMER_REPLICA_ID)
        results = await self.replicas.answer_at_leader(
            fields.partitions(request.body), lambda e: fields.integer(e, "leader_epoch"), epoch_end,
            {"leader_epoch": -1, "end_offset": -1},
            self.replicas.access.follower_or_topic(replica_id, Operation.DESCRIBE))
        return Reply({**OK, "partitions": results})
