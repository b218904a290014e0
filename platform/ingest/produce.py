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
from typing import Awaitable, Sequence

from ember.errors import InvalidRequiredAcks
from ember.ingest.replica_manager import ReplicaManager
from ember.net.pipelining import read_on
from ember.record.header import Buffer
from ember.security.authorizer.model import Operation

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


def check_acks(acks: int) -> None:
    if acks not in (0, 1, -1):
        raise InvalidRequiredAcks(f"acks={acks}; use 0, 1 or -1 (all)")


async def append_at_leaders(replicas: ReplicaManager, entries: Sequence[ProduceEntry], acks: int,
                            timeout_s: float) -> list[Produced | Exception]:
    """Per entry, in order: where it was appended, or the error that stopped it."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    outcomes: list[Produced | Exception] = []
    waits: list[tuple[int, Awaitable[None]]] = []
    for entry in entries:
        try:
            produced, wait = await _append_one(replicas, entry, acks, deadline)
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


async def _append_one(replicas: ReplicaManager, entry: ProduceEntry, acks: int,
                      deadline: float) -> tuple[Produced, Awaitable[None] | None]:
    """Append as leader: where it landed and, for acks=all, the replication wait."""
    check_acks(acks)
    replicas.access.check_topic(Operation.WRITE, entry.topic)
    partition = replicas.leader_partition(entry.topic, entry.partition)
    leader_epoch = partition.leader_epoch
    result = await partition.append(memoryview(entry.batch), acks)
    wait = partition.wait_replicated(result.last_offset + 1, leader_epoch, deadline) if acks == -1 else None
    log_append_time = result.max_timestamp \
        if partition.config.message_timestamp_type == "LogAppendTime" else NO_TIMESTAMP
    return Produced(result.first_offset, log_append_time, partition.log.log_start_offset), wait
