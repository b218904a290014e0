"""Kafka Streams 4.2 with processing.guarantee=exactly_once_v2 on a private 3-broker ember cluster:
Kafka's WordCountDemo counts words while brokers are killed and restarted (one of them the
coordinator of the application's transactions); its output, read read_committed, holds each word's
exact count, every count once: a record processed twice would count twice."""
from __future__ import annotations

import collections
import struct
import time
from urllib.parse import unquote

from confluent_kafka import Consumer, Producer
from kafka_helpers import create_topic, java_service
from kazoo.client import KazooClient

from ember.groups.coordinator import coordinator_id
from ember.zk.zk_paths import CHROOT, TRANSACTIONS
from waiting import eventually

INPUT, OUTPUT = "streams-plaintext-input", "streams-wordcount-output"
WORDS = [f"word{i}" for i in range(20)]


def produce_lines(bootstrap: str, start: int, count: int, counts: collections.Counter) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "enable.idempotence": True})
    for n in range(start, start + count):
        line = " ".join(WORDS[(n * 7 + j) % len(WORDS)] for j in range(5))
        counts.update(line.split())
        producer.produce(INPUT, line.encode())
    assert producer.flush(60) == 0


class CommittedCounts:
    """Each word's counts on the output topic in the order a read_committed consumer sees them."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-check",
                                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        self.consumer.subscribe([OUTPUT])
        self.seen: dict[str, list[int]] = collections.defaultdict(list)

    def read(self) -> dict[str, int]:
        for message in self.consumer.consume(1000, 0.5):
            if not message.error():
                self.seen[message.key().decode()].append(struct.unpack(">q", message.value())[0])
        return {word: counts[-1] for word, counts in self.seen.items()}


def coordinator_of_streams(cluster) -> int:
    """The broker coordinating the application's (one) transactional id, from ZooKeeper."""
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(timeout=30)
    try:
        ids = [unquote(i) for i in zk.get_children(CHROOT + TRANSACTIONS) if i.startswith("streams-wordcount-eos")]
    finally:
        zk.stop()
        zk.close()
    assert ids, "the Streams application has no transactional id yet"
    found = coordinator_id(ids[0], cluster.brokers)
    assert found is not None
    return found


def test_streams_exactly_once_v2_counts_exactly_while_brokers_die(make_cluster, tmp_path):
    from ember.jars import KAFKA_STREAMS

    cluster = make_cluster(brokers=3)
    bootstrap = cluster.kafka_bootstrap
    for topic in (INPUT, OUTPUT):
        create_topic(bootstrap, topic, partitions=2, replication_factor=3)
    properties = tmp_path / "streams.properties"
    properties.write_text("\n".join([
        f"bootstrap.servers={bootstrap}", f"state.dir={tmp_path / 'state'}", "application.id=streams-wordcount-eos",
        "processing.guarantee=exactly_once_v2", "replication.factor=3", "commit.interval.ms=200",
        "producer.transaction.timeout.ms=20000", "producer.delivery.timeout.ms=60000",
        "producer.request.timeout.ms=10000"]) + "\n")
    expected: collections.Counter = collections.Counter()
    counts = CommittedCounts(bootstrap)
    log = tmp_path / "streams.log"
    try:
        with java_service(KAFKA_STREAMS.classpath, "org.apache.kafka.streams.examples.wordcount.WordCountDemo",
                          properties, log) as app:
            produce_lines(bootstrap, 0, 1000, expected)
            eventually(lambda: counts.read() == dict(expected), "the first lines counted", timeout_s=120)
            victims = [coordinator_of_streams(cluster)]
            victims.append(next(b for b in sorted(cluster.brokers) if b not in victims))
            for round_, victim in enumerate(victims):
                produce_lines(bootstrap, 1000 * (round_ + 1), 500, expected)
                time.sleep(0.5)                        # mid-transaction: Streams commits every 200 ms
                cluster.kill_broker(victim)
                produce_lines(bootstrap, 1000 * (round_ + 1) + 500, 500, expected)
                cluster.restart_broker(victim)
                eventually(lambda: counts.read() == dict(expected),
                           f"exact counts after broker {victim} was killed", timeout_s=180)
            assert app.poll() is None, f"WordCountDemo exited {app.returncode}: see {log}"
        final = counts.read()
        assert final == dict(expected)
        for word, seen in counts.seen.items():       # each update once, in order: no count repeated or undone
            assert seen == sorted(set(seen)), f"{word}: {seen}"
    finally:
        counts.consumer.close()
