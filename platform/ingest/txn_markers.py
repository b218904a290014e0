"""Writing transaction markers at the partition leaders: the WriteTxnMarkers work of both wire
protocols, asked by a transaction coordinator once a transaction's outcome is durable.

Each marker is a control batch appended by the leader (``Partition.write_marker``) and answered
once every in-sync replica has it, as Kafka appends markers with acks=all: a coordinator marks a
transaction complete only when no leader change can lose a marker. All partitions are appended
first, then the replication waits run together.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Awaitable, Sequence

from ember.ingest.replica_manager import ReplicaManager
from ember.record.control import Marker

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class TxnMarker:
    """One producer's transaction outcome, for the partitions of it this broker leads."""
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]


async def write_txn_markers(replicas: ReplicaManager, markers: Sequence[TxnMarker],
                            timeout_s: float) -> list[dict[TopicPartition, Exception | None]]:
    """Per marker, per partition: None once written and replicated, else the error (a partition
    this broker does not lead: NOT_LEADER_OR_FOLLOWER, the coordinator retries at the new leader)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    outcomes: list[dict[TopicPartition, Exception | None]] = []
    waits: list[tuple[int, TopicPartition, Awaitable[None]]] = []
    for position, txn in enumerate(markers):
        outcome: dict[TopicPartition, Exception | None] = {}
        marker = Marker(txn.producer_id, txn.producer_epoch, txn.commit, txn.coordinator_epoch)
        for topic, index in txn.partitions:
            try:
                partition = replicas.leader_partition(topic, index)
                leader_epoch = partition.leader_epoch
                written = await partition.write_marker(marker)
                waits.append((position, (topic, index),
                              partition.wait_replicated(written.last_offset + 1, leader_epoch, deadline)))
                outcome[(topic, index)] = None
            except Exception as exc:
                outcome[(topic, index)] = exc
        outcomes.append(outcome)
    results = await asyncio.gather(*(wait for _, _, wait in waits), return_exceptions=True)
    for (position, key, _), result in zip(waits, results):
        if isinstance(result, Exception):
            outcomes[position][key] = result
        elif isinstance(result, BaseException):
            raise result
    return outcomes
