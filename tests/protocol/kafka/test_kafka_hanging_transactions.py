"""A hanging transaction and Kafka's own tool for it: a transaction whose coordinator lost its state
(its ZooKeeper node deleted while its broker was down) holds the partition's last stable offset
back for good; ``kafka-transactions.sh`` shows it with ``describe-producers`` and
``find-hanging`` and ends it with ``abort --start-offset`` (DescribeProducers, then
WriteTxnMarkers at the partition leader), after which read_committed readers move on."""
from __future__ import annotations

from urllib.parse import quote

import pytest
from confluent_kafka import Producer
from kafka_helpers import create_topic, run_tool
from kazoo.client import KazooClient

from ember.client import Consumer, TopicPartition
from ember.groups.coordinator import coordinator_id
from ember.zk.zk_paths import CHROOT, TRANSACTIONS
from waiting import eventually

pytestmark = pytest.mark.integration

TOOL = "org.apache.kafka.tools.TransactionsCommand"


def stable_and_high(cluster, topic: str) -> tuple[int, int]:
    tp = TopicPartition(topic, 0)
    ends = []
    for isolation in ("read_committed", "read_uncommitted"):
        with Consumer(bootstrap_servers=cluster.bootstrap, isolation_level=isolation) as consumer:
            ends.append(consumer.end_offsets([tp])[tp])
    return ends[0], ends[1]


def test_kafka_transactions_finds_and_aborts_a_hanging_transaction(make_cluster, topic_name) -> None:
    cluster = make_cluster(brokers=3)
    bootstrap = cluster.kafka_bootstrap
    create_topic(bootstrap, topic_name, partitions=1, replication_factor=3)
    transactional_id = f"hang-{topic_name}"
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 600000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"committed")
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"left open")
    producer.flush(30)
    # The coordinator loses the transaction: its broker goes down, its state goes from ZooKeeper.
    coordinator = coordinator_id(transactional_id, cluster.brokers)
    assert coordinator is not None
    cluster.kill_broker(coordinator)
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(timeout=30)
    try:
        zk.delete(f"{CHROOT}{TRANSACTIONS}/{quote(transactional_id, safe='')}", recursive=True)
    finally:
        zk.stop()
        zk.close()
    cluster.restart_broker(coordinator)
    stable, high = eventually(lambda: (found := stable_and_high(cluster, topic_name))[1] > found[0] and found,
                              "the open transaction to hold the last stable offset back")
    assert (stable, high) == (2, 3)          # 0 committed record, 1 its marker, 2 the open transaction

    producers = run_tool(TOOL, "--bootstrap-server", bootstrap, "describe-producers", "--topic", topic_name,
                         "--partition", "0").stdout
    rows = [line.split() for line in producers.strip().splitlines()]
    assert rows[0][-1] == "CurrentTransactionStartOffset" and rows[1][-1] == "2", producers
    hanging = run_tool(TOOL, "--bootstrap-server", bootstrap, "find-hanging", "--topic", topic_name,
                       "--max-transaction-timeout", "0").stdout
    rows = [line.split() for line in hanging.strip().splitlines()]
    assert rows[0][5] == "StartOffset" and rows[1][0] == topic_name and rows[1][5] == "2", hanging
    run_tool(TOOL, "--bootstrap-server", bootstrap, "abort", "--topic", topic_name, "--partition", "0",
             "--start-offset", "2")
    eventually(lambda: (found := stable_and_high(cluster, topic_name))[0] == found[1],
               "the last stable offset to reach the high watermark after the abort")
    with Consumer(bootstrap_servers=cluster.bootstrap, isolation_level="read_committed",
                  auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic_name, 0)])
        values = []
        for _ in range(20):
            values += [r.value for records in consumer.poll(timeout_ms=200).values() for r in records]
        assert values == [b"committed"]
