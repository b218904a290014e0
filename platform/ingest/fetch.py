"""Reading partitions at their leaders with a long poll: the Fetch work of both wire protocols.

A fetch answers once ``min_bytes`` are readable, a partition fails, ``max_wait`` passes, or its
client sends another request on the connection (which would otherwise wait behind it);
waiting parks on the partitions' ``changed`` signals (woken by appends and high-watermark moves).
The result is a list of segment slices; the ember protocol sends them with ``sendfile``, the
Kafka protocol converts the batches they hold into Kafka record batches (in memory).

A fetch reads at most ``min(request max_bytes, broker fetch.max.bytes)`` over all its partitions
and each partition at most its own ``max_bytes``, but always the first batch of the first
partition that has one (so a batch larger than the limits still makes progress), as Kafka's
``KafkaApis.handleFetchRequest``/``ReplicaManager.readFromLog`` do; ``min_bytes`` is capped by the
same limit. Without the broker's cap a request asking for 2 GiB read that much from segments.
"""
from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import NamedTuple, Sequence

from ember.errors import EmberError
from ember.ingest.fetch_session import FetchSession, SessionPartition, monotonic_ms
from ember.ingest.partition import LogOffsets, Partition
from ember.ingest.replica_manager import ReplicaManager
from ember.ingest.signals import Signal
from ember.log import FetchSlice
from ember.log.txn_index import AbortedTxn
from ember.net.pipelining import next_request_sent
from ember.security.authorizer.model import Operation
from ember.wire.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, NO_SESSION

#: At most this many partitions of a fetch pass are read on the event loop (``_read_at_log_ends``).
INLINE_READS = 4


class FetchTarget(NamedTuple):
    """One partition a fetch names (a tuple: a sessionless fetch of 1,000 partitions builds 1,000)."""
    topic: str
    partition: int
    offset: int
    max_bytes: int
    leader_epoch: int | None = None


@dataclass
class FetchResult:
    target: FetchTarget
    error: Exception | None = None
    slice: FetchSlice | None = None
    leader: Partition | None = None
    offsets: LogOffsets = LogOffsets()   # all -1 on an error
    #: read_committed: the aborted transactions the reader must filter from what it got (None:
    #: read_uncommitted, or nothing read)
    aborted: list[AbortedTxn] | None = None

    @property
    def size(self) -> int:
        return self.slice.size if self.slice is not None else 0


def response_limit(replicas: ReplicaManager, max_bytes: int) -> int:
    """Bytes a fetch may read over all its partitions: the request's ``max_bytes`` capped by the
    broker's ``fetch.max.bytes`` (Kafka's ``fetchMaxBytes``); never negative."""
    return max(0, min(max_bytes, replicas.config.fetch_max_bytes))


async def fetch_at_leaders(replicas: ReplicaManager, targets: Sequence[FetchTarget], replica_id: int,
                           min_bytes: int, max_bytes: int, max_wait_s: float,
                           committed: bool = False) -> list[FetchResult]:
    """A sessionless long poll (librdkafka never opens fetch sessions): read every target, then
    again only those whose partition changed, until there is enough. Re-reading all of them on
    every change cost a consumer of 1,000 partitions 333 reads per broker for each append (twice:
    the append, then the high watermark's move)."""
    if not targets:
        return []     # nothing could ever change: no waiting
    loop = asyncio.get_running_loop()
    max_bytes = response_limit(replicas, max_bytes)
    min_bytes = min(min_bytes, max_bytes)
    deadline = loop.time() + max_wait_s
    changes = _TargetChanges()
    try:
        results = await _read_all(replicas, targets, replica_id, max_bytes, committed, changes)
        sent = None
        while True:
            remaining = deadline - loop.time()
            if sum(r.size for r in results) >= min_bytes or remaining <= 0 or any(r.error for r in results) \
                    or (sent := sent or next_request_sent()) is not None and sent.done():
                _count_sent(results, replica_id)
                return results
            await changes.wait(remaining, sent)
            changed = changes.take()
            fired = set(changed)
            kept = [r.size for i, r in enumerate(results) if i not in fired]
            again = await _read_all(replicas, [targets[i] for i in changed], replica_id,
                                    max(0, max_bytes - sum(kept)), committed, changes, indices=changed,
                                    some_data=any(kept))
            for index, result in zip(changed, again):
                results[index] = result
    finally:
        changes.stop()


class _TargetWake:
    """What a target partition's ``changed`` fires during a sessionless long poll."""
    __slots__ = ("changes", "index", "__weakref__")

    def __init__(self, changes: "_TargetChanges", index: int) -> None:
        self.changes = changes
        self.index = index

    def fire(self) -> None:
        self.changes.fired.add(self.index)
        self.changes.signal.fire()


