"""The partition-state watches of one topic: one children watch, and reads all in flight at once.

A partition gets a state znode at its first change (:mod:`ember.cluster.partition_state_store`);
until then it is in the initial state its replicas imply. One children watch on the topic's
``partitions`` node tells which partitions have a state znode: a new topic of 1,000 partitions
costs one read here, not 1,000, and a partition's first state is read when the watch says its
node appeared. Each state znode carries a ZooKeeper one-shot watch, armed by a read and re-armed
by the read its event starts; reads go out together and their answers are stored in one update
(1,000 pipelined requests on the session's one connection, not 1,000 round trips one after the
other, nor a thread or a kazoo ``DataWatch`` per partition). After every reconnection the
metadata cache reads everything again (:meth:`PartitionStateWatches.rewatch`), so a change
missed while disconnected is not missed for good.

A state znode is deleted only with its topic, whose record's watch drops the topic: a deleted
state is not stored, a missing one is stored as the initial state. Each state carries its
znode's creation zxid, so a late read of a deleted topic's node never passes for the state of
the topic created again under the name, and
an initial state never passes for a written one.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import EventType, WatchedEvent

from ember.cluster.records import PartitionState
from ember.zk import zk_paths

log = logging.getLogger(__name__)

#: States read, stored in one update.
StoreStates = Callable[[dict[int, PartitionState]], None]
#: How long ``watch`` waits for the reads to answer together; a later answer is stored on its own.
READ_WAIT_S = 30.0


class PartitionStateWatches:
    """Watches the states of one topic's partitions until :meth:`stop`."""

    def __init__(self, client: KazooClient, topic: str, store: StoreStates) -> None:
        self.client, self.topic, self.store = client, topic, store
        self.active = True
        self._lock = threading.Lock()
        self._replicas: dict[int, list[int]] = {}      # the partitions watched
        self._written: set[int] = set()                # those with a state znode, as listed
        self._paths: dict[str, int] = {}

    @property
    def indexes(self) -> set[int]:
        with self._lock:
            return set(self._replicas)

    def watch(self, replicas: Mapping[int, list[int]]) -> None:
        """Read and watch the states of these partitions (again, for ones watched already), given
        with their replicas (for the initial state of one without a state znode); waits
        (bounded) until all have answered and stores them in one update."""
        with self._lock:
            self._replicas.update({index: list(brokers) for index, brokers in replicas.items()})
            for index in replicas:
                self._paths[zk_paths.partition_state(self.topic, index)] = index
        deadline = time.monotonic() + READ_WAIT_S
        listing = self.client.get_children_async(zk_paths.partitions(self.topic), watch=self._on_children)
        try:
            children = listing.get(timeout=READ_WAIT_S)
        except KazooTimeoutError:
            listing.rawlink(lambda late: self._on_listed(late, replicas))     # taken when it answers
            return
        except NoNodeError:
            return      # the topic is being deleted
        except KazooException as exc:
            self._unlisted(exc)
            return
        loaded, wanted = self._take_listing(children, replicas)
        reads = [(index, self._read(index)) for index in wanted]
        for index, result in reads:
            try:
                state = self._state(result, max(0.0, deadline - time.monotonic()))
            except KazooTimeoutError:
                # Still in flight: stored when it answers (its watch is armed by then).
                result.rawlink(lambda late, index=index: self._on_read(index, late))
                continue
            except KazooException as exc:
                # The connection dropped: the reconnection reads every state again.
                self._unread(index, exc)
                continue
            if state is not None:
                loaded[index] = state
        if self.active and loaded:
            self.store(loaded)

    def rewatch(self) -> None:
        """List and read every state again, re-arming the watches (after a reconnection)."""
        with self._lock:
            replicas = dict(self._replicas)
        if self.active and replicas:
            self.watch(replicas)

    def reset(self) -> None:
        """Forget every partition: the topic was deleted and created again under its name (its
        old state znodes went with it; armed watches of theirs fire once more, ignored)."""
        with self._lock:
            self._replicas.clear()
            self._written.clear()
            self._paths.clear()

    def stop(self) -> None:
        """No more reads or stores (the topic is gone); armed watches fire once more, ignored."""
        self.active = False

    def _take_listing(self, children: list[str], wanted: Mapping[int, list[int]]
                      ) -> tuple[dict[int, PartitionState], list[int]]:
        """From a listing of the topic's state znodes: the initial states of the ``wanted``
        partitions without one, and the partitions to read, the wanted ones with one and every
        watched one whose znode is new since any listing before (listings may be taken out of
        order; a state znode only goes with its topic)."""
        listed = {int(child) for child in children}
        with self._lock:
            added = listed - self._written
            self._written |= listed
            watched = set(self._replicas)
        initial = {index: PartitionState.initial(brokers) for index, brokers in wanted.items()
                   if index not in listed and brokers}
        return initial, sorted({index for index in wanted if index in listed} | (added & watched))

    def _read_then_store(self, index: int) -> None:
        self._read(index).rawlink(lambda result: self._on_read(index, result))

    def _unlisted(self, exc: Exception) -> None:
        log.warning("could not list the partition states of %s (%s); reading them again on reconnection",
                    self.topic, exc)

    def _unread(self, index: int, exc: Exception) -> None:
        log.warning("could not read the state of %s-%d (%s); reading it again on reconnection",
                    self.topic, index, exc)

    def _read(self, index: int) -> IAsyncResult:
        return self.client.get_async(zk_paths.partition_state(self.topic, index), watch=self._on_event)

    @staticmethod
    def _state(result: IAsyncResult, timeout_s: float | None = None) -> PartitionState | None:
        try:
            data, stat = result.get(timeout=timeout_s)
        except NoNodeError:
            return None
        return PartitionState.from_bytes(data, stat.version, stat.czxid) if data else None

    def _on_children(self, event: WatchedEvent) -> None:
        """A partition got its state znode (kazoo's callback thread): list again, re-arming the
        watch, and read the new ones."""
        if not self.active or event.type != EventType.CHILD:
            return
        self.client.get_children_async(zk_paths.partitions(self.topic), watch=self._on_children).rawlink(
            lambda result: self._on_listed(result, {}))

    def _on_listed(self, result: IAsyncResult, wanted: Mapping[int, list[int]]) -> None:
        """A listing answered late or after an event: store the initial states of ``wanted``
        partitions without a znode, and read (and watch) the others and the new ones."""
        try:
            children = result.get(timeout=0)
        except NoNodeError:
            return      # the topic is being deleted
        except (KazooException, KazooTimeoutError) as exc:
            self._unlisted(exc)
            return
        initial, reads = self._take_listing(children, wanted)
        if self.active and initial:
            self.store(initial)
        for index in reads:
            if self.active:
                self._read_then_store(index)

    def _on_event(self, event: WatchedEvent) -> None:
        """One state changed (kazoo's callback thread): read it again, re-arming its watch."""
        index = self._paths.get(event.path)
        if not self.active or index is None or event.type != EventType.CHANGED:
            return
        self._read_then_store(index)

    def _on_read(self, index: int, result: IAsyncResult) -> None:
        try:
            state = self._state(result, 0)
        except (KazooException, KazooTimeoutError) as exc:
            self._unread(index, exc)
            return
        if self.active and state is not None:
            self.store({index: state})
