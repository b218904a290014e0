"""One partition replica hosted by this broker: its log and the leadership the controller gave it.

As leader it tracks every follower's log end (reported by follower fetches) and keeps the high
watermark at the smallest log end over the ISR (:meth:`high_watermark_target`); acks=all waits
for the high watermark (:meth:`wait_replicated`). As follower it appends what the replica fetcher
brings (:meth:`append_as_follower`) and truncates where its log diverged from the leader's.

A new leader hides its high watermark from consumers (OFFSET_NOT_AVAILABLE, retriable) until it
reaches the log end the leader had when it took over: every offset an earlier leader exposed is
below that point, so consumers never see the high watermark go back across a failover.

Threading: ``Log`` calls that fsync, delete files or may wait on a disk run on the broker's I/O
pool (:meth:`run`); ``Log`` is thread-safe and fsyncs without blocking appends. Moving the high
watermark (memory only), appends of at most INLINE_WRITE_BYTES that need no fsync, and reading a
few partitions at their logs' ends (page cache) run on the event loop when no pool thread holds
the log (``Log.locked(blocking=False)``), else on the pool.
The only broker-side critical section is advancing the high watermark (read target, compare,
set), which must never move it backwards when appends finish out of order. Leadership state, follower
progress and :attr:`changed` live on the event loop; follower appends and truncations are
serialized by an asyncio lock and re-check the leader epoch under it, so nothing fetched from a
former leader lands after the partition moved on.
"""
from __future__ import annotations

import asyncio
import contextlib
import threading
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeVar

from ember.cluster.records import NOT_APPLIED_VERSION, PartitionState
from ember.errors import (
    FencedLeaderEpoch,
    InvalidTxnState,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeaderOrFollower,
    OffsetNotAvailable,
    OffsetOutOfRange,
    RequestTimedOut,
    StorageError,
    UnknownLeaderEpoch,
)
from ember.ingest.isr import FollowerProgress, now_ms
from ember.ingest.log_dir_space import LogDirSpace
from ember.ingest.signals import Signal, wait_any
from ember.log import FsyncNeeded
from ember.log.config import LogConfig
from ember.record.header import NO_EPOCH, BatchHeader

if TYPE_CHECKING:
    from ember.log import AppendResult, FetchSlice, Log
    from ember.log.producer_state import ActiveProducer
    from ember.metrics.broker_metrics import TopicStats
    from ember.record.control import Marker

T = TypeVar("T")

#: Appends of at most this many bytes may run on the event loop (``Partition._write``).
INLINE_WRITE_BYTES = 256 * 1024

# ListOffsets' special timestamps (Kafka's ListOffsetsRequest); with no tiered storage the local
# log is the whole log: its start is the earliest local offset and nothing is tiered.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3               # the record with the largest timestamp (v7+)
EARLIEST_LOCAL_TIMESTAMP = -4    # v8+
LATEST_TIERED_TIMESTAMP = -5     # v9+: -1, as Kafka answers for a topic without remote storage
IN_MEMORY_TIMESTAMPS = frozenset((EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP, LATEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP))
CONSUMER_REPLICA_ID = -1
#: DeleteRecords' offset meaning "up to the high watermark" (Kafka's DeleteRecordsRequest.HIGH_WATERMARK)
DELETE_TO_HIGH_WATERMARK = -1


@dataclass(frozen=True)
class LogOffsets:
    """A partition's offsets as a fetch reports them; -1 each when unknown (a failed fetch)."""
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    last_stable_offset: int = -1