class _TargetChanges:
    """The targets of one sessionless long poll whose partition changed since it was read."""

    def __init__(self) -> None:
        self.fired: set[int] = set()
        self.signal = Signal()
        self._watched: dict[int, tuple[Partition, _TargetWake]] = {}

    def watch(self, index: int, partition: Partition) -> None:
        """Hear of ``partition``'s changes from now on (called before it is read, so a change
        during the read is not missed)."""
        current = self._watched.get(index)
        if current is not None and current[0] is partition:
            return
        if current is not None:
            current[0].changed.stop_forwarding(current[1])
        wake = _TargetWake(self, index)
        partition.changed.forward_to(wake)
        self._watched[index] = (partition, wake)

    async def wait(self, timeout_s: float, sent: asyncio.Future[None] | None) -> None:
        if not self.fired:
            await _changed_or_sent(self.signal.future(), sent, timeout_s)

    def take(self) -> list[int]:
        fired, self.fired = self.fired, set()
        return sorted(fired)

    def stop(self) -> None:
        for partition, wake in self._watched.values():
            partition.changed.stop_forwarding(wake)
        self._watched.clear()


async def fetch(replicas: ReplicaManager, targets: Sequence[FetchTarget], replica_id: int, min_bytes: int,
                max_bytes: int, max_wait_s: float, session_id: int = NO_SESSION, epoch: int = FINAL_EPOCH,
                forgotten: Sequence[tuple[str, int]] = (), committed: bool = False) -> tuple[list[FetchResult], int]:
    """A Fetch of either protocol with KIP-227's session fields: epoch -1 is sessionless (closing
    ``session_id`` if one is named), 0 opens a session (when the cache has room; closing the named
    one), 1, 2, ... continue ``session_id`` (FetchSessionIdNotFound, InvalidFetchSessionEpoch when
    it cannot). ``committed``: read_committed (below each partition's last stable offset, with the
    aborted transactions to filter). Returns the results and the session id to answer (0: none)."""
    sessions = replicas.fetch_sessions
    session = None
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != NO_SESSION:
            sessions.remove(session_id)     # a full fetch closes the session it names, as Kafka's
        if epoch == INITIAL_EPOCH:
            session = sessions.create(replica_id >= 0, len(targets), monotonic_ms())
    else:
        session = sessions.get(session_id, epoch, monotonic_ms())
    if session is None:
        return await fetch_at_leaders(replicas, targets, replica_id, min_bytes, max_bytes, max_wait_s,
                                      committed), NO_SESSION
    results = await fetch_in_session(replicas, session, targets, forgotten, epoch == INITIAL_EPOCH, replica_id,
                                     min_bytes, max_bytes, max_wait_s, committed)
    return results, session.id


async def fetch_in_session(replicas: ReplicaManager, session: FetchSession, listed: Sequence[FetchTarget],
                           forgotten: Sequence[tuple[str, int]], full: bool, replica_id: int, min_bytes: int,
                           max_bytes: int, max_wait_s: float, committed: bool = False) -> list[FetchResult]:
    """A fetch of ``session`` (docs/broker.md, "Fetch sessions"): ``listed`` partitions are added or
    updated (a full fetch lists them all), ``forgotten`` ones dropped. Each pass of the long poll
    reads the listed partitions and those with news (data past the fetcher's position, a new high
    watermark or log start, a change of leadership), looking only at the partitions that changed
    (``FetchSession.maybe_news``): the rest cost nothing. The answer holds every partition of a
    full fetch, else only those with something to say."""
    loop = asyncio.get_running_loop()
    session.forget(forgotten)
    listed_entries: list[SessionPartition] = []
    for target in listed:
        key = (target.topic, target.partition)
        entry = session.partitions.get(key)
        if entry is None:
            entry = session.add(SessionPartition(target.topic, target.partition, target.offset,
                                                 target.max_bytes, target.leader_epoch))
        else:
            entry.fetch_offset, entry.max_bytes, entry.leader_epoch = \
                target.offset, target.max_bytes, target.leader_epoch
        listed_entries.append(entry)
    if not session.partitions:
        return []     # nothing could ever change: answered at once, as Kafka answers a fetch of nothing
    if replica_id >= 0:
        _report_positions(replicas, session, replica_id, monotonic_ms())
    max_bytes = response_limit(replicas, max_bytes)
    min_bytes = min(min_bytes, max_bytes)
    deadline = loop.time() + max_wait_s
    first = True
    sent = None
    while True:
        # taken before the read: a change while reading wakes the wait below at once, not after max_wait
        changed = session.changed.future()
        if full:
            session.maybe_news.clear()
            entries = list(session.partitions.values())
        else:
            entries = session.take_news(listed_entries if first else (), lambda e: _has_news(e, replica_id, committed))
        first = False
        results = await _read_all(replicas, [FetchTarget(e.topic, e.index, e.fetch_offset, e.max_bytes, e.leader_epoch)
                                             for e in entries], replica_id, max_bytes, committed)
        for entry, result in zip(entries, results):
            session.watch(entry, result.leader)
        remaining = deadline - loop.time()
        if sum(r.size for r in results) >= min_bytes or remaining <= 0 or any(r.error for r in results) \
                or (sent := sent or next_request_sent()) is not None and sent.done():
            answered = [(e, r) for e, r in zip(entries, results) if full or _must_answer(e, r)]
            for entry, result in answered:
                if result.error is None:
                    entry.sent_high_watermark = result.offsets.high_watermark
                    entry.sent_log_start = result.offsets.log_start_offset
            session.move_to_end([e.key for e, r in answered if r.size])
            _keep_news(session, entries, replica_id, committed)
            _count_sent(results, replica_id)
            return [r for _, r in answered]
        _keep_news(session, entries, replica_id, committed)
        await _changed_or_sent(changed, sent, remaining)


