"""A transactional producer's APIs over ember's protocol: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn
(at the transactional id's coordinator) and TxnOffsetCommit (at the group's coordinator). JSON only:
the work, and every ACL check, is the broker core's (:class:`ember.ingest.transactions.coordinator.
TransactionCoordinator`, :class:`ember.ingest.transactions.offsets.TransactionalOffsets`), the same
calls the Kafka listener's handlers make. FindCoordinator (``key_type`` 1) and InitProducerId (with
``transactional_id``) are in their families' modules (``api_groups``, ``api_admin``).

Every request names ``transactional_id``, ``producer_id`` and ``producer_epoch``; errors of the
whole request are the top-level ``error_code``; AddPartitionsToTxn answers one per partition.
"""
from __future__ import annotations

from ember.errors import InvalidRequest
from ember.ingest.transactions.coordinator import TransactionCoordinator
from ember.ingest.transactions.offsets import TransactionalOffsets
from ember.protocol.ember.dispatcher import Handler
from ember.security.authorizer.model import Operation
from ember.wire import fields
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Request
from ember.wire.reply import OK, Reply, error_fields
from ember.wire.types import TopicPartition


def _producer(body: fields.Body) -> tuple[str, int, int]:
    """(transactional id, producer id, producer epoch) of a request."""
    return (fields.string(body, "transactional_id"), fields.integer(body, "producer_id", bits=fields.INT64),
            fields.integer(body, "producer_epoch", bits=fields.INT16))


def _on_behalf(transactions: TransactionCoordinator, body: fields.Body) -> bool:
    """``on_behalf``: a broker adding for a transaction version 2 producer (the partition's leader
    for a Produce, the group's coordinator for a TxnOffsetCommit), which authorized the producer
    itself; brokers only (ClusterAction)."""
    if not fields.boolean(body, "on_behalf", False):
        return False
    transactions.access.check_cluster(Operation.CLUSTER_ACTION)
    return True


class ProducerTransactionApis:
    def __init__(self, transactions: TransactionCoordinator, offsets: TransactionalOffsets) -> None:
        self.transactions = transactions
        self.offsets = offsets

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.ADD_PARTITIONS_TO_TXN: self.add_partitions_to_txn,
                ApiKey.ADD_OFFSETS_TO_TXN: self.add_offsets_to_txn,
                ApiKey.END_TXN: self.end_txn, ApiKey.TXN_OFFSET_COMMIT: self.txn_offset_commit}

    async def add_partitions_to_txn(self, request: Request) -> Reply:
        """``partitions`` [{topic, partition}] → ``partitions`` with an error code each (a refused
        one adds none: the others answer OPERATION_NOT_ATTEMPTED, as in Kafka). With ``verify_only``
        (brokers only: ClusterAction) nothing is added; each partition answers whether it is in the
        producer's ongoing transaction."""
        partitions = fields.unique([fields.topic_partition(p) for p in fields.partitions(request.body)],
                                   lambda p: p, "partitions")
        if fields.boolean(request.body, "verify_only", False):
            # a partition leader asking before it appends a transactional batch (KIP-890): adds nothing
            self.transactions.access.check_cluster(Operation.CLUSTER_ACTION)
            results = await self.transactions.verify_partitions(*_producer(request.body), partitions)
        elif _on_behalf(self.transactions, request.body):
            results = await self.transactions.add_partitions_to_txn(*_producer(request.body), partitions,
                                                                    on_behalf=True)
        else:
            results = await self.transactions.add_partitions_to_txn(*_producer(request.body), partitions)
        return Reply({**OK, "partitions": [
            {"topic": topic, "partition": index, **(error_fields(error) if error is not None else OK)}
            for (topic, index), error in results.items()]})

    async def add_offsets_to_txn(self, request: Request) -> Reply:
        await self.transactions.add_offsets_to_txn(*_producer(request.body), fields.string(request.body, "group_id"),
                                                   on_behalf=_on_behalf(self.transactions, request.body))
        return Reply(dict(OK))

    async def end_txn(self, request: Request) -> Reply:
        """``commit``: true to commit, false to abort; ``bump_epoch`` (optional, ember's client
        sends it): end at the next producer epoch, as Kafka's EndTxn v5 (transaction version 2).
        Answers the producer id and epoch to go on with."""
        commit = request.body.get("commit")
        if not isinstance(commit, bool):
            raise InvalidRequest("commit must be true or false")
        producer_id, producer_epoch = await self.transactions.end_txn(
            *_producer(request.body), commit, bump_epoch=fields.boolean(request.body, "bump_epoch", False))
        return Reply({**OK, "producer_id": producer_id, "producer_epoch": producer_epoch})

    async def txn_offset_commit(self, request: Request) -> Reply:
        """``group_id``, ``member_id``/``generation``/``group_instance_id`` (optional: the consumer's
        group metadata, checked as for a commit) and ``offsets`` [{topic, partition, offset,
        metadata}]; they all succeed or fail together (the top-level error)."""
        body = request.body
        transactional_id, producer_id, producer_epoch = _producer(body)
        offsets = {}
        for item in fields.partitions(body, "offsets"):
            tp = TopicPartition(*fields.topic_partition(item))
            offset = fields.integer(item, "offset", bits=fields.INT64)
            if offset < 0:
                raise InvalidRequest(f"offset {offset} for {tp.topic}-{tp.partition} is negative")
            offsets[tp] = (offset, fields.string(item, "metadata", ""))
        await self.offsets.commit(transactional_id, fields.string(body, "group_id"), producer_id, producer_epoch,
                                  fields.string(body, "member_id", ""), fields.integer(body, "generation", -1),
                                  offsets, fields.string(body, "group_instance_id", None))
        return Reply(dict(OK))
