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

from ember.errors import CorruptRecord, InvalidRecord, InvalidRequiredAcks
from ember.ingest.partition import Partition
from ember.ingest.replica_manager import ReplicaManager
from ember.ingest.txn_verification import (
    OPEN_HERE,
    Pending,
    TxnVerifier,
    is_transactional_batch,
    pending,
    still_verified,
    verify,
)
from ember.net.pipelining import read_on
from ember.record.batch import iter_batches
from ember.record.control import is_transactional
from ember.record.header import Buffer
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


def check_acks(acks: int) -> None:
    if acks not in (0, 1, -1):
        raise InvalidRequiredAcks(f"acks={acks}; use 0, 1 or -1 (all)")


async def append_at_leaders(replicas: ReplicaManager, entries: Sequence[ProduceEntry], acks: int,
                            timeout_s: float, transactional_id: str | None = None,
                            verifier: TxnVerifier | None = None,
                            add_partitions: bool = False) -> list[Produced | Exception]:
    """Per entry, in order: where it was appended, or the error that stopped it. A transactional
    producer's first batch at a partition is verified with its coordinator first, or (with
    ``add_partitions``: transaction version 2, Kafka's Produce v12+) added to its transaction
    there (:mod:`ember.ingest.txn_verification`)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    refused = _transactional_refusal(replicas, transactional_id)
    targets: list[_Target | Exception] = []
    for entry in entries:
        try:
            targets.append(_target(replicas, entry, acks, transactional_id, verifier, refused))
        except Exception as exc:
            targets.append(exc)
    guards = await _verify(targets, transactional_id, verifier, add_partitions)
    outcomes: list[Produced | Exception] = []
    waits: list[tuple[int, Awaitable[None]]] = []
    for entry, target, guard in zip(entries, targets, guards):
        try:
            if isinstance(target, Exception):
                raise target
            if isinstance(guard, Exception):
                raise guard
            if target.pending is not None and transactional_id is not None and verifier is not None:
                guard = await still_verified(verifier, transactional_id, target.pending, memoryview(entry.batch),
                                             guard, add_partitions)
            elif target.open_here:
                guard = OPEN_HERE    # re-checked under the append lock: the transaction may have ended meanwhile
            produced, wait = await _append_one(target.partition, entry, acks, deadline, guard)
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


@dataclass(frozen=True)
class _Target:
    """Where an entry is appended, what must be verified first (None: nothing), and whether it
    skipped verification because its producer's transaction was open there at its epoch."""
    partition: Partition
    pending: Pending | None
    open_here: bool = False


def _target(replicas: ReplicaManager, entry: ProduceEntry, acks: int, transactional_id: str | None,
            verifier: TxnVerifier | None, refused: Exception | None) -> _Target:
    """The checks before anything is verified or appended (as Kafka: authorization, then the
    transactional rules, then leadership)."""
    if refused is not None:
        raise refused
    _check_transactional(entry.batch, transactional_id)
    check_acks(acks)
    replicas.access.check_topic(Operation.WRITE, entry.topic)
    partition = replicas.leader_partition(entry.topic, entry.partition)
    if transactional_id is None or verifier is None:
        return _Target(partition, None)
    needed = pending(partition, (entry.topic, entry.partition), entry.batch)
    return _Target(partition, needed, open_here=needed is None and is_transactional_batch(entry.batch))


async def _verify(targets: Sequence[_Target | Exception], transactional_id: str | None,
                  verifier: TxnVerifier | None, add: bool) -> list[object | Exception | None]:
    """Per target, its verification guard, the verification's error, or None (none needed)."""
    asked = {i: t.pending for i, t in enumerate(targets) if isinstance(t, _Target) and t.pending is not None}
    guards: list[object | Exception | None] = [None] * len(targets)
    if not asked or transactional_id is None or verifier is None:
        return guards
    found = await verify(verifier, transactional_id, list(asked.values()), add)
    for i, outcome in zip(asked, found):
        guards[i] = outcome
    return guards


async def _append_one(partition: Partition, entry: ProduceEntry, acks: int, deadline: float,
                      guard: object | None) -> tuple[Produced, Awaitable[None] | None]:
    """Append as leader: where it landed and, for acks=all, the replication wait."""
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
