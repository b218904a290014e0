"""Replication on real clusters: acks=all durability on every replica, leader failover without
loss or duplicates, ISR shrink and expand, min.insync.replicas, truncation by leader epoch.

Invariants, never timings: every acknowledged acks=all record is read back exactly once, in
order; the high watermark consumers see never goes back; every in-sync replica holds the
same records on disk.
"""
from __future__ import annotations

import signal
import time

import pytest
from replication_helpers import (
    FAST,
    HighWatermarkWatch,
    consume_values,
    create_topic,
    disk_values,
    partition_meta,
    produce,
    wait_for_isr,
)

from ember.client import Producer
from ember.errors import ErrorCode, OffsetOutOfRange
from ember.log.reader import read_offset_range
from waiting import eventually

pytestmark = pytest.mark.integration


def test_acks_all_records_are_on_every_replica_disk(shared_cluster, topic_name) -> None:
    create_topic(shared_cluster.bootstrap, topic_name, partitions=2)
    for partition in (0, 1):
        assert set(wait_for_isr(shared_cluster, topic_name, {1, 2, 3}, partition)["isr"]) == {1, 2, 3}
    with Producer(shared_cluster.bootstrap, acks="all") as producer:
        futures = [producer.send(topic_name, b"%d" % i, partition=i % 2) for i in range(3000)]
        producer.flush(60)
        offsets = [future.get(10).offset for future in futures]
    # Acknowledged means written by every ISR member: read each broker's files right away.
    for partition in (0, 1):
        assert offsets[partition::2] == list(range(1500))
        expected = [b"%d" % i for i in range(partition, 3000, 2)]
        for broker_id in shared_cluster.brokers:
            assert disk_values(shared_cluster, broker_id, topic_name, 1500, partition) == expected


def test_leader_kill_keeps_every_acknowledged_record_once(make_cluster, topic_name) -> None:
    cluster = make_cluster(brokers=3, config=FAST)
    create_topic(cluster.bootstrap, topic_name)
    old_leader = wait_for_isr(cluster, topic_name, {1, 2, 3})["leader"]
    with HighWatermarkWatch(cluster, topic_name) as watch:
        with Producer(cluster.bootstrap, acks="all", request_timeout_ms=5000, retry_backoff_ms=100,
                      delivery_timeout_ms=120000) as producer:
            futures = []
            for i in range(4000):
                futures.append(producer.send(topic_name, b"%d" % i))
                if i == 1500:
                    producer.flush(30)
                    eventually(lambda: watch.sampled(lambda leader: leader == old_leader), "a sample of the leader")
                    cluster.kill_broker(old_leader, signal.SIGKILL)
            producer.flush(120)
        acked = [future.get(0).offset for future in futures]   # raises if any record failed
        consumed = consume_values(cluster.bootstrap, topic_name, 4000)
        eventually(lambda: watch.sampled(lambda leader: leader != old_leader), "a sample of the new leader")
    assert [value for _, value in consumed] == [b"%d" % i for i in range(4000)]   # none lost or duplicated, in order
    assert [offset for offset, _ in consumed] == acked                             # where the acks said
    assert watch.high_watermarks == sorted(watch.high_watermarks), "the high watermark went back"
    meta = partition_meta(cluster, topic_name)
    assert meta is not None and meta["leader"] not in (old_leader, -1) and meta["leader_epoch"] >= 1

    # The old leader comes back, truncates whatever it had beyond the new leader's log and
    # rejoins the ISR with exactly the same records.
    cluster.restart_broker(old_leader)
    wait_for_isr(cluster, topic_name, {1, 2, 3})
    for broker_id in cluster.brokers:
        assert disk_values(cluster, broker_id, topic_name, 4000) == [b"%d" % i for i in range(4000)]


