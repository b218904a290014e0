"""Transactions over Kafka's protocol: AddPartitionsToTxn (the client form, v0-3, and the batched
broker form with ``verify_only``, v4+), AddOffsetsToTxn, TxnOffsetCommit, EndTxn, WriteTxnMarkers,
DescribeTransactions and ListTransactions. Translation only: the work is the broker core's
transaction coordinator (``ember.ingest.transactions``); InitProducerId and FindCoordinator
(key type 1) are in their own families' handlers.

Versions: transaction versions 1 and 2 (KIP-890 part 2; the ``transaction.version`` feature is
finalized at 2 in ApiVersions, so Kafka 4 clients use it): EndTxn v5 bumps the producer epoch and
answers the epoch to go on with, TxnOffsetCommit v5 adds the group to the transaction itself (no
AddOffsetsToTxn), and the partitions are added by their leaders when Produce v12+ writes to them.
Clients before KIP-588 get INVALID_PRODUCER_EPOCH where newer ones get PRODUCER_FENCED, as in Kafka.
"""
from __future__ import annotations

import datetime
from typing import Any, Optional

from ember.errors import InvalidProducerEpoch, ProducerFenced
from ember.ingest.core import BrokerCore
from ember.ingest.partition import Partition as Replica
from ember.ingest.replica_manager import LeaderQuery
from ember.ingest.transactions.state import Partition
from ember.ingest.txn_markers import TxnMarker
from ember.log.producer_state import ActiveProducer
from ember.protocol.kafka.codec import KafkaRequest, build, response_class
from ember.protocol.kafka.dispatcher import Api
from ember.security.authorizer.model import Operation
from ember.wire.api_keys import ApiKey
from ember.wire.reply import OK, error_fields
from ember.wire.types import TopicPartition

#: The first version of each API whose clients know PRODUCER_FENCED (KIP-588).
_FENCED_SINCE = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2, ApiKey.ADD_OFFSETS_TO_TXN: 2,
                 ApiKey.END_TXN: 2, ApiKey.TXN_OFFSET_COMMIT: 3}
#: AddPartitionsToTxn v4+ is the batched form brokers send (KIP-890).
BROKER_FORM_VERSION = 4
#: EndTxn and TxnOffsetCommit v5 are transaction version 2's (KIP-890 part 2).
TV2_VERSION = 5


def for_version(exc: Exception, api_key: ApiKey, version: int) -> Exception:
    """``exc`` as a client of this version understands it."""
    if isinstance(exc, ProducerFenced) and version < _FENCED_SINCE[api_key]:
        return InvalidProducerEpoch(str(exc))
    return exc


def producer_error(exc: Exception, api_key: ApiKey, version: int) -> dict[str, Any]:
    return error_fields(for_version(exc, api_key, version))


