"""Verification of transactional batches before their leaders append them (KIP-890's server-side
defence, Kafka's AddPartitionsToTxnManager on the leader's side).

A transactional producer's first batch at a partition (one whose producer has no transaction open
there at its epoch) is appended only once the transactional id's coordinator confirms the
partition is in the producer's ongoing transaction, so a late or stray batch cannot open a
transaction no marker will ever end. Under transaction version 2 (Kafka's Produce v12+) the
coordinator adds the partition instead (starting the transaction if none is open): the client
sends no AddPartitionsToTxn. A Produce's partitions are asked about in one request per producer,
so a transaction writing to many partitions costs the coordinator one write, not one per partition.

Each verified batch gets a guard (Kafka's VerificationGuard), taken before the coordinator is
asked: a marker written meanwhile (the transaction ended) voids it, and the batch is verified again.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Iterable, Optional, Protocol, Sequence

from ember.errors import (
    BrokerNotAvailable,
    ConcurrentTransactions,
    CoordinatorNotAvailable,
    InvalidProducerEpoch,
    NetworkError,
    NotCoordinator,
    NotEnoughReplicas,
    ProducerFenced,
    RequestTimedOut,
)
from ember.ingest.partition import Partition
from ember.record.control import is_transactional
from ember.record.header import HEADER_SIZE, BatchHeader, Buffer

#: Kafka's add.partitions.to.txn.retry.backoff.ms and .max.ms: how long a leader asks again while
#: the producer's previous transaction completes, before the producer is told to retry.
ADD_PARTITIONS_RETRY_BACKOFF_S = 0.02
ADD_PARTITIONS_RETRY_MAX_S = 0.1
#: Verifications a marker may void (the previous transaction's, arriving meanwhile) before giving up.
VERIFY_ATTEMPTS = 3

TopicPartition = tuple[str, int]

#: The guard of a transactional batch appended without verification because its producer's
#: transaction was open at the partition at the batch's epoch: the append checks that it still
#: is, under the partition's append lock (a marker may have ended it while the request waited).
OPEN_HERE = object()


class TxnVerifier(Protocol):
    """Asks a transactional id's coordinator whether partitions are in the producer's ongoing
    transaction, or (``add``) to add them to it
    (``ember.ingest.transactions.coordinator_client.TxnCoordinatorClient``)."""

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Iterable[TopicPartition],
                     add: bool = False) -> dict[TopicPartition, Optional[Exception]]: ...


@dataclass(frozen=True)
class Pending:
    """A batch to verify: where it goes and its producer."""
    partition: Partition
    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int


def is_transactional_batch(batch: Buffer) -> bool:
    return len(batch) >= HEADER_SIZE and is_transactional(BatchHeader.parse(batch))


def pending(partition: Partition, topic_partition: TopicPartition, batch: Buffer) -> Optional[Pending]:
    """What must be verified before ``batch`` is appended at ``partition`` (None: nothing)."""
    if not is_transactional_batch(batch):
        return None
    header = BatchHeader.parse(batch)
    if partition.log.in_transaction(header.producer_id, header.producer_epoch):
        return None
    return Pending(partition, topic_partition, header.producer_id, header.producer_epoch)


async def verify(verifier: TxnVerifier, transactional_id: str, batches: Sequence[Pending],
                 add: bool) -> list[object | Exception]:
    """Per batch, the guard to append it with or the error to answer its producer with. One
    request per producer; while its previous transaction completes (CONCURRENT_TRANSACTIONS) the
    coordinator is asked again for a moment, as Kafka's leaders do."""
    outcomes: dict[int, object | Exception] = {}
    by_producer: dict[tuple[int, int], list[int]] = {}
    for index, batch in enumerate(batches):
        by_producer.setdefault((batch.producer_id, batch.producer_epoch), []).append(index)
    loop = asyncio.get_running_loop()
    for (producer_id, producer_epoch), indexes in by_producer.items():
        give_up = loop.time() + ADD_PARTITIONS_RETRY_MAX_S
        while indexes:
            guards = {i: batches[i].partition.verification_guard(producer_id) for i in indexes}
            answers = await verifier.verify(transactional_id, producer_id, producer_epoch,
                                            [batches[i].topic_partition for i in indexes], add)
            waiting = []
            for i in indexes:
                # a failed verification leaves the guard: the producer's other requests may hold it (as Kafka)
                error = answers.get(batches[i].topic_partition)
                if error is None:
                    outcomes[i] = guards[i]
                elif isinstance(error, ConcurrentTransactions) and loop.time() < give_up:
                    waiting.append(i)
                else:
                    outcomes[i] = for_producer(error, add)
            indexes = waiting
            if indexes:
                await asyncio.sleep(ADD_PARTITIONS_RETRY_BACKOFF_S)
    return [outcomes[i] for i in range(len(batches))]


def for_producer(error: Exception, add: bool) -> Exception:
    """The coordinator's answer as a producer's Produce should get it (Kafka's mapping): a fenced
    epoch is INVALID_PRODUCER_EPOCH at a partition; the coordinator moving or unreachable is
    NOT_ENOUGH_REPLICAS, which every client retries; CONCURRENT_TRANSACTIONS only for transaction
    version 2's Produce (older clients do not retry it on a Produce)."""
    if isinstance(error, ProducerFenced):
        return InvalidProducerEpoch(str(error))
    if isinstance(error, (NotCoordinator, CoordinatorNotAvailable, BrokerNotAvailable, NetworkError,
                          RequestTimedOut)) or (isinstance(error, ConcurrentTransactions) and not add):
        return NotEnoughReplicas(f"transaction verification did not complete ({error}); retry")
    return error


async def still_verified(verifier: TxnVerifier, transactional_id: str, batch: Pending, raw: memoryview,
                         guard: object, add: bool) -> object:
    """``guard``, or a new one when the previous transaction's marker came in while the
    coordinator was asked and voided it (a few times at most); raises the coordinator's error."""
    for _ in range(VERIFY_ATTEMPTS - 1):
        if batch.partition.guard_holds(raw, guard):
            break
        (outcome,) = await verify(verifier, transactional_id, [batch], add)
        if isinstance(outcome, Exception):
            raise outcome
        guard = outcome
    return guard