async def _changed_or_sent(changed: asyncio.Future[None], sent: asyncio.Future[None] | None,
                           timeout_s: float) -> None:
    """A long poll's wait: until a partition changes, the client sends its next request
    (``sent``, :func:`ember.net.pipelining.next_request_sent`) or ``timeout_s`` passes."""
    await asyncio.wait([changed, *([sent] if sent is not None else [])], timeout=timeout_s,
                       return_when=asyncio.FIRST_COMPLETED)


def _keep_news(session: FetchSession, read: list[SessionPartition], replica_id: int, committed: bool) -> None:
    """Partitions read in a pass that still have news (not answered for lack of room, answered
    with data the fetcher has yet to move past, an error) are looked at again in the next pass:
    nothing fires for them meanwhile."""
    session.maybe_news.update(e.key for e in read if _has_news(e, replica_id, committed))


def _has_news(entry: SessionPartition, replica_id: int, committed: bool) -> bool:
    """Whether a partition the fetcher did not name must be read: data past its position, a new
    high watermark or log start, or its replica here no longer leading (or never found)."""
    partition = entry.partition
    if partition is None or not partition.is_leader or partition.log.closed:
        return True
    log = partition.log
    visible = log.log_end_offset if replica_id >= 0 else log.last_stable_offset if committed else log.high_watermark
    return entry.fetch_offset != visible or log.high_watermark != entry.sent_high_watermark \
        or log.log_start_offset != entry.sent_log_start


def _must_answer(entry: SessionPartition, result: FetchResult) -> bool:
    """KIP-227: an incremental answer holds a partition with data, an error, or new offsets."""
    return result.error is not None or result.size > 0 \
        or result.offsets.high_watermark != entry.sent_high_watermark \
        or result.offsets.log_start_offset != entry.sent_log_start


#: How often a follower session reports the positions of the partitions its fetches no longer name
#: (they have not moved), so a caught-up follower stays caught up (``replica.lag.time.max.ms``).
POSITION_REPORT_MS = 1000


def _report_positions(replicas: ReplicaManager, session: FetchSession, replica_id: int, now_ms: float) -> None:
    interval = min(POSITION_REPORT_MS, replicas.config.replica_lag_time_max_ms / 4)
    if now_ms - session.positions_reported_ms < interval:
        return
    session.positions_reported_ms = now_ms
    for entry in session.partitions.values():
        partition = entry.partition
        if partition is not None and partition.is_leader:
            try:
                partition.record_follower_position(replica_id, entry.fetch_offset)
            except EmberError:
                continue     # the next read of it answers the error
            replicas.isr.maybe_expand(partition, replica_id)