class TransactionHandlers:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    def apis(self) -> dict[int, Api]:
        return {ApiKey.ADD_PARTITIONS_TO_TXN: Api(0, 5, self.add_partitions_to_txn),
                ApiKey.ADD_OFFSETS_TO_TXN: Api(0, 4, self.add_offsets_to_txn),
                ApiKey.END_TXN: Api(0, TV2_VERSION, self.end_txn),
                ApiKey.TXN_OFFSET_COMMIT: Api(0, TV2_VERSION, self.txn_offset_commit),
                ApiKey.WRITE_TXN_MARKERS: Api(1, 1, self.write_txn_markers),
                ApiKey.DESCRIBE_TRANSACTIONS: Api(0, 0, self.describe_transactions),
                ApiKey.LIST_TRANSACTIONS: Api(0, 2, self.list_transactions),
                ApiKey.DESCRIBE_PRODUCERS: Api(0, 0, self.describe_producers)}

    # -- AddPartitionsToTxn --------------------------------------------------------------------

    async def add_partitions_to_txn(self, request: KafkaRequest) -> Any:
        body, version = request.body, request.api_version
        cls = response_class(ApiKey.ADD_PARTITIONS_TO_TXN, version)
        if version < BROKER_FORM_VERSION:
            partitions = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
            results = await self._add(body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                                      body.v3_and_below_producer_epoch, False, partitions, version)
            return build(cls, {"results_by_topic_v3_and_below": _topic_results(results)})
        try:
            self.core.access.check_cluster(Operation.CLUSTER_ACTION)
        except Exception as exc:
            return build(cls, {**error_fields(exc), "results_by_transaction": []})
        transactions = []
        for txn in body.transactions:
            partitions = [(t.name, p) for t in txn.topics for p in t.partitions]
            results = await self._add(txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.verify_only,
                                      partitions, version)
            transactions.append({"transactional_id": txn.transactional_id, "topic_results": _topic_results(results)})
        return build(cls, {**OK, "results_by_transaction": transactions})

    async def _add(self, transactional_id: str, producer_id: int, producer_epoch: int, verify_only: bool,
                   partitions: list[Partition], version: int) -> dict[Partition, Optional[Exception]]:
        try:
            if verify_only:
                return await self.core.transactions.verify_partitions(transactional_id, producer_id, producer_epoch,
                                                                partitions)
            return await self.core.transactions.add_partitions_to_txn(
                transactional_id, producer_id, producer_epoch, partitions,
                on_behalf=version >= BROKER_FORM_VERSION)   # a leader adding for a TV2 producer (ClusterAction)
        except Exception as exc:
            return {p: for_version(exc, ApiKey.ADD_PARTITIONS_TO_TXN, version) for p in partitions}

    # -- AddOffsetsToTxn, TxnOffsetCommit, EndTxn ------------------------------------------------

    async def add_offsets_to_txn(self, request: KafkaRequest) -> Any:
        body = request.body
        try:
            await self.core.transactions.add_offsets_to_txn(body.transactional_id, body.producer_id, body.producer_epoch,
                                                      body.group_id)
            outcome = dict(OK)
        except Exception as exc:
            outcome = producer_error(exc, ApiKey.ADD_OFFSETS_TO_TXN, request.api_version)
        return build(response_class(ApiKey.ADD_OFFSETS_TO_TXN, request.api_version), outcome)

    async def txn_offset_commit(self, request: KafkaRequest) -> Any:
        """Sent to the group's coordinator; all partitions succeed or fail together."""
        body = request.body
        offsets = {TopicPartition(t.name, p.partition_index): (p.committed_offset, p.committed_metadata or "")
                   for t in body.topics for p in t.partitions}
        try:
            await self.core.txn_offsets.commit(body.transactional_id, body.group_id, body.producer_id,
                                               body.producer_epoch, getattr(body, "member_id", ""),
                                               getattr(body, "generation_id", -1), offsets,
                                               getattr(body, "group_instance_id", None),
                                               add_group=request.api_version >= TV2_VERSION)
            outcome = dict(OK)
        except Exception as exc:
            outcome = producer_error(exc, ApiKey.TXN_OFFSET_COMMIT, request.api_version)
        topics = [{"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                                   "error_code": outcome["error_code"]} for p in t.partitions]}
                  for t in body.topics]
        return build(response_class(ApiKey.TXN_OFFSET_COMMIT, request.api_version), {"topics": topics})

    async def end_txn(self, request: KafkaRequest) -> Any:
        body = request.body
        try:
            producer_id, producer_epoch = await self.core.transactions.end_txn(
                body.transactional_id, body.producer_id, body.producer_epoch, body.committed,
                bump_epoch=request.api_version >= TV2_VERSION)
            outcome = {**OK, "producer_id": producer_id, "producer_epoch": producer_epoch}
        except Exception as exc:
            outcome = producer_error(exc, ApiKey.END_TXN, request.api_version)
        return build(response_class(ApiKey.END_TXN, request.api_version), outcome)

    # -- WriteTxnMarkers -----------------------------------------------------------------------

    async def write_txn_markers(self, request: KafkaRequest) -> Any:
        """Markers for partitions this broker leads (Kafka's coordinators send them; ember's send
        them over ember's protocol). Kafka's rule: ClusterAction on the cluster."""
        body = request.body
        markers = [TxnMarker(m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_result,
                             tuple((t.name, p) for t in m.topics for p in t.partition_indexes))
                   for m in body.markers]
        try:
            self.core.access.check_cluster(Operation.CLUSTER_ACTION)
            results = await self.core.txn_markers.write_many(markers)
        except Exception as exc:
            results = [{p: exc for p in marker.partitions} for marker in markers]
        answers = [{"producer_id": marker.producer_id, "topics": [
            {"name": t["name"], "partitions": [{"partition_index": r["partition_index"], "error_code": r["partition_error_code"]}
                                               for r in t["results_by_partition"]]}
            for t in _topic_results(result)]} for marker, result in zip(markers, results)]
        return build(response_class(ApiKey.WRITE_TXN_MARKERS, request.api_version), {"markers": answers})

    # -- DescribeProducers, DescribeTransactions, ListTransactions --------------------------------

    async def describe_producers(self, request: KafkaRequest) -> Any:
        """Each partition's producers at its leader, with the transaction each has open there
        (``kafka-transactions.sh describe-producers``, ``find-hanging``, ``abort --start-offset``).
        Read on the topic, as Kafka."""
        async def producers(partition: Replica, _: None) -> list[ActiveProducer]:
            return await partition.active_producers()
        topics = []
        for topic in request.body.topics:
            queries = [LeaderQuery(topic.name, index, None, None) for index in topic.partition_indexes]
            answers = await self.core.replicas.answer_at_leader(queries, producers, Operation.READ)
            topics.append({"name": topic.name, "partitions": [
                {"partition_index": a.partition, **(error_fields(a.error) if a.error else {**OK, "error_message": None}),
                 "active_producers": [p._asdict() for p in a.value or ()]} for a in answers]})
        return build(response_class(ApiKey.DESCRIBE_PRODUCERS, request.api_version), {"topics": topics})


    async def describe_transactions(self, request: KafkaRequest) -> Any:
        found = await self.core.transactions.describe(request.body.transactional_ids)
        states = []
        for transactional_id in request.body.transactional_ids:
            meta = found[transactional_id]
            if isinstance(meta, Exception):
                states.append({**error_fields(meta), "transactional_id": transactional_id, "transaction_state": "",
                               "transaction_timeout": 0, "transaction_start_time": _timestamp(-1), "producer_id": -1,
                               "producer_epoch": -1, "topics": []})
                continue
            by_topic: dict[str, list[int]] = {}
            for topic, index in sorted(meta.partitions):
                by_topic.setdefault(topic, []).append(index)
            states.append({**OK, "transactional_id": transactional_id, "transaction_state": meta.state.value,
                           "transaction_timeout": meta.timeout_ms, "transaction_start_time": _timestamp(meta.start_ms),
                           "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
                           "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]})
        return build(response_class(ApiKey.DESCRIBE_TRANSACTIONS, request.api_version), {"transaction_states": states})

    async def list_transactions(self, request: KafkaRequest) -> Any:
        body = request.body
        cls = response_class(ApiKey.LIST_TRANSACTIONS, request.api_version)
        try:
            found, unknown = self.core.transactions.list_transactions(
                body.state_filters, body.producer_id_filters, getattr(body, "duration_filter", -1),
                getattr(body, "transactional_id_pattern", None))
        except Exception as exc:
            return build(cls, {**error_fields(exc), "unknown_state_filters": [], "transaction_states": []})
        return build(cls, {**OK, "unknown_state_filters": unknown, "transaction_states": [
            {"transactional_id": m.transactional_id, "producer_id": m.producer_id,
             "transaction_state": m.state.value} for m in found]})


def _timestamp(ms: int) -> datetime.datetime:
    """A timestamp field that may be -1 (no transaction open), which the codec would make null."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)


def _topic_results(results: dict[Partition, Optional[Exception]]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), error in results.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": index,
             "partition_error_code": error_fields(error)["error_code"] if error is not None else 0})
    return [{"name": topic, "results_by_partition": parts} for topic, parts in by_topic.items()]
