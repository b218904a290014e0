"""Gauges read at scrape time from the broker's own state: partitions and their ISRs, logs, the
controller, the ZooKeeper session, connections and readiness.

Runs on the broker's event loop (the endpoint serves from it), where partition leadership and
ISRs live, so it reads them without locks and sees one consistent moment. Log sizes are read
lock-free (``Log.segment_stats``). Like Kafka, partition health is reported by each partition's
leader only, and cluster-wide counts (offline partitions, topics) by the active controller only,
so summing over brokers counts each partition once.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ember.cluster.records import BrokerInfo
from ember.server.health import Readiness, check_readiness

if TYPE_CHECKING:
    from prometheus_client import Metric

    from ember.server.broker import Broker

SESSION_STATES = ("CONNECTED", "SUSPENDED", "LOST")


class BrokerStateCollector(Collector):
    def __init__(self, broker: "Broker") -> None:
        self.broker = broker

    @property
    def me(self) -> BrokerInfo:
        """This broker as registered (built after the metrics service, which starts first)."""
        return self.broker.registration.info

    def readiness(self) -> Readiness:
        broker = self.broker
        partitions = broker.replicas.partitions if broker.replicas is not None else None
        return check_readiness(self.me, str(broker.session.client.state), broker.cache, partitions,
                               self._in_offline_dirs())

    def _in_offline_dirs(self) -> set[tuple[str, int]]:
        replicas = self.broker.replicas
        return {(r.topic, r.partition) for r in replicas.in_offline_dirs()} if replicas is not None else set()

    def collect(self) -> Iterator["Metric"]:
        yield from self._broker()
        yield from self._fetch_sessions()
        yield from self._partitions()
        yield from self._controller()
        yield from self._disk()
        yield from self._transactions()

    def _transactions(self) -> Iterator["Metric"]:
        """The transactional ids this broker coordinates, per state (Kafka's names), and how long
        its oldest open transaction has run: a count of Ongoing that only grows, or an age past
        ``transaction.timeout.ms``, is a producer or coordinator in trouble."""
        coordinator = getattr(self.broker, "transactions", None)
        if coordinator is None:
            return
        counts, oldest_ms = coordinator.state_counts()
        states = GaugeMetricFamily("ember_coordinator_transaction_transactional_ids",
                                   "Transactional ids this broker coordinates, by transaction state.", labels=["state"])
        for state, count in sorted(counts.items()):
            states.add_metric([state], count)
        yield states
        yield GaugeMetricFamily("ember_coordinator_transaction_oldest_open_ms",
                                "How long the oldest transaction this broker coordinates has been open (0: none).",
                                value=oldest_ms)

    def _broker(self) -> Iterator["Metric"]:
        info = GaugeMetricFamily("ember_server_broker_info", "This broker's id.", labels=["broker_id"])
        info.add_metric([str(self.me.id)], 1)
        yield info
        yield GaugeMetricFamily("ember_server_ready", "1 when the broker is ready for traffic (see /readyz).",
                                value=int(self.readiness().ready))
        state = str(self.broker.session.client.state)
        session = GaugeMetricFamily("ember_server_sessionexpirelistener_sessionstate",
                                    "ZooKeeper session state: 1 for the current one.", labels=["state"])
        for name in SESSION_STATES:
            session.add_metric([name], int(name == state))
        yield session
        connections = GaugeMetricFamily("ember_server_socketservermetrics_connection_count",
                                        "Open client and broker connections.", labels=["listener"])
        for name, server in self.broker.listener_servers():
            connections.add_metric([name], server.connection_count)
        yield connections

    def _fetch_sessions(self) -> Iterator["Metric"]:
        """Kafka's FetchSessionCache metrics (KIP-227): sessions held, partitions in them, evictions."""
        replicas = self.broker.replicas
        if replicas is None:
            return
        cache = replicas.fetch_sessions
        yield GaugeMetricFamily("ember_server_fetchsessioncache_numincrementalfetchsessions",
                                "Fetch sessions held (followers, ember consumers, Kafka clients).", value=len(cache))
        yield GaugeMetricFamily("ember_server_fetchsessioncache_numincrementalfetchpartitionscached",
                                "Partitions held over all fetch sessions.", value=cache.partition_count)
        yield CounterMetricFamily("ember_server_fetchsessioncache_incrementalfetchsessionevictions",
                                  "Fetch sessions evicted to make room for new ones "
                                  "(max.incremental.fetch.session.cache.slots too small for the fetchers).",
                                  value=cache.evictions)

    def _partitions(self) -> Iterator["Metric"]:
        replicas = self.broker.replicas
        local = list(replicas.partitions.values()) if replicas is not None else []
        tp = ["topic", "partition"]
        size = GaugeMetricFamily("ember_log_log_size", "Bytes of the partition's log on this broker.", labels=tp)
        segments = GaugeMetricFamily("ember_log_log_numlogsegments", "Segments of the partition's log.", labels=tp)
        start = GaugeMetricFamily("ember_log_log_logstartoffset", "First offset of the partition's log.", labels=tp)
        end = GaugeMetricFamily("ember_log_log_logendoffset", "Offset after the last record of the log.", labels=tp)
        offline = GaugeMetricFamily("ember_log_log_offline", "1 when a disk failure took the partition's log "
                                    "offline (every append, read and flush fails until it is reopened).", labels=tp)
        in_sync = GaugeMetricFamily("ember_cluster_partition_insyncreplicascount",
                                    "ISR size (reported by the leader).", labels=tp)
        assigned = GaugeMetricFamily("ember_cluster_partition_replicascount",
                                     "Replicas assigned (reported by the leader).", labels=tp)
        under = GaugeMetricFamily("ember_cluster_partition_underreplicated",
                                  "1 when the ISR is smaller than the replica set (reported by the leader).", labels=tp)
        under_min = GaugeMetricFamily("ember_cluster_partition_underminisr",
                                      "1 when the ISR is below min.insync.replicas (reported by the leader).", labels=tp)
        high = GaugeMetricFamily("ember_log_log_highwatermark", "Offset after the last record every in-sync replica "
                                 "has: read_uncommitted readers read below it (reported by the leader).", labels=tp)
        stable = GaugeMetricFamily("ember_log_log_laststableoffset", "Offset read_committed readers read below: the "
                                   "high watermark, or the first offset of a transaction still open (reported by the "
                                   "leader).", labels=tp)
        open_txns = GaugeMetricFamily("ember_log_log_opentransactions", "Transactions open in the partition: "
                                      "written to, not yet ended by a marker (reported by the leader).", labels=tp)
        counts = {"under": 0, "under_min": 0, "at_min": 0, "leaders": 0}
        offline_logs = 0
        for partition in local:
            labels = [partition.topic, str(partition.index)]
            log = partition.log
            count, size_bytes = log.segment_stats
            size.add_metric(labels, size_bytes)
            segments.add_metric(labels, count)
            start.add_metric(labels, log.log_start_offset)
            end.add_metric(labels, log.log_end_offset)
            offline.add_metric(labels, int(log.offline))
            offline_logs += log.offline
            if not partition.is_leader:
                continue
            isr, replicas_count = len(partition.state.isr), len(partition.replicas)
            min_isr = partition.config.min_insync_replicas
            counts["leaders"] += 1
            counts["under"] += isr < replicas_count
            counts["under_min"] += isr < min_isr
            counts["at_min"] += isr == min_isr
            high.add_metric(labels, log.high_watermark)
            stable.add_metric(labels, log.last_stable_offset)
            open_txns.add_metric(labels, log.open_transaction_count)
            in_sync.add_metric(labels, isr)
            assigned.add_metric(labels, replicas_count)
            under.add_metric(labels, int(isr < replicas_count))
            under_min.add_metric(labels, int(isr < min_isr))
        for topic, index in sorted(self._in_offline_dirs()):   # never opened: only the offline flag
            offline.add_metric([topic, str(index)], 1)
            offline_logs += 1
        yield from (size, segments, start, end, offline, in_sync, assigned, under, under_min, high, stable, open_txns)
        yield GaugeMetricFamily("ember_log_logmanager_offlinelogs",
                                "Logs on this broker that a disk failure took offline, with the replicas on a log "
                                "directory that failed at start-up (Kafka counts whole directories: "
                                "ember_log_logmanager_offlinelogdirectorycount).", value=offline_logs)
        for name, key, doc in (
                ("partitioncount", None, "Partitions with a replica on this broker."),
                ("leadercount", "leaders", "Partitions this broker leads."),
                ("underreplicatedpartitions", "under", "Partitions led here whose ISR is smaller than their replicas."),
                ("underminisrpartitioncount", "under_min", "Partitions led here with fewer in-sync replicas than "
                                                           "min.insync.replicas (acks=all produce is refused)."),
                ("atminisrpartitioncount", "at_min", "Partitions led here exactly at min.insync.replicas.")):
            yield GaugeMetricFamily(f"ember_server_replicamanager_{name}", doc,
                                    value=len(local) if key is None else counts[key])

    def _controller(self) -> Iterator["Metric"]:
        controller, cache = self.broker.controller, self.broker.cache
        active = controller.active
        yield GaugeMetricFamily("ember_controller_activecontrollercount",
                                "1 on the active controller, 0 elsewhere.", value=int(active))
        current = cache.controller()
        yield GaugeMetricFamily("ember_controller_controllerepoch",
                                "Epoch of the active controller as this broker knows it (-1: none).",
                                value=current.epoch if current is not None else -1)
        topics = cache.topics() if active else {}
        offline = sum(1 for meta in topics.values() for index in meta.partitions
                      if (state := meta.states.get(index)) is None or state.leader < 0)
        yield GaugeMetricFamily("ember_controller_offlinepartitionscount",
                                "Partitions without a leader (reported by the active controller).", value=offline)
        yield GaugeMetricFamily("ember_controller_globaltopiccount", "Topics (reported by the active controller).",
                                value=len(topics))
        yield GaugeMetricFamily("ember_controller_globalpartitioncount",
                                "Partitions (reported by the active controller).",
                                value=sum(len(meta.partitions) for meta in topics.values()))

    def _disk(self) -> Iterator["Metric"]:
        """Per log directory (Kafka's ``logDirectory`` tag): whether it is offline, and the free
        space and size of its file system (online directories only)."""
        dirs = self.broker.logs.dirs.dirs
        label = ["log_directory"]
        offline = GaugeMetricFamily("ember_log_logmanager_logdirectoryoffline",
                                    "1 when the log directory failed (at start-up) and is not used.", labels=label)
        free = GaugeMetricFamily("ember_log_logdir_free_bytes", "Free bytes on the log directory's file system.",
                                 labels=label)
        total = GaugeMetricFamily("ember_log_logdir_total_bytes", "Size of the log directory's file system.",
                                  labels=label)
        for directory in dirs:
            name = [str(directory.path)]
            offline.add_metric(name, int(not directory.online))
            if not directory.online:
                continue
            try:
                stat = os.statvfs(directory.path)
            except OSError:
                continue   # a failing disk: its logs' errors say so
            free.add_metric(name, stat.f_bavail * stat.f_frsize)
            total.add_metric(name, stat.f_blocks * stat.f_frsize)
        yield from (offline, free, total)
        yield GaugeMetricFamily("ember_log_logmanager_offlinelogdirectorycount", "Log directories that failed "
                                "(at start-up) and are not used.", value=sum(not d.online for d in dirs))
