"""A Kafka client's idempotent acks=all producer across a leader failure on a real cluster: the
partition's leader broker is SIGKILLed mid-stream, another replica takes over, and the producer's
retries (same producer id and sequence numbers) land exactly once, in order."""
from __future__ import annotations

import signal
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kafka_helpers import WAIT_S, admin, consume, create_topic

pytestmark = pytest.mark.integration

#: Dead brokers leave ZooKeeper within 2 s; followers retry a not-yet-ready leader after 200 ms.
FAST = {"zookeeper.session.timeout.ms": "2000", "replica.fetch.backoff.ms": "200"}


def leader_of(client: AdminClient, topic: str, partition: int) -> int:
    return client.list_topics(topic, timeout=WAIT_S).topics[topic].partitions[partition].leader


def test_idempotent_acks_all_producer_loses_and_duplicates_nothing_when_the_leader_is_killed(make_cluster, topic_name):
    cluster = make_cluster(brokers=3, config=FAST)
    bootstrap = cluster.kafka_bootstrap
    create_topic(bootstrap, topic_name, partitions=2, replication_factor=3, config={"min.insync.replicas": "2"})
    client = admin(bootstrap)
    leader = leader_of(client, topic_name, 0)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "delivery.timeout.ms": 120_000})
    reports: dict[int, object] = {}
    sent = 0

    def send(count: int) -> None:
        nonlocal sent
        for _ in range(count):
            producer.produce(topic_name, value=str(sent).encode(), partition=sent % 2,
                             on_delivery=lambda err, msg, i=sent: reports.__setitem__(i, err or msg.offset()))
            sent += 1
            producer.poll(0.001)   # paced, so records are in flight when the leader dies

    send(600)
    cluster.kill_broker(leader, signal.SIGKILL)
    deadline = time.monotonic() + WAIT_S   # keep producing until another broker leads partition 0
    while leader_of(client, topic_name, 0) in (leader, -1):
        assert time.monotonic() < deadline, f"no new leader for {topic_name}-0 within {WAIT_S}s"
        send(50)
    send(600)
    assert producer.flush(WAIT_S * 2) == 0, "records left undelivered"

    errors = {i: r for i, r in reports.items() if not isinstance(r, int)}
    assert len(reports) == sent and not errors, f"{len(errors)} delivery error(s), e.g. {next(iter(errors.items()), None)}"
    read = consume(bootstrap, topic_name, {0: 0, 1: 0}, sent)
    for partition in (0, 1):   # each value exactly once, in the order sent, at the offset its report gave
        got = [(offset, int(value)) for p, offset, _, value, _, _ in read if p == partition]
        assert [v for _, v in got] == list(range(partition, sent, 2))
        assert all(reports[v] == offset for offset, v in got)
