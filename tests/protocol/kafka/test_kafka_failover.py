"""Kafka clients across a leader failure on a real cluster: an idempotent acks=all producer's
retries (same producer id and sequence numbers) land exactly once, in order, while the partition's
leader broker is SIGKILLed mid-stream; afterwards OffsetForLeaderEpoch tells where each leader's
epoch ended."""
from __future__ import annotations

import signal
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kafka_helpers import WAIT_S, admin, consume, create_topic, produce, records
from kafka_wire import KafkaWire, partition_leader
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)

from ember.errors import ErrorCode

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


def epoch_ends(address: str, topic: str, current_epoch: int, epochs: list[int]) -> list[tuple[int, int, int]]:
    """OffsetForLeaderEpoch v4 for partition 0, as a consumer asks: (error, epoch, end offset) per epoch."""
    with KafkaWire(address) as wire:
        response = wire.call(OffsetForLeaderEpochRequest(replica_id=-1, topics=(OffsetForLeaderTopic(
            topic=topic, partitions=tuple(OffsetForLeaderPartition(partition=0, current_leader_epoch=current_epoch,
                                                                   leader_epoch=epoch) for epoch in epochs)),)))
    return [(p.error_code.value, p.leader_epoch, p.end_offset) for p in response.topics[0].partitions]


def test_offset_for_leader_epoch_tells_where_each_leaders_epoch_ended(make_cluster, topic_name):
    """The leader answers from its leader-epoch cache: the killed leader's epoch ended where the
    new leader's writes began, the current epoch ends at the log end; a stale current epoch is
    fenced and a follower refuses (what the Java consumer's position validation relies on)."""
    cluster = make_cluster(brokers=3, config=FAST)
    bootstrap = cluster.kafka_bootstrap
    create_topic(bootstrap, topic_name, replication_factor=3)
    produce(bootstrap, topic_name, records(10), acks="all")
    first_leader, first_epoch, _ = partition_leader(bootstrap.split(",")[0], topic_name)
    cluster.kill_broker(first_leader, signal.SIGKILL)
    live = next(b.kafka_address for i, b in cluster.brokers.items() if i != first_leader)
    deadline = time.monotonic() + WAIT_S
    while partition_leader(live, topic_name)[0] in (first_leader, -1):
        assert time.monotonic() < deadline, f"no new leader for {topic_name}-0 within {WAIT_S}s"
        time.sleep(0.2)
    produce(live, topic_name, records(5), acks="all")
    leader, epoch, brokers = partition_leader(live, topic_name)
    assert epoch > first_epoch
    assert epoch_ends(brokers[leader], topic_name, epoch, [first_epoch, epoch]) == [(0, first_epoch, 10), (0, epoch, 15)]
    assert epoch_ends(brokers[leader], topic_name, first_epoch, [epoch]) == [(ErrorCode.FENCED_LEADER_EPOCH, -1, -1)]
    follower = next(b for b in brokers if b not in (leader, first_leader))
    assert epoch_ends(brokers[follower], topic_name, epoch, [epoch]) == [(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1)]
