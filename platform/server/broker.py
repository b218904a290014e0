"""The broker process: wires ZooKeeper metadata, the partition logs and the network server
together, and owns the start-up and shutdown order.

Start-up: lock the log directories (one that fails goes offline) → metrics endpoint (with
``metrics.listen``) → ZooKeeper session, cluster id → metadata cache (watches) → delete
partitions of topics deleted while we were down, open the rest → bind the port → register in
``/brokers/ids`` → accept connections (so "answers ApiVersions" implies
"registered") → join controller election → retention and flush schedules.
Shutdown (SIGTERM/SIGINT) runs it backwards: resign and deregister first so the controller
moves leadership away, then stop serving, then flush and close every log; the metrics endpoint
goes last.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Awaitable, Callable

from ember.cluster.controller import Controller
from ember.cluster.metadata_cache import MetadataCache
from ember.cluster.offline_replicas import OfflineReplicaWriter
from ember.cluster.producer_ids import ProducerIdAllocator
from ember.cluster.records import BrokerInfo
from ember.cluster.registration import BrokerRegistration
from ember.cluster.topic_admin import TopicAdmin
from ember.groups.coordinator import GroupCoordinator
from ember.groups.store import GroupStore
from ember.ingest.broker_client import InterBroker
from ember.ingest.broker_config import BrokerConfig, TopicConfigPolicy
from ember.ingest.core import BrokerCore
from ember.ingest.isr import IsrWriter
from ember.ingest.listeners import EMBER_LISTENER, ListenerConfig
from ember.ingest.log_cleaner import LogCleaner
from ember.ingest.log_manager import LogManager
from ember.ingest.metadata_view import MetadataView
from ember.ingest.replica_manager import ReplicaManager
from ember.ingest.topic_changes import TopicChanges
from ember.ingest.transactions.coordinator import TransactionConfig, TransactionCoordinator
from ember.ingest.transactions.coordinator_client import TxnCoordinatorClient
from ember.ingest.transactions.local_markers import LeaderMarkers
from ember.ingest.transactions.marker_router import MarkerRouter
from ember.ingest.transactions.offsets import TransactionalOffsets
from ember.ingest.transactions.peers import Peers
from ember.ingest.transactions.store import TransactionStore
from ember.net.budget import RequestBudget
from ember.net.server import BrokerServer
from ember.protocol.ember.api_acls import AclApis
from ember.protocol.ember.api_admin import AdminApis
from ember.protocol.ember.api_cluster import ClusterApis
from ember.protocol.ember.api_groups import GroupApis
from ember.protocol.ember.api_leadership import LeadershipApis
from ember.protocol.ember.api_producer_transactions import ProducerTransactionApis
from ember.protocol.ember.api_records import RecordApis
from ember.protocol.ember.api_replication import ReplicationApis
from ember.protocol.ember.api_sasl import SaslApis, ScramCredentialApis
from ember.protocol.ember.api_transaction_admin import TransactionAdminApis
from ember.protocol.ember.api_transactions import TransactionApis
from ember.protocol.ember.dispatcher import Dispatcher
from ember.protocol.ember.listener import EmberServer
from ember.protocol.kafka.listener import kafka_server
from ember.security.authorizer.access import Access
from ember.security.authorizer.acl_admin import AclAdmin
from ember.security.authorizer.authorizer import Authorizer, authorizer_enabled, parse_super_users
from ember.security.authorizer.store import AclStore
from ember.security.client import ClientSecurity
from ember.security.listener import ListenerSecurity
from ember.security.sasl.config import enabled_mechanisms, inter_broker_login
from ember.security.sasl.credential_store import CredentialStore
from ember.security.sasl.scram import PLAIN, check_mechanism
from ember.security.sasl.scram_admin import ScramAdmin
from ember.security.sasl.server import SaslServerSettings
from ember.server.memory_release import MemoryRelease, glibc_malloc_trim
from ember.zk.zk_session import ZkSession, ensure_cluster_id

if TYPE_CHECKING:
    from ember.metrics.requests import RequestObserver
    from ember.server.metrics_service import MetricsService

log = logging.getLogger(__name__)

#: Upper bound of any one shutdown step (the ZooKeeper steps have their own, shorter budget).
STEP_TIMEOUT_S = 30.0


def _on_daemon_thread(fn: Callable[[], object]) -> "asyncio.Future[object]":
    """Run a blocking call on a daemon thread: unlike the default executor's threads, one stuck
    in a ZooKeeper call cannot keep the process from exiting."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[object] = loop.create_future()

    def run() -> None:
        result: object = None
        error: BaseException | None = None
        try:
            result = fn()
        except BaseException as exc:   # noqa: BLE001 - handed to the awaiting coroutine
            error = exc
        try:
            loop.call_soon_threadsafe(_settle, future, result, error)
        except RuntimeError:   # the loop is gone: the shutdown moved on without this step
            pass

    threading.Thread(target=run, name="broker-shutdown", daemon=True).start()
    return future


