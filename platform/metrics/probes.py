"""Background probes for what no request measures: how late the event loop runs, how long a
ZooKeeper round trip takes, and ZooKeeper session losses and suspensions.

ember has no request queue between network and handler threads: a request runs on the event
loop as soon as the loop gets to it, so the loop's delay is its queue time. The loop probe sleeps
``interval`` and records by how much it overslept; the ZooKeeper probe times an ``exists`` call.
"""
from __future__ import annotations

import asyncio
import logging
import time

from kazoo.client import KazooState
from kazoo.exceptions import KazooException

from ember.metrics.broker_metrics import BrokerMetrics
from ember.zk import zk_paths
from ember.zk.zk_session import ZkSession

log = logging.getLogger(__name__)

LOOP_INTERVAL_S = 0.5
ZOOKEEPER_INTERVAL_S = 5.0


class Probes:
    def __init__(self, metrics: BrokerMetrics, session: ZkSession) -> None:
        self.metrics = metrics
        self.session = session
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self.session.client.add_listener(self._on_session_state)
        self._tasks = [asyncio.create_task(self._event_loop_delay(), name="probe-event-loop"),
                       asyncio.create_task(self._zookeeper_latency(), name="probe-zookeeper")]

    async def close(self) -> None:
        self.session.client.remove_listener(self._on_session_state)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _on_session_state(self, state: str) -> None:
        """kazoo's connection listener (its thread): count losses and suspensions."""
        if state == KazooState.LOST:
            self.metrics.zookeeper_expires.inc()
        elif state == KazooState.SUSPENDED:
            self.metrics.zookeeper_disconnects.inc()

    async def _event_loop_delay(self) -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(LOOP_INTERVAL_S)
            self.metrics.event_loop_delay.observe(max(0.0, time.perf_counter() - started - LOOP_INTERVAL_S))

    async def _zookeeper_latency(self) -> None:
        client = self.session.client
        while True:
            if client.state == KazooState.CONNECTED:
                started = time.perf_counter()
                try:
                    await asyncio.to_thread(client.exists, zk_paths.BROKER_IDS)
                    self.metrics.zookeeper_latency.observe(time.perf_counter() - started)
                except KazooException as exc:
                    log.debug("ZooKeeper latency probe failed: %s", exc)
            await asyncio.sleep(ZOOKEEPER_INTERVAL_S)
