"""Kafka transactions through Kafka's own clients (confluent-kafka/librdkafka) on the Kafka
listeners of a shared 3-broker cluster: committed and aborted transactions over several
partitions, read_committed and read_uncommitted consumers (librdkafka and ember's), fencing of a
zombie, and a consume-transform-produce step with send_offsets_to_transaction."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka_helpers import WAIT_S, create_topic

from txn_reads import ember_values, librdkafka_values

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def bootstrap(shared_cluster) -> str:
    return shared_cluster.kafka_bootstrap


def transactional(bootstrap: str, transactional_id: str, **config) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 20000, "linger.ms": 5, **config})
    producer.init_transactions(WAIT_S)
    return producer


def test_committed_transactions_are_read_and_aborted_ones_are_not(shared_cluster, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=3, replication_factor=3)
    producer = transactional(bootstrap, f"tx-{topic_name}")
    for round_ in range(4):
        producer.begin_transaction()
        for i in range(30):
            producer.produce(topic_name, value=b"r%d-%d" % (round_, i), partition=i % 3)
        producer.flush(WAIT_S)        # written before the abort (librdkafka purges what it has not sent)
        if round_ % 2:
            producer.abort_transaction(WAIT_S)
        else:
            producer.commit_transaction(WAIT_S)
    producer.flush(WAIT_S)
    committed = sorted(b"r%d-%d" % (r, i) for r in (0, 2) for i in range(30))
    assert sorted(librdkafka_values(bootstrap, topic_name, 3, "read_committed", 60)) == committed
    assert len(librdkafka_values(bootstrap, topic_name, 3, "read_uncommitted", 120)) == 120
    assert sorted(ember_values(shared_cluster.bootstrap, topic_name, 3, "read_committed")) == committed
    assert len(ember_values(shared_cluster.bootstrap, topic_name, 3, "read_uncommitted")) == 120


def test_an_open_transaction_is_invisible_to_read_committed_until_it_commits(shared_cluster, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=1, replication_factor=3)
    producer = transactional(bootstrap, f"tx-{topic_name}")
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic_name, value=b"open-%d" % i)
    producer.flush(WAIT_S)
    assert librdkafka_values(bootstrap, topic_name, 1, "read_committed", 1, timeout_s=3) == []
    assert len(librdkafka_values(bootstrap, topic_name, 1, "read_uncommitted", 10)) == 10
    producer.commit_transaction(WAIT_S)
    assert len(librdkafka_values(bootstrap, topic_name, 1, "read_committed", 10)) == 10


def test_a_new_instance_fences_the_old_one_and_aborts_its_open_transaction(shared_cluster, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=2, replication_factor=3)
    zombie = transactional(bootstrap, f"tx-{topic_name}")
    zombie.begin_transaction()
    zombie.produce(topic_name, value=b"zombie", partition=0)
    zombie.flush(WAIT_S)
    fresh = transactional(bootstrap, f"tx-{topic_name}")     # aborts the zombie's open transaction
    fresh.begin_transaction()
    fresh.produce(topic_name, value=b"fresh", partition=1)
    fresh.commit_transaction(WAIT_S)
    with pytest.raises(KafkaException) as fenced:
        zombie.produce(topic_name, value=b"late", partition=0)
        zombie.commit_transaction(WAIT_S)
    assert fenced.value.args[0].fatal() or fenced.value.args[0].code() in (
        KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    assert librdkafka_values(bootstrap, topic_name, 2, "read_committed", 1) == [b"fresh"]


def test_consume_transform_produce_commits_offsets_with_the_output(shared_cluster, bootstrap, topic_name):
    source, sink, group = f"{topic_name}-in", f"{topic_name}-out", f"{topic_name}-group"
    create_topic(bootstrap, source, partitions=2, replication_factor=3)
    create_topic(bootstrap, sink, partitions=2, replication_factor=3)
    feeder = Producer({"bootstrap.servers": bootstrap})
    for i in range(40):
        feeder.produce(source, value=b"%d" % i, partition=i % 2)
    feeder.flush(WAIT_S)

    def step(abort: bool) -> int:
        """One transaction over what the group has not consumed yet: doubled values out, offsets in."""
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        producer = transactional(bootstrap, f"tx-{topic_name}")
        try:
            consumer.assign([TopicPartition(source, p) for p in range(2)])
            got = []
            deadline = time.monotonic() + WAIT_S
            while len(got) < 40 and time.monotonic() < deadline:
                got += [m for m in consumer.consume(100, timeout=0.5) if m.error() is None]
            producer.begin_transaction()
            for message in got:
                producer.produce(sink, value=b"%d" % (2 * int(message.value())), partition=message.partition())
            producer.flush(WAIT_S)
            positions = consumer.position([TopicPartition(source, p) for p in range(2)])
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), WAIT_S)
            if abort:
                producer.abort_transaction(WAIT_S)
            else:
                producer.commit_transaction(WAIT_S)
            return len(got)
        finally:
            consumer.close()

    assert step(abort=True) == 40            # aborted: neither the output nor the offsets count
    assert step(abort=False) == 40           # so the next instance reads everything again
    out = librdkafka_values(bootstrap, sink, 2, "read_committed", 40)
    assert sorted(out, key=int) == [b"%d" % (2 * i) for i in range(40)]
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = check.committed([TopicPartition(source, p) for p in range(2)], timeout=WAIT_S)
        assert sorted(tp.offset for tp in committed) == [20, 20]
    finally:
        check.close()
