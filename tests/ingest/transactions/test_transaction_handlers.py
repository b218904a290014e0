"""Kafka transactions through Kafka's protocol with clients nobody here wrote, on private clusters:
Kafka 4.2's Java client through its own tools (TransactionalMessageCopier's consume-transform-produce
loop aborting at random, ``kafka-transactions`` listing and describing), a commit completing after
its coordinator's broker is killed, and kafka-python's transactional producer. confluent-kafka's
commits, aborts, fencing and send_offsets_to_transaction are in
tests/protocol/kafka/test_kafka_transactions.py (shared cluster)."""
from __future__ import annotations

import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.integration

WAIT_S = 30.0


def create_topic(bootstrap: str, name: str, partitions: int, replication_factor: int) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap})
    futures = client.create_topics([NewTopic(name, partitions, replication_factor)], operation_timeout=WAIT_S)
    futures[name].result(timeout=WAIT_S)


def transactional(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5,
                         "transaction.timeout.ms": 30000})
    producer.init_transactions(WAIT_S)
    return producer


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str, expected: int,
             group: str | None = None) -> list[bytes]:
    """Every value of the topic (read_committed or read_uncommitted), polled until ``expected``
    arrived and a further second brought nothing."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group or f"reader-{uuid.uuid4().hex}",
                         "isolation.level": isolation, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        quiet_since = None
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                if len(values) >= expected:
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since > 1.0:
                        break
                continue
            values.append(message.value())
        return values
    finally:
        consumer.close()


def java_tool(main_class: str, *args: str, timeout_s: float = 120.0) -> str:
    """Run one of Kafka's own tools (the ``kafka-tools`` jars ``make setup`` fetched); its stdout."""
    from ember.jars import KAFKA_TOOLS

    done = subprocess.run(["java", "-Xmx256m", "-cp", KAFKA_TOOLS.classpath, main_class, *args],
                          capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, f"{main_class} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_java_client_copies_exactly_once_and_kafka_transactions_describes(make_cluster) -> None:
    """Kafka's TransactionalMessageCopier (Java producer and read_committed consumer, offsets sent
    with the group's metadata, transactions aborted at random and redone) copies every record once;
    kafka-transactions lists and describes its transactional id."""
    cluster = make_cluster(brokers=3)
    bootstrap = cluster.kafka_bootstrap
    source, sink = f"jin-{uuid.uuid4().hex[:8]}", f"jout-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, source, partitions=1, replication_factor=2)
    create_topic(bootstrap, sink, partitions=3, replication_factor=2)
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(300):
        plain.produce(source, value=f"r{i}".encode(), partition=0)
    assert plain.flush(WAIT_S) == 0
    transactional_id = f"copier-{source}"
    java_tool("org.apache.kafka.tools.TransactionalMessageCopier", "--broker-list", bootstrap,
              "--input-topic", source, "--input-partition", "0", "--output-topic", sink,
              "--consumer-group", f"g-{source}", "--transactional-id", transactional_id,
              "--transaction-size", "40", "--enable-random-aborts", "--use-group-metadata", timeout_s=180)
    copied = read_all(bootstrap, sink, 3, "read_committed", 300)
    assert sorted(copied) == sorted(f"r{i}".encode() for i in range(300))

    listed = java_tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap, "list")
    assert transactional_id in listed
    described = java_tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap,
                          "describe", "--transactional-id", transactional_id)
    assert transactional_id in described and ("CompleteCommit" in described or "Empty" in described)


def test_a_transaction_commits_after_its_coordinators_broker_is_killed(make_cluster) -> None:
    """The coordinator's broker dies while a transaction is open: the broker that coordinates the
    id next loads it from ZooKeeper, and the producer's commit (retried there) writes the markers,
    also to partitions whose leader died with it."""
    from ember.groups.coordinator import coordinator_id

    cluster = make_cluster(brokers=3, config={"zookeeper.session.timeout.ms": "2000",
                                              "replica.fetch.backoff.ms": "200"})
    bootstrap = cluster.kafka_bootstrap
    topic = f"fail-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=6, replication_factor=3)
    transactional_id = f"tx-{topic}"
    producer = transactional(bootstrap, transactional_id)
    producer.begin_transaction()
    for i in range(60):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 6)
    assert producer.flush(WAIT_S) == 0
    cluster.kill_broker(coordinator_id(transactional_id, [1, 2, 3]))
    producer.commit_transaction(2 * WAIT_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"after", partition=1)
    producer.commit_transaction(WAIT_S)
    committed = read_all(bootstrap, topic, 6, "read_committed", 61)
    assert sorted(committed) == sorted([f"v{i}".encode() for i in range(60)] + [b"after"])


def test_kafka_python_commits_and_aborts(make_cluster) -> None:
    """kafka-python's transactional producer (its own versions of the transaction APIs)."""
    from kafka import KafkaProducer

    cluster = make_cluster(brokers=1)
    bootstrap = cluster.kafka_bootstrap
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=2, replication_factor=1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"tx-{topic}")
    try:
        producer.init_transactions()
        for commit in (True, False, True):
            producer.begin_transaction()
            for i in range(10):
                producer.send(topic, value=f"{commit}-{i}".encode(), partition=i % 2)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(timeout=WAIT_S)
    committed = read_all(bootstrap, topic, 2, "read_committed", 20)
    assert sorted(committed) == sorted([f"True-{i}".encode() for i in range(10)] * 2)
