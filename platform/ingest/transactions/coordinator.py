"""The transaction coordinator: the one object the protocol handlers call for the transactional
ids this broker coordinates (Kafka's TransactionCoordinator).

The coordinator of a transactional id is the group rule, ``sorted(live broker ids)[crc32(id) % n]``
(:func:`ember.groups.coordinator.coordinator_id`). Its metadata lives in ZooKeeper
(:class:`TransactionStore`, compare-and-set), memory holds the ids this broker coordinates, loaded
when the mapping gives them to it. Every state change is stored before it takes effect: a
PrepareCommit/PrepareAbort is durable before the first marker is written, so whichever broker
coordinates the id next finishes the same decision. The first write of a coordinator to an id bumps
its coordinator epoch, which the markers carry and which fences the previous coordinator's markers;
its stale writes fail the compare-and-set.

Fencing: InitProducerId bumps the producer epoch (a new producer id when the epoch is exhausted),
aborting a transaction the previous instance left open (completing one it had prepared) first; the
old instance's requests then get PRODUCER_FENCED. A transaction that runs past its
``transaction.timeout.ms`` is aborted with a bumped epoch, so its producer is fenced too.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from ember.cluster.metadata_cache import MetadataCache
from ember.cluster.producer_ids import ProducerIdAllocator
from ember.cluster.records import BrokerInfo
from ember.errors import (
    ConcurrentTransactions,
    CoordinatorNotAvailable,
    EmberError,
    InvalidProducerIdMapping,
    InvalidRequest,
    InvalidTransactionTimeout,
    InvalidTxnState,
    NotCoordinator,
    OperationNotAttempted,
    ProducerFenced,
    TransactionalIdNotFound,
    TransactionCoordinatorFenced,
    UnknownTopicOrPartition,
)
from ember.groups.coordinator import coordinator_id, validate_group_id
from ember.groups.store import GroupStore
from ember.ingest.transactions.markers import MarkerWriter
from ember.ingest.transactions.state import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    Partition,
    TransactionMetadata,
    TxnState,
)
from ember.ingest.transactions.store import TransactionConflict, TransactionStore
from ember.security.authorizer.access import ALLOW_ALL, Access
from ember.security.authorizer.model import Operation, Resource, ResourceType

log = logging.getLogger(__name__)

TICK_S = 0.5


@dataclass(frozen=True)
class TransactionConfig:
    """Kafka's broker settings of the coordinator, and how it retries markers."""
    max_timeout_ms: int = 900000
    id_expiration_ms: int = 604800000
    abort_check_interval_ms: int = 10000
    #: Markers of one completion are retried (with backoff) this long, then again at the next check.
    marker_deadline_s: float = 30.0
    marker_backoff_s: float = 0.05
    #: How long InitProducerId and EndTxn wait for a completion before answering.
    completion_wait_s: float = 5.0


class _Entry:
    """One transactional id in memory: its metadata, the znode version it was read or written at,
    and the completion (marker writing) running for it."""

    def __init__(self, meta: TransactionMetadata, version: Optional[int]) -> None:
        self.meta = meta
        self.version = version
        #: This coordinator has written the id (and so bumped its coordinator epoch).
        self.claimed = False
        self.completing: Optional[asyncio.Task[None]] = None


def validate_transactional_id(transactional_id: str) -> None:
    """Transactional ids are UTF-8 (hashed to pick the coordinator, quoted into a ZooKeeper path):
    not empty, '.' or '..', and no lone surrogate (which has no UTF-8 form)."""
    if transactional_id in ("", ".", "..") or _SURROGATE.search(transactional_id):
        raise InvalidRequest(f"transactional id {transactional_id!r} is not allowed")


_SURROGATE = re.compile("[\ud800-\udfff]")