def test_restarted_leader_truncates_its_divergent_tail_by_epoch(make_cluster, topic_name) -> None:
    # Short follower long polls: once frozen, a follower has no fetch parked at the leader.
    cluster = make_cluster(brokers=3, config={**FAST, "zookeeper.session.timeout.ms": "3000",
                                              "replica.fetch.wait.max.ms": "100"})
    create_topic(cluster.bootstrap, topic_name)
    old_leader = wait_for_isr(cluster, topic_name, {1, 2, 3})["leader"]
    followers = [b for b in cluster.brokers if b != old_leader]
    committed = [b"a%d" % i for i in range(10)]
    assert produce(cluster.brokers[old_leader].address, topic_name, committed, acks=-1)["error_code"] == 0

    # Records only the old leader gets (acks=1 while its followers are frozen), then it dies.
    # The pause outlasts the followers' parked fetches (100 ms), else the leader would still push
    # the records into their sockets; it stays well inside the session timeout.
    for broker_id in followers:
        cluster.pause_broker(broker_id)
    try:
        time.sleep(0.5)
        lost = [b"lost%d" % i for i in range(5)]
        assert produce(cluster.brokers[old_leader].address, topic_name, lost, acks=1)["error_code"] == 0
        cluster.kill_broker(old_leader, signal.SIGKILL)
    finally:
        for broker_id in followers:
            cluster.resume_broker(broker_id)

    new_leader = wait_for_isr(cluster, topic_name, set(followers), ask=followers)["leader"]
    newer = [b"b%d" % i for i in range(10)]
    assert produce(cluster.brokers[new_leader].address, topic_name, newer, acks=-1)["error_code"] == 0

    cluster.restart_broker(old_leader)
    wait_for_isr(cluster, topic_name, {1, 2, 3})
    for broker_id in cluster.brokers:
        assert disk_values(cluster, broker_id, topic_name, 20) == committed + newer
        with pytest.raises(OffsetOutOfRange):   # and nothing after them: the lost tail is gone
            list(read_offset_range(cluster.brokers[broker_id].data_dir / f"{topic_name}-0", 20, 21))


def test_paused_follower_leaves_the_isr_and_rejoins(make_cluster, topic_name) -> None:
    # A long session keeps the frozen follower registered: only the leader's lag check drops it.
    cluster = make_cluster(brokers=3, config={**FAST, "zookeeper.session.timeout.ms": "30000",
                                              "replica.lag.time.max.ms": "1500"})
    create_topic(cluster.bootstrap, topic_name)
    leader = wait_for_isr(cluster, topic_name, {1, 2, 3})["leader"]
    address = cluster.brokers[leader].address
    paused = next(b for b in cluster.brokers if b != leader)
    cluster.pause_broker(paused)
    try:
        # acks=all completes once the frozen follower is out of the ISR (2 = min.insync.replicas left).
        assert produce(address, topic_name, [b"while-paused"], acks=-1)["error_code"] == 0
        wait_for_isr(cluster, topic_name, {1, 2, 3} - {paused}, ask=[leader])
    finally:
        cluster.resume_broker(paused)
    assert produce(address, topic_name, [b"after"], acks=-1)["error_code"] == 0
    wait_for_isr(cluster, topic_name, {1, 2, 3}, ask=[leader])   # the resumed broker's cache is stale
    assert disk_values(cluster, paused, topic_name, 2) == [b"while-paused", b"after"]


def test_min_insync_replicas_refuses_acks_all_without_enough_replicas(make_cluster, topic_name) -> None:
    cluster = make_cluster(brokers=3, config=FAST)
    create_topic(cluster.bootstrap, topic_name)
    leader = wait_for_isr(cluster, topic_name, {1, 2, 3})["leader"]
    for broker_id in [b for b in cluster.brokers if b != leader]:
        cluster.kill_broker(broker_id, signal.SIGKILL)
    wait_for_isr(cluster, topic_name, {leader})
    address = cluster.brokers[leader].address
    assert produce(address, topic_name, [b"x"], acks=-1)["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
    assert produce(address, topic_name, [b"x"], acks=1)["error_code"] == 0
