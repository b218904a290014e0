"""Transaction operations of ``ember.client.Admin`` (``ember transactions``, as
``kafka-transactions.sh``): list and describe transactions at their coordinators, describe a
partition's producers at its leader, and abort a transaction left open at a partition (a hanging
transaction whose coordinator will never end it) by writing its abort marker there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from ember.client.metadata import MetadataClient
from ember.client.offsets import at_leaders
from ember.errors import InvalidRequest, error_for_code
from ember.wire.api_keys import ApiKey
from ember.wire.frame import response_error
from ember.wire.types import TopicPartition


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int                               # -1: no transaction open
    partitions: tuple[TopicPartition, ...]
    groups: tuple[str, ...]


@dataclass(frozen=True)
class ProducerState:
    """A producer as a partition's leader knows it (Kafka's DescribeProducers)."""
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int               # -1: no transaction open at this partition


class TransactionOperations:
    """The transaction half of :class:`ember.client.admin.Admin`, which inherits it."""

    _metadata: MetadataClient
    request_timeout_s: float

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = ()
                          ) -> list[TransactionListing]:
        """Every transactional id of the cluster (each broker lists those it coordinates), filtered
        by state names (Kafka's: Empty, Ongoing, PrepareCommit, ...) and producer ids."""
        self._metadata.refresh([])
        body = {"states": list(states), "producer_ids": list(producer_ids)}
        found: list[TransactionListing] = []
        for broker_id in sorted(self._metadata.brokers):
            answer = self._metadata.request(ApiKey.LIST_TRANSACTIONS, body, broker_id=broker_id).body
            _raise(answer)
            if answer.get("unknown_states"):
                raise InvalidRequest(f"unknown transaction states {answer['unknown_states']}: use Kafka's names "
                                     f"(Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, "
                                     f"PrepareEpochFence, Dead)")
            found += [TransactionListing(t["transactional_id"], t["producer_id"], t["state"])
                      for t in answer.get("transactions", [])]
        return sorted(found, key=lambda t: t.transactional_id)

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        """A transactional id's state at its coordinator (TransactionalIdNotFound if unknown)."""
        found = self._metadata.request(ApiKey.FIND_COORDINATOR, {"key": transactional_id, "key_type": 1}).body
        _raise(found)
        if found["node_id"] not in self._metadata.brokers:
            self._metadata.refresh([])
        answer = self._metadata.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]},
                                        broker_id=found["node_id"]).body
        _raise(answer)
        (item,) = answer["transactions"]
        if item.get("error_code"):
            raise error_for_code(item["error_code"], item.get("error_message") or transactional_id)
        return TransactionDescription(transactional_id, item["state"], item["producer_id"], item["producer_epoch"],
                                      item["timeout_ms"], item["start_ms"],
                                      tuple(TopicPartition(p["topic"], p["partition"]) for p in item["partitions"]),
                                      tuple(item["groups"]))

    def describe_producers(self, partition: TopicPartition) -> list[ProducerState]:
        """The producers the partition's leader knows, with the transaction each has open there."""
        found = at_leaders(self._metadata, ApiKey.DESCRIBE_PRODUCERS, {partition: {}}, self.request_timeout_s)
        return [ProducerState(**p) for p in found[partition].get("producers", [])]

    def abort_transaction(self, partition: TopicPartition, start_offset: int) -> ProducerState:
        """Write the abort marker of the transaction open at ``partition`` since ``start_offset``,
        with its producer's epoch and latest coordinator epoch (``kafka-transactions.sh abort
        --start-offset``); for a hanging transaction only: one its coordinator still knows ends
        by itself. Needs ClusterAction. Returns the producer it aborted."""
        candidates = [p for p in self.describe_producers(partition) if p.current_txn_start_offset == start_offset]
        if not candidates:
            raise InvalidRequest(f"no transaction is open at {partition.topic}-{partition.partition} since offset "
                                 f"{start_offset}; `ember transactions producers` lists the open ones")
        producer = candidates[0]
        found = at_leaders(self._metadata, ApiKey.WRITE_TXN_MARKERS, {partition: {}}, self.request_timeout_s,
                           {"producer_id": producer.producer_id, "producer_epoch": producer.producer_epoch,
                            "coordinator_epoch": producer.coordinator_epoch, "commit": False})
        if found[partition].get("error_code"):
            raise error_for_code(found[partition]["error_code"], found[partition].get("error_message") or "abort")
        return producer


def _raise(body: dict[str, Any]) -> None:
    error = response_error(body)
    if error is not None:
        raise error

