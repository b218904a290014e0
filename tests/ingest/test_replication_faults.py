"""Replication edge paths on real clusters: an ISR that shrinks while acks=all waits, a follower
that fell below the leader's log start, a leader whose ZooKeeper session expires, and an
idempotent producer retrying at a new leader.

Invariants, never timings: nothing acknowledged is lost, nothing retried is written twice, a
leader that lost its session stops taking writes.
"""
from __future__ import annotations

import signal

import pytest
from replication_helpers import (
    FAST,
    call,
    create_topic,
    disk_values,
    partition_meta,
    produce,
    produce_batch,
    wait_for_isr,
)

from ember.errors import ErrorCode, OffsetOutOfRange
from ember.log.reader import read_offset_range
from ember.log.recovery import segment_bases
from ember.record import build_batch
from ember.wire.api_keys import ApiKey
from waiting import eventually

pytestmark = pytest.mark.integration


def earliest_offset(address: str, topic: str) -> int | None:
    body = {"partitions": [{"topic": topic, "partition": 0, "timestamp": -2}]}
    item = call(address, ApiKey.LIST_OFFSETS, body, timeout_s=5)["partitions"][0]
    return item["offset"] if item["error_code"] == 0 else None


def test_isr_shrinking_during_an_acks_all_wait_answers_not_enough_replicas_after_append(make_cluster, topic_name):
    # A long session keeps the frozen followers registered: only the leader's lag check drops them.
    cluster = make_cluster(brokers=3, config={**FAST, "zookeeper.session.timeout.ms": "30000",
                                              "replica.lag.time.max.ms": "1500"})
    create_topic(cluster.bootstrap, topic_name, min_insync=2)
    leader = wait_for_isr(cluster, topic_name, {1, 2, 3})["leader"]
    address = cluster.brokers[leader].address
    followers = [b for b in cluster.brokers if b != leader]
    for broker_id in followers:
        cluster.pause_broker(broker_id)
    try:
        # Written with 3 in sync; both followers then leave the ISR before fetching it.
        assert produce(address, topic_name, [b"written"], acks=-1)["error_code"] == \
            ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert produce(address, topic_name, [b"refused"], acks=-1)["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
    finally:
        for broker_id in followers:
            cluster.resume_broker(broker_id)
    wait_for_isr(cluster, topic_name, {1, 2, 3}, ask=[leader])
    # Metadata shows the ISR a moment before the leader's partition applies it: NOT_ENOUGH_REPLICAS
    # (refused before writing, as a client retries it) is retried; nothing else is.
    answer = eventually(lambda: (code := produce(address, topic_name, [b"after"], acks=-1)["error_code"])
                        != ErrorCode.NOT_ENOUGH_REPLICAS and (code,), "an answer other than NOT_ENOUGH_REPLICAS")
    assert answer == (0,)
    for broker_id in cluster.brokers:   # the record was written, not refused, so every replica has it
        assert disk_values(cluster, broker_id, topic_name, 2) == [b"written", b"after"]


def test_follower_below_the_leaders_log_start_restarts_its_log_there(make_cluster, topic_name):
    cluster = make_cluster(brokers=2, config={**FAST, "log.retention.check.interval.ms": "200"})
    # Tiny segments and retention: the leader's log start moves on while the follower is down.
    create_topic(cluster.bootstrap, topic_name, replication_factor=2, min_insync=1,
                 **{"segment.bytes": "2048", "retention.bytes": "4096"})
    meta = wait_for_isr(cluster, topic_name, {1, 2})
    leader, follower = meta["leader"], next(b for b in (1, 2) if b != meta["leader"])
    address = cluster.brokers[leader].address
    assert produce(address, topic_name, [b"early"], acks=-1)["error_code"] == 0
    cluster.kill_broker(follower, signal.SIGKILL)
    wait_for_isr(cluster, topic_name, {leader})
    values = [b"v%03d" % i for i in range(60)]
    for value in values:
        assert produce(address, topic_name, [value], acks=1)["error_code"] == 0
    leader_start = eventually(lambda: (start := earliest_offset(address, topic_name)) and start > 1 and start,
                              "retention to move the leader's log start past the follower's log end")

    cluster.restart_broker(follower)
    wait_for_isr(cluster, topic_name, {1, 2})
    assert produce(address, topic_name, [b"last"], acks=-1)["error_code"] == 0
    directory = cluster.brokers[follower].data_dir / f"{topic_name}-0"
    assert min(segment_bases(directory)) >= leader_start      # restarted at the leader's log start
    tail = [v for batch in read_offset_range(directory, len(values), len(values) + 2)
            for v in batch.column("value").to_pylist()]
    assert tail == [values[-1], b"last"]


def test_leader_whose_zookeeper_session_expires_stops_leading(make_cluster, topic_name):
    cluster = make_cluster(brokers=3, config=FAST)
    create_topic(cluster.bootstrap, topic_name)
    before = wait_for_isr(cluster, topic_name, {1, 2, 3})
    old = before["leader"]
    address = cluster.brokers[old].address
    assert produce(address, topic_name, [b"committed"], acks=-1)["error_code"] == 0

    # Frozen past its 2 s session timeout: ZooKeeper expires the session and the controller
    # elects another leader. Resumed, the old leader learns it and must stop taking writes.
    others = [b for b in cluster.brokers if b != old]
    cluster.pause_broker(old)
    try:
        after = wait_for_isr(cluster, topic_name, set(others), ask=others)
    finally:
        cluster.resume_broker(old)
    assert after["leader"] != old and after["leader_epoch"] > before["leader_epoch"]
    stale_codes = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)
    eventually(lambda: produce(address, topic_name, [b"stale"], acks=-1)["error_code"] in stale_codes,
               "the old leader to refuse writes")
    assert produce(cluster.brokers[after["leader"]].address, topic_name, [b"new"], acks=-1)["error_code"] == 0

    # It re-registers with a new session, follows the new leader, and keeps no stale write.
    wait_for_isr(cluster, topic_name, {1, 2, 3})
    for broker_id in cluster.brokers:
        assert disk_values(cluster, broker_id, topic_name, 2) == [b"committed", b"new"]
    meta = partition_meta(cluster, topic_name)
    assert meta is not None and meta["leader"] == after["leader"]


