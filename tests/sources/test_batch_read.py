"""Batch reads through the ember source against a real 3-broker cluster."""
from __future__ import annotations

import json

import pytest
from spark_helpers import create_topic, expected, produce, rows

pytestmark = pytest.mark.spark

COUNTS = {0: 30, 1: 20, 2: 25}


@pytest.fixture(scope="module")
def topic(shared_cluster) -> str:
    """One 3-partition topic (replicated on every broker) read by all tests of this module."""
    name = "spark-batch-read"
    create_topic(shared_cluster.bootstrap, name, partitions=3, replication_factor=3)
    produce(shared_cluster.bootstrap, name, COUNTS)
    return name


def reader(spark, cluster, topic: str, **options: str):
    read = spark.read.format("ember").option("bootstrap", cluster.bootstrap).option("topic", topic)
    for key, value in options.items():
        read = read.option(key, value)
    return read.load()


def test_reads_every_record_with_all_columns(spark, shared_cluster, topic) -> None:
    df = reader(spark, shared_cluster, topic, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp", "headers"]
    assert rows(df) == expected(COUNTS)
    sample = df.where("partition = 1 AND offset = 5").selectExpr("*", "CAST(timestamp AS LONG) AS seconds").first()
    assert sample["topic"] == topic and sample["seconds"] == 1_700_000_005
    assert [(h["key"], bytes(h["value"])) for h in sample["headers"]] == [("n", b"5")]


def test_starting_and_ending_offsets_json(spark, shared_cluster, topic) -> None:
    df = reader(spark, shared_cluster, topic,
                startingOffsets=json.dumps({topic: {"0": 10, "1": -2, "2": -1}}),
                endingOffsets=json.dumps({topic: {"0": 15, "1": 3, "2": -1}}))
    assert rows(df) == [r for r in expected(COUNTS) if (r[0] == 0 and 10 <= r[1] < 15) or (r[0] == 1 and r[1] < 3)]


def test_nothing_to_read_gives_an_empty_frame(spark, shared_cluster, topic) -> None:
    assert reader(spark, shared_cluster, topic, startingOffsets="latest").count() == 0


def test_starting_timestamp(spark, shared_cluster, topic) -> None:
    df = reader(spark, shared_cluster, topic, startingTimestamp=str(1_700_000_000_000 + 22_000))
    assert rows(df) == [r for r in expected(COUNTS) if r[1] >= 22]


def test_min_partitions_splits_ranges_without_changing_rows(spark, shared_cluster, topic) -> None:
    df = reader(spark, shared_cluster, topic, minPartitions="9")
    assert df.rdd.getNumPartitions() >= 9
    assert rows(df) == expected(COUNTS)


def test_direct_and_broker_paths_give_identical_rows(spark, shared_cluster, topic) -> None:
    root = str(shared_cluster.data_dir)
    columns = ["key", "value", "topic", "partition", "offset", "timestamp", "headers"]
    direct = reader(spark, shared_cluster, topic, readPath="direct", storageRoot=root, includeHeaders="true")
    broker = reader(spark, shared_cluster, topic, readPath="broker", includeHeaders="true")
    assert sorted(direct.select(columns).collect()) == sorted(broker.select(columns).collect())
    assert direct.count() == sum(COUNTS.values())


def test_many_small_partitions_are_packed_into_few_tasks_with_every_row(spark, shared_cluster) -> None:
    """60 small partitions: one task reads them all (maxPartitionBytes, 32 MiB by default), not 60
    Python tasks; with maxPartitionBytes=0 each partition is a task again. Rows are the same."""
    name = "spark-batch-packed"
    counts = {p: 3 for p in range(60)}
    create_topic(shared_cluster.bootstrap, name, partitions=60, replication_factor=1)
    produce(shared_cluster.bootstrap, name, counts)
    packed = reader(spark, shared_cluster, name)
    assert packed.rdd.getNumPartitions() == 1
    assert rows(packed) == expected(counts)
    one_each = reader(spark, shared_cluster, name, maxPartitionBytes="0")
    assert one_each.rdd.getNumPartitions() == 60
    assert rows(one_each) == expected(counts)
    direct = reader(spark, shared_cluster, name, readPath="direct", storageRoot=str(shared_cluster.data_dir))
    assert rows(direct) == expected(counts)
