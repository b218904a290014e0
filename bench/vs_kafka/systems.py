"""ember and Apache Kafka behind one interface, so every workload is written once.

A workload (``workloads.py``) says *what* to do — "send N records of 100 bytes with acks=all",
"read a topic from the beginning", "count a topic in Spark" — and a system adapter says *how* in
that system's idiomatic, fastest client code:

* ``Clients`` (picklable, so a consumer can run in a child process): producers, consumers and the
  Spark reader/writer options of one system. ``EmberClients`` uses ``ember.client`` and the
  ``ember`` Spark source/sink; ``KafkaClients`` uses confluent-kafka (librdkafka) and Spark's own
  ``kafka`` source/sink.
* ``System``: one running cluster of three brokers — start (timed: the cold start), topics,
  broker processes (for RSS), one broker restart (timed), stop.

Client settings are matched where both systems have them: ``linger.ms`` 5, ``batch.size`` 256 KiB
(ember's default; librdkafka's is 1 MB), ``acks``, idempotence on with ``acks=all`` and off with
``acks=1`` (Kafka only allows it with ``acks=all``), and the same number of records per poll.
"""
from __future__ import annotations

import os
import signal
import time
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

import pyarrow as pa
from kafka_cluster import KafkaCluster

from ember.client import Admin, Consumer, Producer, TopicPartition
from ember.launcher.cluster_sasl import ClusterSasl
from ember.launcher.cluster_tls import ClusterTls
from ember.launcher.local import LocalCluster
from ember.launcher.zookeeper_server import read_pid

POLL_RECORDS = 10_000          # records per poll / consume call, both systems
TOPIC_READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ProduceSettings:
    """Producer settings both systems get; ``label`` names the case in the results."""

    acks: str                  # "1" or "all"
    replication_factor: int
    linger_ms: int = 5
    batch_size: int = 256 * 1024
    #: compression.type: none, gzip, snappy, lz4 or zstd (ember's own producer maps gzip and snappy to its
    #: Arrow codecs, zstd level 1 and lz4; a Kafka client's batches keep the codec they were sent with)
    compression: str = "none"

    @property
    def idempotent(self) -> bool:
        return self.acks == "all"

    @property
    def label(self) -> str:
        return f"acks={self.acks} RF={self.replication_factor}"


SendOne = Callable[[bytes], None]
PollValues = Callable[[], list[bytes]]


class Clients(Protocol):
    """Client side of one system (picklable: it holds addresses, not connections)."""

    name: str
    produce_modes: tuple[str, ...]
    consume_modes: tuple[str, ...]
    spark_read_modes: tuple[str, ...]

    def produce_job(self, mode: str, topic: str, settings: ProduceSettings, value: bytes,
                    count: int) -> AbstractContextManager[Callable[[], None]]: ...
    def load_table(self, topic: str, table: pa.Table) -> None: ...
    def paced_producer(self, topic: str, settings: ProduceSettings) -> AbstractContextManager[SendOne]: ...
    def consume_job(self, mode: str, topic: str, partitions: int, count: int) -> AbstractContextManager[Callable[[], int]]: ...
    def tail_values(self, topic: str, partitions: int) -> AbstractContextManager[PollValues]: ...
    def spark_read(self, spark: Any, mode: str, topic: str) -> Any: ...
    def spark_write(self, frame: Any, topic: str, checkpoint: Path) -> Any: ...


class System(Protocol):
    """A running three-broker cluster of one system."""

    name: str
    clients: Clients
    cold_start_s: float

    def create_topic(self, topic: str, partitions: int, replication_factor: int) -> None: ...
    def delete_topic(self, topic: str) -> None: ...
    def record_count(self, topic: str) -> int: ...
    def processes(self) -> dict[str, int]: ...
    def restart_broker_s(self) -> float: ...
    def stop(self) -> None: ...


