"""Kafka consumers in groups (the classic protocol: JoinGroup, SyncGroup with the leader's
assignment, Heartbeat, LeaveGroup) against the shared group coordinator: partitions are shared
without overlap, a leaving member's partitions move to the others, and the group is the one
``ember groups describe`` shows."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka_helpers import WAIT_S, create_topic, produce, records

from ember.client import Admin

pytestmark = pytest.mark.integration


def settle(consumers: list[Consumer], seen: set[tuple[int, int]], done) -> None:
    """Poll every consumer (collecting (partition, offset)) until ``done()``; bounded."""
    deadline = time.monotonic() + 2 * WAIT_S
    while not done():
        assert time.monotonic() < deadline, "the group did not settle in time"
        for consumer in consumers:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.add((message.partition(), message.offset()))


def test_subscribed_consumers_share_partitions_and_take_over_when_one_leaves(shared_cluster, topic_name):
    bootstrap = shared_cluster.kafka_bootstrap
    create_topic(bootstrap, topic_name, partitions=4)
    produce(bootstrap, topic_name, records(40, partitions=4))
    group = f"g-{topic_name}"
    config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "session.timeout.ms": 10000, "heartbeat.interval.ms": 500}
    first, second = Consumer(config), Consumer(config)
    try:
        for consumer in (first, second):
            consumer.subscribe([topic_name])
        seen: set[tuple[int, int]] = set()
        settle([first, second], seen, lambda: len(first.assignment()) == 2 and len(second.assignment()) == 2)
        assert {tp.partition for tp in first.assignment()} | {tp.partition for tp in second.assignment()} == set(range(4))
        settle([first, second], seen, lambda: len(seen) == 40)
        # a member of the current generation commits (explicit offsets: what this member consumed
        # itself depends on how the reads raced the rebalance)
        first.commit(offsets=[TopicPartition(topic_name, tp.partition, 10) for tp in first.assignment()],
                     asynchronous=False)
        with Admin(shared_cluster.bootstrap) as admin:
            described = admin.describe_group(group)
        assert described.state == "Stable" and len(described.members) == 2
        assert sorted(tp.partition for m in described.members for tp in m.assignment) == [0, 1, 2, 3]
        second.close()
        settle([first], seen, lambda: len(first.assignment()) == 4)
        first.commit(offsets=[TopicPartition(topic_name, p, 10) for p in range(4)], asynchronous=False)
        assert [tp.offset for tp in first.committed(first.assignment(), timeout=WAIT_S)] == [10] * 4
    finally:
        first.close()
        second.close()


def test_kafka_python_and_librdkafka_consumers_share_one_group(shared_cluster, topic_name):
    from kafka import KafkaConsumer

    bootstrap = shared_cluster.kafka_bootstrap
    create_topic(bootstrap, topic_name, partitions=2)
    produce(bootstrap, topic_name, records(20, partitions=2))
    group = f"g-{topic_name}"
    rdkafka = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                        "enable.auto.commit": False, "partition.assignment.strategy": "range"})
    python = KafkaConsumer(topic_name, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                           enable_auto_commit=False, heartbeat_interval_ms=500)
    try:
        rdkafka.subscribe([topic_name])
        seen: set[tuple[int, int]] = set()
        deadline = time.monotonic() + 2 * WAIT_S
        while not (len(rdkafka.assignment()) == 1 and len(python.assignment()) == 1 and len(seen) == 20):
            assert time.monotonic() < deadline, "the mixed group did not settle and read everything in time"
            message = rdkafka.poll(0.2)
            if message is not None and message.error() is None:
                seen.add((message.partition(), message.offset()))
            for batch in python.poll(timeout_ms=200).values():
                seen.update((r.partition, r.offset) for r in batch)
        assert {tp.partition for tp in rdkafka.assignment()} | {tp.partition for tp in python.assignment()} == {0, 1}
        python.commit()
    finally:
        python.close()
        rdkafka.close()
