"""Keeps this broker's partitions in step with cluster metadata, and their replication roles.

The metadata cache reports changed topics from kazoo's thread; :meth:`ReplicaManager.notify`
hops onto the event loop and queues the topic, and a single task reconciles queued topics one
at a time: it opens logs for partitions assigned to this broker, applies leadership and config
changes, and deletes local partitions of topics that were deleted, re-created under a new id or
moved away. Every new partition state (from the watch, or from this broker's own ISR writes)
goes through :meth:`ReplicaManager.apply_state`, which ignores states older than the one applied
and starts or stops the partition's replica fetcher. Requests look partitions up here
(:meth:`leader_partition`); follower fetches report in through :meth:`follower_fetched`.

A partition whose log a disk failure took offline (``Log.offline``) is reported to the controller
in ``/brokers/offline_replicas/<id>`` (:mod:`ember.cluster.offline_replicas`), which moves its
leadership away and drops this replica from its ISR. The manager looks after every StorageError
the broker meets on a partition's log and every second; it rewrites the znode whenever the set
changes, once at start-up (a restarted broker whose logs reopened clears it) and after a new
ZooKeeper session, retrying every second while ZooKeeper does not take it. The partition stays
open: appends and reads raise StorageError, the replica fetcher leaves it out. Once the controller
has moved away and the disk works again (:mod:`ember.ingest.offline_log_recovery`),
:meth:`ReplicaManager.reopen_offline` puts a new Partition over the log reopened from disk in its
place; the report then drops it, and the replica catches up and rejoins the ISR.
A replica whose log directory failed at start-up (``ember.ingest.log_dirs``) is never opened and
is reported the same way until the broker restarts with that directory working.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Awaitable, Callable, Generic, Iterable, TypeVar

from ember.cluster.election import offline_reason
from ember.cluster.metadata_cache import MetadataCache, TopicMetadata
from ember.cluster.offline_replicas import OfflineReplicaWriter
from ember.cluster.records import NO_LEADER, OfflineReplica, PartitionState
from ember.errors import InvalidConfig, LeaderNotAvailable, NotLeaderOrFollower, StorageError, UnknownTopicOrPartition
from ember.ingest.broker_client import InterBroker
from ember.ingest.broker_config import BrokerConfig
from ember.ingest.fetch_session import FetchSessionCache
from ember.ingest.isr import IsrManager, IsrWriter
from ember.ingest.log_dir_space import LogDirSpace
from ember.ingest.log_manager import LogManager
from ember.ingest.offline_log_recovery import OfflineLogRecovery
from ember.ingest.partition import Partition
from ember.ingest.replica_fetcher import FetcherConfig, ReplicaFetchers
from ember.ingest.signals import Signal, wait_any
from ember.log import Log
from ember.log.config import LogConfig
from ember.log.log import rename_for_delete
from ember.net.channel import Address
from ember.security.authorizer.access import ALLOW_ALL, Access
from ember.security.authorizer.model import Operation

if TYPE_CHECKING:
    from ember.metrics.broker_metrics import BrokerMetrics

log = logging.getLogger(__name__)

#: How often the manager looks for logs gone offline (it also looks after each StorageError).
OFFLINE_CHECK_INTERVAL_S = 1.0
_ALL = "\0all"   # queue marker: reconcile every topic (start-up, new session)
#: Replicas new here opened per I/O-pool job, each chunk led or followed before the next opens:
#: a topic of 1,000 partitions is served from its first chunk on, not after all 1,000 logs.
OPEN_CHUNK = 100
#: A reconciliation applying more partition states than this logs them in one INFO line, not one
#: per partition (a new topic of 1,000 partitions: 1,000 lines cost a broker about 0.2 s of CPU).
LOGGED_STATES = 20
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class LeaderQuery(Generic[T]):
    """One partition's question for its leader (ListOffsets, OffsetForLeaderEpoch, DeleteRecords):
    the epoch the asker last saw (None: any) and the request's argument for that partition."""
    topic: str
    partition: int
    current_leader_epoch: int | None
    argument: T


