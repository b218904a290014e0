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

from ember.errors import ConcurrentTransactions, InvalidProducerEpoch, ProducerFenced
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


def pending(partition: Partition, topic_partition: TopicPartition, batch: Buffer) -> Optional[Pending]:
    """What must be verified before ``batch`` is appended at ``partition`` (None: nothing)."""
    if len(batch) < HEADER_SIZE:
        return None
    header = BatchHeader.parse(batch)
    if not is_transactional(header) or partition.log.in_transaction(header.producer_id, header.producer_epoch):
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
                error = answers.get(batches[i].topic_partition)
                if error is None:
                    outcomes[i] = guards[i]
                    continue
                batches[i].partition.drop_verification_guard(producer_id, guards[i])
                if isinstance(error, ConcurrentTransactions) and loop.time() < give_up:
                    waiting.append(i)
                else:
                    # a producer hears of its fenced epoch as INVALID_PRODUCER_EPOCH at a partition, as in Kafka
                    outcomes[i] = InvalidProducerEpoch(str(error)) if isinstance(error, ProducerFenced) else error
            indexes = waiting
            if indexes:
                await asyncio.sleep(ADD_PARTITIONS_RETRY_BACKOFF_S)
    return [outcomes[i] for i in range(len(batches))]


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
