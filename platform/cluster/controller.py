"""Controller election and leader election on broker failure.

Every broker runs a :class:`Controller`; the one that creates the ephemeral ``/controller`` node
(atomically with bumping ``/controller_epoch``) is active. When the set of live brokers changes,
the active controller moves leadership of partitions whose leader died to the first live replica
in the ISR (bumping the leader epoch), drops dead brokers from ISRs, and revives leaderless
partitions when an ISR member returns. Every state write is a compare-and-set on the znode
version and carries the controller epoch, so a deposed controller cannot overwrite newer state.

All controller work runs on one dedicated thread, in the order events arrive.
"""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from kazoo.exceptions import BadVersionError, NoNodeError
from kazoo.recipe.watchers import DataWatch

from ember.cluster import zk_paths
from ember.cluster.metadata_cache import MetadataCache
from ember.cluster.records import NO_LEADER, ControllerInfo, PartitionState
from ember.cluster.zk_session import ZkSession

log = logging.getLogger(__name__)


def next_state(state: PartitionState, replicas: list[int], live: set[int],
               controller_epoch: int) -> PartitionState | None:
    """The state a partition should move to given the live brokers, or None if it is fine.

    Only ISR members are eligible (no unclean election); preferred order is the replica list.
    """
    alive_isr = [b for b in state.isr if b in live]
    if state.leader in live:
        if alive_isr == state.isr:
            return None
        return PartitionState(state.leader, state.leader_epoch, alive_isr, controller_epoch)
    candidates = [b for b in replicas if b in alive_isr]
    if candidates:
        return PartitionState(candidates[0], state.leader_epoch + 1, alive_isr, controller_epoch)
    if state.leader == NO_LEADER:
        return None
    # Keep the last ISR so one of its members can lead again when it comes back.
    return PartitionState(NO_LEADER, state.leader_epoch + 1, state.isr, controller_epoch)


class Controller:
    def __init__(self, session: ZkSession, cache: MetadataCache, broker_id: int) -> None:
        self.session = session
        self.cache = cache
        self.broker_id = broker_id
        self.epoch = -1
        self.active = False
        self._closed = False
        self._events = ThreadPoolExecutor(1, thread_name_prefix="controller")

    def start(self) -> None:
        self.cache.add_listener(lambda topic: self._submit(self._on_brokers_changed) if topic is None else None)
        self.session.on_new_session(lambda: self._submit(self._resign_lost_session))
        DataWatch(self.session.client, zk_paths.CONTROLLER, self._on_controller_node)

    def close(self) -> None:
        """Resign (so another broker takes over at once) and stop the event thread."""
        self._closed = True
        self._events.submit(self._resign).result(timeout=10)
        self._events.shutdown(wait=True)

    def _submit(self, job: Callable[[], None]) -> None:
        if not self._closed:
            self._events.submit(self._guard, job)

    @staticmethod
    def _guard(job: Callable[[], None]) -> None:
        try:
            job()
        except Exception:
            log.exception("controller task %s failed", getattr(job, "__name__", job))

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
        self.epoch, self.active = epoch, True
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

    def _on_brokers_changed(self) -> None:
        """Re-check every partition against the live brokers. Both are read from ZooKeeper,
        not the cache: the cache may not yet show this controller's own latest writes."""
        if not self.active:
            return
        live = {int(child) for child in self.session.client.get_children(zk_paths.BROKER_IDS)}
        for name, topic in self.cache.topics().items():
            for index, replicas in topic.partitions.items():
                self._update_partition(name, index, replicas, live)

    def _update_partition(self, topic: str, index: int, replicas: list[int], live: set[int]) -> None:
        path = zk_paths.partition_state(topic, index)
        client = self.session.client
        while self.active:
            try:
                data, stat = client.get(path)
            except NoNodeError:
                return   # topic deleted meanwhile
            current = PartitionState.from_bytes(data, stat.version)
            if current.controller_epoch > self.epoch:
                log.warning("a newer controller (epoch %d) owns %s-%d; stepping down",
                            current.controller_epoch, topic, index)
                self.active = False
                return
            target = next_state(current, replicas, live, self.epoch)
            if target is None:
                return
            try:
                client.set(path, target.to_bytes(), version=stat.version)
            except BadVersionError:
                continue
            log.info("%s-%d: leader %d -> %d (epoch %d), isr %s", topic, index, current.leader,
                     target.leader, target.leader_epoch, target.isr)
            return
