"""``ember transactions``: list and describe a transaction left open by a confluent-kafka producer,
show it among the partition's producers with the offset where it starts, and abort it there, after
which read_committed readers move past it."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
from confluent_kafka import Producer

from ember.client import Admin, Consumer, TopicPartition
from waiting import eventually

pytestmark = pytest.mark.integration


def ember(cluster, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "ember.cli", "transactions", *args, "--bootstrap", cluster.bootstrap],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out
    return out.stdout


def test_list_describe_producers_and_abort(shared_cluster, topic_name) -> None:
    with Admin(shared_cluster.bootstrap) as admin:
        admin.create_topic(topic_name, partitions=1, replication_factor=3)
    transactional_id = f"cli-{topic_name}"
    producer = Producer({"bootstrap.servers": shared_cluster.kafka_bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"committed")
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"open")
    producer.flush(30)

    assert re.search(rf"^ +{transactional_id} +\d+ +Ongoing$", ember(shared_cluster, "list"), re.MULTILINE)
    assert transactional_id in ember(shared_cluster, "list", "--state", "Ongoing")
    assert transactional_id not in ember(shared_cluster, "list", "--state", "CompleteAbort")
    described = ember(shared_cluster, "describe", transactional_id)
    assert "state Ongoing" in described and f"partition {topic_name}-0" in described, described
    producers = ember(shared_cluster, "producers", "--topic", topic_name, "--partition", "0")
    assert re.search(r"^ +\d+ +0 +\d+ +\d+ +\d+ +2$", producers, re.MULTILINE), producers    # from offset 2

    tp = TopicPartition(topic_name, 0)
    with Consumer(bootstrap_servers=shared_cluster.bootstrap, isolation_level="read_committed") as consumer:
        assert consumer.end_offsets([tp])[tp] == 2
    aborted = ember(shared_cluster, "abort", "--topic", topic_name, "--partition", "0", "--start-offset", "2")
    assert "aborted the transaction of producer" in aborted
    with Consumer(bootstrap_servers=shared_cluster.bootstrap, isolation_level="read_committed") as consumer:
        assert eventually(lambda: consumer.end_offsets([tp])[tp] == 4, "the last stable offset past the abort marker")
