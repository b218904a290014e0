"""The broker's counters and histograms: Kafka's metric names, renamed for ember, in one registry.

Kafka's JMX names become Prometheus names the way the JMX exporter spells them
(``kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec`` →
``kafka_server_brokertopicmetrics_messagesin_total``), with ``ember`` for ``kafka``, rates as
``_total`` counters and times as ``_seconds`` histograms. docs/operations.md maps every name.

They are updated where things happen, once per batch or event, never per record: a topic's
children are looked up once (:class:`TopicStats`), so a produced batch costs two ``inc`` calls.
Request metrics, the busiest, are kept lock-free on the event loop (``ember.metrics.requests``). State
(partitions, logs, controller, ZooKeeper, lag) is read at scrape time by the
collectors in ``ember.server.state`` and ``ember.server.lag``, so it costs nothing between
scrapes. A broker without ``metrics.listen`` creates none of this (its code paths hold ``None``).
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, disable_created_metrics
from prometheus_client.registry import Collector

#: Request, flush and ZooKeeper latencies: 0.5 ms (a metadata request) to 30 s (a stuck acks=all).
#: Few buckets on purpose: every bucket is a line per API in every scrape, and rendering them is
#: most of a scrape's cost.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0)

#: Where the broker meets a ``StorageError`` from a log (the ``operation`` label of
#: ``ember_server_replicamanager_storageerrors_total``): a producer's append at the leader, a
#: follower's append or truncation in the replica fetcher, the flush and retention schedules.
STORAGE_OPERATIONS = ("produce", "replication", "flush", "retention")


class TopicStats:
    """One topic's BrokerTopicMetrics children, resolved once per topic."""

    __slots__ = ("messages_in", "bytes_in", "bytes_out", "replication_bytes_in", "replication_bytes_out",
                 "_metrics")

    def __init__(self, metrics: "BrokerMetrics", topic: str) -> None:
        self.messages_in = metrics.messages_in.labels(topic)
        self.bytes_in = metrics.bytes_in.labels(topic)
        self.bytes_out = metrics.bytes_out.labels(topic)
        self.replication_bytes_in = metrics.replication_bytes_in.labels(topic)
        self.replication_bytes_out = metrics.replication_bytes_out.labels(topic)
        self._metrics = metrics

    def produced(self, records: int, size: int) -> None:
        """A producer's batch was appended by this leader."""
        self.messages_in.inc(records)
        self.bytes_in.inc(size)

    def sent(self, size: int, to_follower: bool) -> None:
        """A fetch response carries ``size`` bytes of this topic to a consumer or a follower."""
        (self.replication_bytes_out if to_follower else self.bytes_out).inc(size)

    def replicated(self, size: int) -> None:
        """This follower appended ``size`` bytes fetched from the leader."""
        self.replication_bytes_in.inc(size)

    def storage_error(self, operation: str) -> None:
        """A write of this topic's log failed with StorageError (counted per broker, not per topic)."""
        self._metrics.storage_error(operation)


class BrokerMetrics:
    """Every counter and histogram of one broker, and the registry the endpoint serves."""

    def __init__(self) -> None:
        disable_created_metrics()   # no ``_created`` series beside every counter: Kafka has none either
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        registry = self.registry

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, labels, registry=registry)

        def histogram(name: str, doc: str, labels: tuple[str, ...] = ()) -> Histogram:
            return Histogram(name, doc, labels, registry=registry, buckets=LATENCY_BUCKETS)

        self.event_loop_delay = histogram("ember_network_requestchannel_eventloopdelay_seconds",
                                          "How late the event loop runs a due callback (ember's request queue time).")

        topic = ("topic",)
        self.messages_in = counter("ember_server_brokertopicmetrics_messagesin", "Records appended as leader.", topic)
        self.bytes_in = counter("ember_server_brokertopicmetrics_bytesin", "Batch bytes appended as leader.", topic)
        self.bytes_out = counter("ember_server_brokertopicmetrics_bytesout", "Batch bytes sent to consumers.", topic)
        self.replication_bytes_in = counter("ember_server_brokertopicmetrics_replicationbytesin",
                                            "Batch bytes appended as follower.", topic)
        self.replication_bytes_out = counter("ember_server_brokertopicmetrics_replicationbytesout",
                                             "Batch bytes sent to followers.", topic)

        self.isr_shrinks = counter("ember_server_replicamanager_isrshrinks", "ISR shrinks written by this leader.")
        self.isr_expands = counter("ember_server_replicamanager_isrexpands", "ISR expansions written by this leader.")
        self.leader_elections = counter("ember_controller_controllerstats_leaderelections",
                                        "Leader elections (any kind) made by this broker as controller.")
        self.unclean_leader_elections = counter("ember_controller_controllerstats_uncleanleaderelections",
                                                "Unclean leader elections made by this broker as controller.")
        self.storage_errors = counter("ember_server_replicamanager_storageerrors",
                                      "Log writes that failed with KAFKA_STORAGE_ERROR (a full or failing disk).",
                                      ("operation",))
        for operation in STORAGE_OPERATIONS:   # every series from 0, so increase() sees the first error
            self.storage_errors.labels(operation)
        self.log_flush_time = histogram("ember_log_logflushstats_logflush_seconds", "fsync of a partition's log.")
        self.zookeeper_latency = histogram("ember_server_zookeeperclientmetrics_zookeeperrequestlatency_seconds",
                                           "Round trip of a ZooKeeper probe request.")
        self.zookeeper_expires = counter("ember_server_sessionexpirelistener_zookeeperexpires",
                                         "ZooKeeper sessions lost.")
        self.zookeeper_disconnects = counter("ember_server_sessionexpirelistener_zookeeperdisconnects",
                                             "ZooKeeper connections suspended.")
        self._topics: dict[str, TopicStats] = {}

    def register(self, collector: Collector) -> None:
        self.registry.register(collector)

    def topic(self, name: str) -> TopicStats:
        stats = self._topics.get(name)
        if stats is None:
            stats = self._topics[name] = TopicStats(self, name)
        return stats

    def forget_topic(self, name: str) -> None:
        """Drop a deleted topic's series (as Kafka removes its topic metrics)."""
        if self._topics.pop(name, None) is not None:
            for family in (self.messages_in, self.bytes_in, self.bytes_out, self.replication_bytes_in,
                           self.replication_bytes_out):
                family.remove(name)

    def isr_changed(self, before: int, after: int) -> None:
        if after < before:
            self.isr_shrinks.inc()
        elif after > before:
            self.isr_expands.inc()

    def storage_error(self, operation: str) -> None:
        """The broker met a StorageError from a log during ``operation`` (one of STORAGE_OPERATIONS)."""
        self.storage_errors.labels(operation).inc()

    def leader_elected(self, unclean: bool) -> None:
        self.leader_elections.inc()
        if unclean:
            self.unclean_leader_elections.inc()
