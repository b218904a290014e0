"""Appending producers' batches at the partition leaders: the Produce work of both wire protocols.

Every partition's batch is appended first, then (acks=all) the replication waits run together,
so one slow partition does not delay the next one's append; once only those waits remain, the
connection reads its next request meanwhile (:mod:`ember.net.pipelining`: replies still go out in
request order). Both wire protocols pass batches as they came (ember's Arrow batches, Kafka's
RecordBatch v2: docs/log.md "Batch format"), and the log assigns offsets, orders and deduplicates
them from the header both share, whichever protocol wrote.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Awaitable, Iterable, Optional, Protocol, Sequence

from ember.errors import CorruptRecord, InvalidRecord, InvalidRequiredAcks
from ember.ingest.partition import Partition
from ember.ingest.replica_manager import ReplicaManager
from ember.net.pipelining import read_on
from ember.record.batch import iter_batches
from ember.record.control import is_transactional
from ember.record.header import HEADER_SIZE, BatchHeader, Buffer
from ember.security.authorizer.model import Operation, Resource, ResourceType

NO_TIMESTAMP = -1


@dataclass(frozen=True)
class Produced:
    """Where a partition's batch landed (an idempotent retry gets the original offsets)."""
    base_offset: int
    log_append_time: int        # -1 unless the topic uses LogAppendTime
    log_start_offset: int


@dataclass(frozen=True)
class ProduceEntry:
    topic: str
    partition: int
    batch: Buffer               # one or more stored-format batches (ember's or Kafka's, docs/log.md)


class TxnVerifier(Protocol):
    """Asks a transactional id's coordinator whether partitions are in the producer's ongoing
    transaction (``ember.ingest.transactions.verifier.PartitionVerifier``)."""

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], Optional[Exception]]: ...


def check_acks(acks: int) -> None:
    if acks not in (0, 1, -1):
        raise InvalidRequiredAcks(f"acks={acks}; use 0, 1 or -1 (all)")


async def append_at_leaders(replicas: ReplicaManager, entries: Sequence[ProduceEntry], acks: int,
                            timeout_s: float, transactional_id: str | None = None,
                            verifier: TxnVerifier | None = None) -> list[Produced | Exception]:
    """Per entry, in order: where it was appended, or the error that stopped it. A transactional
    producer's first batch at a partition (``transactional_id``) is appended only once its
    coordinator confirms the partition is in the producer's ongoing transaction (``verifier``:
    KIP-890's server-side defence), so a late or stray batch cannot open a transaction no marker
    will ever end."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    outcomes: list[Produced | Exception] = []
    waits: list[tuple[int, Awaitable[None]]] = []
    refused = _transactional_refusal(replicas, transactional_id)
    for entry in entries:
        try:
            if refused is not None:
                raise refused
            _check_transactional(entry.batch, transactional_id)
            produced, wait = await _append_one(replicas, entry, acks, deadline, transactional_id, verifier)
            if wait is not None:
                waits.append((len(outcomes), wait))
            outcomes.append(produced)
        except Exception as exc:
            outcomes.append(exc)
    if waits:
        read_on()    # only waits remain: the connection may read the next Produce meanwhile
    results = await asyncio.gather(*(wait for _, wait in waits), return_exceptions=True)
    for (position, _), result in zip(waits, results):
        if isinstance(result, Exception):
            outcomes[position] = result
        elif isinstance(result, BaseException):
            raise result
    return outcomes


async def _append_one(replicas: ReplicaManager, entry: ProduceEntry, acks: int, deadline: float,
                      transactional_id: str | None, verifier: TxnVerifier | None
                      ) -> tuple[Produced, Awaitable[None] | None]:
    """Append as leader: where it landed and, for acks=all, the replication wait."""
    check_acks(acks)
    replicas.access.check_topic(Operation.WRITE, entry.topic)
    partition = replicas.leader_partition(entry.topic, entry.partition)
    guard = await _verified(partition, entry, transactional_id, verifier)
    leader_epoch = partition.leader_epoch
    result = await partition.append(memoryview(entry.batch), acks, guard)
    wait = partition.wait_replicated(result.last_offset + 1, leader_epoch, deadline) if acks == -1 else None
    log_append_time = result.max_timestamp \
        if partition.config.message_timestamp_type == "LogAppendTime" else NO_TIMESTAMP
    return Produced(result.first_offset, log_append_time, partition.log.log_start_offset), wait


def _transactional_refusal(replicas: ReplicaManager, transactional_id: str | None) -> Exception | None:
    """A transactional Produce needs Write on its transactional id, checked before anything else,
    as Kafka does (every partition then answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""
    if transactional_id is None:
        return None
    try:
        replicas.access.check(Operation.WRITE, Resource(ResourceType.TRANSACTIONAL_ID, transactional_id))
    except Exception as exc:
        return exc
    return None


def _check_transactional(batch: Buffer, transactional_id: str | None) -> None:
    """Kafka's rule: a Produce's batches are transactional exactly when it names a transactional id
    (headers only: a malformed batch is refused by the append, which says where)."""
    try:
        if all(is_transactional(header) == (transactional_id is not None)
               for header, _ in iter_batches(batch, verify_crc=False)):
            return
    except CorruptRecord:
        return
    raise InvalidRecord("a transactional batch needs a Produce request with its transactional id, and a Produce "
                        "request with a transactional id needs transactional batches")


async def _verified(partition: Partition, entry: ProduceEntry, transactional_id: str | None,
                    verifier: TxnVerifier | None) -> object | None:
    """The verification guard a transactional batch that would open its producer's transaction
    here must present to be appended (None: no verification needed). Taken before asking the
    coordinator, so a marker written meanwhile (the transaction ended) voids it."""
    if transactional_id is None or verifier is None or len(entry.batch) < HEADER_SIZE:
        return None
    header = BatchHeader.parse(entry.batch)
    if not is_transactional(header) or partition.log.in_transaction(header.producer_id):
        return None
    guard = partition.verification_guard(header.producer_id)
    answers = await verifier.verify(transactional_id, header.producer_id, header.producer_epoch,
                                    [(entry.topic, entry.partition)])
    error = answers.get((entry.topic, entry.partition))
    if error is not None:
        partition.drop_verification_guard(header.producer_id, guard)
        raise error
    return guard