# -- ember -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EmberClients:
    bootstrap: str
    storage_root: str
    #: ember's Kafka listeners: mode ``kafka-client`` runs Kafka's client code against ember
    kafka_bootstrap: str = ""
    name: str = "ember"
    produce_modes: tuple[str, ...] = ("send", "send_batch", "kafka-client")
    consume_modes: tuple[str, ...] = ("poll_batches", "poll", "kafka-client")
    spark_read_modes: tuple[str, ...] = ("broker", "direct", "kafka")
    #: TLS keywords of a secure cluster's clients (``LocalCluster.client_options``), as pairs.
    security: tuple[tuple[str, Any], ...] = ()

    def _producer(self, settings: ProduceSettings) -> Producer:
        return Producer(self.bootstrap, acks=settings.acks, linger_ms=settings.linger_ms,
                        batch_size=settings.batch_size, enable_idempotence=settings.idempotent,
                        compression_type=settings.compression, **dict(self.security))

    @contextmanager
    def produce_job(self, mode: str, topic: str, settings: ProduceSettings, value: bytes,
                    count: int) -> Iterator[Callable[[], None]]:
        """``send``: one call per record, then flush. ``send_batch``: the records as one Arrow
        table (built before the clock starts: the columnar path assumes columns exist).
        ``kafka-client``: confluent-kafka, exactly as against Kafka, through ember's Kafka listener."""
        if mode == "kafka-client":
            with KafkaClients(self.kafka_bootstrap).produce_job("produce", topic, settings, value, count) as job:
                yield job
            return
        with self._producer(settings) as producer:
            producer.send(topic, value).get(30)           # metadata, connections, producer id

            def send_each() -> None:
                send = producer.send
                for _ in range(count):
                    send(topic, value)
                producer.flush(600)

            table = pa.table({"value": pa.array([value] * count, pa.binary())}) if mode == "send_batch" else None

            def send_table() -> None:
                producer.send_batch(topic, table).result(600)

            yield {"send": send_each, "send_batch": send_table}[mode]

    def load_table(self, topic: str, table: pa.Table) -> None:
        with self._producer(ProduceSettings("1", 1)) as producer:
            producer.send_batch(topic, table).result(900)

    @contextmanager
    def paced_producer(self, topic: str, settings: ProduceSettings) -> Iterator[SendOne]:
        with self._producer(settings) as producer:
            producer.send(topic, b"warm-up").get(30)
            yield lambda value: producer.send(topic, value)
            producer.flush(60)

    def _consumer(self, topic: str, partitions: int) -> tuple[Consumer, list[TopicPartition]]:
        consumer = Consumer(bootstrap_servers=self.bootstrap, auto_offset_reset="earliest",
                            max_poll_records=POLL_RECORDS, **dict(self.security))
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        return consumer, tps

    @contextmanager
    def consume_job(self, mode: str, topic: str, partitions: int, count: int) -> Iterator[Callable[[], int]]:
        """Read from the beginning until ``count`` records arrived; returns the count read
        (``kafka-client``: confluent-kafka through ember's Kafka listener)."""
        if mode == "kafka-client":
            with KafkaClients(self.kafka_bootstrap).consume_job("consume", topic, partitions, count) as job:
                yield job
            return
        consumer, tps = self._consumer(topic, partitions)
        try:
            consumer.seek_to_beginning(*tps)

            def columns() -> int:
                seen = 0
                while seen < count:
                    seen += sum(batch.num_rows for batch in consumer.poll_batches(timeout_ms=1000).values())
                return seen

            def records() -> int:
                seen = 0
                while seen < count:
                    seen += sum(len(rows) for rows in consumer.poll(timeout_ms=1000).values())
                return seen

            yield {"poll_batches": columns, "poll": records}[mode]
        finally:
            consumer.close()

    @contextmanager
    def tail_values(self, topic: str, partitions: int) -> Iterator[PollValues]:
        """Values of a new topic as they arrive (``poll_batches``: ember's fastest path)."""
        consumer, tps = self._consumer(topic, partitions)
        try:
            consumer.seek_to_beginning(*tps)

            def poll() -> list[bytes]:
                values: list[bytes] = []
                for batch in consumer.poll_batches(timeout_ms=100).values():
                    values += batch.column("value").to_pylist()
                return values

            yield poll
        finally:
            consumer.close()

    def spark_read(self, spark: Any, mode: str, topic: str) -> Any:
        """``broker``: through the brokers; ``direct``: segment files under the data dir; ``kafka``:
        Spark's own Kafka connector, exactly as against Kafka, through ember's Kafka listener."""
        if mode == "kafka":
            return KafkaClients(self.kafka_bootstrap).spark_read(spark, mode, topic)
        reader = (spark.read.format("ember").option("bootstrap", self.bootstrap).option("topic", topic)
                  .option("readPath", mode))
        if mode == "direct":
            reader = reader.option("storageRoot", self.storage_root)
        return reader.load()

    def spark_write(self, frame: Any, topic: str, checkpoint: Path) -> Any:
        """The ember sink with its defaults: acks=all, exactly-once."""
        return (frame.writeStream.format("ember").option("bootstrap", self.bootstrap).option("topic", topic)
                .option("checkpointLocation", str(checkpoint)))