class TransactionCoordinator:
    def __init__(self, broker_id: int, cache: MetadataCache, store: TransactionStore,
                 producer_ids: ProducerIdAllocator, writer: MarkerWriter, group_offsets: GroupStore,
                 config: TransactionConfig = TransactionConfig(), access: Access = ALLOW_ALL,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.broker_id = broker_id
        self.cache = cache
        self.store = store
        self.producer_ids = producer_ids
        self.writer = writer
        self.group_offsets = group_offsets
        self.config = config
        self.access = access
        self.clock_ms = clock_ms
        self.entries: dict[str, _Entry] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._brokers: Optional[frozenset[int]] = None
        self._last_check = 0.0
        self._ticker: Optional[asyncio.Task[None]] = None

    def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())

    async def close(self) -> None:
        tasks = [t for t in [self._ticker, *(e.completing for e in self.entries.values())] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.entries.clear()

    # -- ownership ---------------------------------------------------------------------------

    def coordinator_broker(self, transactional_id: str) -> BrokerInfo:
        """The live broker that coordinates ``transactional_id`` (FindCoordinator, key type 1)."""
        validate_transactional_id(transactional_id)
        self.access.check(Operation.DESCRIBE, _resource(transactional_id))
        brokers = self.cache.brokers()
        node = coordinator_id(transactional_id, brokers)
        if node is None:
            raise CoordinatorNotAvailable("no live broker can coordinate transactions")
        return brokers[node]

    def owns(self, transactional_id: str) -> bool:
        return coordinator_id(transactional_id, self.cache.brokers()) == self.broker_id

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        return self._locks.setdefault(transactional_id, asyncio.Lock())

    async def _entry(self, transactional_id: str) -> Optional[_Entry]:
        """This broker's entry of ``transactional_id`` (loaded from ZooKeeper on first use), None
        for an id without metadata; NOT_COORDINATOR unless this broker coordinates it."""
        self._check_owned(transactional_id)
        entry = self.entries.get(transactional_id)
        if entry is None:
            meta, version = await asyncio.to_thread(self.store.load, transactional_id)
            if meta is None:
                return None
            entry = self.entries.setdefault(transactional_id, _Entry(meta, version))
        return entry

    def _check_owned(self, transactional_id: str) -> None:
        validate_transactional_id(transactional_id)
        if not self.owns(transactional_id):
            raise NotCoordinator(f"broker {self.broker_id} is not the coordinator of transactional id "
                                 f"{transactional_id!r}")

    async def _current(self, transactional_id: str) -> Optional[_Entry]:
        """The entry as ZooKeeper holds it now. What this broker holds is stale once another
        coordinator wrote the id (the mapping moved while brokers came and went, and each held the
        id for a moment): a write would fail its compare-and-set, but an answer given from memory
        without a write (a retried EndTxn, a verification, a partition already added) would not,
        so those read the znode's version first and take the stored metadata when it moved."""
        self._check_owned(transactional_id)
        entry = self.entries.get(transactional_id)
        meta, version = await asyncio.to_thread(self.store.load, transactional_id)
        if entry is not None and version == entry.version:
            return entry
        if entry is not None and self.entries.get(transactional_id) is entry:
            del self.entries[transactional_id]
        if meta is None:
            return None
        if entry is not None:
            log.info("transactional id %s: another coordinator wrote it; taking the stored state", transactional_id)
        return self.entries.setdefault(transactional_id, _Entry(meta, version))

    async def _save(self, entry: _Entry, meta: TransactionMetadata) -> None:
        """Store ``meta`` (compare-and-set), then let it take effect. A conflict means another
        coordinator wrote the id: the entry is dropped (reloaded on next use) and the client told
        NOT_COORDINATOR, so it looks the coordinator up again."""
        if not entry.claimed:
            meta = dataclasses.replace(meta, coordinator=self.broker_id,
                                       coordinator_epoch=entry.meta.coordinator_epoch + 1)
        try:
            version = await asyncio.to_thread(self.store.save, meta, entry.version)
        except TransactionConflict as exc:
            if self.entries.get(meta.transactional_id) is entry:
                del self.entries[meta.transactional_id]
            raise NotCoordinator(f"transactional id {meta.transactional_id!r} was written by another "
                                 f"coordinator; find the coordinator again") from exc
        entry.meta, entry.version, entry.claimed = meta, version, True

    # -- InitProducerId ----------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int,
                               producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1) -> tuple[int, int]:
        """(producer id, epoch) of a new transactional producer instance. The previous instance's
        open transaction is aborted (a prepared one completed) first; with ``producer_id`` and
        ``producer_epoch`` (KIP-360) only that producer may bump its epoch."""
        validate_transactional_id(transactional_id)
        self.access.check(Operation.WRITE, _resource(transactional_id))
        if not 0 < transaction_timeout_ms <= self.config.max_timeout_ms:
            raise InvalidTransactionTimeout(f"transaction.timeout.ms={transaction_timeout_ms} is not in "
                                            f"(0, transaction.max.timeout.ms={self.config.max_timeout_ms}]")
        for _ in range(3):      # at most: fence the open transaction, wait for it, then bump
            async with self._lock(transactional_id):
                entry = await self._current(transactional_id)
                if entry is None:
                    return await self._new_id(transactional_id, transaction_timeout_ms)
                meta = entry.meta
                if meta.state == TxnState.ONGOING:
                    await self._prepare(entry, commit=False, fence=True,
                                        for_new_instance=producer_id == NO_PRODUCER_ID)
                if not entry.meta.state.preparing:
                    return await self._bump(entry, transaction_timeout_ms, producer_id, producer_epoch)
                completing = self._completion(transactional_id, entry)
            await self._wait(completing)
        raise ConcurrentTransactions(f"the previous transaction of {transactional_id!r} is still completing")

    async def _new_id(self, transactional_id: str, timeout_ms: int) -> tuple[int, int]:
        pid = await asyncio.to_thread(self.producer_ids.next_id)
        now = self.clock_ms()
        entry = _Entry(TransactionMetadata(transactional_id, pid, 0, timeout_ms, update_ms=now), None)
        await self._save(entry, entry.meta)
        self.entries[transactional_id] = entry
        return pid, 0

    async def _bump(self, entry: _Entry, timeout_ms: int, producer_id: int, producer_epoch: int) -> tuple[int, int]:
        meta = entry.meta
        if producer_id != NO_PRODUCER_ID:
            if (producer_id, producer_epoch) == (meta.last_producer_id, meta.last_producer_epoch):
                # a retry whose answer was lost, or a producer whose transaction the coordinator
                # aborted on timeout with a bumped epoch: it carries on with that epoch
                return meta.producer_id, meta.producer_epoch
            if (producer_id, producer_epoch) != (meta.producer_id, meta.producer_epoch):
                raise ProducerFenced(f"producer {producer_id} epoch {producer_epoch} is not the current "
                                     f"producer of {meta.transactional_id!r}")
        if meta.producer_epoch >= MAX_PRODUCER_EPOCH:
            pid, epoch = await asyncio.to_thread(self.producer_ids.next_id), 0
        else:
            pid, epoch = meta.producer_id, meta.producer_epoch + 1
        await self._save(entry, meta.with_producer(pid, epoch, self.clock_ms(), timeout_ms,
                                                   continuing=producer_id != NO_PRODUCER_ID))
        return pid, epoch

    # -- the transaction's partitions and groups ---------------------------------------------

    async def add_partitions_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                    partitions: Iterable[Partition],
                                    on_behalf: bool = False) -> dict[Partition, Optional[Exception]]:
        """Add partitions to the producer's transaction (starting one); per partition None or its
        error. A partition that cannot be added (unknown, not authorized) adds none: the others
        get OPERATION_NOT_ATTEMPTED, as in Kafka. ``on_behalf``: a partition leader adding the
        partition a transaction version 2 producer wrote to (KIP-890: no AddPartitionsToTxn from
        the client), which authorized that producer's Produce itself."""
        validate_transactional_id(transactional_id)
        if not on_behalf:
            self.access.check(Operation.WRITE, _resource(transactional_id))
        wanted = list(dict.fromkeys(partitions))
        refused = {} if on_behalf else self._refused_partitions(wanted)
        if refused:
            return {p: refused.get(p) or OperationNotAttempted(f"{p[0]}-{p[1]} not added: another partition "
                                                                f"of the request was refused") for p in wanted}
        await self._add(transactional_id, producer_id, producer_epoch, wanted, ())
        return {p: None for p in wanted}

    def _refused_partitions(self, partitions: list[Partition]) -> dict[Partition, Exception]:
        topics = self.cache.topics()
        refused: dict[Partition, Exception] = {}
        for topic, index in partitions:
            try:
                self.access.check_topic(Operation.WRITE, topic)
                if topic not in topics or index not in topics[topic].partitions:
                    raise UnknownTopicOrPartition(f"{topic}-{index} does not exist")
            except EmberError as exc:
                refused[(topic, index)] = exc
        return refused

    async def add_offsets_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                 group_id: str, on_behalf: bool = False) -> None:
        """Make the group's offsets part of the transaction (TxnOffsetCommit to the group follows).
        ``on_behalf``: the group's coordinator adding it for a TxnOffsetCommit v5 (transaction
        version 2), which authorized the producer itself."""
        validate_transactional_id(transactional_id)
        validate_group_id(group_id)
        if not on_behalf:
            self.access.check(Operation.WRITE, _resource(transactional_id))
            self.access.check_group(Operation.READ, group_id)
        await self._add(transactional_id, producer_id, producer_epoch, (), (group_id,))

    async def _add(self, transactional_id: str, producer_id: int, producer_epoch: int,
                   partitions: Iterable[Partition], groups: Iterable[str]) -> None:
        async with self._lock(transactional_id):
            entry = await self._producer_entry(transactional_id, producer_id, producer_epoch)
            meta = entry.meta
            if meta.state.preparing:
                raise ConcurrentTransactions(f"the previous transaction of {transactional_id!r} is completing")
            new = meta.begin_or_add(self.clock_ms(), partitions, groups)
            if new.state == meta.state and new.partitions == meta.partitions and new.groups == meta.groups:
                return
            await self._save(entry, new)

    async def _producer_entry(self, transactional_id: str, producer_id: int, producer_epoch: int) -> _Entry:
        """The entry as stored now, if ``producer_id``/``producer_epoch`` is its current producer."""
        return self._of_producer(await self._current(transactional_id), transactional_id, producer_id, producer_epoch)

    @staticmethod
    def _of_producer(entry: Optional[_Entry], transactional_id: str, producer_id: int, producer_epoch: int) -> _Entry:
        """``entry``, if ``producer_id``/``producer_epoch`` is its current producer."""
        if entry is not None and entry.meta.state.preparing and \
                entry.meta.client_producer == (producer_id, producer_epoch):
            # a transaction version 2 producer starting its next transaction at the epoch (or id)
            # EndTxn gave it, before the markers of the previous one are all written
            raise ConcurrentTransactions(f"the previous transaction of {transactional_id!r} is completing")
        if entry is None or entry.meta.producer_id != producer_id:
            raise InvalidProducerIdMapping(f"producer {producer_id} does not hold transactional id "
                                           f"{transactional_id!r}")
        if entry.meta.producer_epoch != producer_epoch:
            raise ProducerFenced(f"producer {producer_id} epoch {producer_epoch} of {transactional_id!r} was "
                                 f"fenced (current epoch {entry.meta.producer_epoch})")
        return entry

    async def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                partitions: Iterable[Partition]) -> dict[Partition, Optional[Exception]]:
        """AddPartitionsToTxn v4+ ``verify_only`` (a partition leader asking before it appends a
        transactional batch): None for each partition in the producer's ongoing transaction."""
        wanted = list(dict.fromkeys(partitions))
        try:
            entry = await self._producer_entry(transactional_id, producer_id, producer_epoch)
        except EmberError as exc:
            return {p: exc for p in wanted}
        meta = entry.meta
        return {p: None if meta.state == TxnState.ONGOING and p in meta.partitions
                else InvalidTxnState(f"{p[0]}-{p[1]} is not in an ongoing transaction of {transactional_id!r}")
                for p in wanted}

    # -- EndTxn and completion ---------------------------------------------------------------

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                      bump_epoch: bool = False) -> tuple[int, int]:
        """Commit or abort the producer's transaction: PrepareCommit/PrepareAbort is stored, then
        the markers are written (answering waits for them a while, then lets them finish). The
        producer id and epoch to go on with are returned: with ``bump_epoch`` (transaction version
        2, EndTxn v5) the next epoch, which the decision and the markers carry, so nothing the
        producer sent at the old epoch can join a later transaction (KIP-890)."""
        validate_transactional_id(transactional_id)
        self.access.check(Operation.WRITE, _resource(transactional_id))
        async with self._lock(transactional_id):
            entry = await self._current(transactional_id)
            if bump_epoch and entry is not None and self._is_bumped_retry(entry.meta, producer_id, producer_epoch, commit):
                if entry.meta.state.preparing:
                    raise ConcurrentTransactions(f"the transaction of {transactional_id!r} is completing")
                return entry.meta.client_producer   # a retry of an EndTxn that completed
            entry = self._of_producer(entry, transactional_id, producer_id, producer_epoch)
            state = entry.meta.state
            decided = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            if not bump_epoch and state == done:
                return entry.meta.client_producer   # a retry of an EndTxn that completed
            if state == decided or (bump_epoch and state.preparing):
                raise ConcurrentTransactions(f"the transaction of {transactional_id!r} is completing")
            if state != TxnState.ONGOING and not (bump_epoch and state.ended):
                raise InvalidTxnState(f"cannot {'commit' if commit else 'abort'}: the transaction of "
                                      f"{transactional_id!r} is {state.value}")
            if bump_epoch:
                await self._prepare_with_bump(entry, commit)
            else:
                await self._prepare(entry, commit)
            answer = entry.meta.client_producer
            completing = self._completion(transactional_id, entry)
        await self._wait(completing)
        return answer

    @staticmethod
    def _is_bumped_retry(meta: TransactionMetadata, producer_id: int, producer_epoch: int, commit: bool) -> bool:
        """Whether a transaction version 2 EndTxn is a retry of the one that bumped the epoch (its
        answer was lost): it names the epoch before the bump, and the decision is the same."""
        decided = (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT) if commit else \
            (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)
        return ((producer_id, producer_epoch) == (meta.last_producer_id, meta.last_producer_epoch)
                and meta.state in decided)

    async def _prepare_with_bump(self, entry: _Entry, commit: bool) -> None:
        """Transaction version 2: store the decision at the next epoch (and, past the last epoch,
        the producer id to go on with). A transaction nothing was added to (an abort after writes
        that all failed, or an empty commit) ends the same way, with no marker to write."""
        meta = entry.meta
        now = self.clock_ms()
        if meta.state.ended:
            meta = meta.begin_or_add(now)
        next_id = NO_PRODUCER_ID
        if meta.producer_epoch + 1 >= MAX_PRODUCER_EPOCH:
            next_id = await asyncio.to_thread(self.producer_ids.next_id)
        await self._save(entry, meta.prepare_with_bump(commit, now, next_id))

    async def _prepare(self, entry: _Entry, commit: bool, fence: bool = False, for_new_instance: bool = False) -> None:
        """Store the decision; ``fence``: bump the epoch first, so the producer is fenced. The
        fenced epoch is remembered (its producer may carry on at the new one, as after a timeout),
        except ``for_new_instance``: a new instance's InitProducerId fences the old one for good,
        so nothing it sends may pass for a retry (Kafka's PrepareEpochFence)."""
        meta = entry.meta
        changes: dict[str, int] = {}
        if fence and meta.producer_epoch < MAX_PRODUCER_EPOCH:
            changes = {"producer_epoch": meta.producer_epoch + 1, "last_producer_id": meta.producer_id,
                       "last_producer_epoch": NO_PRODUCER_EPOCH if for_new_instance else meta.producer_epoch}
        await self._save(entry, meta.prepare(commit, self.clock_ms(), **changes))

    def _completion(self, transactional_id: str, entry: _Entry) -> asyncio.Task[None]:
        """The task writing the entry's markers (started unless running)."""
        self._start_completion(transactional_id, entry)
        assert entry.completing is not None
        return entry.completing

    def _start_completion(self, transactional_id: str, entry: _Entry) -> None:
        if entry.completing is None or entry.completing.done():
            entry.completing = asyncio.get_running_loop().create_task(self._complete(transactional_id, entry))

    async def _wait(self, completing: asyncio.Task[None]) -> None:
        await asyncio.wait({completing}, timeout=self.config.completion_wait_s)

    async def _complete(self, transactional_id: str, entry: _Entry) -> None:
        """Write the markers until every partition has them, move the offsets of a commit to the
        groups, then store CompleteCommit/CompleteAbort. Stops (the next check retries) when the
        markers take longer than ``marker_deadline_s`` or the id moves to another coordinator."""
        try:
            if not entry.claimed:          # an inherited decision: fence the old coordinator's markers first
                async with self._lock(transactional_id):
                    if self.entries.get(transactional_id) is entry and not entry.claimed:
                        await self._save(entry, entry.meta)
            meta = entry.meta
            if not await self._write_markers(transactional_id, meta):
                return
            if meta.committing:
                pending = await asyncio.to_thread(self.store.pending_offsets, transactional_id, meta.groups)
                for group_id, offsets in sorted(pending.items()):
                    await asyncio.to_thread(self.group_offsets.commit, group_id, offsets)
            await asyncio.to_thread(self.store.drop_offsets, transactional_id, meta.groups)
            async with self._lock(transactional_id):
                if self.entries.get(transactional_id) is entry and entry.meta == meta:
                    await self._save(entry, meta.complete(self.clock_ms()))
        except TransactionCoordinatorFenced:
            log.info("transactional id %s: a newer coordinator took over its completion", transactional_id)
            self.entries.pop(transactional_id, None)
        except (NotCoordinator, CoordinatorNotAvailable) as exc:
            log.info("transactional id %s: completion stopped (%s); retried at the next check", transactional_id, exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("transactional id %s: completion failed; retried at the next check", transactional_id)

    async def _write_markers(self, transactional_id: str, meta: TransactionMetadata) -> bool:
        """True once every partition has its marker (partitions of deleted topics need none)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.marker_deadline_s
        backoff = self.config.marker_backoff_s
        remaining = sorted(meta.partitions)
        while remaining:
            try:
                results = await self.writer.write_markers(meta.producer_id, meta.producer_epoch,
                                                          meta.coordinator_epoch, meta.committing, remaining)
            except (asyncio.CancelledError, TransactionCoordinatorFenced):
                raise
            except Exception as exc:
                results = {p: exc for p in remaining}
            fenced = next((e for e in results.values() if isinstance(e, TransactionCoordinatorFenced)), None)
            if fenced is not None:
                raise fenced
            remaining = [p for p in remaining if self._must_retry(p, results.get(p, TimeoutError()))]
            if not remaining:
                return True
            if loop.time() >= deadline or not self.owns(transactional_id):
                log.warning("transactional id %s: markers not yet written to %s (%s)", transactional_id,
                            ", ".join(f"{t}-{p}" for t, p in remaining[:5]), results.get(remaining[0]))
                return False
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
        return True

    def _must_retry(self, partition: Partition, error: Optional[Exception]) -> bool:
        if error is None:
            return False
        if isinstance(error, UnknownTopicOrPartition):
            topic = self.cache.topics().get(partition[0])
            return topic is not None and partition[1] in topic.partitions   # deleted: no marker needed
        if isinstance(error, EmberError) and not error.retriable:
            log.error("marker for %s-%d refused (%s); not retried", partition[0], partition[1], error)
            return False
        return True

    # -- DescribeTransactions and ListTransactions ---------------------------------------------

    async def describe(self, transactional_ids: Iterable[str]) -> dict[str, TransactionMetadata | Exception]:
        """Each id's metadata, or its error (NOT_COORDINATOR, TRANSACTIONAL_ID_NOT_FOUND, ...)."""
        out: dict[str, TransactionMetadata | Exception] = {}
        for transactional_id in transactional_ids:
            try:
                validate_transactional_id(transactional_id)
                self.access.check(Operation.DESCRIBE, _resource(transactional_id))
                entry = await self._entry(transactional_id)
                if entry is None:
                    raise TransactionalIdNotFound(f"no transactional id {transactional_id!r}")
                out[transactional_id] = entry.meta
            except EmberError as exc:
                out[transactional_id] = exc
        return out

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          min_duration_ms: int = -1,
                          pattern: Optional[str] = None) -> tuple[list[TransactionMetadata], list[str]]:
        """The transactions this broker coordinates that pass every filter and the principal may
        Describe, and the state names that are unknown."""
        names = {s.value for s in TxnState}
        wanted_states = set(states)
        wanted_pids = set(producer_ids)
        try:
            regex = re.compile(pattern) if pattern else None
        except re.error as exc:
            raise InvalidRequest(f"transactional id pattern {pattern!r}: {exc}") from None
        now = self.clock_ms()
        found = []
        for transactional_id, entry in sorted(self.entries.items()):
            meta = entry.meta
            if (not self.owns(transactional_id)
                    or (wanted_states and meta.state.value not in wanted_states)
                    or (wanted_pids and meta.producer_id not in wanted_pids)
                    or (min_duration_ms >= 0 and (meta.start_ms < 0 or now - meta.start_ms < min_duration_ms))
                    or (regex is not None and not regex.search(transactional_id))
                    or not self.access.allowed(Operation.DESCRIBE, _resource(transactional_id), log_refusal=False)):
                continue
            found.append(meta)
        return found, sorted(wanted_states - names)

    def state_counts(self) -> tuple[dict[str, int], int]:
        """Per state (every state, 0 included), how many ids this broker coordinates; and how
        long, in ms, the oldest open transaction among them has run (0: none open)."""
        counts = {state.value: 0 for state in TxnState}
        now, oldest = self.clock_ms(), 0
        for transactional_id, entry in list(self.entries.items()):
            if not self.owns(transactional_id):
                continue
            counts[entry.meta.state.value] += 1
            if not entry.meta.state.ended and entry.meta.start_ms >= 0:
                oldest = max(oldest, now - entry.meta.start_ms)
        return counts, oldest

    # -- the periodic work: ownership, timeouts, retries, expiry ------------------------------

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction coordinator: periodic check failed")

    async def tick(self, force: bool = False) -> None:
        """Take over the ids the broker mapping gives this broker (completing what they prepared)
        and let go of the others; every ``abort_check_interval_ms`` (or with ``force``): abort
        transactions past their timeout, retry unfinished completions, expire unused ids."""
        brokers = frozenset(self.cache.brokers())
        if brokers != self._brokers:
            await self._load_owned()
            self._brokers = brokers         # only once loaded: a failed load is retried next tick
        now = asyncio.get_running_loop().time()
        if force or now - self._last_check >= self.config.abort_check_interval_ms / 1000:
            self._last_check = now
            for transactional_id in list(self.entries):
                await self._check(transactional_id)

    async def _load_owned(self) -> None:
        for transactional_id in list(self.entries):
            if not self.owns(transactional_id):
                entry = self.entries.pop(transactional_id)
                if entry.completing is not None:
                    entry.completing.cancel()
        for transactional_id in await asyncio.to_thread(self.store.ids):
            if self.owns(transactional_id) and transactional_id not in self.entries:
                loaded = await self._entry(transactional_id)
                if loaded is not None and loaded.meta.state.preparing:
                    self._start_completion(transactional_id, loaded)

    async def _check(self, transactional_id: str) -> None:
        entry = self.entries.get(transactional_id)
        if entry is None or not self.owns(transactional_id):
            return
        meta, now = entry.meta, self.clock_ms()
        try:
            if meta.state == TxnState.ONGOING and now - meta.start_ms > meta.timeout_ms:
                log.info("transactional id %s: aborting its transaction, open past transaction.timeout.ms=%d",
                         transactional_id, meta.timeout_ms)
                async with self._lock(transactional_id):
                    if entry.meta is meta:
                        await self._prepare(entry, commit=False, fence=True)
                        self._start_completion(transactional_id, entry)
            elif meta.state.preparing:
                self._start_completion(transactional_id, entry)
            elif meta.state.ended and now - meta.update_ms > self.config.id_expiration_ms:
                async with self._lock(transactional_id):
                    if entry.meta is meta and entry.version is not None:
                        await asyncio.to_thread(self.store.delete, transactional_id, entry.version)
                        self.entries.pop(transactional_id, None)
                        self._locks.pop(transactional_id, None)
                        log.info("transactional id %s expired (unused for transactional.id.expiration.ms)",
                                 transactional_id)
        except (EmberError, TransactionConflict) as exc:
            self.entries.pop(transactional_id, None)
            log.info("transactional id %s: periodic check deferred (%s)", transactional_id, exc)


def _resource(transactional_id: str) -> Resource:
    return Resource(ResourceType.TRANSACTIONAL_ID, transactional_id)
