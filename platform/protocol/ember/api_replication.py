"""OffsetForLeaderEpoch (key 23): where a leader epoch ended in the leader's log.

A follower asks before fetching from a new leader, with its own latest epoch, and truncates to
the smaller of the answer and its own end of that epoch (see ``ember.ingest.replica_fetcher``).
"""
from __future__ import annotations

from ember.ingest.partition import CONSUMER_REPLICA_ID, Partition
from ember.ingest.replica_manager import ReplicaManager
from ember.protocol.ember.dispatcher import Handler
from ember.protocol.ember.leader_fields import answer_fields, leader_queries
from ember.security.authorizer.model import Operation
from ember.wire import fields
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Request
from ember.wire.reply import OK, Reply


class ReplicationApis:
    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch}

    async def offset_for_leader_epoch(self, request: Request) -> Reply:
        replica_id = fields.integer(request.body, "replica_id", CONSUMER_REPLICA_ID)
        operation = self.replicas.access.follower_or_topic(replica_id, Operation.DESCRIBE)
        queries = leader_queries(request.body, lambda e: fields.integer(e, "leader_epoch"))
        answers = await self.replicas.answer_at_leader(queries, Partition.end_offset_for_epoch, operation)
        return Reply({**OK, "partitions": answer_fields(
            answers, lambda found: {"leader_epoch": found[0], "end_offset": found[1]},
            {"leader_epoch": -1, "end_offset": -1})})