class EmberSystem:
    """A LocalCluster: a real ZooKeeper server and three broker processes (``secure``: all on TLS;
    with ``sasl`` too, SASL_SSL with SCRAM, clients logging in as the cluster's admin)."""

    name = "ember"

    def __init__(self, root: Path, brokers: int = 3, secure: bool = False, sasl: bool = False,
                 broker_config: dict[str, str] | None = None) -> None:
        self.cluster = LocalCluster(root, broker_count=brokers, secure=secure, sasl=sasl,
                                    broker_config=dict(broker_config or {}))
        started = time.perf_counter()
        self.cluster.start()
        self.cold_start_s = time.perf_counter() - started
        self.clients = EmberClients(self.cluster.bootstrap, str(self.cluster.data_dir), self.cluster.kafka_bootstrap,
                                    security=tuple(self.cluster.client_options.items()))
        self.admin = Admin(self.cluster.bootstrap, **self.cluster.client_options)

    def create_topic(self, topic: str, partitions: int, replication_factor: int) -> None:
        self.admin.create_topic(topic, partitions=partitions, replication_factor=replication_factor)
        wait_for(lambda: all(p.leader >= 0 and len(p.isr) == replication_factor
                             for p in self.admin.describe_topic(topic).partitions), f"ember topic {topic}")

    def delete_topic(self, topic: str) -> None:
        self.admin.delete_topic(topic)

    def record_count(self, topic: str) -> int:
        return sum(p.high_watermark for p in self.admin.describe_topic(topic).partitions)

    def processes(self) -> dict[str, int]:
        pids = {f"broker {b.broker_id}": b.pid for b in self.cluster.brokers.values() if b.pid}
        zk = self.cluster.zookeeper
        zk_pid = zk.process.pid if zk and zk.process else read_pid(zk.data_dir / "zookeeper.pid") if zk else None
        if zk_pid:
            pids["zookeeper"] = zk_pid
        return pids

    def restart_broker_s(self) -> float:
        """Seconds from spawning broker 1 again (stopped cleanly, data kept) to its ApiVersions."""
        self.cluster.kill_broker(1, signal.SIGTERM)
        started = time.perf_counter()
        self.cluster.restart_broker(1)
        return time.perf_counter() - started

    def stop(self) -> None:
        try:
            self.admin.close()
        finally:
            self.cluster.stop()


