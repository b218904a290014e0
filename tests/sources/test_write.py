"""Writes through the ember sink: batch and streaming round trips."""
from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from spark_helpers import create_topic, expected, produce, rows

pytestmark = pytest.mark.spark


def read_all(spark, cluster, topic: str, **options: str):
    read = spark.read.format("ember").option("bootstrap", cluster.bootstrap).option("topic", topic)
    for key, value in options.items():
        read = read.option(key, value)
    return read.load()


def test_batch_write_round_trip(spark, shared_cluster, topic_name) -> None:
    create_topic(shared_cluster.bootstrap, topic_name, partitions=3)
    df = spark.createDataFrame(
        [(f"k{i}", f"v{i}".encode(), i % 3, [("src", b"test")]) for i in range(30)],
        "key string, value binary, partition int, headers array<struct<key string, value binary>>")
    df.write.format("ember").mode("append").option("bootstrap", shared_cluster.bootstrap).option("topic", topic_name).save()

    back = read_all(spark, shared_cluster, topic_name, includeHeaders="true")
    got = sorted((r["partition"], bytes(r["key"]).decode(), bytes(r["value"]).decode()) for r in back.collect())
    assert got == sorted((i % 3, f"k{i}", f"v{i}") for i in range(30))
    assert {tuple((h["key"], bytes(h["value"])) for h in r["headers"]) for r in back.collect()} == {(("src", b"test"),)}
    per_partition = back.groupBy("partition").agg(F.max("offset").alias("last")).collect()
    assert sorted((r["partition"], r["last"]) for r in per_partition) == [(0, 9), (1, 9), (2, 9)]


def test_topic_column_routes_rows(spark, shared_cluster, topic_name) -> None:
    a, b = f"{topic_name}-a", f"{topic_name}-b"
    for name in (a, b):
        create_topic(shared_cluster.bootstrap, name, partitions=1)
    df = spark.createDataFrame([(a if i % 2 else b, f"v{i}") for i in range(10)], "topic string, value string")
    df.write.format("ember").mode("append").option("bootstrap", shared_cluster.bootstrap).save()
    assert read_all(spark, shared_cluster, a).count() == 5
    assert read_all(spark, shared_cluster, b).count() == 5


def test_streaming_copy_between_topics(spark, shared_cluster, topic_name, tmp_path) -> None:
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(shared_cluster.bootstrap, source, partitions=2)
    create_topic(shared_cluster.bootstrap, sink, partitions=2)
    produce(shared_cluster.bootstrap, source, {0: 12, 1: 8})
    query = (spark.readStream.format("ember").option("bootstrap", shared_cluster.bootstrap).option("topic", source)
             .option("startingOffsets", "earliest").load()
             .select("key", "value", "partition")
             .writeStream.format("ember").option("bootstrap", shared_cluster.bootstrap).option("topic", sink)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    assert rows(read_all(spark, shared_cluster, sink)) == expected({0: 12, 1: 8})
