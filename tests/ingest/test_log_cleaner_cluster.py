"""Compacted topics on a real cluster: every replica's broker cleans its own log, Kafka clients and
ember's consumer read the cleaned log (offset gaps) to its end, keyless records are refused."""
from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient, NewTopic

from ember.client import Consumer, Producer, TopicPartition
from ember.log import checkpoint
from waiting import eventually

KEYS = 40
ROUNDS = 60
CLEANER = {"log.cleaner.backoff.ms": "100"}
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "16384", "min.cleanable.dirty.ratio": "0.01"}


def create(bootstrap: str, topic: str, config: dict[str, str], replication_factor: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, replication_factor, config=config)])[topic].result(30)


def kafka_read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """Every record from the beginning to the end, as a Kafka consumer sees them."""
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False,
                              "auto.offset.reset": "earliest", "enable.partition.eof": True})
    try:
        consumer.subscribe([topic])
        records = []
        for _ in range(600):
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    return records
                raise KafkaException(message.error())
            records.append((message.offset(), message.key(), message.value()))
        raise AssertionError(f"no end of {topic} within 300 s; read {len(records)}")
    finally:
        consumer.close()


def cleaned_everywhere(cluster, topic: str) -> bool:
    """Whether each replica's broker has cleaned its copy past the first segments."""
    points = [checkpoint.read_offset(Path(b.data_dir) / f"{topic}-0" / checkpoint.CLEANER_OFFSET) or 0
              for b in cluster.brokers.values()]
    return all(p > KEYS * ROUNDS // 2 for p in points)


def test_every_replica_compacts_and_consumers_read_the_latest_value_of_each_key(make_cluster, topic_name):
    cluster = make_cluster(brokers=3, config=CLEANER, metrics=True)
    create(cluster.kafka_bootstrap, topic_name, COMPACTED)
    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all", "linger.ms": 5})
    final = {}
    for r in range(ROUNDS):
        for k in range(KEYS):
            key, value = b"key-%d" % k, b"value-%d-%d" % (k, r) + bytes(50)
            producer.produce(topic_name, value, key)
            final[key] = value
        producer.flush(30)
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as ember:   # a batch of ember's own format too
        for k in range(0, KEYS, 2):
            key, value = b"key-%d" % k, b"ember-%d" % k
            ember.send(topic_name, value=value, key=key)
            final[key] = value
        ember.flush(30)
    producer.produce(topic_name, b"x" * 20_000, b"roll")   # rolls the segment: the last updates become cleanable
    producer.flush(30)
    final[b"roll"] = b"x" * 20_000
    written = KEYS * ROUNDS + KEYS // 2 + 1

    eventually(lambda: cleaned_everywhere(cluster, topic_name), "every replica to clean its log", timeout_s=90)
    records = kafka_read_all(cluster.kafka_bootstrap, topic_name)
    assert len(records) < written / 2
    assert [o for o, _, _ in records] == sorted({o for o, _, _ in records})
    seen = {}
    for _, key, value in records:
        seen[key] = value
    assert seen == final

    with Consumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False) as consumer:
        partition = TopicPartition(topic_name, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        ember_seen, read = {}, 0
        for _ in range(200):
            batches = consumer.poll_batches(timeout_ms=500)
            for batch in batches.values():
                read += batch.num_rows
                for key, value in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist()):
                    ember_seen[key] = value
            if consumer.position(partition) >= written:
                break
        assert consumer.position(partition) == written and read == len(records) and ember_seen == final

    metrics = urllib.request.urlopen(f"http://{next(iter(cluster.metrics_addresses.values()))}/metrics", timeout=10)
    text = metrics.read().decode()
    cleanings = [line for line in text.splitlines() if line.startswith("ember_log_logcleaner_cleanings_total")]
    assert cleanings and float(cleanings[0].split()[-1]) >= 1, cleanings


def test_a_compacted_topic_refuses_keyless_records_with_kafkas_error(make_cluster, topic_name):
    cluster = make_cluster(brokers=1, config=CLEANER)
    create(cluster.kafka_bootstrap, topic_name, COMPACTED, replication_factor=1)
    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all", "retries": 0})
    errors = []
    producer.produce(topic_name, b"no key", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(30)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD, errors
    with Producer(bootstrap_servers=cluster.bootstrap) as ember:
        with pytest.raises(Exception, match="without key"):
            ember.send(topic_name, value=b"no key").get(30)
