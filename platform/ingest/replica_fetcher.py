"""Follower replication: one fetcher task per leader broker pulls every partition this broker
follows from that leader, as Kafka's ReplicaFetcherThread does.

Before a partition fetches from a leader (of a new epoch) it truncates its log to where it
stops agreeing with the leader's: it asks the leader (OffsetForLeaderEpoch) where the
follower's latest epoch ended and truncates to the smaller of that and its own end of that
epoch — never to its high watermark, which may be stale. Then it fetches from its log end with
``replica_id`` = this broker and the leader epoch it follows, appends the leader's batches as
they are (offsets and epochs kept) and follows the leader's high watermark and log start (so
DeleteRecords and retention at the leader reach the followers). The fetch offset is what tells
the leader where this follower's log ends.

A partition whose log a disk failure took offline (``Log.offline``) is no longer fetched: the
fetcher says so once and leaves it out of every request (reopening the log is not done here).
A follower append the disk refuses (a full disk; the log undid it) takes the log offline too
(``Partition.write_failed``), so the controller drops the replica from the ISR at once instead of
acks=all producers waiting ``replica.lag.time.max.ms`` for a follower that cannot write.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Hashable

from ember.errors import (
    EmberError,
    ErrorCode,
    FetchSessionIdNotFound,
    InvalidFetchSessionEpoch,
    NotLeaderOrFollower,
    OffsetOutOfRange,
    StorageError,
    UnexpectedAppendOffset,
    error_for_code,
)
from ember.ingest.broker_client import BrokerClient, InterBroker
from ember.ingest.broker_config import BrokerConfig
from ember.ingest.partition import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Partition
from ember.net.channel import Address
from ember.record.header import NO_EPOCH
from ember.wire.api_keys import ApiKey
from ember.wire.fetch_session import INITIAL_EPOCH, NO_SESSION, FetchSessionHandler
from ember.wire.frame import split_payload
from ember.wire.replication import (
    FetchedPartition,
    FetchRequest,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
    PartitionTarget,
    epoch_ends,
    fetched_partitions,
    offset_answers,
)

log = logging.getLogger(__name__)

LeaderAddress = Callable[[int], Address | None]


class _OwnDiskFailed(Exception):
    """A follower append or truncation failed on this broker's disk (StorageError, counted and
    logged by :meth:`ReplicaFetcher._write`), unlike a KAFKA_STORAGE_ERROR the leader answers."""


@dataclass(frozen=True)
class FetcherConfig:
    """The broker's ``replica.*`` settings."""
    wait_max_ms: int
    min_bytes: int
    partition_max_bytes: int
    response_max_bytes: int
    backoff_ms: int
    socket_timeout_ms: int

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> "FetcherConfig":
        return cls(config.replica_fetch_wait_max_ms, config.replica_fetch_min_bytes, config.replica_fetch_max_bytes,
                   config.replica_fetch_response_max_bytes, config.replica_fetch_backoff_ms,
                   config.replica_socket_timeout_ms)


def truncation_point(leader_epoch: int, leader_end_offset: int, log_end_offset: int,
                     end_offset_for_epoch: Callable[[int], tuple[int, int]]) -> tuple[int, bool]:
    """Where a follower's log stops agreeing with its leader's, from the leader's answer
    (``leader_epoch``, ``leader_end_offset``) for the follower's latest epoch.

    Returns (offset to truncate to, done). Not done means the follower lacks the epoch the leader
    named: it truncates to the end of its own largest earlier epoch and asks again (Kafka's rule).
    """
    if leader_epoch == NO_EPOCH:
        return min(leader_end_offset, log_end_offset), True
    own_epoch, own_end = end_offset_for_epoch(leader_epoch)
    if own_epoch == NO_EPOCH:
        return min(leader_end_offset, log_end_offset), True
    if own_epoch != leader_epoch:
        return min(own_end, log_end_offset), False
    return min(own_end, leader_end_offset, log_end_offset), True


