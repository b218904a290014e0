"""ember's consumer fetches in a fetch session per leader (KIP-227, ``ember.wire.fetch_session``):
after the first fetch it names only partitions whose position moved, and still reads every record
once, in order, across seeks and new appends."""
from __future__ import annotations

import time

import pytest

from ember.client import Admin, Consumer, Producer, TopicPartition
from ember.launcher.scrape import scrape

pytestmark = pytest.mark.integration

PARTITIONS = 40
CACHED = "ember_server_fetchsessioncache_numincrementalfetchpartitionscached"


def _read(consumer: Consumer, expected: int, timeout_s: float = 60) -> dict[int, list[int]]:
    """{partition: offsets} of the next ``expected`` records."""
    got: dict[int, list[int]] = {}
    deadline = time.monotonic() + timeout_s
    while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
        for tp, records in consumer.poll(500).items():
            got.setdefault(tp.partition, []).extend(r.offset for r in records)
    assert sum(map(len, got.values())) == expected, f"read {got}"
    return got


def test_a_consumer_reads_every_record_once_through_its_session(make_cluster, topic_name: str) -> None:
    cluster = make_cluster(brokers=1, metrics=True)
    broker = next(iter(cluster.brokers.values()))
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic_name, partitions=PARTITIONS, replication_factor=1)
    with Producer(cluster.bootstrap) as producer, \
            Consumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        for i in range(PARTITIONS * 5):
            producer.send(topic_name, b"v%d" % i, partition=i % PARTITIONS)
        producer.flush(30)
        partitions = [TopicPartition(topic_name, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        got = _read(consumer, PARTITIONS * 5)
        assert got == {p: [0, 1, 2, 3, 4] for p in range(PARTITIONS)}
        # the broker holds the consumer's session with every partition (those with buffered data come and go)
        assert 0 < scrape(broker.host, broker.metrics_port).total(CACHED) <= PARTITIONS
        # new records in two partitions arrive through the incremental fetches
        for _ in range(3):
            producer.send(topic_name, b"late", partition=7)
        producer.send(topic_name, b"late", partition=31)
        producer.flush(30)
        assert _read(consumer, 4) == {7: [5, 6, 7], 31: [5]}
        # a seek is a moved position: named again, read again from there
        consumer.seek(TopicPartition(topic_name, 3), 2)
        assert _read(consumer, 3) == {3: [2, 3, 4]}