# -- Kafka -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KafkaClients:
    bootstrap: str
    name: str = "kafka"
    produce_modes: tuple[str, ...] = ("produce",)
    consume_modes: tuple[str, ...] = ("consume",)
    spark_read_modes: tuple[str, ...] = ("kafka",)
    #: Extra librdkafka settings (security.protocol ssl or sasl_ssl, its files and login), as pairs.
    config: tuple[tuple[str, str], ...] = ()

    def _producer(self, settings: ProduceSettings) -> Any:
        from confluent_kafka import Producer as KafkaProducer
        return KafkaProducer({
            "bootstrap.servers": self.bootstrap, "acks": settings.acks, "linger.ms": settings.linger_ms,
            "batch.size": settings.batch_size, "enable.idempotence": settings.idempotent,
            "compression.type": settings.compression,
            "queue.buffering.max.kbytes": 64 * 1024,           # ember's buffer_memory
            "queue.buffering.max.messages": 2_000_000, "log_level": 3, **dict(self.config)})

    @contextmanager
    def produce_job(self, mode: str, topic: str, settings: ProduceSettings, value: bytes,
                    count: int) -> Iterator[Callable[[], None]]:
        """``produce`` per record (waiting in ``poll`` when librdkafka's queue is full), then flush."""
        producer = self._producer(settings)
        try:
            producer.produce(topic, value)
            producer.flush(30)

            def produce_each() -> None:
                produce, poll = producer.produce, producer.poll
                for _ in range(count):
                    while True:   # a full queue (large values, a slow broker) may take more than one poll
                        try:
                            produce(topic, value)
                            break
                        except BufferError:
                            poll(0.01)
                _flush(producer, 600)

            yield produce_each
        finally:
            producer.flush(30)

    def load_table(self, topic: str, table: pa.Table) -> None:
        """Kafka has no columnar producer: produce the rows one by one (key, value, timestamp),
        idempotent (acks=all), so a retried request cannot store a row twice (it did, with acks=1,
        loading a topic of 1,000 partitions)."""
        producer = self._producer(ProduceSettings("all", 1))
        produce, poll = producer.produce, producer.poll
        columns = table.to_pydict()
        for key, value, timestamp in zip(columns["key"], columns["value"], columns["timestamp"]):
            while True:
                try:
                    produce(topic, value, key, timestamp=timestamp)
                    break
                except BufferError:
                    poll(0.01)
        _flush(producer, 900)

    @contextmanager
    def paced_producer(self, topic: str, settings: ProduceSettings) -> Iterator[SendOne]:
        producer = self._producer(settings)
        producer.produce(topic, b"warm-up")
        producer.flush(30)

        def send(value: bytes) -> None:
            producer.produce(topic, value)
            producer.poll(0)

        yield send
        _flush(producer, 60)

    def _consumer(self, topic: str, partitions: int, offset: int) -> Any:
        from confluent_kafka import Consumer as KafkaConsumer
        from confluent_kafka import TopicPartition as KafkaTopicPartition
        consumer = KafkaConsumer({
            "bootstrap.servers": self.bootstrap, "group.id": f"bench-{os.getpid()}", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "log_level": 3,
            # librdkafka pauses a partition's prefetch for fetch.queue.backoff.ms (default 1 s) whenever its
            # queue holds queued.min.messages (default 100k): ~150k records/s here. Tuned so Kafka is not
            # held back by a client default.
            "fetch.queue.backoff.ms": 0, "queued.min.messages": 1_000_000, **dict(self.config)})
        consumer.assign([KafkaTopicPartition(topic, p, offset) for p in range(partitions)])
        return consumer

    @contextmanager
    def consume_job(self, mode: str, topic: str, partitions: int, count: int) -> Iterator[Callable[[], int]]:
        from confluent_kafka import OFFSET_BEGINNING
        consumer = self._consumer(topic, partitions, OFFSET_BEGINNING)
        try:
            def consume() -> int:
                seen = 0
                while seen < count:
                    # consume(n, t) waits for n messages or t seconds: never ask for more than is left
                    wanted = min(POLL_RECORDS, count - seen)
                    seen += sum(1 for m in consumer.consume(wanted, 1.0) if m.error() is None)
                return seen

            yield consume
        finally:
            consumer.close()

    @contextmanager
    def tail_values(self, topic: str, partitions: int) -> Iterator[PollValues]:
        from confluent_kafka import OFFSET_BEGINNING
        consumer = self._consumer(topic, partitions, OFFSET_BEGINNING)

        def poll() -> list[bytes]:
            """Wait for one message, then take what else is queued (``consume(n, t)`` alone would
            wait for n messages or t seconds, adding its timeout to the latency)."""
            first = consumer.poll(0.1)
            if first is None:
                return []
            messages = [first, *consumer.consume(POLL_RECORDS, 0)]
            return [m.value() for m in messages if m.error() is None]
        try:
            yield poll
        finally:
            consumer.close()

    def spark_read(self, spark: Any, mode: str, topic: str) -> Any:
        return (spark.read.format("kafka").option("kafka.bootstrap.servers", self.bootstrap)
                .option("subscribe", topic).option("startingOffsets", "earliest")
                .option("endingOffsets", "latest").load())

    def spark_write(self, frame: Any, topic: str, checkpoint: Path) -> Any:
        """Spark's Kafka sink (kafka-clients: acks=all, idempotent by default) with the same
        linger/batch settings as the producers above."""
        return (frame.writeStream.format("kafka").option("kafka.bootstrap.servers", self.bootstrap)
                .option("topic", topic).option("kafka.linger.ms", "5").option("kafka.batch.size", str(256 * 1024))
                .option("checkpointLocation", str(checkpoint)))


