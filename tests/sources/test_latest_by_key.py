"""latestByKey: a batch read of a (compacted) topic as a table, each key's latest value per
partition with deletes applied, on both read paths; and the Arrow step on its own."""
from __future__ import annotations

import pyarrow as pa
import pytest
from spark_helpers import create_topic

from ember.client import Producer
from ember.errors import EmberError
from ember.sources.batch_reader import latest_by_key
from ember.sources.schema import arrow_schema

pytestmark = pytest.mark.spark


def test_latest_by_key_keeps_each_keys_last_record_per_partition_and_drops_deletes() -> None:
    schema = arrow_schema(False)
    rows = [  # (partition, offset, key, value)
        (0, 0, b"a", b"a1"), (0, 1, b"b", b"b1"), (1, 0, b"a", b"other partition"), (0, 2, b"a", b"a2"),
        (0, 3, b"b", None), (0, 4, None, b"keyless"), (1, 1, b"c", b"c1"), (0, 5, b"d", b"d1")]
    batch = pa.RecordBatch.from_pydict({
        "key": [r[2] for r in rows], "value": [r[3] for r in rows], "topic": ["t"] * len(rows),
        "partition": pa.array([r[0] for r in rows], pa.int32()), "offset": [r[1] for r in rows],
        "timestamp": pa.array([0] * len(rows), pa.timestamp("us", tz="UTC"))}, schema=schema)
    table = pa.Table.from_batches(list(latest_by_key([batch.slice(0, 3), batch.slice(3)], schema)), schema=schema)
    assert [(p, o, k, v) for p, o, k, v in zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(),
                                              table.column("key").to_pylist(), table.column("value").to_pylist())] == [
        (1, 0, b"a", b"other partition"), (0, 2, b"a", b"a2"), (1, 1, b"c", b"c1"), (0, 5, b"d", b"d1")]


@pytest.mark.parametrize("read_path", ["broker", "direct"])
def test_a_compacted_topic_reads_as_a_table_in_spark(spark, shared_cluster, topic_name, read_path) -> None:
    topic = f"{topic_name}-{read_path}"
    create_topic(shared_cluster.bootstrap, topic, partitions=2, replication_factor=3,
                 config={"cleanup.policy": "compact", "segment.bytes": "4096"})
    final: dict[bytes, bytes | None] = {}
    with Producer(bootstrap_servers=shared_cluster.bootstrap, acks="all") as producer:
        for round_ in range(20):
            for k in range(30):
                key = b"user-%d" % k
                value = None if (k % 7 == 0 and round_ == 19) else b"%d@%d" % (k, round_)
                producer.send(topic, value=value, key=key)
                final[key] = value
        producer.flush(30)
    reader = (spark.read.format("ember").option("bootstrap", shared_cluster.bootstrap).option("topic", topic)
              .option("latestByKey", "true").option("readPath", read_path))
    if read_path == "direct":
        reader = reader.option("storageRoot", str(shared_cluster.data_dir))
    rows = reader.load().select("key", "value").collect()
    assert {bytes(r["key"]): bytes(r["value"]) for r in rows} == {k: v for k, v in final.items() if v is not None}
    assert len(rows) == len([v for v in final.values() if v is not None])


def test_latest_by_key_refuses_streaming_and_min_partitions(spark, shared_cluster) -> None:
    with pytest.raises(Exception, match="drop minPartitions"):
        (spark.read.format("ember").option("bootstrap", shared_cluster.bootstrap).option("topic", "x")
         .option("latestByKey", "true").option("minPartitions", "4").load().count())
    from ember.sources.options import reader_options
    with pytest.raises(EmberError, match="batch reads only"):
        reader_options({"bootstrap": "h:1", "topic": "x", "latestByKey": "true"}, streaming=True)
