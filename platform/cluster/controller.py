"""Controller election and the leadership changes only the controller makes.

Every broker runs a :class:`Controller`; the one that creates the ephemeral ``/controller`` node
(atomically with bumping ``/controller_epoch``) is active. It moves leadership when brokers die
or return (:func:`ember.cluster.election.failover_state`, unclean election if a topic allows it),
back to preferred replicas (periodically and on demand), and drives partition reassignments
(:mod:`ember.cluster.reassignment`). A replica whose broker reports its log offline
(``/brokers/offline_replicas/<id>``, :mod:`ember.cluster.offline_replicas`) counts as dead for
its partition: it loses leadership and leaves the ISR. Every state write is a compare-and-set on the znode version
and carries the controller epoch, so a deposed controller cannot overwrite newer state.

All controller work runs on one dedicated thread, in the order events arrive: broker and topic
changes from the metadata cache, the imbalance timer, and admin requests (:meth:`Controller.call`).
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Mapping, NamedTuple, TypeVar

from kazoo.client import TransactionRequest
from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from ember.cluster.election import (
    failover_state,
    imbalanced_partitions,
    is_unclean,
    offline_by_replica,
    partition_live,
    preferred_state,
    unclean_state,
)
from ember.cluster.metadata_cache import MetadataCache
from ember.cluster.offline_replicas import read_offline_replicas
from ember.cluster.partition_state_store import LOST_RACE, TopicRecords, add_compare_and_set, read_state
from ember.cluster.reassignment import (
    cancel_reassignment,
    completion_if_ready,
    finish_reassignment,
    reassignment_complete,
    start_reassignment,
)
from ember.cluster.records import ABSENT_VERSION, ControllerInfo, OfflineReplica, PartitionState, TopicRecord
from ember.cluster.topic_admin import finish_creation, finish_deletion
from ember.errors import ElectionNotNeeded, EmberError, NotController, PreferredLeaderNotAvailable, UnknownTopicOrPartition
from ember.log.config import LogConfig
from ember.zk import zk_paths
from ember.zk.zk_session import ZkSession, multi_failure

if TYPE_CHECKING:
    from ember.metrics.broker_metrics import BrokerMetrics

log = logging.getLogger(__name__)

T = TypeVar("T")
#: ElectLeaders' election types (Kafka's numbers)
PREFERRED, UNCLEAN = 0, 1
StateRule = Callable[[PartitionState], "PartitionState | None"]
#: replica → brokers reporting their copy of it offline (``election.offline_by_replica``)
Offline = Mapping[OfflineReplica, "set[int]"]
#: How often the active controller looks for topics left half deleted (or marked creating by an
#: older ember), and how long such a topic must have been left alone before it finishes the job
#: (its writer died).
INCOMPLETE_CHECK_S = 10.0
INCOMPLETE_AFTER_S = 60.0


def topic_unclean_election(overrides: Mapping[str, str]) -> bool:
    """A topic's ``unclean.leader.election.enable`` with the built-in default."""
    return LogConfig.from_properties(overrides).unclean_leader_election_enable


@dataclass(frozen=True)
class ControllerConfig:
    """The broker settings the controller acts on (Kafka's names and defaults)."""
    #: A topic's effective ``unclean.leader.election.enable`` from its config overrides.
    unclean_election: Callable[[Mapping[str, str]], bool] = topic_unclean_election
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_s: float = 300.0
    leader_imbalance_per_broker_percentage: int = 10


class ElectionResult(NamedTuple):
    """One partition's outcome of a leader election (preferred or unclean)."""
    topic: str
    partition: int
    previous_leader: int
    leader: int
    error: EmberError | None = None