@dataclass(frozen=True)
class LeaderAnswer(Generic[R]):
    """The leader's answer to one :class:`LeaderQuery`: its value, or the error to report."""
    topic: str
    partition: int
    value: R | None
    error: Exception | None = None


class ReplicaManager:
    def __init__(self, broker_id: int, cache: MetadataCache, logs: LogManager, config: BrokerConfig,
                 isr_writer: IsrWriter, metrics: "BrokerMetrics | None" = None,
                 inter_broker: InterBroker = InterBroker(), access: Access = ALLOW_ALL,
                 offline_writer: OfflineReplicaWriter | None = None) -> None:
        self.broker_id = broker_id
        #: The ACL checks of the record path (produce, fetch, offsets), shared by both protocols.
        self.access = access
        self.inter_broker = inter_broker
        self.metrics = metrics
        self.cache = cache
        self.logs = logs
        self.config = config
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.fetchers = ReplicaFetchers(broker_id, self._broker_address, FetcherConfig.from_broker_config(config),
                                        inter_broker)
        self.isr = IsrManager(isr_writer, config.replica_lag_time_max_ms, self.all_partitions, self.apply_state,
                              metrics)
        #: Fetch sessions of followers and clients fetching from the partitions this broker leads.
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots)
        #: Fired after every reconcile, so admin requests can wait for their effect locally.
        self.reconciled = Signal()
        #: Fired on the loop whenever the metadata cache told of a change (before it is applied).
        self.metadata_noticed = Signal()
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        #: Held while a topic is reconciled or an offline log reopened: both replace partitions.
        self._replacing = asyncio.Lock()
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[None] | None = None
        #: Reports this broker's offline replicas to the controller (None: nobody to tell).
        self.offline_writer = offline_writer
        self._offline_reported: frozenset[OfflineReplica] | None = None   # None: not written yet
        self._offline_look = Signal()     # fired when a log may have gone offline (or must be re-reported)
        self._offline_pending = True      # a look is due (start-up: write the report at once)
        self._offline_task: asyncio.Task[None] | None = None
        self._offline_announced: frozenset[OfflineReplica] = frozenset()   # ERROR line written for these
        self._offline_noticed: frozenset[OfflineReplica] = frozenset()   # their replica fetchers told
        self._offline_write_failing = False
        #: Replicas whose log is on a log directory that failed at start-up: never opened, reported offline.
        self._in_offline_dirs: frozenset[OfflineReplica] = frozenset()
        self._closed = False
        self._removals: set[asyncio.Task[None]] = set()    # deleted partitions' directories being removed
        if offline_writer is not None:
            offline_writer.on_new_session(self._new_session)
        self.space = LogDirSpace(config.log_dir_min_free_bytes)
        self.recovery = OfflineLogRecovery(broker_id, config.log_offline_retry_interval_ms, self.all_partitions,
                                           self._cached_state, self.reopen_offline, logs.io_pool,
                                           config.log_dir_min_free_bytes)

    # -- lookups (event loop) ------------------------------------------------------------------

    async def answer_at_leader(self, queries: list[LeaderQuery[T]], answer: Callable[[Partition, T], Awaitable[R]],
                               operation: Operation | None = Operation.DESCRIBE) -> list[LeaderAnswer[R]]:
        """Per query: ``answer(partition, query.argument)`` when this broker leads the partition at
        the query's ``current_leader_epoch`` and the principal may do ``operation`` on its topic
        (None: checked by the caller), else the error. Each protocol parses every query before
        asking, so a malformed one refuses the whole request."""
        results: list[LeaderAnswer[R]] = []
        for query in queries:
            try:
                partition = self._leading(query, operation)
                results.append(LeaderAnswer(query.topic, query.partition, await answer(partition, query.argument)))
            except Exception as exc:
                results.append(LeaderAnswer(query.topic, query.partition, None, exc))
        return results

    def answer_at_leader_now(self, queries: list[LeaderQuery[T]], answer: Callable[[Partition, T], R],
                             operation: Operation | None = Operation.DESCRIBE) -> list[LeaderAnswer[R]]:
        """:meth:`answer_at_leader` with an answer at hand (held in memory): the same checks, no wait."""
        results: list[LeaderAnswer[R]] = []
        for query in queries:
            try:
                partition = self._leading(query, operation)
                results.append(LeaderAnswer(query.topic, query.partition, answer(partition, query.argument)))
            except Exception as exc:
                results.append(LeaderAnswer(query.topic, query.partition, None, exc))
        return results

    def _leading(self, query: LeaderQuery[T], operation: Operation | None) -> Partition:
        """The partition a query is for, if this broker leads it at the query's epoch and the
        principal may do ``operation`` on its topic; else the error to answer."""
        if operation is not None:
            self.access.check_topic(operation, query.topic)
        partition = self.leader_partition(query.topic, query.partition)
        partition.check_leader(query.current_leader_epoch)
        return partition

    def leader_partition(self, topic: str, index: int) -> Partition:
        """The partition if this broker leads it, else the error a client should act on."""
        partition = self.partitions.get((topic, index))
        if partition is not None and partition.is_leader:
            return partition
        meta = self.cache.topic(topic)
        if meta is None or index not in meta.partitions:
            raise UnknownTopicOrPartition(f"{topic}-{index} does not exist")
        state = meta.states.get(index)
        if state is None or state.leader < 0:
            raise LeaderNotAvailable(self.unavailable_reason(meta, index))
        if state.leader == self.broker_id:
            if OfflineReplica(topic, index, meta.topic_id) in self._in_offline_dirs:
                raise StorageError(f"{topic}-{index}: its log directory on broker {self.broker_id} is offline")
            raise LeaderNotAvailable(f"{topic}-{index} is still being opened on broker {self.broker_id}")
        raise NotLeaderOrFollower(f"broker {self.broker_id} does not lead {topic}-{index}; "
                                  f"broker {state.leader} does")

    def unavailable_reason(self, meta: TopicMetadata, index: int) -> str:
        """Why partition ``index`` of ``meta`` has no serving leader (LEADER_NOT_AVAILABLE)."""
        try:
            unclean = self.config.log_config(meta.record.config).unclean_leader_election_enable
        except InvalidConfig:
            unclean = self.config.unclean_leader_election_enable
        return offline_reason(f"{meta.name}-{index}", meta.states.get(index), meta.partitions[index],
                              self.cache.brokers(), unclean)

    def offline_replicas(self) -> frozenset[OfflineReplica]:
        """This broker's partitions whose log a disk failure took offline."""
        return frozenset(OfflineReplica(p.topic, p.index, p.topic_id) for p in self.partitions.values()
                         if p.log.offline) | self.in_offline_dirs()

    def in_offline_dirs(self) -> frozenset[OfflineReplica]:
        """Replicas still assigned here whose log is on a log directory that failed at start-up."""
        if not self._in_offline_dirs:
            return frozenset()
        return frozenset(r for r in self._in_offline_dirs if r in self._assigned_here())

    def _assigned_here(self) -> frozenset[OfflineReplica]:
        return frozenset(OfflineReplica(name, index, meta.topic_id) for name, meta in self.cache.topics().items()
                         for index, replicas in meta.partitions.items() if self.broker_id in replicas)

    def all_partitions(self) -> Iterable[Partition]:
        return self.partitions.values()

    def _broker_address(self, broker_id: int) -> Address | None:
        return self.inter_broker.address(self.cache.brokers().get(broker_id))

    # -- replication ---------------------------------------------------------------------------

    async def follower_fetched(self, partition: Partition, replica_id: int, fetch_offset: int) -> None:
        """A follower fetch reached the leader: its log ends at ``fetch_offset``. Advance the high
        watermark (waking acks=all waits) and let a caught-up follower rejoin the ISR."""
        partition.record_follower_position(replica_id, fetch_offset)
        await partition.advance_high_watermark()
        self.isr.maybe_expand(partition, replica_id)

    async def apply_state(self, partition: Partition, state: PartitionState, quiet: bool = False) -> bool:
        """Apply a partition state unless an equal or newer znode version is applied already;
        start or stop fetching, and as leader advance the high watermark (the ISR may allow it).
        Logged at INFO unless ``quiet`` (the caller sums up many); True when applied."""
        if state.version <= partition.state.version or \
                self.partitions.get((partition.topic, partition.index)) is not partition:
            return False
        partition.apply_state(state)
        log.log(logging.DEBUG if quiet else logging.INFO, "%s: leader %d epoch %d isr %s", partition, state.leader,
                state.leader_epoch, state.isr)
        self.fetchers.update(partition)
        await partition.advance_high_watermark()
        return True

    # -- reconciliation ------------------------------------------------------------------------

    def notify(self, topic: str | None) -> None:
        """Metadata listener (any thread): queue ``topic`` for reconciliation."""
        if topic is not None:
            self._loop.call_soon_threadsafe(self._mark, topic)

    def _mark(self, topic: str) -> None:
        self._dirty.add(topic)
        self._wake.set()
        self.metadata_noticed.fire()

    async def start(self) -> None:
        """Delete local partitions the cluster no longer assigns here, open the rest, and keep
        reconciling as metadata changes."""
        await self._remove_stale_directories()
        self._in_offline_dirs = await asyncio.to_thread(self.logs.missing_replicas, self._assigned_here())
        self._mark(_ALL)
        await self._drain()
        self._task = asyncio.create_task(self._run(), name="replica-manager")
        self.isr.start()
        # the first look writes the report at once: clears one a previous process left
        self._offline_task = asyncio.create_task(self._watch_offline_logs(), name="offline-replicas")
        self.recovery.start()

    # -- offline logs --------------------------------------------------------------------------

    def _look_offline(self) -> None:
        """A StorageError met on some partition's log, or an offline log reopened (event loop):
        look at once which logs are offline, and report a change."""
        self._offline_pending = True
        self._offline_look.fire()

    def _new_session(self) -> None:
        """ZooKeeper replaced the session (worker thread): write the report again."""
        def rewrite() -> None:
            self._offline_reported = None
            self._offline_pending = True
            self._offline_look.fire()
        if not self._closed:
            try:
                self._loop.call_soon_threadsafe(rewrite)
            except RuntimeError:
                pass   # the loop is closed: the broker is gone

    async def _watch_offline_logs(self) -> None:
        while True:
            if not self._offline_pending:
                await wait_any([self._offline_look], OFFLINE_CHECK_INTERVAL_S)
            self._offline_pending = False
            await self.report_offline_replicas()

    async def report_offline_replicas(self) -> None:
        """Write this broker's offline replicas to ZooKeeper if they changed since the last
        write (or were never written); a failed write is retried on the next check."""
        current = self.offline_replicas()
        for replica in current - self._offline_noticed:
            partition = self.partitions.get((replica.topic, replica.partition))
            if partition is not None:
                self.fetchers.log_offline(partition)
                partition.changed.fire()   # gone offline on a path that did not say so: acks=all waits end
        self._offline_noticed = current
        if self.offline_writer is None or current == self._offline_reported:
            return
        for replica in sorted(current - self._offline_announced - self._in_offline_dirs):   # those: at start-up
            partition = self.partitions[(replica.topic, replica.partition)]
            log.error("%s: its log is offline after a disk failure (%s); telling the controller, which moves "
                      "leadership away and drops this replica from the ISR until the log is reopened (once its "
                      "disk works again)", partition, partition.log.offline_reason)
        self._offline_announced = current
        try:
            await asyncio.to_thread(self.offline_writer.write, current)
        except Exception as exc:
            if not self._offline_write_failing:
                log.warning("could not write this broker's offline replicas %s to ZooKeeper (%s: %s); retrying "
                            "every %.0f s", sorted(current), type(exc).__name__, exc, OFFLINE_CHECK_INTERVAL_S)
            self._offline_write_failing = True
            return
        if self._offline_write_failing:
            log.info("wrote this broker's offline replicas %s to ZooKeeper", sorted(current))
        self._offline_write_failing = False
        self._offline_reported = current

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            await self._drain()

    async def _drain(self) -> None:
        self._wake.clear()
        while self._dirty:
            names = self._dirty - {_ALL}
            if _ALL in self._dirty:
                names |= set(self.cache.topics()) | {topic for topic, _ in self.partitions}
            self._dirty.clear()
            for name in sorted(names):
                try:
                    async with self._replacing:
                        await self._reconcile(name)
                except Exception:
                    log.exception("could not apply metadata of topic %s", name)
            self.reconciled.fire()

    async def _remove_stale_directories(self) -> None:
        """At start-up: rename the directories of partitions deleted or moved away while this
        broker was down (their names are free at once for a re-created topic), then remove them
        and those a previous process renamed but did not remove, in the background."""
        topics = self.cache.topics()
        stale = []
        for local in await asyncio.to_thread(self.logs.local_partitions):
            meta = topics.get(local.topic)
            if meta is None or meta.topic_id != local.topic_id or \
                    self.broker_id not in meta.partitions.get(local.index, ()):
                log.info("deleting %s: its topic was deleted or the partition moved away", local.path)
                stale.append(local.path)
        renames: list[tuple[Path, Callable[[], Path]]] = [(d, functools.partial(rename_for_delete, d)) for d in stale]
        renamed = await asyncio.get_running_loop().run_in_executor(self.logs.io_pool, _rename_for_delete, renames)
        self._remove_later(renamed + await asyncio.to_thread(self.logs.deleted_directories))

    async def _reconcile(self, name: str) -> None:
        meta = self.cache.topic(name)
        local = {i: p for (t, i), p in self.partitions.items() if t == name}
        if meta is None:
            await self._delete(list(local.values()), "its topic was deleted")
            if self.metrics is not None:
                self.metrics.forget_topic(name)
            return
        try:
            config = self.config.log_config(meta.record.config)
        except InvalidConfig as exc:
            log.error("topic %s has an invalid config in ZooKeeper (%s); keeping broker defaults", name, exc)
            config = self.config.log_config()
        await self._delete([p for p in local.values() if p.topic_id != meta.topic_id], "its topic was re-created")
        await self._delete([p for i, p in local.items() if p.topic_id == meta.topic_id
                            and self.broker_id not in meta.partitions.get(i, ())], "it is no longer assigned here")
        new = [index for index, replicas in meta.partitions.items()
               if self.broker_id in replicas and (meta.name, index) not in self.partitions
               and OfflineReplica(meta.name, index, meta.topic_id) not in self._in_offline_dirs]
        failure = None
        # many states to apply (a new topic, a broker's failover): one INFO line for them all
        quiet = len(new) + sum(1 for index, partition in local.items()
                               if (state := meta.states.get(index)) is not None
                               and state.version > partition.state.version) > LOGGED_STATES
        applied = 0
        try:
            for start in range(0, len(new), OPEN_CHUNK):
                chunk = new[start:start + OPEN_CHUNK]
                chunk_failure = await self._open_new(meta, chunk, config)
                failure = failure or chunk_failure
                latest = self.cache.topic(name)      # states read while the chunk opened
                if latest is None or latest.topic_id != meta.topic_id:
                    return      # deleted or re-created meanwhile: the next pass (queued by its watch) applies that
                meta = latest
                for index in chunk:
                    applied += await self._apply(meta, index, meta.partitions[index], config, quiet)
            opened_now = set(new)
            for index, replicas in meta.partitions.items():
                if self.broker_id in replicas and index not in opened_now:
                    applied += await self._apply(meta, index, replicas, config, quiet)
        finally:
            if quiet and applied:
                here = [p for (t, _), p in self.partitions.items() if t == name]
                log.info("%s: applied %d partition state(s); this broker leads %d of its %d replica(s) "
                         "(each at DEBUG)", name, applied, sum(p.is_leader for p in here), len(here))
        if failure is not None:
            raise failure

    async def _open_new(self, meta: TopicMetadata, new: list[int], config: LogConfig) -> Exception | None:
        """Open the logs of replicas ``new`` here in one I/O-pool job: a topic of 1,000 partitions
        would otherwise cost 1,000 round trips to the pool. Those that opened are put even when
        another failed; the first failure is returned (raised once the rest is applied)."""
        opened = await asyncio.get_running_loop().run_in_executor(
            self.logs.io_pool, self._open_logs, meta.name, new, meta.topic_id, config)
        failure = None
        for index, log_ in zip(new, opened):
            if isinstance(log_, Exception):
                failure = failure or log_
                continue
            partition = self._put_partition(meta.name, index, meta.topic_id, log_, config)
            log.debug("opened %s (log end %d)", partition, log_.log_end_offset)
        log.info("opened %d replica(s) of %s", sum(not isinstance(x, Exception) for x in opened), meta.name)
        return failure

    def _open_logs(self, topic: str, indexes: list[int], topic_id: str, config: LogConfig) -> list[Log | Exception]:
        """Open each partition's log (I/O pool), keeping each one's failure instead of stopping."""
        opened: list[Log | Exception] = []
        for index in indexes:
            try:
                opened.append(self.logs.open_log(topic, index, topic_id, config))
            except Exception as exc:
                opened.append(exc)
        return opened

    async def _apply(self, meta: TopicMetadata, index: int, replicas: list[int], config: LogConfig,
                     quiet: bool = False) -> bool:
        """Apply the topic's record and ``index``'s state to the replica here; True when a new
        state was applied."""
        partition = self.partitions.get((meta.name, index))
        if partition is None:
            return False        # not opened: in an offline log directory, or its open failed
        if partition.config != config:
            await partition.run(partition.reconfigure, config)
            log.info("%s: applied new topic config", partition)
        move = meta.record.reassignments.get(index)
        partition.assign(replicas, move.removing if move is not None else [])
        state = meta.states.get(index)
        return state is not None and await self.apply_state(partition, state, quiet)

    def _put_partition(self, topic: str, index: int, topic_id: str, log_: Log, config: LogConfig) -> Partition:
        partition = Partition(topic, index, topic_id, log_, config, self.broker_id, self.logs.io_pool,
                              self.metrics.topic(topic) if self.metrics else None, self.space)
        partition.on_storage_error = self._look_offline
        self.partitions[(topic, index)] = partition
        return partition

    def _retire(self, partition: Partition) -> None:
        """Stop fetching a partition object that leaves this manager, and wake whatever waits on
        it (acks=all, parked fetches): it leads nothing any more."""
        self.fetchers.remove(partition)
        partition.assign([], [])
        partition.apply_state(PartitionState(NO_LEADER, partition.leader_epoch, [], -1))

    async def _delete(self, partitions: list[Partition], why: str) -> None:
        """Take ``partitions`` out of this broker together: all retired at once (none goes on
        leading, or shrinking its ISR, while the others are deleted), their logs closed and their
        directories renamed in one I/O-pool job, the renamed directories removed in the
        background. A deleted topic of thousands of partitions costs the next reconciliation a
        rename per partition, not the removal of its files."""
        if not partitions:
            return
        for partition in partitions:
            del self.partitions[(partition.topic, partition.index)]
            self._retire(partition)
        if len(partitions) > LOGGED_STATES:
            log.info("deleting %d partition(s) of %s: %s (each at DEBUG)", len(partitions), partitions[0].topic, why)
        for partition in partitions:
            log.log(logging.DEBUG if len(partitions) > LOGGED_STATES else logging.INFO,
                    "deleting %s: %s", partition, why)
        renamed = await asyncio.get_running_loop().run_in_executor(
            self.logs.io_pool, _rename_for_delete, [(p.log.directory, p.log.rename_for_delete) for p in partitions])
        self._remove_later(renamed)

    def _remove_later(self, directories: list[Path]) -> None:
        """Remove renamed directories in a background thread (the I/O pool stays free for the
        logs in use); stopped between two directories when the broker closes: the next start
        removes the rest."""
        if not directories:
            return

        def remove() -> None:
            for directory in directories:
                if self._closed:
                    return
                self.logs.delete_directory(directory)

        task = asyncio.create_task(asyncio.to_thread(remove), name="remove-deleted-partitions")
        self._removals.add(task)
        task.add_done_callback(self._removals.discard)

    # -- reopening offline logs ------------------------------------------------------------------

    def _cached_state(self, partition: Partition) -> PartitionState | None:
        """The partition's newest state in the metadata cache (None: unknown or another topic id)."""
        meta = self.cache.topic(partition.topic)
        if meta is None or meta.topic_id != partition.topic_id:
            return None
        return meta.states.get(partition.index)

    async def reopen_offline(self, partition: Partition) -> Partition | None:
        """Close ``partition``'s offline log and reopen it from disk with the recovery of a start
        (``Log.open``: a torn tail cut by CRC, indexes rebuilt), then put a new Partition with it in
        its place and apply the partition's cached state: it follows the current leader (truncating
        by leader epoch first, like any follower) or waits for the controller to elect it. Requests,
        fetchers and schedules holding the old Partition see its closed log raise StorageError, as
        while it was offline. Returns the new Partition, or None if the partition was deleted,
        moved away or reopened meanwhile (reconciliation, serialized with this, owns it then).
        Raises StorageError if the log cannot be opened (it stays offline; retried later)."""
        key = (partition.topic, partition.index)
        async with self._replacing:
            meta = self.cache.topic(partition.topic)
            if self.partitions.get(key) is not partition or not partition.log.offline or meta is None or \
                    meta.topic_id != partition.topic_id or self.broker_id not in meta.partitions.get(partition.index, ()):
                return None
            future = asyncio.get_running_loop().run_in_executor(self.logs.io_pool, self._reopen_log, partition)
            try:
                log_ = await asyncio.shield(future)
            except asyncio.CancelledError:
                # the broker is closing: hand the reopened log over, so close() closes it with the rest
                # (no bound of its own: close() drains the I/O pool it runs on anyway)
                await asyncio.wait([future])
                if not future.cancelled() and future.exception() is None:
                    self._put_partition(partition.topic, partition.index, partition.topic_id,
                                        future.result(),   # done: waited for above
                                        partition.config)
                raise
            fresh = self._put_partition(partition.topic, partition.index, partition.topic_id, log_, partition.config)
            self._retire(partition)
            now = self.cache.topic(partition.topic)   # it may have changed while the log was opened
            if now is not None and now.topic_id == partition.topic_id and \
                    self.broker_id in now.partitions.get(partition.index, ()):
                await self._apply(now, partition.index, now.partitions[partition.index], fresh.config)
            # else the topic was deleted or moved meanwhile: its queued reconciliation deletes the partition
        self._look_offline()    # report at once that the replica is back: the controller counts it live again
        return fresh

    @staticmethod
    def _reopen_log(partition: Partition) -> Log:
        """Close the offline log's files and open its directory again (I/O pool): that very
        directory, never a new placement, which would start the replica empty elsewhere."""
        partition.log.close()
        return Log.open(partition.log.directory, partition.config)

    async def close(self) -> None:
        """Stop reconciling, ISR changes and fetchers, then flush and close every log (writes
        the logs' checkpoints)."""
        self._closed = True
        await self.recovery.close()
        # each removal stops after its current directory (_closed): a bounded wait
        await asyncio.gather(*self._removals, return_exceptions=True)
        for task in (self._task, self._offline_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.isr.close()
        await self.fetchers.close()
        for partition in list(self.partitions.values()):
            try:
                await partition.run(partition.log.close)
            except StorageError as exc:     # a full or failing disk: one line, no traceback
                log.warning("closing %s: its last flush failed (%s); its files are closed, and the next start "
                            "recovers them from the last checkpoint", partition, exc)
            except Exception:
                log.exception("closing %s failed", partition)
        self.partitions.clear()


def _rename_for_delete(renames: list[tuple[Path, Callable[[], Path]]]) -> list[Path]:
    """Run each (directory, rename) on the I/O pool; returns the new paths. A directory that
    cannot be renamed (a failed disk) is left for the next start, which removes it."""
    renamed = []
    for directory, rename in renames:
        try:
            renamed.append(rename())
        except OSError as exc:
            log.warning("could not rename %s for deletion (%s); the next start removes it", directory, exc)
    return renamed
