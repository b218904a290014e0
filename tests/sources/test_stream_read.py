"""Streaming reads: checkpointed offsets, restarts, admission control, partition/topic discovery."""
from __future__ import annotations

from pathlib import Path

import pytest
from spark_helpers import create_topic, expected, produce, rows

from ember.sources.progress import offsets_behind_latest

pytestmark = pytest.mark.spark


def run_available_now(spark, cluster, tmp: Path, options: dict[str, str]):
    """One availableNow run into a Parquet sink under ``tmp``; returns the finished query."""
    stream = spark.readStream.format("ember").option("bootstrap", cluster.bootstrap)
    for key, value in options.items():
        stream = stream.option(key, value)
    query = (stream.load().writeStream.format("parquet").option("path", str(tmp / "out"))
             .option("checkpointLocation", str(tmp / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    return query


def written(spark, tmp: Path) -> list[tuple]:
    return rows(spark.read.parquet(str(tmp / "out")))


def test_restart_from_checkpoint_reads_only_new_records(spark, shared_cluster, topic_name, tmp_path) -> None:
    create_topic(shared_cluster.bootstrap, topic_name, partitions=2)
    produce(shared_cluster.bootstrap, topic_name, {0: 10, 1: 7})
    options = {"topic": topic_name, "startingOffsets": "earliest"}
    run_available_now(spark, shared_cluster, tmp_path, options)
    assert written(spark, tmp_path) == expected({0: 10, 1: 7})

    produce(shared_cluster.bootstrap, topic_name, {0: 5, 1: 3}, first=0)  # ids repeat, offsets do not
    query = run_available_now(spark, shared_cluster, tmp_path, options)
    assert sum(p["numInputRows"] for p in query.recentProgress) == 8
    got = written(spark, tmp_path)
    assert [(p, o) for p, o, _, _ in got] == sorted([(0, o) for o in range(15)] + [(1, o) for o in range(10)])


def test_max_records_per_trigger_limits_each_micro_batch(spark, shared_cluster, topic_name, tmp_path) -> None:
    create_topic(shared_cluster.bootstrap, topic_name, partitions=2)
    produce(shared_cluster.bootstrap, topic_name, {0: 20, 1: 15})
    query = run_available_now(spark, shared_cluster, tmp_path, {
        "topic": topic_name, "startingOffsets": "earliest", "maxRecordsPerTrigger": "10"})
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    assert [p["numInputRows"] for p in batches] == [10, 10, 10, 5]
    assert written(spark, tmp_path) == expected({0: 20, 1: 15})
    # each progress tells how far the batch ended behind the latest offsets it was planned against
    assert [sum(offsets_behind_latest(p).values()) for p in batches] == [25, 15, 5, 0]


def test_topic_pattern_picks_up_new_topics(spark, shared_cluster, topic_name, tmp_path) -> None:
    first, second = f"{topic_name}-a", f"{topic_name}-b"
    create_topic(shared_cluster.bootstrap, first, partitions=1)
    produce(shared_cluster.bootstrap, first, {0: 4})
    options = {"topicPattern": f"{topic_name}-.*", "startingOffsets": "earliest"}
    run_available_now(spark, shared_cluster, tmp_path, options)

    create_topic(shared_cluster.bootstrap, second, partitions=2)
    produce(shared_cluster.bootstrap, second, {0: 3, 1: 2})
    produce(shared_cluster.bootstrap, first, {0: 1}, first=4)
    run_available_now(spark, shared_cluster, tmp_path, options)
    out = spark.read.parquet(str(tmp_path / "out"))
    assert sorted((r["topic"], r["partition"], r["offset"]) for r in out.collect()) == sorted(
        [(first, 0, o) for o in range(5)] + [(second, 0, o) for o in range(3)] + [(second, 1, o) for o in range(2)])


def test_max_bytes_per_trigger_is_turned_into_records(spark, shared_cluster, topic_name, tmp_path) -> None:
    create_topic(shared_cluster.bootstrap, topic_name, partitions=1)
    produce(shared_cluster.bootstrap, topic_name, {0: 40})  # key + value of 8-10 bytes each
    query = run_available_now(spark, shared_cluster, tmp_path, {
        "topic": topic_name, "startingOffsets": "earliest", "maxBytesPerTrigger": "100"})
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert len(sizes) >= 3 and max(sizes) <= 12 and sum(sizes) == 40
    assert written(spark, tmp_path) == expected({0: 40})


def test_group_id_publishes_the_query_offsets_and_lag(spark, shared_cluster, topic_name, tmp_path) -> None:
    """Spark commits a micro-batch's offsets to its source when it starts the next one, so the group
    trails the checkpoint by at most one run; it never runs ahead of what the query wrote."""
    from ember.client import Admin

    create_topic(shared_cluster.bootstrap, topic_name, partitions=2)
    produce(shared_cluster.bootstrap, topic_name, {0: 6, 1: 4})
    group = f"spark-{topic_name}"
    options = {"topic": topic_name, "startingOffsets": "earliest", "groupId": group}
    run_available_now(spark, shared_cluster, tmp_path, options)
    produce(shared_cluster.bootstrap, topic_name, {0: 3}, first=6)
    run_available_now(spark, shared_cluster, tmp_path, options)
    produce(shared_cluster.bootstrap, topic_name, {1: 2}, first=4)
    with Admin(bootstrap_servers=shared_cluster.bootstrap) as admin:
        described = admin.describe_group(group)
    lag = {p.partition.partition: (p.committed, p.log_end, p.lag) for p in described.partitions}
    # run 2's start (= run 1's end) is committed; run 2's own end (0: 9) waits for the next run
    assert lag == {0: (6, 9, 3), 1: (4, 6, 2)}