class Controller:
    def __init__(self, session: ZkSession, cache: MetadataCache, broker_id: int,
                 config: ControllerConfig | None = None, metrics: "BrokerMetrics | None" = None) -> None:
        self.session = session
        self.metrics = metrics
        self.cache = cache
        self.broker_id = broker_id
        self.config = config or ControllerConfig()
        self.epoch = -1
        self._epoch_version = -1   # version of /controller_epoch this controller wrote
        self.active = False
        self._closed = False
        self._stopped = threading.Event()
        self._records: dict[str, TopicRecord] = {}   # topic records acted on (controller thread)
        self._topic_records = TopicRecords()         # those initial states were derived from
        self._events = ThreadPoolExecutor(1, thread_name_prefix="controller")
        self._offline_watched: set[str] = set()   # brokers' offline-replica znodes watched (controller thread)

    def start(self) -> None:
        self.cache.add_listener(self._on_metadata)
        self.session.on_new_session(lambda: self._submit(self._resign_lost_session))
        DataWatch(self.session.client, zk_paths.CONTROLLER, self._on_controller_node)
        self.session.client.ensure_path(zk_paths.OFFLINE_REPLICAS)
        ChildrenWatch(self.session.client, zk_paths.OFFLINE_REPLICAS, self._on_offline_reports)
        if self.config.auto_leader_rebalance_enable:
            threading.Thread(target=self._check_imbalance_periodically, name="leader-imbalance",
                             daemon=True).start()
        threading.Thread(target=self._finish_incomplete_periodically, name="incomplete-topics", daemon=True).start()

    def close(self, timeout_s: float = 10.0) -> None:
        """Resign (so another broker takes over at once) and stop the event thread; gives up on
        resigning after ``timeout_s`` (the ZooKeeper session's end resigns instead)."""
        self._closed = True
        self._stopped.set()
        try:
            self._events.submit(self._resign).result(timeout=timeout_s)
        except FutureTimeout:
            log.warning("controller thread still busy after %.1fs; the ZooKeeper session's end resigns instead",
                        timeout_s)
        finally:
            self._events.shutdown(wait=False, cancel_futures=True)

    def call(self, job: Callable[[], T]) -> "Future[T]":
        """Run an admin ``job`` on the controller thread; the future raises NotController unless
        this broker is the active controller when the job runs."""
        def run() -> T:
            if not self.active:
                raise NotController(f"broker {self.broker_id} is not the controller")
            return job()
        if self._closed:
            failed: Future[T] = Future()
            failed.set_exception(NotController(f"broker {self.broker_id} is shutting down"))
            return failed
        return self._events.submit(run)

    def _submit(self, job: Callable[[], object]) -> None:
        if not self._closed:
            self._events.submit(self._guard, job)

    @staticmethod
    def _guard(job: Callable[[], object]) -> None:
        try:
            job()
        except Exception:
            log.exception("controller task %s failed", getattr(job, "__name__", job))

    # -- controller election -------------------------------------------------------------------

    def _on_controller_node(self, data: bytes | None, _stat: object) -> None:
        if data is None:
            self._submit(self._elect)
            return
        info = ControllerInfo.from_bytes(data)
        if self.active and (info.broker_id, info.epoch) != (self.broker_id, self.epoch):
            log.info("controller moved to broker %d (epoch %d)", info.broker_id, info.epoch)
            self.active = False

    def _resign_lost_session(self) -> None:
        self.active = False
        self._elect()

    def _elect(self) -> None:
        if self._closed or self.active:
            return
        client = self.session.client
        try:
            data, stat = client.get(zk_paths.CONTROLLER_EPOCH)
            epoch, version = int(data) + 1, stat.version
        except NoNodeError:
            epoch, version = 1, None
        tx = client.transaction()
        tx.create(zk_paths.CONTROLLER, ControllerInfo(self.broker_id, epoch).to_bytes(), ephemeral=True)
        if version is None:
            tx.create(zk_paths.CONTROLLER_EPOCH, str(epoch).encode())
        else:
            tx.set_data(zk_paths.CONTROLLER_EPOCH, str(epoch).encode(), version=version)
        if any(isinstance(r, Exception) for r in tx.commit()):
            return   # another broker won; its node's watch tells us when it goes away
        # Every state write checks /controller_epoch still has this version: a deposed controller
        # that has not noticed yet cannot overwrite what its successor decided.
        self._epoch_version = 0 if version is None else version + 1
        self.epoch, self.active = epoch, True
        self._records.clear()
        log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
        self._on_brokers_changed()

    def _resign(self) -> None:
        if not self.active:
            return
        self.active = False
        try:
            data, _ = self.session.client.get(zk_paths.CONTROLLER)
            if ControllerInfo.from_bytes(data).broker_id == self.broker_id:
                self.session.client.delete(zk_paths.CONTROLLER)
        except NoNodeError:
            pass

    # -- events --------------------------------------------------------------------------------

    def _on_metadata(self, topic: str | None) -> None:
        """Metadata listener (kazoo thread): queue the matching controller work."""
        if topic is None:
            self._submit(self._on_brokers_changed)
        else:
            self._submit(lambda: self._on_topic_changed(topic))

    def _on_offline_reports(self, children: list[str]) -> None:
        """ChildrenWatch (kazoo thread): watch each broker's offline-replica znode; any change of
        one re-checks every partition."""
        self._submit(lambda: self._watch_offline_reports(children))

    def _watch_offline_reports(self, children: list[str]) -> None:
        for child in children:
            if child not in self._offline_watched:
                self._offline_watched.add(child)
                # fires at once, and on every rewrite or deletion: each re-checks every partition
                DataWatch(self.session.client, f"{zk_paths.OFFLINE_REPLICAS}/{child}", self._on_offline_report)
        self._on_brokers_changed()

    def _on_offline_report(self, _data: bytes | None, _stat: object) -> None:
        self._submit(self._on_brokers_changed)

    def _live(self) -> set[int]:
        """Registered brokers, read from ZooKeeper: the cache may lag behind this controller."""
        return {int(child) for child in self.session.client.get_children(zk_paths.BROKER_IDS)}

    def _offline(self) -> Offline:
        """Replicas the brokers report offline, read from ZooKeeper."""
        return offline_by_replica(read_offline_replicas(self.session.client))

    def _partition_live(self, name: str, index: int, live: set[int], offline: Offline) -> set[int]:
        """Brokers live for partition ``index`` of topic ``name``: registered, its log not offline."""
        meta = self.cache.topic(name)
        return partition_live(live, offline, name, meta.topic_id, index) if meta is not None else live

    def _on_brokers_changed(self) -> None:
        if not self.active:
            return
        live, offline = self._live(), self._offline()
        for name in self.cache.topics():
            self._check_topic(name, live, offline)

    def _on_topic_changed(self, name: str) -> None:
        """A new or changed topic record gets every partition checked (its config may now allow
        unclean election); a state change only advances the topic's reassignments."""
        meta = self.cache.topic(name) if self.active else None
        if meta is None:
            self._records.pop(name, None)
        elif meta.record != self._records.get(name):
            self._check_topic(name, self._live(), self._offline())
        elif meta.record.reassignments:
            self._advance_reassignments(name, self._live(), self._offline())

    def _check_topic(self, name: str, live: set[int], offline: Offline) -> None:
        meta = self.cache.topic(name)
        if meta is None:
            return
        self._records[name] = meta.record
        try:
            unclean = self.config.unclean_election(meta.record.config)
        except EmberError as exc:
            log.error("topic %s has an invalid config (%s); unclean election stays off", name, exc)
            unclean = False
        self._transition_each(name, "failover", {index: functools.partial(
            failover_state, replicas=replicas, live=partition_live(live, offline, name, meta.topic_id, index),
            controller_epoch=self.epoch, unclean=unclean) for index, replicas in meta.partitions.items()},
            meta.record)
        if meta.record.reassignments:
            self._advance_reassignments(name, live, offline)

    def _transition_each(self, topic: str, why: str, rules: Mapping[int, StateRule], record: TopicRecord) -> None:
        """:meth:`_transition` for many partitions of ``topic`` (``record``): their states are read
        in one pipelined batch (a missing znode is the initial state the record implies), and only
        those whose rule wants a change (or that a newer controller wrote) go through
        ``_transition``'s read and compare-and-set. A topic of 1,000 partitions is checked in one
        round of reads, not 1,000 round trips one after the other (2-3 s, on every new topic and
        every broker change)."""
        client = self.session.client
        reads = [(index, client.get_async(zk_paths.partition_state(topic, index))) for index in rules]
        for index, result in reads:
            if not self.active:
                return
            try:
                data, stat = result.get()     # as client.get: kazoo fails it when the connection drops
                current = PartitionState.from_bytes(data, stat.version)
            except NoNodeError:
                if index not in record.assignment:
                    continue
                current = PartitionState.initial(record.assignment[index])     # _transition re-reads it
            if current.controller_epoch > self.epoch or rules[index](current) is not None:
                self._transition(topic, index, why, rules[index], record.topic_id)

    def _transition(self, topic: str, index: int, why: str, rule: StateRule,
                    topic_id: str | None = None) -> tuple[PartitionState, PartitionState] | None:
        """Compare-and-set the partition state to ``rule(current)`` (None: leave it). Returns
        (state before, state now stored), or None if the topic (``topic_id``, if given) is gone
        or this controller was deposed. Exceptions of ``rule`` propagate."""
        client = self.session.client
        while self.active:
            stored = read_state(client, topic, index, topic_id, self._topic_records)
            if stored is None:
                return None   # topic deleted meanwhile
            current = stored.state
            if current.controller_epoch > self.epoch:
                log.warning("a newer controller (epoch %d) owns %s-%d; stepping down",
                            current.controller_epoch, topic, index)
                self.active = False
                return None
            target = rule(current)
            if target is None:
                return current, current
            try:
                written = self._fenced(functools.partial(add_compare_and_set, topic=topic, index=index,
                                                         stored=stored, target=target))
            except NoNodeError:
                return None   # topic deleted between the read and the write
            if written is None:
                return None
            if not written:
                continue
            elected = target.leader >= 0 and (target.leader, target.leader_epoch) != (current.leader,
                                                                                     current.leader_epoch)
            if elected and self.metrics is not None:
                self.metrics.leader_elected(is_unclean(current, target))
            if is_unclean(current, target):
                log.warning("%s-%d: UNCLEAN leader election: broker %d was not in the ISR %s and becomes leader "
                            "(epoch %d); records it lacks are lost (data may be lost)", topic, index,
                            target.leader, current.isr, target.leader_epoch)
            else:
                log.info("%s-%d (%s): leader %d -> %d (epoch %d), isr %s", topic, index, why, current.leader,
                         target.leader, target.leader_epoch, target.isr)
            return current, target
        return None

    def _fenced(self, write: Callable[[TransactionRequest], None]) -> bool | None:
        """Commit the ops ``write`` adds only while /controller_epoch is still the one this
        controller wrote, in one transaction: a deposed controller that has not noticed yet
        cannot overwrite its successor's decisions. True: written; False: the znodes changed
        (re-read and retry); None: this controller is superseded and has stepped down."""
        tx = self.session.client.transaction()
        tx.check(zk_paths.CONTROLLER_EPOCH, self._epoch_version)
        write(tx)
        results = tx.commit()
        failure = multi_failure(results)
        if failure is None:
            return True
        if failure is results[0]:   # the epoch check itself: a successor (a lost write race must not depose us)
            log.warning("controller epoch %d is superseded; stepping down", self.epoch)
            self.active = False
            return None
        if isinstance(failure, LOST_RACE):
            return False
        raise failure       # NoNodeError: the topic was deleted since it was read

    # -- preferred leaders ---------------------------------------------------------------------

    def elect(self, partitions: list[tuple[str, int]] | None = None, unclean: bool = False) -> list[ElectionResult]:
        """Move leadership of ``partitions`` (None: all) to their preferred replicas, or with
        ``unclean`` give partitions without a live leader one, out of sync if need be
        (controller thread; use :meth:`call`)."""
        topics = self.cache.topics()
        keys = partitions if partitions is not None else \
            [(name, index) for name, meta in sorted(topics.items()) for index in meta.partitions]
        live, offline = self._live(), self._offline()
        election, why = (unclean_state, "unclean election") if unclean else (preferred_state, "preferred leader")
        results = []
        for name, index in keys:
            meta = topics.get(name)
            if meta is None or index not in meta.partitions:
                results.append(ElectionResult(name, index, -1, -1,
                                              UnknownTopicOrPartition(f"{name}-{index} does not exist")))
                continue
            replicas = meta.partitions[index]
            state = meta.states.get(index)
            leader = state.leader if state is not None else -1
            try:
                moved = self._transition(name, index, why, functools.partial(
                    election, replicas=replicas, live=partition_live(live, offline, name, meta.topic_id, index),
                    controller_epoch=self.epoch), meta.topic_id)
                if moved is None:
                    raise NotController(f"broker {self.broker_id} stopped being the controller")
                results.append(ElectionResult(name, index, moved[0].leader, moved[1].leader))
            except EmberError as exc:
                results.append(ElectionResult(name, index, leader, leader, exc))
        return results

    def _finish_incomplete_periodically(self) -> None:
        while not self._stopped.wait(INCOMPLETE_CHECK_S):
            if self.active and self.cache.incomplete_topics():
                self._submit(functools.partial(self.finish_incomplete_topics, INCOMPLETE_AFTER_S))

    def finish_incomplete_topics(self, older_than_s: float) -> list[str]:
        """Finish deleting the topics left half deleted (their deleter died between two of its
        transactions), or unmark those an older ember left marked creating, for at least
        ``older_than_s``; the names finished."""
        finished = []
        for name in sorted(self.cache.incomplete_topics()):
            if not self.active:
                break
            try:
                data, stat = self.session.client.get(zk_paths.topic(name))
            except NoNodeError:
                continue
            record = TopicRecord.from_bytes(data)
            if record.complete or time.time() - stat.mtime / 1000 < older_than_s:
                continue
            log.warning("topic %s was left half %s; the controller finishes it", name,
                        "created" if record.creating else "deleted")
            if record.creating:
                finish_creation(self.session, name, record.topic_id)
            else:
                finish_deletion(self.session, name, record.topic_id)
            finished.append(name)
        return finished

    def _check_imbalance_periodically(self) -> None:
        while not self._stopped.wait(self.config.leader_imbalance_check_interval_s):
            self._submit(self._rebalance_leaders)

    def _rebalance_leaders(self) -> None:
        """Kafka's auto leader rebalance: brokers whose preferred partitions are too often led
        elsewhere get them back (partitions being reassigned are left alone)."""
        if not self.active:
            return
        leadership = {(name, index): (replicas, meta.states[index].leader)
                      for name, meta in self.cache.topics().items()
                      for index, replicas in meta.partitions.items()
                      if index in meta.states and index not in meta.record.reassignments}
        moves = imbalanced_partitions(leadership, self.config.leader_imbalance_per_broker_percentage)
        if not moves:
            return
        live, offline = self._live(), self._offline()
        for name, index in moves:
            replicas = leadership[(name, index)][0]
            try:
                self._transition(name, index, "preferred leader", functools.partial(
                    preferred_state, replicas=replicas, live=self._partition_live(name, index, live, offline),
                    controller_epoch=self.epoch))
            except (ElectionNotNeeded, PreferredLeaderNotAvailable):
                pass   # back already, or not caught up yet: the next check looks again

    # -- reassignment --------------------------------------------------------------------------

    def reassign(self, moves: list[tuple[str, int, list[int] | None]],
                 allow_replication_factor_change: bool = True) -> list[EmberError | None]:
        """Start moving partitions to new replicas, or with target None cancel a partition's move
        (controller thread; use :meth:`call`): one error or None per move, in order."""
        live, offline = self._live(), self._offline()
        known = self.cache.topics()
        errors: list[EmberError | None] = [None] * len(moves)
        for name in dict.fromkeys(name for name, _, _ in moves):
            mine = [(i, index, target) for i, (topic, index, target) in enumerate(moves) if topic == name]
            if name not in known:   # never build a ZooKeeper path from a name nobody checked
                for i, _, _ in mine:
                    errors[i] = UnknownTopicOrPartition(f"topic {name[:300]!r} does not exist")
                continue
            self._start_reassignments(name, mine, live, errors, allow_replication_factor_change)
            self._advance_reassignments(name, live, offline)
        return errors

    def _start_reassignments(self, name: str, moves: list[tuple[int, int, list[int] | None]], live: set[int],
                             errors: list[EmberError | None], allow_replication_factor_change: bool) -> None:
        # A partition without a state znode is led by its first replica: write its state before
        # its replica list changes (partition_state_store).
        for _, index, _ in moves:
            self._transition(name, index, "state written before a move", self._write_initial)
        def start(record: TopicRecord) -> TopicRecord:
            for i, index, target in moves:
                try:
                    record = cancel_reassignment(name, record, index) if target is None else \
                        start_reassignment(name, record, index, target, live, allow_replication_factor_change)
                    errors[i] = None
                except EmberError as exc:
                    errors[i] = exc
            return record
        try:
            written = self._update_topic_record(name, start)
        except NoNodeError:
            for i, _, _ in moves:
                errors[i] = UnknownTopicOrPartition(f"topic {name!r} does not exist")
            return
        if written is not None:
            before, after = written
            for index, move in after.reassignments.items():
                if before.reassignments.get(index) != move:
                    log.info("%s-%d: reassigning: adding %s, removing %s", name, index, move.adding, move.removing)

    def _write_initial(self, state: PartitionState) -> PartitionState | None:
        """The rule that writes a partition's initial state to a znode (and leaves a written one)."""
        return replace(state, controller_epoch=self.epoch) if state.version == ABSENT_VERSION else None

    def _advance_reassignments(self, name: str, live: set[int], offline: Offline) -> None:
        """Finish every move of topic ``name`` whose new replicas have all caught up."""
        def finish(record: TopicRecord) -> TopicRecord:
            updated = record
            for index, move in record.reassignments.items():
                target = move.target(record.assignment[index])
                moved = self._transition(name, index, "reassignment", functools.partial(
                    completion_if_ready, target=target, live=partition_live(live, offline, name, record.topic_id, index),
                    controller_epoch=self.epoch), record.topic_id)
                if moved is not None and reassignment_complete(moved[1], target):
                    updated = finish_reassignment(updated, index)
            return updated
        try:
            written = self._update_topic_record(name, finish)
        except NoNodeError:
            return
        if written is not None:
            before, after = written
            for index in before.reassignments.keys() - after.reassignments.keys():
                log.info("%s-%d: reassignment done; replicas %s", name, index, after.assignment[index])

    def _update_topic_record(self, name: str, change: Callable[[TopicRecord], TopicRecord]
                             ) -> tuple[TopicRecord, TopicRecord] | None:
        """Read-modify-write of topic ``name``'s record, fenced by the controller epoch and redone
        (``change`` included) when the znode changed meanwhile. Returns (before, after) once
        written; None when ``change`` left it as it was or this controller was deposed. Raises
        NoNodeError when the topic is gone."""
        path = zk_paths.topic(name)
        while self.active:
            data, stat = self.session.client.get(path)
            record = TopicRecord.from_bytes(data)
            updated = change(record)
            if updated == record:
                return None
            written = self._fenced(functools.partial(TransactionRequest.set_data, path=path,
                                                     value=updated.to_bytes(), version=stat.version))
            if written is None:
                return None
            if written:
                return record, updated
        return None
