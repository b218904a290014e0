"""Incremental fetch sessions (Kafka's KIP-227) for both wire protocols: a fetch names only the
partitions whose fetch position changed, and the answer carries only the partitions that have
something new, so a fetch over hundreds of idle partitions costs per partition that moved, not per
partition held.

A session is the set of partitions a fetcher (a follower's replica fetcher, an ember consumer, a
Kafka client) reads, with the position it last asked for and what it was last told of each. The
fetcher opens one with a full fetch (session id 0, epoch 0), then sends the epochs 1, 2, ... of it;
a fetch with epoch -1 is sessionless (every partition named, every partition answered), and one
with a session id and epoch -1 closes that session. Sessions live in the broker's
``FetchSessionCache``, bounded by ``max.incremental.fetch.session.cache.slots`` with Kafka's
eviction rules: a new session takes a slot from one unused for ``EVICTION_MS``, else from the
smallest one it outranks (a follower's session outranks a client's; among equals, the one with
more partitions wins); with no such slot the fetch is answered without a session (id 0) and the
fetcher goes on with full fetches, as Kafka's clients do.
"""
from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from ember.errors import FetchSessionIdNotFound, InvalidFetchSessionEpoch
from ember.ingest.signals import Signal
from ember.wire.fetch_session import INT32_MAX, NO_SESSION, next_epoch

if TYPE_CHECKING:
    from ember.ingest.partition import Partition

#: A session unused this long may be evicted by any new one (Kafka's fixed 2 minutes).
EVICTION_MS = 120_000


def monotonic_ms() -> float:
    """The clock sessions are aged on (milliseconds; wall-clock jumps cannot evict a session)."""
    return time.monotonic() * 1000


@dataclass
class SessionPartition:
    """One partition of a session: what the fetcher last asked for, and what it was last told
    (-2: nothing yet), so the broker can tell whether the partition has news for it."""
    topic: str
    index: int
    fetch_offset: int
    max_bytes: int
    leader_epoch: int | None
    sent_high_watermark: int = -2
    sent_log_start: int = -2
    #: The partition the broker resolved last time (None: unknown or an error): where to look for news.
    partition: "Partition | None" = None
    #: Where the partition is in the session's read order (lower: read first).
    turn: int = 0
    #: Subscribed to ``partition.changed`` while the session watches it.
    wake: "_PartitionWake | None" = field(default=None, repr=False, compare=False)

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.index


class _PartitionWake:
    """What a watched partition's ``changed`` fires: the partition is marked as possibly having
    news for the session, and the session's long poll wakes."""
    __slots__ = ("session", "key", "__weakref__")

    def __init__(self, session: "FetchSession", key: tuple[str, int]) -> None:
        self.session = session
        self.key = key

    def fire(self) -> None:
        self.session.maybe_news.add(self.key)
        self.session.changed.fire()


@dataclass(eq=False)
class FetchSession:
    """The partitions of one fetcher, in the order they are read (those that returned data move to
    the end, so one busy partition cannot starve the others of a response's bytes).

    An incremental fetch looks only at the partitions in ``maybe_news``: those whose ``changed``
    fired since they were last read, and those that still had news after it. Every change a
    fetcher must hear of fires ``changed`` (appends, high watermark and log start moves,
    leadership changes, a replica closing), so an idle partition costs nothing per fetch."""
    id: int
    privileged: bool               # a follower's: outranks clients' sessions in the cache
    created_ms: float
    last_used_ms: float
    #: The epoch the next fetch of this session must carry.
    epoch: int = 1
    partitions: dict[tuple[str, int], SessionPartition] = field(default_factory=dict)
    #: Fires when any partition of the session changes (its ``changed`` forwards here).
    changed: Signal = field(default_factory=Signal)
    #: Partitions to look at in the next pass of an incremental fetch (see the class docstring).
    maybe_news: set[tuple[str, int]] = field(default_factory=set)
    #: Follower sessions: when the caught-up positions were last reported to the partitions (ms).
    positions_reported_ms: float = 0.0
    _turns: Iterator[int] = field(default_factory=itertools.count)

    def __len__(self) -> int:
        return len(self.partitions)

    def add(self, entry: SessionPartition) -> SessionPartition:
        entry.turn = next(self._turns)
        self.partitions[entry.key] = entry
        return entry

    def watch(self, entry: SessionPartition, partition: "Partition | None") -> None:
        """Point ``entry`` at ``partition`` (the broker's replica of it, or None), moving the
        entry's subscription to its change signal along."""
        if entry.partition is partition:
            return
        if entry.partition is not None and entry.wake is not None:
            entry.partition.changed.stop_forwarding(entry.wake)
        entry.partition = partition
        if partition is not None:
            if entry.wake is None:
                entry.wake = _PartitionWake(self, entry.key)
            partition.changed.forward_to(entry.wake)

    def take_news(self, named: Iterable[SessionPartition],
                  has_news: Callable[[SessionPartition], bool]) -> list[SessionPartition]:
        """The partitions one pass of an incremental fetch reads, in read order: ``named`` ones
        and those of ``maybe_news`` that ``has_news``; ``maybe_news`` starts empty again."""
        picked = {entry.key: entry for entry in named}
        keys, self.maybe_news = self.maybe_news, set()
        for key in keys:
            entry = self.partitions.get(key)
            if entry is not None and key not in picked and has_news(entry):
                picked[key] = entry
        return sorted(picked.values(), key=lambda entry: entry.turn)

    def forget(self, keys: Iterable[tuple[str, int]]) -> None:
        for key in keys:
            entry = self.partitions.pop(key, None)
            if entry is not None:
                self.watch(entry, None)

    def move_to_end(self, keys: Iterable[tuple[str, int]]) -> None:
        for key in keys:
            entry = self.partitions.pop(key, None)
            if entry is not None:
                self.add(entry)

    def close(self) -> None:
        self.forget(list(self.partitions))


