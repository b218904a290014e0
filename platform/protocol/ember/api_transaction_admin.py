"""Transaction administration over ember's protocol (``ember transactions``, ``Admin``):
ListTransactions and DescribeTransactions at the coordinators, DescribeProducers at the partition
leaders. The work and the ACL checks are the broker core's, as for the Kafka listener's handlers.

* LIST_TRANSACTIONS ``{states?: [names], producer_ids?: [ids]}`` → ``{transactions: [{transactional_id,
  producer_id, state}], unknown_states}``: the ids this broker coordinates (ask every broker).
* DESCRIBE_TRANSACTIONS ``{transactional_ids: [ids]}`` → ``{transactions: [{transactional_id, error_code,
  state, producer_id, producer_epoch, timeout_ms, start_ms, partitions: [{topic, partition}], groups}]}``.
* DESCRIBE_PRODUCERS ``{partitions: [{topic, partition}]}`` (at their leader) → ``{partitions: [{topic,
  partition, error_code, producers: [{producer_id, producer_epoch, last_sequence, last_timestamp,
  coordinator_epoch, current_txn_start_offset}]}]}``.
"""
from __future__ import annotations

from typing import Any

from ember.ingest.partition import Partition
from ember.ingest.replica_manager import LeaderQuery, ReplicaManager
from ember.ingest.transactions.coordinator import TransactionCoordinator
from ember.log.producer_state import ActiveProducer
from ember.protocol.ember.dispatcher import Handler
from ember.security.authorizer.model import Operation
from ember.wire import fields
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Request
from ember.wire.reply import OK, Reply, error_fields


class TransactionAdminApis:
    def __init__(self, transactions: TransactionCoordinator, replicas: ReplicaManager) -> None:
        self.transactions = transactions
        self.replicas = replicas

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.LIST_TRANSACTIONS: self.list_transactions,
                ApiKey.DESCRIBE_TRANSACTIONS: self.describe_transactions,
                ApiKey.DESCRIBE_PRODUCERS: self.describe_producers}

    async def list_transactions(self, request: Request) -> Reply:
        body = request.body
        states = fields.strings(body, "states", [])
        producer_ids = fields.integers(body, "producer_ids", bits=fields.INT64) if body.get("producer_ids") else []
        found, unknown = self.transactions.list_transactions(states, producer_ids)
        return Reply({**OK, "unknown_states": unknown, "transactions": [
            {"transactional_id": m.transactional_id, "producer_id": m.producer_id, "state": m.state.value}
            for m in found]})

    async def describe_transactions(self, request: Request) -> Reply:
        ids = fields.strings(request.body, "transactional_ids")
        found = await self.transactions.describe(ids)
        answers: list[dict[str, Any]] = []
        for transactional_id in ids:
            meta = found[transactional_id]
            if isinstance(meta, Exception):
                answers.append({"transactional_id": transactional_id, **error_fields(meta)})
                continue
            answers.append({"transactional_id": transactional_id, **OK, "state": meta.state.value,
                            "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
                            "timeout_ms": meta.timeout_ms, "start_ms": meta.start_ms,
                            "partitions": [{"topic": t, "partition": p} for t, p in sorted(meta.partitions)],
                            "groups": sorted(meta.groups)})
        return Reply({**OK, "transactions": answers})

    async def describe_producers(self, request: Request) -> Reply:
        async def producers(partition: Partition, _: None) -> list[ActiveProducer]:
            return await partition.active_producers()
        queries = [LeaderQuery(*fields.topic_partition(p), None, None) for p in fields.partitions(request.body)]
        answers = await self.replicas.answer_at_leader(queries, producers, Operation.READ)
        return Reply({**OK, "partitions": [
            {"topic": a.topic, "partition": a.partition, **(error_fields(a.error) if a.error else OK),
             "producers": [p._asdict() for p in a.value or ()]} for a in answers]})
