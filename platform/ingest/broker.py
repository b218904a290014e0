"""The broker process: wires ZooKeeper metadata, the partition logs and the network server
together, and owns the start-up and shutdown order.

Start-up: lock the data directory → metrics endpoint (with ``metrics.listen``) → ZooKeeper
session, cluster id → metadata cache (watches)
→ delete partitions of topics deleted while we were down, open the rest → bind the port →
register in ``/brokers/ids`` → accept connections (so "answers ApiVersions" implies
"registered") → join controller election → retention and flush schedules.
Shutdown (SIGTERM/SIGINT) runs it backwards: resign and deregister first so the controller
moves leadership away, then stop serving, then flush and close every log; the metrics endpoint
goes last.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

from ember.cluster.controller import Controller
from ember.cluster.metadata_cache import MetadataCache
from ember.cluster.producer_ids import ProducerIdAllocator
from ember.cluster.records import BrokerInfo
from ember.cluster.registration import BrokerRegistration
from ember.cluster.topic_admin import TopicAdmin
from ember.cluster.zk_session import ZkSession, ensure_cluster_id
from ember.groups.coordinator import GroupCoordinator
from ember.groups.store import GroupStore
from ember.ingest.api_admin import AdminApis
from ember.ingest.api_cluster import ClusterApis
from ember.ingest.api_groups import GroupApis
from ember.ingest.api_leadership import LeadershipApis
from ember.ingest.api_records import RecordApis
from ember.ingest.broker_config import BrokerConfig, TopicConfigPolicy
from ember.ingest.api_replication import ReplicationApis
from ember.ingest.dispatcher import Dispatcher
from ember.ingest.isr import IsrWriter
from ember.ingest.log_manager import LogManager
from ember.ingest.replica_manager import ReplicaManager
from ember.ingest.server import BrokerServer
from ember.metrics.service import MetricsService

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BrokerOptions:
    broker_id: int
    zookeeper: str
    host: str
    port: int
    data_dir: Path
    config: BrokerConfig
    #: Where to serve /metrics, /livez and /readyz (None: metrics off).
    metrics_listen: tuple[str, int] | None = None


class Broker:
    def __init__(self, options: BrokerOptions) -> None:
        self.options = options
        self.config = options.config
        self.logs = LogManager(options.data_dir, options.broker_id)
        self.session = ZkSession(options.zookeeper, self.config.zookeeper_session_timeout_ms)
        self.cache = MetadataCache(self.session)
        self.groups = GroupCoordinator(options.broker_id, self.cache, GroupStore(self.session),
                                       self.config.group_initial_rebalance_delay_ms)
        self.telemetry = MetricsService(self, *options.metrics_listen) if options.metrics_listen else None
        self.metrics = self.telemetry.metrics if self.telemetry is not None else None
        self.controller = Controller(self.session, self.cache, options.broker_id, self.config.controller_config(),
                                     self.metrics)
        self.registration = BrokerRegistration(
            self.session, BrokerInfo(options.broker_id, options.host, options.port),
            self.config.zookeeper_session_timeout_ms)
        self.replicas: ReplicaManager | None = None
        self.server: BrokerServer | None = None

    async def start(self) -> None:
        options = self.options
        log.info("starting broker %d (data %s, ZooKeeper %s)", options.broker_id, options.data_dir,
                 options.zookeeper)
        self.logs.lock()
        if self.telemetry is not None:
            await self.telemetry.start()
        await asyncio.to_thread(self.session.start)
        cluster_id = await asyncio.to_thread(ensure_cluster_id, self.session, uuid.uuid4().hex)
        self.logs.claim(cluster_id)
        await asyncio.to_thread(self.cache.start)
        self.replicas = ReplicaManager(options.broker_id, self.cache, self.logs, self.config,
                                       IsrWriter(self.session, options.broker_id), self.metrics)
        self.cache.add_listener(self.replicas.notify)
        await self.replicas.start()

        admin = AdminApis(TopicAdmin(self.session, TopicConfigPolicy(self.config)), self.cache,
                          self.replicas, self.config, ProducerIdAllocator(self.session, options.broker_id))
        dispatcher = Dispatcher(
            ClusterApis(self.cache, admin.create_topic if self.config.auto_create_topics_enable else None,
                        self.replicas.unavailable_reason).handlers(),
            RecordApis(self.replicas).handlers(), ReplicationApis(self.replicas).handlers(), admin.handlers(),
            LeadershipApis(self.controller).handlers(), GroupApis(self.groups).handlers())
        self.server = BrokerServer(dispatcher, options.host, options.port, self.config.socket_request_max_bytes,
                                   self.telemetry.requests if self.telemetry is not None else None)
        await self.server.bind()
        await asyncio.to_thread(self.registration.register)
        await self.server.start_serving()
        self.controller.start()
        self.groups.start()
        self.logs.start_schedules(self.replicas.all_partitions, self.config.log_retention_check_interval_ms,
                                  self.config.log_flush_scheduler_interval_ms, self.metrics)
        log.info("broker %d started (cluster %s) on %s:%d", options.broker_id, cluster_id,
                 options.host, options.port)

    async def stop(self) -> None:
        """Undo whatever :meth:`start` got to; each step runs even if an earlier one failed."""
        log.info("shutting down broker %d", self.options.broker_id)
        steps: list[Callable[[], Awaitable[object]]] = [
            lambda: asyncio.to_thread(self.controller.close),
            lambda: asyncio.to_thread(self.registration.deregister),
            self.groups.close,
            lambda: self.server.close() if self.server else asyncio.sleep(0),
            self.logs.stop_schedules,
            lambda: self.replicas.close() if self.replicas else asyncio.sleep(0),
            lambda: asyncio.to_thread(self.session.close),
            lambda: asyncio.to_thread(self.logs.close),
            lambda: self.telemetry.close() if self.telemetry else asyncio.sleep(0),
        ]
        for step in steps:
            try:
                await step()
            except Exception:
                log.exception("shutdown step failed; continuing")
        log.info("broker %d stopped", self.options.broker_id)

    async def run(self) -> None:
        """Start, serve until SIGTERM or SIGINT, then shut down cleanly."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await self.start()
            await stop.wait()
        finally:
            await self.stop()
