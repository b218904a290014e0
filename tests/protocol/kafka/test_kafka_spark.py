"""Spark and ember's Kafka listener, both ways: records written by a Kafka client (confluent-kafka)
are read by ember's Spark source exactly (stored as ember's columnar batches, so Spark gets them
with no conversion at read time); Spark's own Kafka connector (``format("kafka")``, whose jars every
``ember.spark_env`` session carries) reads an ember topic in batch and streaming and writes to one."""
from __future__ import annotations

import pytest
from kafka_helpers import WAIT_S, create_topic, ember_read, produce, records

pytestmark = [pytest.mark.integration, pytest.mark.spark]

KAFKA_COLUMNS = ("partition", "offset", "key", "value", "headers", "CAST(timestamp AS DOUBLE) * 1000 AS ms")


def as_records(rows) -> list[tuple]:
    """Spark rows as (partition, offset, key, value, headers, timestamp ms), sorted."""
    return sorted((r["partition"], r["offset"], None if r["key"] is None else bytes(r["key"]),
                   None if r["value"] is None else bytes(r["value"]),
                   [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"] or []],
                   round(r["ms"])) for r in rows)


@pytest.fixture
def kafka_topic(shared_cluster, topic_name):
    """A 2-partition RF 2 topic holding 40 confluent-kafka records (null keys and values, headers)
    and what a reader must see: (partition, offset, key, value, headers, timestamp) sorted."""
    bootstrap = shared_cluster.kafka_bootstrap
    create_topic(bootstrap, topic_name, partitions=2, replication_factor=2)
    items = records(40, partitions=2)
    offsets = produce(bootstrap, topic_name, items, **{"enable.idempotence": True, "compression.type": "zstd"})
    return topic_name, sorted((p, o, k, v, h, ts) for (_, k, v, h, ts), (p, o) in zip(items, offsets))


def test_spark_reads_what_confluent_kafka_wrote(spark, shared_cluster, kafka_topic):
    topic, want = kafka_topic
    df = (spark.read.format("ember").option("bootstrap", shared_cluster.bootstrap).option("topic", topic)
          .option("includeHeaders", "true").load().selectExpr(*KAFKA_COLUMNS))
    assert as_records(df.collect()) == want


def kafka_reader(reader, shared_cluster, topic: str):
    return (reader.format("kafka").option("kafka.bootstrap.servers", shared_cluster.kafka_bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").option("includeHeaders", "true"))


def test_spark_kafka_connector_reads_an_ember_topic_in_batch(spark, shared_cluster, kafka_topic):
    topic, want = kafka_topic
    df = kafka_reader(spark.read, shared_cluster, topic).option("endingOffsets", "latest").load()
    assert as_records(df.selectExpr(*KAFKA_COLUMNS).collect()) == want


def test_spark_kafka_connector_streams_an_ember_topic_available_now(spark, shared_cluster, kafka_topic, tmp_path):
    topic, want = kafka_topic
    name = "kafka_" + topic.replace("-", "_")
    query = (kafka_reader(spark.readStream, shared_cluster, topic).load().selectExpr(*KAFKA_COLUMNS)
             .writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(WAIT_S * 4), "the availableNow query did not finish"
        assert query.exception() is None
        assert as_records(spark.table(name).collect()) == want
    finally:
        query.stop()


def test_spark_kafka_connector_writes_to_an_ember_topic(spark, shared_cluster, topic_name):
    create_topic(shared_cluster.kafka_bootstrap, topic_name, partitions=2, replication_factor=2)
    rows = [(i % 2, None if i == 5 else f"k{i}", f"spark value {i}", [("h", f"{i}".encode())]) for i in range(30)]
    df = spark.createDataFrame(rows, "partition INT, key STRING, value STRING, headers ARRAY<STRUCT<key: STRING, value: BINARY>>")
    (df.write.format("kafka").option("kafka.bootstrap.servers", shared_cluster.kafka_bootstrap)
     .option("topic", topic_name).save())
    got = ember_read(shared_cluster, topic_name, 2, 30)
    by_value = lambda record: record[2]  # noqa: E731  (values are unique; keys hold a null)
    assert sorted(((p, k, v, h) for p, _, k, v, h, _ in got), key=by_value) == sorted(
        ((p, None if k is None else k.encode(), v.encode(), h) for p, k, v, h in rows), key=by_value)
    assert sorted((p, o) for p, o, *_ in got) == [(p, o) for p in (0, 1) for o in range(15)]