def _settle(future: "asyncio.Future[object]", result: object, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


@dataclass(frozen=True)
class BrokerOptions:
    broker_id: int
    zookeeper: str
    listeners: ListenerConfig
    data_dir: Path
    config: BrokerConfig
    #: Where to serve /metrics, /livez and /readyz (None: metrics off).
    metrics_listen: tuple[str, int] | None = None
    #: The log directories (``log.dirs``); empty: ``data_dir`` alone.
    log_dirs: tuple[Path, ...] = ()

    @property
    def log_directories(self) -> tuple[Path, ...]:
        return self.log_dirs or (self.data_dir,)


class Broker:
    def __init__(self, options: BrokerOptions) -> None:
        self.options = options
        self.config = options.config
        self.session = ZkSession(options.zookeeper, self.config.zookeeper_session_timeout_ms,
                                 self.config.zookeeper_tls())
        self.credentials = CredentialStore(self.session)
        # TLS and SASL settings are checked (contexts built) before anything starts.
        self.listener_security = {listener.name: self._listener_security(listener.name)
                                  for listener in options.listeners.bind}
        self.inter_broker = InterBroker(options.listeners.inter_broker, self._inter_broker_security())
        self.logs = LogManager(options.log_directories, options.broker_id)
        self.cache = MetadataCache(self.session)
        # ACLs (authorizer.class.name): every broker checks requests against its watched copy.
        self.authorizer = Authorizer(parse_super_users(self.config.super_users),
                                     self.config.allow_everyone_if_no_acl_found) \
            if authorizer_enabled(self.config.authorizer_class_name) else None
        self.access = Access(self.authorizer)
        self.acls = AclStore(self.session, self.authorizer.replace) if self.authorizer is not None else None
        self.groups = GroupCoordinator(options.broker_id, self.cache, GroupStore(self.session),
                                       self.config.group_initial_rebalance_delay_ms,
                                       self.config.group_max_session_timeout_ms, self.access)
        self.telemetry = _metrics_service(self, options.metrics_listen) if options.metrics_listen else None
        self.metrics = self.telemetry.metrics if self.telemetry is not None else None
        self.controller = Controller(self.session, self.cache, options.broker_id, self.config.controller_config(),
                                     self.metrics)
        self.registration = BrokerRegistration(
            self.session, BrokerInfo(options.broker_id, *options.listeners.advertised_address(EMBER_LISTENER),
                                     tuple((a.name, a.host, a.port) for a in options.listeners.advertised)),
            self.config.zookeeper_session_timeout_ms)
        self.replicas: ReplicaManager | None = None
        #: coordinates the transactional ids the broker mapping gives this broker
        self.transactions: TransactionCoordinator | None = None
        self.marker_router: MarkerRouter | None = None
        #: compacts the logs of topics with cleanup.policy=compact (log.cleaner.enable)
        self.cleaner: LogCleaner | None = None
        self.memory = MemoryRelease(self.config.memory_release_interval_ms, glibc_malloc_trim())
        #: (listener name, its server), ember's protocol first.
        self.servers: list[tuple[str, BrokerServer]] = []

    async def start(self) -> None:
        options = self.options
        log.info("starting broker %d (log dirs %s, ZooKeeper %s%s)", options.broker_id,
                 ",".join(str(d) for d in options.log_directories),
                 options.zookeeper, " over TLS" if self.session.tls else "")
        self.logs.lock()
        if self.telemetry is not None:
            await self.telemetry.start()
        await asyncio.to_thread(self.session.start)
        cluster_id = await asyncio.to_thread(ensure_cluster_id, self.session, uuid.uuid4().hex)
        self.logs.claim(cluster_id)
        await asyncio.to_thread(self.cache.start)
        if self.acls is not None:
            assert self.authorizer is not None   # an ACL store exists only with an authorizer
            await asyncio.to_thread(self.acls.start)
            log.info("authorizer on: %d ACL(s), super.users %s, allow.everyone.if.no.acl.found=%s",
                     len(self.acls.bindings()), ";".join(sorted(self.authorizer.super_users)) or "(none)",
                     str(self.config.allow_everyone_if_no_acl_found).lower())
        self.replicas = ReplicaManager(options.broker_id, self.cache, self.logs, self.config,
                                       IsrWriter(self.session, options.broker_id), self.metrics,
                                       self.inter_broker, self.access,
                                       OfflineReplicaWriter(self.session, options.broker_id))
        self.cache.add_listener(self.replicas.notify)
        await self.replicas.start()

        topics = TopicChanges(TopicAdmin(self.session, TopicConfigPolicy(self.config)), self.cache,
                              self.replicas, self.config, self.access)
        view = MetadataView(self.cache, topics.create if self.config.auto_create_topics_enable else None,
                            self.replicas.unavailable_reason, self.access)
        producer_ids = ProducerIdAllocator(self.session, options.broker_id)
        scram = ScramAdmin(self.credentials)
        leader_markers = LeaderMarkers(self.replicas)
        peers = Peers(self.cache, self.inter_broker)
        self.marker_router = MarkerRouter(options.broker_id, self.cache, leader_markers, peers)
        txn_store = TransactionStore(self.session)
        self.transactions = TransactionCoordinator(
            options.broker_id, self.cache, txn_store, producer_ids, self.marker_router, GroupStore(self.session),
            TransactionConfig(self.config.transaction_max_timeout_ms, self.config.transactional_id_expiration_ms,
                              self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms),
            self.access)
        verifier = TxnCoordinatorClient(options.broker_id, self.cache, self.transactions, peers)
        txn_offsets = TransactionalOffsets(txn_store, self.groups, self.access, verifier.add_offsets)
        dispatcher = Dispatcher(
            ClusterApis(view).handlers(), RecordApis(self.replicas, verifier).handlers(),
            ReplicationApis(self.replicas).handlers(),
            AdminApis(topics, self.cache, producer_ids, self.transactions).handlers(),
            LeadershipApis(self.controller, self.access).handlers(),
            GroupApis(self.groups, self.transactions).handlers(),
            AclApis(AclAdmin(self.access, self.acls)).handlers(), SaslApis().handlers(),
            ScramCredentialApis(scram, self.access).handlers(),
            TransactionApis(leader_markers, self.access).handlers(),
            ProducerTransactionApis(self.transactions, txn_offsets).handlers(),
            TransactionAdminApis(self.transactions, self.replicas).handlers())
        core = BrokerCore(options.broker_id, cluster_id, self.config, self.cache, self.replicas, view, topics,
                          producer_ids, self.groups, self.controller, scram, self.transactions, txn_offsets,
                          leader_markers, self.access, self.acls, verifier)
        max_bytes, max_idle_ms = self.config.socket_request_max_bytes, self.config.connections_max_idle_ms
        # queued.max.request.bytes: one pool for the client listeners, one for the inter-broker listener
        # (docs/broker.md: shared with ember's clients when that is the EMBER listener, the default)
        budgets = {"": RequestBudget(self.config.queued_max_request_bytes),
                   options.listeners.inter_broker: RequestBudget(self.config.queued_max_request_bytes)}
        self.servers = [(listener.name, EmberServer(dispatcher, listener.host, listener.port, max_bytes, max_idle_ms,
                                                    self._request_observer(listener.name),
                                                    self.listener_security[listener.name],
                                                    budgets.get(listener.name, budgets[""])))
                        for listener in options.listeners.ember_protocol]
        self.servers += [(listener.name, kafka_server(core, listener, max_bytes, max_idle_ms,
                                                      self._request_observer(listener.name),
                                                      self.listener_security[listener.name],
                                                      budgets.get(listener.name, budgets[""])))
                         for listener in options.listeners.kafka]
        for _, server in self.servers:
            await server.bind()
        await asyncio.to_thread(self.registration.register)
        for _, server in self.servers:
            await server.start_serving()
        self.controller.start()
        self.groups.start()
        self.transactions.start()
        self.logs.start_schedules(self.replicas.all_partitions, self.config.log_retention_check_interval_ms,
                                  self.config.log_flush_scheduler_interval_ms, self.metrics)
        if self.config.log_cleaner_enable:
            self.cleaner = LogCleaner(self.replicas.all_partitions, threads=self.config.log_cleaner_threads,
                                      dedupe_buffer_bytes=self.config.log_cleaner_dedupe_buffer_size,
                                      backoff_ms=self.config.log_cleaner_backoff_ms,
                                      io_max_bytes_per_second=self.config.log_cleaner_io_max_bytes_per_second)
            if self.telemetry is not None:
                self.telemetry.watch_cleaner(self.cleaner)
            self.cleaner.start()
        self.memory.start()
        log.info("broker %d started (cluster %s), listeners %s", options.broker_id, cluster_id,
                 ", ".join(f"{listener} ({self._describe_security(listener.name)})"
                           for listener in options.listeners.bind))

    def listener_servers(self) -> list[tuple[str, BrokerServer]]:
        """(listener name, its server) of every listener serving now."""
        return list(self.servers)

    def _listener_security(self, name: str) -> ListenerSecurity:
        """What listener ``name`` enforces (raises InvalidConfig when its TLS settings are incomplete)."""
        protocol = self.options.listeners.protocol(name)
        sasl = self._sasl_settings(name) if protocol.uses_sasl else None
        if not protocol.uses_tls:
            return ListenerSecurity(name, protocol, sasl=sasl)
        tls = self.config.tls_settings(name)
        return ListenerSecurity(name, protocol, tls.server_context(), tls.handshake_timeout_ms / 1000, sasl)

    def _sasl_settings(self, name: str) -> SaslServerSettings:
        mechanisms = enabled_mechanisms(self.config.listener_value(name, "sasl.enabled.mechanisms"), name)
        if PLAIN in mechanisms and not self.options.listeners.protocol(name).uses_tls:
            log.warning("listener %s enables SASL PLAIN without TLS: passwords cross the network in clear "
                        "(development only; use SASL_SSL)", name)
        per_mechanism = {m: self.config.listener_value(name, f"{m}.connections.max.reauth.ms") for m in mechanisms}
        return SaslServerSettings(mechanisms, self.credentials, self.config.sasl_handshake_timeout_ms,
                                  self.config.sasl_server_max_receive_size,
                                  self.config.listener_value(name, "connections.max.reauth.ms"),
                                  {m: ms for m, ms in per_mechanism.items() if ms is not None},
                                  failed_authentication_delay_ms=self.config.connection_failed_authentication_delay_ms)

    def _describe_security(self, name: str) -> str:
        protocol = self.options.listeners.protocol(name)
        parts = [f"SSL: {self.config.tls_settings(name).describe()}"] if protocol.uses_tls else []
        security = self.listener_security[name]
        if security.sasl is not None:
            lifetimes = {m: security.sasl.reauth_ms_for(m) for m in security.sasl.mechanisms}
            if len(set(lifetimes.values())) > 1:
                reauth = ", connections.max.reauth.ms " + " ".join(f"{m}={ms}" for m, ms in lifetimes.items())
            else:
                reauth = f", connections.max.reauth.ms={security.sasl.reauth_ms}" if security.sasl.reauth_ms else ""
            parts.append(f"SASL: {','.join(security.sasl.mechanisms)}{reauth}")
        return "; ".join(parts) or protocol.value

    def _inter_broker_security(self) -> ClientSecurity:
        """How this broker connects to the others' inter-broker listener: with that listener's
        TLS settings as a client (its truststore; its keystore for listeners requiring certificates)
        and, on SASL_*, ``sasl.mechanism.inter.broker.protocol`` with the listener's JAAS login."""
        name = self.options.listeners.inter_broker
        protocol = self.options.listeners.protocol(name)
        sasl: tuple[str | None, ...] = (None, None, None)
        if protocol.uses_sasl:
            mechanism = check_mechanism(self.config.sasl_mechanism_inter_broker_protocol.upper(),
                                        "sasl.mechanism.inter.broker.protocol")
            jaas = self.config.listener_value(name, f"{mechanism}.sasl.jaas.config") or self.config.sasl_jaas_config
            login = inter_broker_login(jaas, name, mechanism)
            sasl = (mechanism, login.username, login.password)
        if not protocol.uses_tls:
            return ClientSecurity(protocol, sasl_mechanism=sasl[0], sasl_username=sasl[1], sasl_password=sasl[2])
        tls = self.config.tls_settings(name)
        return ClientSecurity(protocol, check_hostname=tls.endpoint_identification_algorithm == "https",
                              context=tls.client_context(), sasl_mechanism=sasl[0], sasl_username=sasl[1],
                              sasl_password=sasl[2])

    def _request_observer(self, listener: str) -> "RequestObserver | None":
        """Counts and times the requests of one listener (None: metrics off)."""
        return self.telemetry.request_metrics.listener(listener) if self.telemetry is not None else None

    async def stop(self) -> None:
        """Undo whatever :meth:`start` got to; each step runs even if an earlier one failed, and
        the whole shutdown ends in bounded time whatever ZooKeeper does.

        The ZooKeeper steps (resign as controller, deregister, end the session) only speed up
        failover: the session's expiry does the same after ``zookeeper.session.timeout.ms``. So
        together they get at most that long, and the local steps (stop serving, flush and close
        every log, write checkpoints) always run."""
        log.info("shutting down broker %d", self.options.broker_id)
        zk_deadline = time.monotonic() + self.config.zookeeper_session_timeout_ms / 1000

        def zk_budget() -> float:
            return max(zk_deadline - time.monotonic(), 0.0)

        steps: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("resign as controller", lambda: _on_daemon_thread(lambda: self.controller.close(zk_budget()))),
            ("deregister", lambda: _on_daemon_thread(lambda: self.registration.deregister(zk_budget()))),
            ("close group coordinator", self.groups.close),
            ("close transaction coordinator", self._close_transactions),
            ("stop serving", lambda: asyncio.gather(*(server.close() for _, server in self.servers))),
            ("stop schedules", self.logs.stop_schedules),
            ("stop the log cleaner", lambda: self.cleaner.stop() if self.cleaner else asyncio.sleep(0)),
            ("stop releasing memory", self.memory.stop),
            ("close replicas and logs", lambda: self.replicas.close() if self.replicas else asyncio.sleep(0)),
            ("end ZooKeeper session", lambda: _on_daemon_thread(lambda: self.session.close(max(zk_budget(), 1.0)))),
            ("close log manager", lambda: asyncio.to_thread(self.logs.close)),
            ("stop metrics endpoint", lambda: self.telemetry.close() if self.telemetry else asyncio.sleep(0)),
        ]
        for name, step in steps:
            try:
                await asyncio.wait_for(step(), STEP_TIMEOUT_S)
            except asyncio.TimeoutError:
                log.error("shutdown step %r did not finish within %.0fs; continuing", name, STEP_TIMEOUT_S)
            except Exception:
                log.exception("shutdown step %r failed; continuing", name)
        log.info("broker %d stopped", self.options.broker_id)

    async def _close_transactions(self) -> None:
        if self.transactions is not None:
            await self.transactions.close()
        if self.marker_router is not None:
            self.marker_router.close()

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


def _metrics_service(broker: Broker, listen: tuple[str, int]) -> MetricsService:
    """The /metrics endpoint, imported only when metrics.listen is set: prometheus_client and the
    http.server, urllib and email modules it loads (~3 MB) stay out of a broker without it."""
    from ember.server.metrics_service import MetricsService

    return MetricsService(broker, *listen)
