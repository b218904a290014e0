"""A consume-transform-produce loop with ember's transactional Producer (send_offsets_to_transaction)
on a private 3-broker cluster copies every record exactly once while, mid-transaction, the broker
coordinating its transactional id is killed, then (after it is back) another broker: a call that
times out is called again, an abortable error aborts and rewinds to the committed offsets. The
output, read read_committed by ember's consumer and by its Spark source, holds each record once."""
from __future__ import annotations

import time
from typing import Callable

import pytest

from ember.client import Admin, Consumer, OffsetAndMetadata, Producer, TopicPartition
from ember.client.transaction_manager import FATAL_ERRORS
from ember.errors import EmberError, KafkaTimeoutError
from ember.launcher.local import LocalCluster
from txn_failover import coordinator_of
from txn_reads import ember_values, spark_values

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TOTAL = 600
WAIT_S = 180.0


def retried(call: Callable[[], None], deadline: float) -> None:
    """A transaction call that timed out (a broker is down) is called again, as Kafka allows."""
    while True:
        try:
            return call()
        except KafkaTimeoutError:
            if time.monotonic() > deadline:
                raise


def copy_exactly_once(cluster: LocalCluster, source: str, sink: str, transactional_id: str,
                      mid_transaction: Callable[[int], None]) -> None:
    """Copy ``source`` to ``sink`` transaction by transaction until every offset is committed;
    ``mid_transaction(step)`` runs after a transaction's records were sent, before it commits."""
    tps = [TopicPartition(source, p) for p in range(2)]
    deadline = time.monotonic() + WAIT_S
    with Consumer(bootstrap_servers=cluster.bootstrap, group_id=f"{transactional_id}-group",
                  isolation_level="read_committed", enable_auto_commit=False, auto_offset_reset="earliest",
                  request_timeout_ms=10000) as consumer, \
            Producer(bootstrap_servers=cluster.bootstrap, transactional_id=transactional_id,
                     transaction_timeout_ms=60000, request_timeout_ms=5000, delivery_timeout_ms=60000,
                     max_block_ms=20000) as producer:
        consumer.assign(tps)
        producer.init_transactions()
        step = 0
        while sum(consumer.committed(tp) or 0 for tp in tps) < TOTAL:
            assert time.monotonic() < deadline, "the copy did not finish in time"
            batch = consumer.poll(timeout_ms=500, max_records=25)
            if not batch:
                continue
            step += 1
            producer.begin_transaction()
            try:
                for tp, records in batch.items():
                    for record in records:
                        producer.send(sink, record.value, key=record.key, partition=tp.partition)
                mid_transaction(step)
                offsets = {tp: OffsetAndMetadata(records[-1].offset + 1) for tp, records in batch.items()}
                retried(lambda: producer.send_offsets_to_transaction(offsets, consumer.group_metadata()), deadline)
                retried(producer.commit_transaction, deadline)
            except FATAL_ERRORS:
                raise
            except EmberError:
                retried(producer.abort_transaction, deadline)
                for tp in tps:
                    consumer.seek(tp, consumer.committed(tp) or 0)


def test_consume_transform_produce_is_exactly_once_while_brokers_die(make_cluster, spark):
    cluster = make_cluster(brokers=3)
    source, sink, transactional_id = "ctp-in", "ctp-out", "ctp-copier"
    with Admin(bootstrap_servers=cluster.bootstrap) as admin:
        for topic in (source, sink):
            admin.create_topic(topic, partitions=2, replication_factor=3)
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as plain:
        for i in range(TOTAL):
            plain.send(source, b"%04d" % i, key=b"%d" % (i % 7))
        plain.flush(60)
    victims: list[int] = []

    def mid_transaction(step: int) -> None:
        if step == 4:                   # the coordinator of the transactional id, mid-transaction
            victims.append(coordinator_of(cluster, transactional_id))
            cluster.kill_broker(victims[-1])
        elif step == 8:
            cluster.restart_broker(victims[-1])
        elif step == 12:                # then another broker (a leader of some partitions)
            victims.append(next(b for b in sorted(cluster.brokers) if b != victims[0]))
            cluster.kill_broker(victims[-1])
        elif step == 16:
            cluster.restart_broker(victims[-1])

    copy_exactly_once(cluster, source, sink, transactional_id, mid_transaction)
    assert len(victims) == 2
    want = [b"%04d" % i for i in range(TOTAL)]
    assert sorted(ember_values(cluster.bootstrap, sink, 2, "read_committed")) == want     # none lost, none twice
    assert sorted(spark_values(spark, cluster.bootstrap, sink)) == want                   # nor in Spark's read