@dataclass
class _Follow:
    partition: Partition
    leader_epoch: int
    truncated: bool = False
    #: The log went offline and this was logged: the partition is left out of every request.
    offline: bool = False
    #: The error code of the leader's last answer for it, once logged (0: the last one worked).
    failing: int = 0

    @property
    def key(self) -> tuple[str, int]:
        return self.partition.topic, self.partition.index

    def target(self) -> PartitionTarget:
        return {"topic": self.partition.topic, "partition": self.partition.index,
                "current_leader_epoch": self.leader_epoch}


class ReplicaFetcher:
    """Replicates the partitions this broker follows from one leader broker (event loop task)."""

    def __init__(self, broker_id: int, leader_id: int, leader_address: LeaderAddress,
                 config: FetcherConfig, inter_broker: InterBroker) -> None:
        self.broker_id = broker_id
        self.leader_id = leader_id
        self._leader_address = leader_address
        self.config = config
        self._inter_broker = inter_broker
        self._follows: dict[tuple[str, int], _Follow] = {}
        #: Follows waiting for an OffsetForLeaderEpoch round before they are fetched.
        self._to_truncate: set[tuple[str, int]] = set()
        #: Partitions whose position (log end, leader epoch) or fetchability may differ from what
        #: the leader's session holds: an incremental fetch looks only at these (and names those
        #: that did move), so a round costs per partition that moved, not per partition followed.
        self._moved: set[tuple[str, int]] = set()
        #: The partitions the fetch in flight names: the session will hold them once it is answered.
        self._naming: set[tuple[str, int]] = set()
        self._wake = asyncio.Event()
        self._client: BrokerClient | None = None
        #: The fetch session at the leader: what it holds of each partition (log end, leader epoch).
        self._session: FetchSessionHandler[tuple[str, int]] = FetchSessionHandler()
        self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{leader_id}")

    def __len__(self) -> int:
        return len(self._follows)

    def follow(self, partition: Partition) -> None:
        """Fetch ``partition`` at its current leader epoch (truncating first on a new epoch)."""
        key = (partition.topic, partition.index)
        current = self._follows.get(key)
        if current is None or current.leader_epoch != partition.leader_epoch or current.partition is not partition:
            self._follows[key] = _Follow(partition, partition.leader_epoch)
            self._to_truncate.add(key)
            self._restart_session_if_held(key)
            self._wake.set()

    def unfollow(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        if self._follows.pop(key, None) is not None:
            self._to_truncate.discard(key)
            self._moved.add(key)      # forgotten by the next incremental fetch if the session holds it
            self._restart_session_if_held(key)

    def recheck(self, partition: Partition) -> None:
        """Look at ``partition`` in the next round (its log went offline outside replication: a
        failed flush or retention): an offline log is dropped from the leader's session."""
        key = (partition.topic, partition.index)
        if key in self._follows:
            self._moved.add(key)

    def _restart_session_if_held(self, key: tuple[str, int]) -> None:
        """A partition the leader's session holds was replaced (new epoch, reopened log) or dropped:
        the session remembers what it last told the old one (high watermark, log start) and would
        not tell the new one again, so the next fetch is a full one, in a new session. A partition
        the fetch in flight names counts as held (its answer adds it to the session)."""
        if self._session.holds(key) or key in self._naming:
            self._session.reset()

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._disconnect()

    # -- loop ----------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            if not any(self._fetchable(f) for f in list(self._follows.values())):
                self._wake.clear()    # nothing to fetch (none followed, or every log offline)
                await self._wake.wait()
                continue
            try:
                client = await self._connect()
                pending = [f for key in list(self._to_truncate)
                           if (f := self._follows.get(key)) is not None and not f.truncated and self._fetchable(f)]
                if pending:
                    await self._truncate(client, pending)
                if not await self._fetch(client):
                    await asyncio.sleep(self.config.backoff_ms / 1000)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                retriable = isinstance(exc, EmberError) and exc.retriable
                log.log(logging.INFO if retriable else logging.WARNING, "replica fetcher for leader %d: %s; "
                        "retrying in %d ms", self.leader_id, exc, self.config.backoff_ms)
                self._disconnect()
                await asyncio.sleep(self.config.backoff_ms / 1000)

    async def _connect(self) -> BrokerClient:
        if self._client is not None and not self._client.closed:
            return self._client
        address = self._leader_address(self.leader_id)
        if address is None:
            raise NotLeaderOrFollower(f"leader broker {self.leader_id} is not registered")
        self._client = await self._inter_broker.connect(address, self.config.socket_timeout_ms)
        return self._client

    def _disconnect(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _current(self, follow: _Follow) -> bool:
        """True while ``follow`` is still what this fetcher should do (not replaced or dropped)."""
        return self._follows.get(follow.key) is follow

    def _fetchable(self, follow: _Follow) -> bool:
        """False once the partition's log is offline (logged once): it is not fetched any more."""
        if follow.offline:
            return False
        log_ = follow.partition.log
        if not log_.offline:
            return True
        follow.offline = True
        self._moved.add(follow.key)     # the leader's session lets it go
        log.error("%s: its log is offline after a disk failure (%s); no longer fetching it from leader %d "
                  "until the partition is reopened", follow.partition, log_.offline_reason, self.leader_id)
        return False

    async def _write(self, follow: _Follow, write: Awaitable[None]) -> None:
        """Run a follower append or truncation. A StorageError of this broker's log takes it
        offline (``Partition.write_failed``: the controller drops this replica from the ISR at
        once), is logged once by :meth:`_fetchable` (the partition is not fetched any more) and
        raised as :class:`_OwnDiskFailed`."""
        try:
            await write
        except StorageError as exc:
            if follow.partition.log.closed and not follow.partition.log.offline:
                raise   # the partition was deleted meanwhile: no disk failure
            follow.partition.write_failed("replication", exc)
            if self._current(follow):
                self._fetchable(follow)
            raise _OwnDiskFailed() from exc

    # -- truncation ----------------------------------------------------------------------------

    async def _truncate(self, client: BrokerClient, follows: list[_Follow]) -> None:
        """One OffsetForLeaderEpoch round for ``follows``; a partition whose answer needs another
        round (or failed) stays pending."""
        asked = [(f, f.partition.log.latest_epoch) for f in follows]
        for follow, epoch in asked:
            if epoch == NO_EPOCH:   # nothing that could diverge
                self._set_truncated(follow, True)
        asked = [(f, e) for f, e in asked if e != NO_EPOCH]
        if not asked:
            return
        body: OffsetForLeaderEpochRequest = {
            "replica_id": self.broker_id,
            "partitions": [{**f.target(), "leader_epoch": epoch} for f, epoch in asked]}
        response = await client.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, body)
        for (follow, _), item in zip(asked, epoch_ends(response.body)):
            if not self._current(follow):
                continue
            if item["error_code"]:
                log.info("%s: leader %d cannot answer OffsetForLeaderEpoch yet (%s)", follow.partition,
                         self.leader_id, item.get("error_message"))
                continue
            partition = follow.partition
            offset, done = truncation_point(item["leader_epoch"], item["end_offset"],
                                            partition.log.log_end_offset, partition.log.end_offset_for_epoch)
            if offset < partition.log.log_end_offset:
                log.info("%s: truncating to %d (log end %d) before following leader %d at epoch %d", partition,
                         offset, partition.log.log_end_offset, self.leader_id, follow.leader_epoch)
                try:
                    await self._write(follow, partition.truncate(offset, follow.leader_epoch))
                except _OwnDiskFailed:
                    continue    # stays pending (or, offline, is left out)
            self._set_truncated(follow, done)

    def _set_truncated(self, follow: _Follow, done: bool) -> None:
        """Whether ``follow`` is ready to be fetched (its log cannot have diverged from the
        leader's) or needs another OffsetForLeaderEpoch round first."""
        follow.truncated = done
        if not self._current(follow):
            return      # replaced or dropped meanwhile: its successor has its own state
        if done:
            self._to_truncate.discard(follow.key)
            self._moved.add(follow.key)
        else:
            self._to_truncate.add(follow.key)

    # -- fetching ------------------------------------------------------------------------------

    async def _fetch(self, client: BrokerClient) -> bool:
        """One fetch of the session for every truncated partition; False when nothing could be
        fetched (back off). The session's first fetch names every partition; later ones only those
        whose log end or leader epoch moved (and those dropped), and the leader answers only those
        with news (``ember.ingest.fetch_session``)."""
        config = self.config
        session = self._session
        if session.epoch == INITIAL_EPOCH:
            self._moved.clear()
            wanted = {key: self._position(f) for key, f in self._follows.items() if f.truncated and self._fetchable(f)}
            if not wanted:
                return False
            listed, forgotten = session.next_fetch(wanted)
        else:
            moved, self._moved = self._moved, set()
            wanted = {key: self._position(f) for key in moved
                      if (f := self._follows.get(key)) is not None and f.truncated and self._fetchable(f)}
            listed, forgotten = session.next_changes(wanted, moved.difference(wanted))
            if not session.holds_any() and not listed:
                return False
        body: FetchRequest = {
            "replica_id": self.broker_id, "max_wait_ms": config.wait_max_ms, "min_bytes": config.min_bytes,
            "max_bytes": config.response_max_bytes,
            "session_id": session.session_id, "session_epoch": session.epoch,
            "partitions": [{**self._follows[key].target(), "fetch_offset": self._follows[key].partition.log.log_end_offset,
                            "max_bytes": config.partition_max_bytes} for key in listed],
            "forgotten": [{"topic": topic, "partition": index} for topic, index in forgotten]}
        timeout_s = (config.socket_timeout_ms + config.wait_max_ms) / 1000
        self._naming = set(listed)
        try:
            response = await client.call(ApiKey.FETCH, body, timeout_s=timeout_s)
        except (FetchSessionIdNotFound, InvalidFetchSessionEpoch) as exc:
            log.info("replica fetcher for leader %d: %s; starting a new fetch session", self.leader_id, exc)
            session.reset()
            return True
        except BaseException:
            session.reset()     # the leader may or may not have taken this epoch
            raise
        finally:
            self._naming = set()
        session.answered(response.body.get("session_id", NO_SESSION), wanted, listed, forgotten)
        items = fetched_partitions(response.body)
        pieces = split_payload(response.payload, [item["size"] for item in items])
        answered = [(follow, item, raw) for item, raw in zip(items, pieces)
                    if (follow := self._follows.get((item["topic"], item["partition"]))) is not None
                    and follow.truncated and not follow.offline]
        self._moved.update(follow.key for follow, _, _ in answered)   # appended, truncated or failed
        outcomes = await asyncio.gather(*(self._apply(client, follow, item, raw) for follow, item, raw in answered))
        return not outcomes or any(outcomes)

    @staticmethod
    def _position(follow: _Follow) -> Hashable:
        """What the leader's session must hold of a partition: where its log ends, at which epoch."""
        return follow.partition.log.log_end_offset, follow.leader_epoch

    async def _apply(self, client: BrokerClient, follow: _Follow, item: FetchedPartition, raw: memoryview) -> bool:
        """Append one partition's fetched batches; False if it failed (the loop backs off)."""
        if not self._current(follow):
            return True
        partition = follow.partition
        code = item["error_code"]
        try:
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                await self._reset_out_of_range(client, follow)
                return True
            if code:
                raise error_for_code(code, item.get("error_message", ""))
            await self._write(follow, partition.append_as_follower(raw, follow.leader_epoch, item["high_watermark"],
                                                                   item.get("log_start_offset", 0)))
            follow.failing = 0
            return True
        except UnexpectedAppendOffset as exc:
            log.warning("%s: %s; checking for divergence again", partition, exc)
            self._set_truncated(follow, False)
        except _OwnDiskFailed:
            # an offline log is simply left out from now on; a full disk backs off
            return follow.offline or not self._current(follow) or partition.leader_epoch != follow.leader_epoch
        except EmberError as exc:
            if not self._current(follow) or partition.leader_epoch != follow.leader_epoch:
                return True   # this broker moved on meanwhile
            if follow.failing != exc.code:   # once per error, not every round (1,000 partitions: 1,000 lines)
                follow.failing = exc.code
                log.log(logging.INFO if exc.retriable else logging.WARNING, "%s: fetching from leader %d: %s",
                        partition, self.leader_id, exc)
        return False

    async def _reset_out_of_range(self, client: BrokerClient, follow: _Follow) -> None:
        """The leader has no data at our log end: above its end, keep only what it has; below its
        log start (retention moved on while we were away), restart empty at its log start."""
        partition = follow.partition
        start, end = [await self._leader_offset(client, follow, timestamp)
                      for timestamp in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP)]
        log_end = partition.log.log_end_offset
        if log_end > end:
            log.warning("%s: log end %d is past leader %d's log end %d; truncating", partition, log_end,
                        self.leader_id, end)
            await self._write(follow, partition.truncate(end, follow.leader_epoch))
        elif log_end < start:
            log.warning("%s: log end %d is below leader %d's log start %d; restarting the log there",
                        partition, log_end, self.leader_id, start)
            await self._write(follow, partition.truncate(start, follow.leader_epoch, fully=True))
        else:
            raise OffsetOutOfRange(f"{partition}: offset {log_end} is inside the leader's log [{start}, {end}]")


    async def _leader_offset(self, client: BrokerClient, follow: _Follow, timestamp: int) -> int:
        """One ListOffsets answer of the leader (a request names each partition once)."""
        body: ListOffsetsRequest = {"replica_id": self.broker_id,
                                     "partitions": [{**follow.target(), "timestamp": timestamp}]}
        item = offset_answers((await client.call(ApiKey.LIST_OFFSETS, body)).body)[0]
        if item["error_code"]:
            raise error_for_code(item["error_code"], item.get("error_message", ""))
        return item["offset"]


