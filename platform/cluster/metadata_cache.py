"""Every broker's view of cluster metadata, kept current by ZooKeeper watches (never polled).

kazoo runs watch callbacks on its own thread; readers (the broker's event loop, the controller)
get copies taken under a lock. Listeners hear which topic changed (``None`` for broker or
controller changes) and must hand the work to their own thread or loop.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable

from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from ember.cluster.partition_state_watches import PartitionStateWatches
from ember.cluster.records import BrokerInfo, ControllerInfo, PartitionState, TopicRecord
from ember.zk import zk_paths
from ember.zk.zk_session import ZkSession

log = logging.getLogger(__name__)

Listener = Callable[[str | None], None]


@dataclass(frozen=True)
class TopicMetadata:
    name: str
    record: TopicRecord
    states: dict[int, PartitionState] = field(default_factory=dict)

    @property
    def topic_id(self) -> str:
        return self.record.topic_id

    @property
    def partitions(self) -> dict[int, list[int]]:
        return self.record.assignment

    def shown_state(self, index: int) -> PartitionState | None:
        """The state clients are shown: the one read from ZooKeeper, else, while the topic's
        state znodes are being listed and read, its initial state (led by the first replica,
        epoch 0, every replica in sync), which a new topic's partitions have. A topic of 1,000
        partitions is thus known at once; a client that meets a leader changed since is told
        NOT_LEADER_OR_FOLLOWER and looks again, as after any leader move. Never for decisions
        (the controller and replica manager act on read states only). None for a partition
        being reassigned: its replica list no longer says who leads."""
        state = self.states.get(index)
        if state is not None:
            return state
        replicas = self.record.assignment.get(index)
        if not replicas or index in self.record.reassignments:
            return None
        return PartitionState.initial(replicas)


class _TopicWatch:
    """Watches one topic node and its partition states until the topic leaves ``/topics``."""

    def __init__(self, cache: "MetadataCache", name: str) -> None:
        self.cache, self.name = cache, name
        self.states = PartitionStateWatches(cache.session.client, name,
                                            lambda loaded: cache._set_states(name, loaded))
        DataWatch(cache.session.client, zk_paths.topic(name), self._on_topic)

    @property
    def active(self) -> bool:
        return self.states.active

    def stop(self) -> None:
        self.states.stop()

    def _on_topic(self, data: bytes | None, _stat: object) -> bool:
        if not self.active:
            return False
        record = TopicRecord.from_bytes(data) if data else None
        incomplete = record is not None and not record.complete
        self.cache._set_incomplete(self.name, incomplete)
        if incomplete:
            record = None     # being created or deleted chunk by chunk: served by no broker
        renewed = self.cache._set_topic(self.name, record)
        assignment = record.assignment if record else {}
        # A topic deleted and created again while this watch lagged: its old states were dropped
        # with the old record, and the one-shot watches of the old state nodes fired on their
        # deletion, so every partition is read and watched anew (not only the new ones).
        if renewed:
            self.states.reset()
        watched = self.states.indexes
        wanted = {index: replicas for index, replicas in assignment.items() if index not in watched}
        if wanted:
            self.states.watch(wanted)
        return True


class MetadataCache:
    def __init__(self, session: ZkSession) -> None:
        self.session = session
        self._lock = threading.RLock()
        self._brokers: dict[int, BrokerInfo] = {}
        self._controller: ControllerInfo | None = None
        self._topics: dict[str, TopicMetadata] = {}
        self._watches: dict[str, _TopicWatch] = {}
        self._incomplete: set[str] = set()
        self._listeners: list[Listener] = []

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def start(self) -> None:
        """Install the watches; returns once the initial state has been read."""
        client = self.session.client
        client.add_listener(self._on_connection)
        ChildrenWatch(client, zk_paths.BROKER_IDS, self._on_brokers)
        DataWatch(client, zk_paths.CONTROLLER, self._on_controller)
        ChildrenWatch(client, zk_paths.TOPICS, self._on_topics)

    # -- readers -------------------------------------------------------------------------------

    def brokers(self) -> dict[int, BrokerInfo]:
        with self._lock:
            return dict(self._brokers)

    def controller_id(self) -> int:
        with self._lock:
            return self._controller.broker_id if self._controller else -1

    def controller(self) -> ControllerInfo | None:
        """The active controller and its epoch, None while there is none."""
        with self._lock:
            return self._controller

    def topics(self) -> dict[str, TopicMetadata]:
        with self._lock:
            return dict(self._topics)

    def topic(self, name: str) -> TopicMetadata | None:
        with self._lock:
            return self._topics.get(name)

    def incomplete_topics(self) -> set[str]:
        """Topics whose record is marked creating or deleting (the controller finishes them)."""
        with self._lock:
            return set(self._incomplete)

    # -- watch callbacks (kazoo thread) --------------------------------------------------------

    def _notify(self, topic: str | None) -> None:
        for listener in self._listeners:
            try:
                listener(topic)
            except Exception:
                log.exception("metadata listener failed")

    def _on_connection(self, state: str) -> None:
        """kazoo's connection thread, which must not block: every partition state is read
        again on one worker after a reconnection (a watch event may have been missed)."""
        if state == KazooState.CONNECTED:
            self.session.client.handler.spawn(self._rewatch_states)

    def _rewatch_states(self) -> None:
        with self._lock:
            watches = list(self._watches.values())
        for watch in watches:
            watch.states.rewatch()

    def _on_brokers(self, children: list[str]) -> None:
        brokers: dict[int, BrokerInfo] = {}
        try:
            for child in children:
                data, _ = self._get(zk_paths.BROKER_IDS + "/" + child)
                if data:
                    info = BrokerInfo.from_bytes(data)
                    brokers[info.id] = info
        except KazooException as exc:
            # The connection dropped mid-read; kazoo re-runs this watch when it reconnects.
            log.warning("could not read broker registrations (%s); keeping the last known set", exc)
            return
        with self._lock:
            changed = brokers != self._brokers
            self._brokers = brokers
        if changed:
            log.info("live brokers: %s", sorted(brokers))
            self._notify(None)

    def _on_controller(self, data: bytes | None, _stat: object) -> None:
        with self._lock:
            self._controller = ControllerInfo.from_bytes(data) if data else None
        self._notify(None)

    def _on_topics(self, children: list[str]) -> None:
        names = set(children)
        with self._lock:
            gone = [name for name in self._watches if name not in names]
            for name in gone:
                self._watches.pop(name).stop()
                self._incomplete.discard(name)
                self._topics.pop(name, None)
            new = [name for name in names if name not in self._watches]
        for name in gone:
            self._notify(name)
        for name in new:
            self._watches[name] = _TopicWatch(self, name)

    def _set_incomplete(self, name: str, incomplete: bool) -> None:
        with self._lock:
            if incomplete:
                self._incomplete.add(name)
            else:
                self._incomplete.discard(name)

    def _set_topic(self, name: str, record: TopicRecord | None) -> bool:
        """Store a topic's record; True when it is another topic than the one stored (a new topic
        id, or none stored): its partition states start empty."""
        with self._lock:
            old = self._topics.get(name)
            renewed = record is not None and (old is None or old.topic_id != record.topic_id)
            if record is None:
                self._topics.pop(name, None)
            else:
                keep = {} if renewed or old is None else old.states
                self._topics[name] = TopicMetadata(name, record, dict(keep))
        self._notify(name)
        return renewed

    def _set_states(self, name: str, changed: dict[int, PartitionState]) -> None:
        """Store partition states read from ZooKeeper; one copy and one notification however many
        changed. A state node is deleted only with its topic, whose record's watch drops them."""
        with self._lock:
            topic = self._topics.get(name)
            if topic is None:
                return
            states = dict(topic.states)
            for index, state in changed.items():
                if index not in topic.record.assignment:
                    continue    # read for a topic of the name since deleted
                if index not in states or not states[index].newer_than(state):
                    states[index] = state   # never an older read over a newer one (a batch stored late)
            self._topics[name] = TopicMetadata(name, topic.record, states)
        self._notify(name)

    def _get(self, path: str) -> tuple[bytes | None, object]:
        try:
            return self.session.client.get(path)
        except NoNodeError:
            return None, None