def _flush(producer: Any, timeout_s: float) -> None:
    left = producer.flush(timeout_s)
    if left:
        raise TimeoutError(f"{left} Kafka message(s) not delivered within {timeout_s:.0f}s")


class KafkaSystem:
    """A KafkaCluster: three combined broker + controller KRaft nodes (``tls``: an SSL listener too;
    with ``sasl``, a SASL_SSL one with SCRAM-SHA-512)."""

    name = "kafka"

    def __init__(self, root: Path, brokers: int = 3, tls: ClusterTls | None = None,
                 sasl: ClusterSasl | None = None, overrides: dict[str, object] | None = None) -> None:
        from confluent_kafka.admin import AdminClient
        self.cluster = KafkaCluster(root, node_count=brokers, tls=tls, sasl=sasl, overrides=dict(overrides or {}))
        started = time.perf_counter()
        self.cluster.start()
        self.cold_start_s = time.perf_counter() - started
        self.clients = KafkaClients(self.cluster.bootstrap)
        self.admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap, "log_level": 3})

    def create_topic(self, topic: str, partitions: int, replication_factor: int) -> None:
        create_with_kafka_admin(self.admin, topic, partitions, replication_factor)

    def delete_topic(self, topic: str) -> None:
        for future in self.admin.delete_topics([topic]).values():
            future.result(TOPIC_READY_TIMEOUT_S)

    def record_count(self, topic: str) -> int:
        from confluent_kafka import Consumer as KafkaConsumer
        from confluent_kafka import TopicPartition as KafkaTopicPartition
        consumer = KafkaConsumer({"bootstrap.servers": self.cluster.bootstrap, "group.id": "bench-count",
                                  "log_level": 3})
        try:
            meta = consumer.list_topics(topic, timeout=10).topics[topic]
            return sum(consumer.get_watermark_offsets(KafkaTopicPartition(topic, p), timeout=10)[1]
                       for p in meta.partitions)
        finally:
            consumer.close()

    def processes(self) -> dict[str, int]:
        return {f"broker {n.node_id}": n.pid for n in self.cluster.nodes.values() if n.pid}

    def restart_broker_s(self) -> float:
        """Seconds from spawning node 1 again (stopped cleanly, data kept) to its ApiVersions."""
        self.cluster.stop_node(1)
        started = time.perf_counter()
        self.cluster.spawn(1)
        self.cluster.wait_ready(1, 120)
        return time.perf_counter() - started

    def stop(self) -> None:
        self.admin = None          # librdkafka clients must go before their brokers, or they log reconnects
        self.cluster.stop()


def kafka_client_bootstrap(system: Any) -> str:
    """Where a Kafka client connects to ``system``: ember's Kafka listeners, or Kafka's brokers."""
    return system.clients.kafka_bootstrap if system.name == "ember" else system.clients.bootstrap


def create_with_kafka_admin(admin: Any, topic: str, partitions: int, replication_factor: int) -> None:
    """CreateTopics with confluent-kafka's AdminClient, then Metadata until every partition has a
    leader and a full ISR: what a Kafka user's tooling waits for, against either system."""
    from confluent_kafka.admin import NewTopic
    for future in admin.create_topics([NewTopic(topic, partitions, replication_factor)]).values():
        future.result(TOPIC_READY_TIMEOUT_S)

    def ready() -> bool:
        meta = admin.list_topics(topic, timeout=10).topics[topic]
        return len(meta.partitions) == partitions and all(
            p.leader >= 0 and len(p.isrs) == replication_factor for p in meta.partitions.values())
    wait_for(ready, f"topic {topic}")


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = TOPIC_READY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except Exception:                       # metadata not there yet
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready within {timeout_s:.0f}s")
        time.sleep(0.1)


def rss_mb(pid: int) -> float:
    """Resident set size of one process, from /proc (MB = 10^6 bytes)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError(f"no VmRSS for pid {pid}")
