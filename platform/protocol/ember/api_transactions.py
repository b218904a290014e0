"""WRITE_TXN_MARKERS over ember's protocol: a transaction coordinator on another broker asks this
one to append commit or abort markers to partitions it leads (the inter-broker half of the
coordinator's marker routing, :mod:`ember.ingest.transactions.marker_router`).

Request: ``producer_id``, ``producer_epoch``, ``coordinator_epoch``, ``commit`` and
``partitions`` (``[{"topic", "partition"}]``); response: ``partitions`` with an error code each.
Kafka's rule: ClusterAction on the cluster.
"""
from __future__ import annotations

from ember.errors import UnknownServerError
from ember.ingest.transactions.markers import MarkerWriter
from ember.protocol.ember.dispatcher import Handler
from ember.security.authorizer.access import ALLOW_ALL, Access
from ember.security.authorizer.model import Operation
from ember.wire import fields
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Request
from ember.wire.reply import OK, Reply, error_fields


class TransactionApis:
    def __init__(self, markers: MarkerWriter, access: Access = ALLOW_ALL) -> None:
        self.markers = markers
        self.access = access

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.WRITE_TXN_MARKERS: self.write_txn_markers}

    async def write_txn_markers(self, request: Request) -> Reply:
        body = request.body
        self.access.check_cluster(Operation.CLUSTER_ACTION)
        partitions = fields.unique([fields.topic_partition(p) for p in fields.partitions(body)], lambda p: p,
                                   "partitions")
        results = await self.markers.write_markers(
            fields.integer(body, "producer_id", bits=fields.INT64),
            fields.integer(body, "producer_epoch", bits=fields.INT16),
            fields.integer(body, "coordinator_epoch"), fields.boolean(body, "commit", False), partitions)
        answers = []
        for topic, index in partitions:
            error = results.get((topic, index), UnknownServerError(f"no marker result for {topic}-{index}"))
            answers.append({"topic": topic, "partition": index, **(error_fields(error) if error else OK)})
        return Reply({**OK, "partitions": answers})