class Partition:
    def __init__(self, topic: str, index: int, topic_id: str, log: "Log", config: LogConfig,
                 broker_id: int, io_pool: Executor, stats: "TopicStats | None" = None,
                 space: LogDirSpace | None = None) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.config = config
        self.broker_id = broker_id
        self.state = PartitionState(-1, -1, [], -1, NOT_APPLIED_VERSION)
        self.replicas: list[int] = []
        self.removing: frozenset[int] = frozenset()
        #: Fired on the event loop whenever readers may see more: an append, a higher high
        #: watermark or log start, or a leadership change (so parked fetches and acks=all waits
        #: re-check; fetch sessions look only at partitions that fired).
        self.changed = Signal()
        #: Log end when this broker last became leader; consumers wait for the HW to reach it.
        self.epoch_start_offset = 0
        #: Followers whose addition to the ISR is being written; they count for the HW already.
        self.joining_isr: set[int] = set()
        self._followers: dict[int, FollowerProgress] = {}
        self._hw_lock = threading.RLock()
        # Serializes appends and truncations with the leadership check made before each: an append
        # queued on the I/O pool while leading must not land after this replica began following.
        self._append_lock = asyncio.Lock()
        #: producer id -> its verification guard (see verification_guard)
        self._verification_guards: dict[int, object] = {}
        self._io_pool = io_pool
        #: The topic's byte and record counters (None: metrics are off).
        self.stats = stats
        #: The free space appends must leave on the log directory (None: no check).
        self.space = space
        #: Called (event loop) after each StorageError of this log the broker meets, so the
        #: replica manager looks at once whether the log went offline (set by it).
        self.on_storage_error: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return f"{self.topic}-{self.index}"

    # -- I/O -----------------------------------------------------------------------------------

    async def run(self, job: Callable[..., T], *args: Any) -> T:
        """Run a blocking ``Log`` job on the I/O pool. A cancelled caller (its client went away)
        still returns only once the job is done: the job runs on regardless, and a caller holding
        the append lock must keep it until its write has landed."""
        future = asyncio.get_running_loop().run_in_executor(self._io_pool, job, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            await asyncio.wait([future])
            raise

    # -- leadership ----------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.broker_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    def assign(self, replicas: list[int], removing: list[int]) -> None:
        """Take the partition's replica assignment (event loop). Replicas being removed by a
        reassignment still fetch but never rejoin the ISR."""
        self.replicas = list(replicas)
        self.removing = frozenset(removing)

    def apply_state(self, state: PartitionState) -> None:
        """Take the latest partition state from ZooKeeper (event loop)."""
        new_term = (self.state.leader, self.state.leader_epoch) != (state.leader, state.leader_epoch)
        self.state = state
        if new_term:
            self._followers.clear()
            if self.is_leader:
                # Followers get a full lag period to show up, as in Kafka.
                self.epoch_start_offset = self.log.log_end_offset
                self._followers = {r: FollowerProgress(now_ms()) for r in self.replicas if r != self.broker_id}
        self.changed.fire()

    def check_leader(self, current_leader_epoch: int | None = None) -> None:
        """Raise unless this broker leads the partition at the epoch the client believes in."""
        if not self.is_leader:
            raise NotLeaderOrFollower(f"broker {self.broker_id} does not lead {self} "
                                      f"(leader is {self.state.leader})")
        if current_leader_epoch is None or current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpoch(f"{self}: leader epoch {current_leader_epoch} is older than "
                                    f"{self.leader_epoch}; refresh metadata")
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpoch(f"{self}: leader epoch {current_leader_epoch} is newer than "
                                     f"{self.leader_epoch} known here; retry")

    # -- leader: followers, ISR, high watermark ------------------------------------------------

    def record_follower_position(self, replica_id: int, fetch_offset: int) -> None:
        """A follower fetched from ``fetch_offset``, so its log ends there (event loop). An offset
        past this log's end is out of range: such a follower must truncate first, and must never
        count towards the high watermark or the ISR."""
        if fetch_offset > self.log.log_end_offset:
            raise OffsetOutOfRange(f"{self}: follower {replica_id} fetches from {fetch_offset}, past the "
                                   f"log end {self.log.log_end_offset}")
        if replica_id not in self.replicas or replica_id == self.broker_id:
            raise NotLeaderOrFollower(f"broker {replica_id} is not a follower of {self}")
        progress = self._followers.get(replica_id)
        if progress is None:
            progress = self._followers[replica_id] = FollowerProgress(0.0)
        progress.fetched(fetch_offset, self.log.log_end_offset, now_ms())

    def may_join_isr(self, replica_id: int) -> bool:
        """Kafka's rule: an out-of-sync follower rejoins once its log end reaches the high
        watermark and the start of this leader's epoch (unless a reassignment removes it)."""
        progress = self._followers.get(replica_id)
        return self.is_leader and progress is not None and replica_id not in self.state.isr and \
            replica_id in self.replicas and replica_id not in self.removing and \
            progress.end_offset >= max(self.log.high_watermark, self.epoch_start_offset)

    def out_of_sync_replicas(self, at_ms: float, lag_max_ms: int) -> list[int]:
        """ISR followers that have not been caught up for ``lag_max_ms``."""
        return [r for r in self.state.isr if r != self.broker_id
                and (r not in self._followers or self._followers[r].lagging(at_ms, lag_max_ms))]

    def high_watermark_target(self) -> int:
        """The high watermark the leader may advance to: the smallest log end over the ISR (and
        followers being added to it). A follower that has not fetched yet holds it back."""
        target = self.log.log_end_offset
        for replica in set(self.state.isr) | self.joining_isr:
            if replica != self.broker_id:
                progress = self._followers.get(replica)
                target = min(target, progress.end_offset if progress is not None else -1)
        return target

    async def advance_high_watermark(self) -> None:
        """Move the high watermark to its target if that is higher, waking readers and acks=all
        waits (event loop). The move is in memory: it runs inline, unless an I/O-pool thread holds
        the log (an append, a roll) or is moving it too; then it runs on the pool."""
        if self.is_leader and self.high_watermark_target() > self.log.high_watermark:
            moved = self._advance_high_watermark(wait=False)
            if moved is None:
                try:
                    moved = await self.run(self._advance_high_watermark)
                except asyncio.CancelledError:
                    self.changed.fire()    # the move may have landed: fetch sessions must hear of it
                    raise
            if moved:
                self.changed.fire()

    def _advance_high_watermark(self, wait: bool = True) -> bool | None:
        """Whether the high watermark moved; None (only without ``wait``) when another thread
        holds its lock or the log's."""
        with self._locked(blocking=wait) as held:
            if not held:
                return None
            target = self.high_watermark_target()
            if target > self.log.high_watermark:
                self.log.update_high_watermark(target)
                return True
            return False

    @contextlib.contextmanager
    def _locked(self, *, blocking: bool) -> Iterator[bool]:
        """Hold the high-watermark lock, then the log's (their one order, wherever a job runs);
        without ``blocking`` only if both are free. Yields whether they are held."""
        if not self._hw_lock.acquire(blocking=blocking):
            yield False
            return
        try:
            with self.log.locked(blocking=blocking) as held:
                yield held
        finally:
            self._hw_lock.release()

    async def _write(self, job: Callable[..., T], raw: memoryview, *args: Any) -> T:
        """Run an append job (``raw`` first, then ``args``) on the event loop when the batch is at
        most INLINE_WRITE_BYTES, no other thread holds the log and the append need not fsync (a
        roll, flush.messages): a write into the page cache of microseconds, where the I/O pool's
        two thread hand-offs cost 0.3-1 ms under load on every acks=all write's way (the leader's
        append, the follower's). Else, or after FsyncNeeded (nothing written), on the pool."""
        if len(raw) <= INLINE_WRITE_BYTES:
            with self._locked(blocking=False) as held:
                if held:
                    try:
                        return job(raw, *args, fsync=False)
                    except FsyncNeeded:
                        pass
        return await self.run(job, raw, *args)

    async def wait_replicated(self, end_offset: int, leader_epoch: int, deadline: float) -> None:
        """acks=all: return once every ISR member has the write ending at ``end_offset`` and the
        ISR still has ``min.insync.replicas`` members; woken by high-watermark changes. A log
        that a disk failure took offline fails the wait at once (KAFKA_STORAGE_ERROR, as Kafka
        completes its delayed produces on a log dir failure): its followers can fetch nothing
        more, and waiting for the controller to move leadership would hold the producer's
        connection, with every reply behind this one, for up to the request timeout."""
        loop = asyncio.get_running_loop()
        while True:
            if not self.is_leader or self.leader_epoch != leader_epoch:
                raise NotLeaderOrFollower(f"{self}: leadership moved while waiting for replication")
            if self.log.high_watermark >= end_offset:
                if len(self.state.isr) < self.config.min_insync_replicas:
                    raise NotEnoughReplicasAfterAppend(
                        f"{self}: written, but the ISR {self.state.isr} shrank below "
                        f"min.insync.replicas {self.config.min_insync_replicas}")
                return
            if self.log.offline:
                raise StorageError(f"{self}: written, but its log went offline before every in-sync replica "
                                   f"had the write ({self.log.offline_reason}); retry: leadership moves to a "
                                   f"replica on a working disk")
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise RequestTimedOut(f"{self}: written by the leader but not by every in-sync replica "
                                      f"{self.state.isr} within the request timeout")
            await wait_any([self.changed], remaining)

    # -- records -------------------------------------------------------------------------------

    def verification_guard(self, producer_id: int) -> object:
        """What a transactional batch verified with the coordinator presents to :meth:`append`
        (Kafka's VerificationGuard): one per producer until its transaction here ends; a marker
        voids it, so a verification that raced the transaction's end cannot open a new one."""
        return self._verification_guards.setdefault(producer_id, object())

    async def append(self, raw: memoryview, required_acks: int, guard: object | None = None) -> "AppendResult":
        """Append a producer's batch as leader. acks=all needs ``min.insync.replicas`` in-sync
        replicas before the write (Kafka's NOT_ENOUGH_REPLICAS). A batch verified with its
        transaction coordinator (``guard``) is appended only if no marker voided the guard since
        (or, for one appended without verification because its transaction was open here, only if
        that transaction still is)."""
        async with self._append_lock:
            self.check_leader()
            if guard is not None:
                self._check_guard(raw, guard)
            if required_acks == -1 and len(self.state.isr) < self.config.min_insync_replicas:
                raise NotEnoughReplicas(f"{self}: {len(self.state.isr)} in-sync replica(s) {self.state.isr}, "
                                        f"min.insync.replicas is {self.config.min_insync_replicas}")
            try:
                result = await self._write(self._append, raw, self.leader_epoch)
            except StorageError as exc:
                self.write_failed("produce", exc)
                raise
            finally:
                self.changed.fire()    # also when the client went away: the write landed all the same

        if self.stats is not None and not result.duplicate:
            self.stats.produced(result.record_count, len(raw))
        return result

    def guard_holds(self, raw: memoryview, guard: object) -> bool:
        """Whether ``raw``'s batch may still be appended with ``guard``: its producer's transaction
        is open here at its epoch, or no marker voided the guard since it was taken."""
        header = BatchHeader.parse(raw)
        return (self.log.in_transaction(header.producer_id, header.producer_epoch)
                or self._verification_guards.get(header.producer_id) is guard)

    def _check_guard(self, raw: memoryview, guard: object) -> None:
        producer_id = BatchHeader.parse(raw).producer_id
        if not self.guard_holds(raw, guard):
            raise InvalidTxnState(f"{self}: the transaction of producer {producer_id} ended while its batch was "
                                  f"being verified or waiting; the batch was not written")

    async def write_marker(self, marker: "Marker") -> "AppendResult":
        """Append, as leader, the marker ending ``marker``'s producer's transaction here
        (WriteTxnMarkers); the caller waits for its replication, as Kafka appends markers with
        acks=all. It voids the producer's verification guard."""
        async with self._append_lock:
            self.check_leader()
            self._verification_guards.pop(marker.producer_id, None)
            try:
                return await self.run(self._write_marker, marker, self.leader_epoch)
            except StorageError as exc:
                self.write_failed("produce", exc)   # a marker is written like a produce
                raise
            finally:
                self.changed.fire()

    def _write_marker(self, marker: "Marker", leader_epoch: int) -> "AppendResult":
        result = self.log.append_marker(marker, leader_epoch)
        self._advance_high_watermark()
        return result

    def _append(self, raw: memoryview, leader_epoch: int, fsync: bool = True) -> "AppendResult":
        if self.space is not None and len(raw) <= self.config.max_message_bytes:   # larger: the log refuses it
            self.space.check(self.log.directory, len(raw))
        result = self.log.append_as_leader(raw, leader_epoch, fsync=fsync)
        self._advance_high_watermark()
        return result

    def unflushed_from(self, fetch_offset: int) -> bool:
        """Whether a read from ``fetch_offset`` is of data written since the log's last fsync, so in
        the page cache: such reads (of readers at a log's end) may run on the event loop."""
        return fetch_offset >= self.log.recovery_point

    def caught_up(self, fetch_offset: int, replica_id: int, committed: bool = False) -> LogOffsets | None:
        """On the event loop, without I/O: the offsets when nothing is readable from ``fetch_offset``
        yet (below the high watermark for consumers, the last stable offset for ``committed``:
        read_committed, the log end for followers), else None and ``read_blocking`` reads it. An
        I/O-pool round trip per idle partition would serialize every follower fetch round, and the
        high watermark (so every acks=all reply) only advances once per round."""
        if replica_id < 0:
            self._check_high_watermark_known()
        offsets = self._offsets()
        return offsets if fetch_offset == _visible_end(offsets, replica_id, committed) else None

    def _offsets(self) -> LogOffsets:
        log = self.log
        return LogOffsets(log.high_watermark, log.log_start_offset, log.log_end_offset, log.last_stable_offset)

    def read_blocking(self, fetch_offset: int, max_bytes: int, min_one_batch: bool,
                      replica_id: int, committed: bool = False) -> tuple["FetchSlice | None", LogOffsets]:
        """Batches from ``fetch_offset`` (on an I/O-pool thread, a fetch's partitions in one job;
        or on the event loop, holding the log, for a few reads at their logs' ends): the slice
        (None when nothing is readable) and the offsets."""
        offsets = self._offsets()
        limit = None if replica_id >= 0 else _visible_end(offsets, replica_id, committed)
        piece = self.log.read(fetch_offset, max_bytes, max_offset=limit, min_one_batch=min_one_batch,
                              skip_empty=replica_id < 0)
        return (piece if piece.size > 0 else None), offsets

    def _check_high_watermark_known(self) -> None:
        if self.log.high_watermark < self.epoch_start_offset:
            raise OffsetNotAvailable(f"{self}: the new leader's high watermark {self.log.high_watermark} "
                                     f"has not caught up to {self.epoch_start_offset} yet; retry")

    async def delete_records(self, offset: int) -> int:
        """DeleteRecords at the leader: move the log start up to ``offset`` (-1: the high
        watermark; above it: OFFSET_OUT_OF_RANGE) and return the new log start. Followers move
        theirs when their next fetch brings the leader's log start."""
        self.check_leader()
        if offset < DELETE_TO_HIGH_WATERMARK:
            raise OffsetOutOfRange(f"{self}: cannot delete records before offset {offset}")
        try:
            return await self.run(self._delete_records, offset)
        finally:
            self.changed.fire()    # fetch sessions tell their fetchers of the new log start

    def _delete_records(self, offset: int) -> int:
        return self.log.delete_records_before(self.log.high_watermark if offset == DELETE_TO_HIGH_WATERMARK else offset)

    async def offset_for_timestamp(self, timestamp: int, replica_id: int, committed: bool = False) -> tuple[int, int]:
        """ListOffsets: (offset, timestamp) for a timestamp or one of the special timestamps above;
        (-1, -1) when no visible record answers it (``committed``: read_committed, whose view ends at
        the last stable offset). Earliest and latest are answered on the event loop, from offsets
        held in memory: Spark's Kafka connector asks for both after every poll."""
        if timestamp in IN_MEMORY_TIMESTAMPS:
            return self.offset_in_memory(timestamp, replica_id, committed)
        return await self.run(self._offset, timestamp, replica_id, committed)

    def offset_in_memory(self, timestamp: int, replica_id: int, committed: bool = False) -> tuple[int, int]:
        """:meth:`offset_for_timestamp` for one of :data:`IN_MEMORY_TIMESTAMPS`, answered at once."""
        if timestamp not in IN_MEMORY_TIMESTAMPS:
            raise ValueError(f"timestamp {timestamp} is not answered from memory")
        return self._offset(timestamp, replica_id, committed)

    def _offset(self, timestamp: int, replica_id: int, committed: bool) -> tuple[int, int]:
        log = self.log
        if replica_id < 0:
            self._check_high_watermark_known()
        visible_end = _visible_end(self._offsets(), replica_id, committed)
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return log.log_start_offset, -1
        if timestamp == LATEST_TIMESTAMP:
            return visible_end, -1
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return -1, -1
        found = log.offset_of_max_timestamp() if timestamp == MAX_TIMESTAMP else log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= visible_end:
            return -1, -1
        return found

    async def active_producers(self) -> list["ActiveProducer"]:
        """DescribeProducers at the leader: its producers and the transaction each has open here."""
        return await self.run(self.log.active_producers)

    async def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch on the leader: (largest epoch ≤ ``epoch``, where it ended). With
        no such epoch the answer is (-1, log end): the follower keeps at most what this log has."""
        return await self.run(self._end_offset_for_epoch, epoch)

    def _end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        log = self.log
        found, end = log.end_offset_for_epoch(epoch)
        if found != NO_EPOCH:
            return found, end
        latest = log.latest_epoch
        if latest != NO_EPOCH and latest < epoch <= self.leader_epoch:
            # This leader's epoch began at its log end, though nothing is written in it yet (Kafka
            # records that start on becoming leader): every epoch in between ended there too. A
            # follower that wrote in such an epoch under a former leader must drop those records.
            return latest, log.log_end_offset
        return NO_EPOCH, log.log_end_offset

    # -- follower ------------------------------------------------------------------------------

    async def append_as_follower(self, raw: memoryview, leader_epoch: int, leader_high_watermark: int,
                                 leader_log_start: int = 0) -> None:
        """Append batches fetched from the leader of ``leader_epoch`` and follow its high
        watermark and log start (DeleteRecords, retention), the latter no further than this
        replica's high watermark; raises NotLeaderOrFollower if the partition moved to another
        term meanwhile."""
        if not raw and min(leader_high_watermark, self.log.log_end_offset) <= self.log.high_watermark and \
                leader_log_start <= self.log.log_start_offset:
            return
        async with self._append_lock:
            self._check_following(leader_epoch)
            if leader_log_start > self.log.log_start_offset:    # deleting segments waits on the log's flush
                await self.run(self._append_as_follower, raw, leader_high_watermark, leader_log_start)
            else:
                await self._write(self._append_as_follower, raw, leader_high_watermark, leader_log_start)
        if self.stats is not None and raw:
            self.stats.replicated(len(raw))

    def _append_as_follower(self, raw: memoryview, leader_high_watermark: int, leader_log_start: int,
                            fsync: bool = True) -> None:
        if raw:
            if self.space is not None:
                self.space.check(self.log.directory, len(raw))
            self.log.append_as_follower(raw, fsync=fsync)
        with self._hw_lock:
            if min(leader_high_watermark, self.log.log_end_offset) > self.log.high_watermark:
                self.log.update_high_watermark(leader_high_watermark)
        start = min(leader_log_start, self.log.high_watermark)
        if start > self.log.log_start_offset:
            self.log.delete_records_before(start)

    async def truncate(self, offset: int, leader_epoch: int, *, fully: bool = False) -> None:
        """Drop everything from ``offset`` on (``fully``: everything, restarting the log empty at
        ``offset``, for a follower that fell below the leader's log start)."""
        async with self._append_lock:
            self._check_following(leader_epoch)
            await self.run(self.log.truncate_fully_and_start_at if fully else self.log.truncate_to, offset)

    def _check_following(self, leader_epoch: int) -> None:
        if self.is_leader or self.state.leader < 0 or self.leader_epoch != leader_epoch:
            raise NotLeaderOrFollower(f"{self}: no longer follows the leader of epoch {leader_epoch}")

    # -- maintenance ---------------------------------------------------------------------------

    def write_failed(self, operation: str, error: StorageError) -> None:
        """An append to this partition's log (``operation``: produce or replication) failed on
        disk: counted, and the log taken offline (unless it already is, or was closed meanwhile:
        deleted or moved away). As Kafka (KIP-112) the controller then moves leadership to a
        replica on a working disk and drops this one from the ISR at once; kept online, a full
        follower would hold acks=all producers unanswered for replica.lag.time.max.ms, and a full
        leader would answer KAFKA_STORAGE_ERROR for as long as its disk stays full. The log comes
        back by itself once its disk works (``offline_log_recovery``)."""
        if not self.log.offline and not self.log.closed:
            self.log.take_offline(f"a write failed ({error}); offline until the disk works again")
        self.count_storage_error(operation)

    def count_storage_error(self, operation: str) -> None:
        """The broker met a StorageError of this partition's log during ``operation`` (metrics);
        a log it took offline wakes what waits on the partition (acks=all waits fail, parked
        fetches answer). A log closed meanwhile (deleted or moved away) is no disk failure."""
        if self.stats is not None and (self.log.offline or not self.log.closed):
            self.stats.storage_error(operation)
        if self.log.offline:
            self.changed.fire()
        if self.on_storage_error is not None:
            self.on_storage_error()

    def reconfigure(self, config: LogConfig) -> None:
        """Apply an altered topic config to the open log (I/O thread)."""
        self.log.update_config(config)
        self.config = config


def _visible_end(offsets: LogOffsets, replica_id: int, committed: bool) -> int:
    """Where a reader's view of the log ends: the log end for a follower, the last stable offset
    for a read_committed consumer, the high watermark for any other."""
    if replica_id >= 0:
        return offsets.log_end_offset
    return offsets.last_stable_offset if committed else offsets.high_watermark
