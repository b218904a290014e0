"""ElectLeaders and AlterPartitionReassignments: leadership changes only the controller makes.

The broker that is the active controller runs them on its controller thread (in order with
broker failures and other controller work); any other broker answers NOT_CONTROLLER, and the
client retries at the controller named in Metadata.
"""
from __future__ import annotations

import asyncio
from typing import Any

from ember.cluster.controller import PREFERRED, UNCLEAN, Controller
from ember.errors import InvalidRequest
from ember.protocol.ember.dispatcher import Handler
from ember.security.authorizer.access import ALLOW_ALL, Access
from ember.security.authorizer.model import Operation
from ember.wire import fields
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Request
from ember.wire.reply import OK, Reply, error_fields


class LeadershipApis:
    def __init__(self, controller: Controller, access: Access = ALLOW_ALL) -> None:
        self.controller = controller
        #: Kafka's rule: leadership changes need Alter on the cluster.
        self.access = access

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.ELECT_LEADERS: self.elect_leaders,
                ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.alter_partition_reassignments}

    async def elect_leaders(self, request: Request) -> Reply:
        """Preferred (election_type 0) or unclean (1) leader election of the listed partitions
        (null: every partition)."""
        body = request.body
        election_type = fields.integer(body, "election_type", PREFERRED, bits=fields.INT8)
        if election_type not in (PREFERRED, UNCLEAN):
            raise InvalidRequest(f"election_type {election_type} is unknown: 0 = preferred, 1 = unclean")
        self.access.check_cluster(Operation.ALTER)
        listed = fields.partitions(body, default=None)
        partitions = None if listed is None else [fields.topic_partition(p) for p in listed]
        results = await asyncio.wrap_future(self.controller.call(
            lambda: self.controller.elect(partitions, unclean=election_type == UNCLEAN)))
        return Reply({**OK, "partitions": [
            {"topic": r.topic, "partition": r.partition, "previous_leader": r.previous_leader, "leader": r.leader,
             **(error_fields(r.error) if r.error is not None else OK)} for r in results]})

    async def alter_partition_reassignments(self, request: Request) -> Reply:
        """Start moving partitions to new replica lists; progress shows in Metadata."""
        self.access.check_cluster(Operation.ALTER)
        moves: list[tuple[str, int, list[int] | None]] = [
            (*fields.topic_partition(p), fields.integers(p, "replicas")) for p in fields.partitions(request.body)]
        errors = await asyncio.wrap_future(self.controller.call(lambda: self.controller.reassign(moves)))
        results: list[dict[str, Any]] = [
            {"topic": topic, "partition": index, **(error_fields(error) if error is not None else OK)}
            for (topic, index, _), error in zip(moves, errors)]
        return Reply({**OK, "partitions": results})