class ReplicaFetchers:
    """The fetchers of this broker, one per leader it follows; created and stopped on demand."""

    def __init__(self, broker_id: int, leader_address: LeaderAddress, config: FetcherConfig,
                 inter_broker: InterBroker) -> None:
        self.broker_id = broker_id
        self._leader_address = leader_address
        self.config = config
        self._inter_broker = inter_broker
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def update(self, partition: Partition) -> None:
        """Follow ``partition``'s current leader, or stop fetching it when this broker leads it or
        it has no leader."""
        key = (partition.topic, partition.index)
        leader = partition.state.leader
        previous = self._leaders.get(key)
        if previous is not None and previous != leader:
            self.remove(partition)
        if leader < 0 or leader == self.broker_id:
            return
        fetcher = self._fetchers.get(leader)
        if fetcher is None:
            fetcher = self._fetchers[leader] = ReplicaFetcher(self.broker_id, leader, self._leader_address,
                                                              self.config, self._inter_broker)
        fetcher.follow(partition)
        self._leaders[key] = leader

    def log_offline(self, partition: Partition) -> None:
        """``partition``'s log went offline: its fetcher stops fetching it at its next round."""
        leader = self._leaders.get((partition.topic, partition.index))
        fetcher = self._fetchers.get(leader) if leader is not None else None
        if fetcher is not None:
            fetcher.recheck(partition)

    def remove(self, partition: Partition) -> None:
        leader = self._leaders.pop((partition.topic, partition.index), None)
        fetcher = self._fetchers.get(leader) if leader is not None else None
        if fetcher is None:
            return
        fetcher.unfollow(partition)
        if not len(fetcher):
            del self._fetchers[fetcher.leader_id]
            task = asyncio.create_task(fetcher.close(), name=f"close-replica-fetcher-{fetcher.leader_id}")
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        self._leaders.clear()
        await asyncio.gather(*(f.close() for f in fetchers), *self._closing, return_exceptions=True)
