"""The partition-state watches of one topic, set by reads that are all in flight at once.

Each partition's state znode carries a ZooKeeper one-shot watch, armed by a read and re-armed by
the read its event starts. A new topic's reads go out together and their answers are stored in
one update: a topic of 1,000 partitions costs 1,000 pipelined requests on the session's one
connection, not 1,000 round trips one after the other, nor a thread or a kazoo ``DataWatch``
(with its own lock, retry and session listener) per partition. After every reconnection the
metadata cache reads every state again (:meth:`PartitionStateWatches.rewatch`), as
``DataWatch`` did, so a change missed while disconnected is not missed for good.

A state znode is deleted only with its topic, whose record's watch drops the topic: a deleted
or missing state is not stored. Each state carries its znode's creation zxid, so a late read of a
deleted topic's node never passes for the state of the topic created again under the name.
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Iterable

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
        self.indexes: set[int] = set()
        self.active = True
        self._paths: dict[str, int] = {}

    def watch(self, indexes: Iterable[int]) -> None:
        """Read and watch the states of ``indexes`` (again, for ones watched already); waits
        (bounded) until all have answered and stores them in one update."""
        wanted = list(indexes)
        for index in wanted:
            self._paths[zk_paths.partition_state(self.topic, index)] = index
        self.indexes.update(wanted)
        reads = [(index, self._read(index)) for index in wanted]
        deadline = time.monotonic() + READ_WAIT_S
        loaded: dict[int, PartitionState] = {}
        for index, result in reads:
            try:
                state = self._state(result, max(0.0, deadline - time.monotonic()))
            except KazooTimeoutError:
                # Still in flight: stored when it answers (its watch is armed by then).
                result.rawlink(lambda late, index=index: self._on_read(index, late))
                continue
            except KazooException as exc:
                # The connection dropped: the reconnection reads every state again.
                log.warning("could not read the state of %s-%d (%s); reading it again on reconnection",
                            self.topic, index, exc)
                continue
            if state is not None:
                loaded[index] = state
        if self.active and loaded:
            self.store(loaded)

    def rewatch(self) -> None:
        """Read every state again and re-arm its watch (after a reconnection)."""
        if self.active and self.indexes:
            self.watch(sorted(self.indexes))

    def stop(self) -> None:
        """No more reads or stores (the topic is gone); armed watches fire once more, ignored."""
        self.active = False

    def _read(self, index: int) -> IAsyncResult:
        return self.client.get_async(zk_paths.partition_state(self.topic, index), watch=self._on_event)

    @staticmethod
    def _state(result: IAsyncResult, timeout_s: float | None = None) -> PartitionState | None:
        try:
            data, stat = result.get(timeout=timeout_s)
        except NoNodeError:
            return None
        return PartitionState.from_bytes(data, stat.version, stat.czxid) if data else None

    def _on_event(self, event: WatchedEvent) -> None:
        """One state changed (kazoo's callback thread): read it again, re-arming its watch."""
        index = self._paths.get(event.path)
        if not self.active or index is None or event.type != EventType.CHANGED:
            return
        self._read(index).rawlink(lambda result: self._on_read(index, result))

    def _on_read(self, index: int, result: IAsyncResult) -> None:
        try:
            state = self._state(result, 0)
        except (KazooException, KazooTimeoutError) as exc:
            log.warning("could not read the state of %s-%d (%s); reading it again on reconnection",
                        self.topic, index, exc)
            return
        if self.active and state is not None:
            self.store({index: state})
