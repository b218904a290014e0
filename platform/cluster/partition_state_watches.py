"""The partition-state watches of one topic, set by reads that are all in flight at once.

Each partition's state znode carries a ZooKeeper one-shot watch, armed by a read and re-armed by
the read its event starts. A new topic's reads go out together and their answers are stored in
one update: a topic of 1,000 partitions costs 1,000 pipelined requests on the session's one
connection, not 1,000 round trips one after the other, nor a thread or a kazoo ``DataWatch``
(with its own lock, retry and session listener) per partition. Every reconnection reads every
state again, as ``DataWatch`` did, so a change missed while disconnected is not missed for good.
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import EventType, KazooState, WatchedEvent

from ember.cluster.records import PartitionState
from ember.zk import zk_paths

log = logging.getLogger(__name__)

#: States read (None: the znode is gone), stored in one update.
StoreStates = Callable[[dict[int, PartitionState | None]], None]
#: How long the first reads of a topic's states may take together before the rest are left to
#: the reconnection that a session this slow will see.
READ_TIMEOUT_S = 30.0


class PartitionStateWatches:
    """Watches the states of one topic's partitions until :meth:`stop`."""

    def __init__(self, client: KazooClient, topic: str, store: StoreStates) -> None:
        self.client, self.topic, self.store = client, topic, store
        self.indexes: set[int] = set()
        self.active = True
        self._paths: dict[str, int] = {}
        client.add_listener(self._on_connection)

    def watch(self, indexes: Iterable[int]) -> None:
        """Read and watch the states of ``indexes`` (again, for ones watched already); blocks
        until all have answered (bounded) and stores them in one update."""
        wanted = list(indexes)
        for index in wanted:
            self._paths[zk_paths.partition_state(self.topic, index)] = index
        self.indexes.update(wanted)
        reads = [(index, self._read(index)) for index in wanted]
        deadline = time.monotonic() + READ_TIMEOUT_S
        loaded: dict[int, PartitionState | None] = {}
        for index, result in reads:
            try:
                loaded[index] = self._state(result, max(0.0, deadline - time.monotonic()))
            except (KazooException, KazooTimeoutError) as exc:
                # The connection dropped: the reconnection reads every state again.
                log.warning("could not read the state of %s-%d (%s); reading it again on reconnection",
                            self.topic, index, exc)
        if self.active:
            self.store(loaded)

    def stop(self) -> None:
        """No more reads or stores (the topic is gone); armed watches fire once more, ignored."""
        self.active = False
        self.client.remove_listener(self._on_connection)

    def _read(self, index: int) -> IAsyncResult:
        return self.client.get_async(zk_paths.partition_state(self.topic, index), watch=self._on_event)

    @staticmethod
    def _state(result: IAsyncResult, timeout_s: float | None = None) -> PartitionState | None:
        try:
            data, stat = result.get(timeout=timeout_s)
        except NoNodeError:
            return None
        return PartitionState.from_bytes(data, stat.version) if data else None

    def _on_event(self, event: WatchedEvent) -> None:
        """One state changed (kazoo's callback thread): read it again, re-arming its watch."""
        index = self._paths.get(event.path)
        if not self.active or index is None or event.type == EventType.NONE:
            return
        if event.type == EventType.DELETED:
            self.store({index: None})
            return
        self._read(index).rawlink(lambda result: self._on_read(index, result))

    def _on_read(self, index: int, result: IAsyncResult) -> None:
        try:
            state = self._state(result)
        except KazooException as exc:
            log.warning("could not read the state of %s-%d (%s); reading it again on reconnection",
                        self.topic, index, exc)
            return
        if self.active:
            self.store({index: state})

    def _on_connection(self, state: str) -> None:
        """kazoo's connection thread, which must not block: read again on a worker."""
        if state == KazooState.CONNECTED and self.active and self.indexes:
            self.client.handler.spawn(lambda: self.watch(sorted(self.indexes)))
