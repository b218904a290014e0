"""Records written by a Kafka client (confluent-kafka) are read by ember's Spark source exactly:
they are stored as ember's columnar batches, so Spark gets them with no conversion at read time."""
from __future__ import annotations

import pytest
from kafka_helpers import create_topic, produce, records

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_spark_reads_what_confluent_kafka_wrote(spark, shared_cluster, topic_name):
    bootstrap = shared_cluster.kafka_bootstrap
    create_topic(bootstrap, topic_name, partitions=2, replication_factor=2)
    items = records(40, partitions=2)
    offsets = produce(bootstrap, topic_name, items, **{"enable.idempotence": True, "compression.type": "zstd"})
    df = (spark.read.format("ember").option("bootstrap", shared_cluster.bootstrap).option("topic", topic_name)
          .option("includeHeaders", "true").load()
          .selectExpr("partition", "offset", "key", "value", "headers", "CAST(timestamp AS DOUBLE) * 1000 AS ms"))
    rows = sorted((r["partition"], r["offset"], None if r["key"] is None else bytes(r["key"]),
                   None if r["value"] is None else bytes(r["value"]),
                   [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"] or []],
                   round(r["ms"])) for r in df.collect())
    assert rows == sorted((p, o, k, v, h, ts) for (_, k, v, h, ts), (p, o) in zip(items, offsets))
