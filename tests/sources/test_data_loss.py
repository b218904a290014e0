"""failOnDataLoss: offsets deleted by retention stop the query (true) or are skipped (false)."""
from __future__ import annotations

import json
import time

import pytest
from spark_helpers import create_topic, produce, rows

from ember.client import Consumer, TopicPartition

pytestmark = pytest.mark.spark

TOPIC = "retained"


@pytest.fixture
def retained(make_cluster):
    """A cluster whose only partition has lost its first offsets to retention.bytes; yields
    (cluster, log start offset)."""
    cluster = make_cluster(brokers=1, config={"log.retention.check.interval.ms": "100"})
    create_topic(cluster.bootstrap, TOPIC, partitions=1, config={"segment.bytes": "2048", "retention.bytes": "4096"})
    for first in range(0, 60, 5):  # one batch, and soon one segment, per call
        produce(cluster.bootstrap, TOPIC, {0: 5}, first=first)
    tp = TopicPartition(TOPIC, 0)
    with Consumer(bootstrap_servers=cluster.bootstrap) as consumer:
        deadline = time.monotonic() + 30
        seen = [0]
        while seen[-1] == 0 or len(seen) < 5 or len(set(seen[-5:])) > 1:  # deleted, then settled
            assert time.monotonic() < deadline, f"retention did not settle: log start {seen[-5:]}"
            time.sleep(0.2)
            seen.append(consumer.beginning_offsets([tp])[tp])
    return cluster, seen[-1]


def test_batch_read_fails_or_skips(spark, retained) -> None:
    cluster, log_start = retained
    read = (spark.read.format("ember").option("bootstrap", cluster.bootstrap).option("topic", TOPIC)
            .option("startingOffsets", json.dumps({TOPIC: {"0": 0}})))
    with pytest.raises(Exception, match=rf"offsets \[0, {log_start}\) of topic '{TOPIC}' partition 0"):
        read.load().collect()
    skipped = rows(read.option("failOnDataLoss", "false").load())
    assert [offset for _, offset, _, _ in skipped] == list(range(log_start, 60))


def test_stream_fails_or_skips(spark, retained, tmp_path) -> None:
    cluster, log_start = retained

    def run(fail_on_data_loss: str, name: str):
        return (spark.readStream.format("ember").option("bootstrap", cluster.bootstrap).option("topic", TOPIC)
                .option("startingOffsets", json.dumps({TOPIC: {"0": 0}})).option("failOnDataLoss", fail_on_data_loss)
                .load().writeStream.format("parquet").option("path", str(tmp_path / name))
                .option("checkpointLocation", str(tmp_path / f"{name}-checkpoint")).trigger(availableNow=True).start())

    with pytest.raises(Exception, match=rf"offsets \[0, {log_start}\) of topic '{TOPIC}' partition 0 are no longer"):
        run("true", "strict").awaitTermination(120)
    lenient = run("false", "lenient")
    lenient.awaitTermination(120)
    assert lenient.exception() is None
    assert [o for _, o, _, _ in rows(spark.read.parquet(str(tmp_path / "lenient")))] == list(range(log_start, 60))


def recreate(bootstrap: str, topic: str) -> None:
    """Delete ``topic`` and create it again (retrying while the deletion is still under way)."""
    from ember.client import Admin
    from ember.errors import TopicAlreadyExists

    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.delete_topic(topic)
        deadline = time.monotonic() + 30
        while True:
            try:
                admin.create_topic(topic, partitions=1)
                return
            except TopicAlreadyExists:
                assert time.monotonic() < deadline, f"{topic} was not deleted"
                time.sleep(0.2)


def test_stream_on_recreated_topic_reads_it_from_the_start(spark, shared_cluster, topic_name, tmp_path) -> None:
    """The new topic's offsets start below the checkpoint: with failOnDataLoss=false the query reads
    it from its earliest offset, never resumes at the old offset (skipping its first records)."""
    def run(fail_on_data_loss: str):
        return (spark.readStream.format("ember").option("bootstrap", shared_cluster.bootstrap)
                .option("topic", topic_name).option("startingOffsets", "earliest")
                .option("failOnDataLoss", fail_on_data_loss).load()
                .writeStream.format("parquet").option("path", str(tmp_path / "out"))
                .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())

    create_topic(shared_cluster.bootstrap, topic_name, partitions=1)
    produce(shared_cluster.bootstrap, topic_name, {0: 6})
    run("true").awaitTermination(120)
    recreate(shared_cluster.bootstrap, topic_name)
    produce(shared_cluster.bootstrap, topic_name, {0: 2}, first=100)

    # failOnDataLoss=true fails in latestOffset (test_stream_offsets.py); Spark must also accept the
    # end offset below the start that failOnDataLoss=false plans
    lenient = run("false")
    lenient.awaitTermination(120)
    assert lenient.exception() is None
    assert [(o, v) for _, o, _, v in rows(spark.read.parquet(str(tmp_path / "out")))] == sorted(
        [(o, f"v0-{o}".encode()) for o in range(6)] + [(0, b"v0-100"), (1, b"v0-101")])
