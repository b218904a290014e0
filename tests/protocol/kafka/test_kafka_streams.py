"""A Kafka Streams 4.2 application against an ember cluster: Kafka's WordCountDemo (its examples jar
from Maven Central, ``python -m ember.jars fetch kafka-streams``), a KTable count whose changelog
topic Streams creates compacted and ember's cleaner compacts; restarted with no local state, the
application restores its counts from the compacted changelog and counts on (at_least_once)."""
from __future__ import annotations

import collections
import struct
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from confluent_kafka import Consumer, Producer
from kafka_helpers import create_topic, java_service

from ember.client import Admin
from ember.log import checkpoint
from waiting import eventually

INPUT, OUTPUT = "streams-plaintext-input", "streams-wordcount-output"
CHANGELOG = "streams-wordcount-KSTREAM-AGGREGATE-STATE-STORE-0000000003-changelog"
WORDS = [f"word{i}" for i in range(20)]


@contextmanager
def word_count(bootstrap: str, work: Path, state: Path) -> Iterator[None]:
    from ember.jars import KAFKA_STREAMS

    properties = work / "streams.properties"
    properties.write_text("\n".join([
        f"bootstrap.servers={bootstrap}", f"state.dir={state}", "replication.factor=3", "commit.interval.ms=200",
        "topic.segment.bytes=8192", "topic.min.cleanable.dirty.ratio=0.01"]) + "\n")   # internal topics' configs
    with java_service(KAFKA_STREAMS.classpath, "org.apache.kafka.streams.examples.wordcount.WordCountDemo",
                      properties, work / "streams.log") as app:
        yield
        assert app.poll() is None, f"WordCountDemo exited {app.returncode}: see {work / 'streams.log'}"


def produce_lines(bootstrap: str, count: int, counts: collections.Counter) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for n in range(count):
        line = " ".join(WORDS[(n * 7 + j) % len(WORDS)] for j in range(5))
        counts.update(line.split())
        producer.produce(INPUT, line.encode())
    producer.flush(30)


class Counts:
    """The latest count of each word on the output topic, as a consumer sees them."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "word-count-check",
                                  "auto.offset.reset": "earliest"})
        self.consumer.subscribe([OUTPUT])
        self.latest: dict[str, int] = {}

    def read(self) -> dict[str, int]:
        for message in self.consumer.consume(1000, 0.5):
            if not message.error():
                self.latest[message.key().decode()] = struct.unpack(">q", message.value())[0]
        return self.latest


def cleaned(cluster, topic: str) -> bool:
    """Whether every replica of every partition of ``topic`` was cleaned at least once."""
    points = [checkpoint.read_offset(Path(b.data_dir) / f"{topic}-{p}" / checkpoint.CLEANER_OFFSET) or 0
              for b in cluster.brokers.values() for p in (0, 1)]
    return min(points) > 0


def test_a_streams_ktable_counts_restores_from_its_compacted_changelog_and_counts_on(shared_cluster, tmp_path):
    bootstrap = shared_cluster.kafka_bootstrap
    for topic in (INPUT, OUTPUT):
        create_topic(bootstrap, topic, partitions=2, replication_factor=3)
    expected: collections.Counter = collections.Counter()
    counts = Counts(bootstrap)
    try:
        with word_count(bootstrap, tmp_path, tmp_path / "state-1"):
            produce_lines(bootstrap, 3000, expected)
            eventually(lambda: counts.read() == dict(expected), "every word counted", timeout_s=120)
        with Admin(shared_cluster.bootstrap) as admin:
            assert admin.describe_topic(CHANGELOG).config.get("cleanup.policy") == "compact"
        eventually(lambda: cleaned(shared_cluster, CHANGELOG), "every replica to clean the changelog", timeout_s=60)
        changelog = Consumer({"bootstrap.servers": bootstrap, "group.id": "changelog-check",
                              "auto.offset.reset": "earliest", "enable.partition.eof": True})
        changelog.subscribe([CHANGELOG])
        stored, ends = {}, 0
        for _ in range(120):
            if ends >= 2:
                break
            for message in changelog.consume(1000, 1.0):
                if message.error():
                    ends += 1
                else:
                    stored[message.key().decode()] = struct.unpack(">q", message.value())[0]
        changelog.close()
        assert stored == dict(expected)              # the compacted changelog still holds every count
        # A new instance with no local state restores its table from the compacted changelog.
        with word_count(bootstrap, tmp_path, tmp_path / "state-2"):
            produce_lines(bootstrap, 500, expected)
            eventually(lambda: counts.read() == dict(expected), "counting on from the restored table", timeout_s=120)
    finally:
        counts.consumer.close()