async def _read_all(replicas: ReplicaManager, targets: Sequence[FetchTarget], replica_id: int,
                    max_bytes: int, committed: bool = False, changes: _TargetChanges | None = None,
                    indices: Sequence[int] | None = None, some_data: bool = False) -> list[FetchResult]:
    """At least one whole batch (of the first partition that has one, unless ``some_data`` says
    one was read already), then up to ``max_bytes`` in all and each partition's own ``max_bytes``
    (a negative one reads nothing but that first batch). With ``changes``, each partition found is
    watched (as target ``indices[i]``, else ``i``) before it is read. Checks and caught-up
    partitions are answered on the event loop; the partitions with something to read are read in
    one I/O-pool job, in order (a job per partition cost a consumer starting on 1,000 partitions a
    thread round trip for each, one after the other), or on the event loop when they are a few
    at their logs' ends (``_read_at_log_ends``)."""
    results: list[FetchResult] = []
    to_read: list[tuple[int, Partition]] = []       # (position, partition) of those with something to read
    refusals: dict[str, Exception | None] = {}     # per topic: the ACL check runs once per read
    for position, target in enumerate(targets):
        try:
            refusal = refusals.get(target.topic, _UNCHECKED)
            if refusal is _UNCHECKED:
                refusal = refusals[target.topic] = _refusal(replicas, replica_id, target.topic)
            if refusal is not None:
                results.append(FetchResult(target, error=refusal))    # one error for the topic, not raised again
                continue
            partition = replicas.leader_partition(target.topic, target.partition)
            if changes is not None:
                changes.watch(indices[position] if indices is not None else position, partition)
            partition.check_leader(target.leader_epoch)
            if replica_id >= 0:
                await replicas.follower_fetched(partition, replica_id, target.offset)
            offsets = partition.caught_up(target.offset, replica_id, committed)
        except Exception as exc:
            results.append(FetchResult(target, error=exc))
            continue
        if offsets is None:
            to_read.append((position, partition))    # its result (read below) takes this place
        results.append(FetchResult(target, leader=partition, offsets=offsets or LogOffsets()))
    if to_read:
        work = [(targets[i], p) for i, p in to_read]
        read = _read_at_log_ends(work, max_bytes, some_data, replica_id, committed)
        if read is None:
            read = await to_read[0][1].run(_read_in_order, work, max_bytes, some_data, replica_id, committed)
        for (position, _), result in zip(to_read, read):
            results[position] = result
    return results


def _read_at_log_ends(work: Sequence[tuple[FetchTarget, Partition]], max_bytes: int, some_data: bool,
                      replica_id: int, committed: bool) -> list[FetchResult] | None:
    """The reads of ``_read_all`` on the event loop, when they are few, all from data written
    since their log's last fsync (in the page cache: a read there is an index lookup and a few
    batch headers, microseconds) and no other thread holds those logs; else None, and they go to
    the I/O pool. Followers and consumers at the end of a log read this way: each read on the pool
    cost two thread hand-offs (0.3-1 ms under load), twice on an acks=all write's way to a
    consumer (the follower's fetch, the consumer's)."""
    if len(work) > INLINE_READS:
        return None
    with contextlib.ExitStack() as held:
        inline = all(partition.unflushed_from(target.offset) and
                     held.enter_context(partition.log.locked(blocking=False)) for target, partition in work)
        read = _read_in_order(work, max_bytes, some_data, replica_id, committed) if inline else None
    return read


def _read_in_order(work: Sequence[tuple[FetchTarget, Partition]], max_bytes: int, some_data: bool,
                   replica_id: int, committed: bool) -> list[FetchResult]:
    """The reads of ``_read_all``, sharing ``max_bytes`` in order (on an I/O-pool thread, or on
    the event loop by ``_read_at_log_ends``)."""
    results: list[FetchResult] = []
    room = max_bytes
    for target, partition in work:
        try:
            piece, offsets = partition.read_blocking(target.offset, max(0, min(target.max_bytes, room)),
                                                     not some_data, replica_id, committed)
        except Exception as exc:
            results.append(FetchResult(target, error=exc))
            continue
        aborted = partition.log.aborted_transactions(target.offset, offsets.last_stable_offset) \
            if committed and piece is not None else None
        result = FetchResult(target, slice=piece, leader=partition, offsets=offsets, aborted=aborted)
        room = max(0, room - result.size)
        some_data = some_data or result.size > 0
        results.append(result)
    return results


_UNCHECKED = Exception()


def _refusal(replicas: ReplicaManager, replica_id: int, topic: str) -> Exception | None:
    """Why this fetcher may not read ``topic`` (a follower needs ClusterAction, a consumer Read on
    the topic), or None."""
    try:
        operation = replicas.access.follower_or_topic(replica_id, Operation.READ)
        if operation is not None:
            replicas.access.check_topic(operation, topic)
    except Exception as exc:
        return exc
    return None


def _count_sent(results: Sequence[FetchResult], replica_id: int) -> None:
    """Bytes out per topic (metrics on), consumers and followers apart."""
    for result in results:
        if result.leader is not None and result.leader.stats is not None and result.size:
            result.leader.stats.sent(result.size, replica_id >= 0)