class FetchSessionCache:
    """The broker's fetch sessions, at most ``slots`` (0: none: every fetch is sessionless)."""

    def __init__(self, slots: int, eviction_ms: int = EVICTION_MS) -> None:
        self.slots = slots
        self.eviction_ms = eviction_ms
        self._sessions: dict[int, FetchSession] = {}
        self._random = random.Random()
        #: Sessions evicted to make room, since start (a metric: a cache too small for its fetchers).
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def partition_count(self) -> int:
        return sum(len(s) for s in self._sessions.values())

    def create(self, privileged: bool, size: int, now_ms: float) -> FetchSession | None:
        """A new session for a fetcher about to hold ``size`` partitions, or None when no slot is
        free or may be taken (Kafka's ``FetchSessionCache.maybeCreateSession``)."""
        if self.slots <= 0 or (len(self._sessions) >= self.slots and not self._evict_for(privileged, size, now_ms)):
            return None
        session_id = NO_SESSION
        while session_id == NO_SESSION or session_id in self._sessions:
            session_id = self._random.randint(1, INT32_MAX)
        session = self._sessions[session_id] = FetchSession(session_id, privileged, now_ms, now_ms)
        return session

    def get(self, session_id: int, epoch: int, now_ms: float) -> FetchSession:
        """The session of an incremental fetch at ``epoch``; the fetcher must start over (a full
        fetch) if the session is gone or the epoch is not the one expected."""
        session = self._sessions.get(session_id)
        if session is None:
            raise FetchSessionIdNotFound(f"fetch session {session_id} is not in this broker's cache (evicted, "
                                         f"closed, or the broker restarted)")
        if epoch != session.epoch:
            raise InvalidFetchSessionEpoch(f"fetch session {session_id} expects epoch {session.epoch}, "
                                           f"the fetch has {epoch}")
        session.epoch = next_epoch(epoch)
        session.last_used_ms = now_ms
        return session

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.close()
        return session

    def close(self) -> None:
        for session_id in list(self._sessions):
            self.remove(session_id)

    def _evict_for(self, privileged: bool, size: int, now_ms: float) -> bool:
        """Free a slot for a new session: the least recently used one if idle for ``eviction_ms``;
        else the smallest one this session outranks: a follower's session (``privileged``) may take
        a client's or one older than ``eviction_ms``, a client's only one older than that; the
        victim must rank below (privileged first, then more partitions, then a higher id)."""
        oldest = min(self._sessions.values(), key=lambda s: s.last_used_ms)
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self._evict(oldest)
            return True
        evictable = [s for s in self._sessions.values()
                     if now_ms - s.created_ms > self.eviction_ms or (privileged and not s.privileged)]
        if not evictable:
            return False
        victim = min(evictable, key=_rank)
        if (privileged, size, 0) < _rank(victim):   # ties keep the old session, as Kafka
            return False
        self._evict(victim)
        return True

    def _evict(self, session: FetchSession) -> None:
        self.remove(session.id)
        self.evictions += 1


def _rank(session: FetchSession) -> tuple[bool, int, int]:
    """Kafka's EvictableKey order: a session ranks higher if privileged, then with more partitions."""
    return session.privileged, len(session), session.id