def test_idempotent_retry_at_a_new_leader_is_not_written_twice(make_cluster, topic_name):
    cluster = make_cluster(brokers=3, config=FAST)
    create_topic(cluster.bootstrap, topic_name)
    old = wait_for_isr(cluster, topic_name, {1, 2, 3})["leader"]
    producer_id = call(cluster.brokers[old].address, ApiKey.INIT_PRODUCER_ID, {})["producer_id"]
    batches = [build_batch([(None, b"b%d" % i)], producer_id=producer_id, producer_epoch=0, base_sequence=i)
               for i in range(4)]
    for i, batch in enumerate(batches[:3]):
        assert produce_batch(cluster.brokers[old].address, topic_name, batch, acks=-1)["base_offset"] == i

    # The leader dies before its last answer reached the producer, which retries at the new
    # leader: its producer state, replicated with the batches, recognises the retries.
    cluster.kill_broker(old, signal.SIGKILL)
    others = [b for b in cluster.brokers if b != old]
    new = cluster.brokers[wait_for_isr(cluster, topic_name, set(others), ask=others)["leader"]].address
    for i in (2, 1):
        retried = produce_batch(new, topic_name, batches[i], acks=-1)
        assert (retried["error_code"], retried["base_offset"]) == (0, i)
    assert produce_batch(new, topic_name, batches[3], acks=-1)["base_offset"] == 3
    for broker_id in others:
        assert disk_values(cluster, broker_id, topic_name, 4) == [b"b0", b"b1", b"b2", b"b3"]
    with pytest.raises(OffsetOutOfRange):   # and nothing after them
        disk_values(cluster, others[0], topic_name, 5)
