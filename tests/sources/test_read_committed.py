"""isolationLevel in the Spark source: read_committed (the default) reads committed transactions and
plain records only, up to the last stable offset, on both read paths; read_uncommitted reads
every record up to the high watermark, as Spark's Kafka connector does by default."""
from __future__ import annotations

import pytest
from confluent_kafka import Producer
from spark_helpers import create_topic

pytestmark = pytest.mark.spark

WAIT_S = 60


def write_transactions(cluster, topic: str) -> tuple[set[bytes], set[bytes], Producer]:
    """Committed, aborted and plain records over 2 partitions, then a transaction left open: the
    values that are committed, every value written, and the producer holding the open transaction."""
    plain = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "enable.idempotence": True})
    txn = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "transactional.id": f"tx-{topic}",
                    "transaction.timeout.ms": 60000})
    txn.init_transactions(WAIT_S)
    committed: set[bytes] = set()
    written: set[bytes] = set()
    for round_ in range(6):
        txn.begin_transaction()
        values = [b"t%d-%d" % (round_, i) for i in range(50)]
        for i, value in enumerate(values):
            txn.produce(topic, value=value, partition=i % 2)
        txn.flush(WAIT_S)
        written.update(values)
        if round_ % 3 == 1:
            txn.abort_transaction(WAIT_S)
        else:
            txn.commit_transaction(WAIT_S)
            committed.update(values)
        extra = [b"p%d-%d" % (round_, i) for i in range(10)]
        for i, value in enumerate(extra):
            plain.produce(topic, value=value, partition=i % 2)
        plain.flush(WAIT_S)
        written.update(extra)
        committed.update(extra)
    txn.begin_transaction()
    for i in range(20):
        txn.produce(topic, value=b"open-%d" % i, partition=i % 2)
        written.add(b"open-%d" % i)
    txn.flush(WAIT_S)
    return committed, written, txn


@pytest.mark.parametrize("read_path", ["broker", "direct"])
def test_spark_reads_committed_transactions_only_unless_told_otherwise(spark, shared_cluster, topic_name, read_path):
    topic = f"{topic_name}-{read_path}"
    create_topic(shared_cluster.bootstrap, topic, partitions=2, replication_factor=3)
    committed, written, open_txn = write_transactions(shared_cluster, topic)
    try:
        def values(**options: str) -> list[bytes]:
            reader = (spark.read.format("ember").option("bootstrap", shared_cluster.bootstrap).option("topic", topic)
                      .option("readPath", read_path))
            if read_path == "direct":
                reader = reader.option("storageRoot", str(shared_cluster.data_dir))
            for name, value in options.items():
                reader = reader.option(name, value)
            return [bytes(r["value"]) for r in reader.load().select("value").collect()]

        # before the open transaction: exactly the committed and plain records, each once
        assert sorted(values()) == sorted(committed)
        assert sorted(values(**{"kafka.isolation.level": "read_committed"})) == sorted(committed)
        assert sorted(values(isolationLevel="read_uncommitted")) == sorted(written)
    finally:
        open_txn.abort_transaction(WAIT_S)
    # the open transaction ends aborted: still nothing of it in a committed read
    assert sorted(values()) == sorted(committed)


def test_sparks_kafka_connector_reads_read_committed_through_the_kafka_listener(spark, shared_cluster, topic_name):
    create_topic(shared_cluster.bootstrap, topic_name, partitions=2, replication_factor=3)
    committed, written, open_txn = write_transactions(shared_cluster, topic_name)
    open_txn.abort_transaction(WAIT_S)

    def values(isolation: str) -> list[bytes]:
        frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", shared_cluster.kafka_bootstrap)
                 .option("subscribe", topic_name).option("startingOffsets", "earliest")
                 .option("endingOffsets", "latest").option("kafka.isolation.level", isolation)
                 .option("failOnDataLoss", "false")      # markers and aborted records are offsets without a record
                 .load())
        return [bytes(r["value"]) for r in frame.select("value").collect()]

    assert sorted(values("read_committed")) == sorted(committed)
    assert sorted(values("read_uncommitted")) == sorted(written)


@pytest.mark.parametrize("read_path", ["broker", "direct"])
def test_a_stream_stops_at_an_open_transaction_and_reads_it_once_committed(spark, shared_cluster, topic_name,
                                                                         tmp_path, read_path):
    """Each micro-batch ends at the last stable offset: an open transaction holds the stream back
    (nothing after it is read either), its records arrive in a later run once it commits, once."""
    topic = f"{topic_name}-{read_path}"
    create_topic(shared_cluster.bootstrap, topic, partitions=2, replication_factor=3)
    committed, _, open_txn = write_transactions(shared_cluster, topic)

    def run() -> None:
        stream = (spark.readStream.format("ember").option("bootstrap", shared_cluster.bootstrap)
                  .option("topic", topic).option("startingOffsets", "earliest").option("readPath", read_path))
        if read_path == "direct":
            stream = stream.option("storageRoot", str(shared_cluster.data_dir))
        query = (stream.load().writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination(180)
        assert query.exception() is None, query.exception()

    def landed() -> list[bytes]:
        return [bytes(r["value"]) for r in spark.read.parquet(str(tmp_path / "out")).select("value").collect()]

    run()
    assert sorted(landed()) == sorted(committed)
    open_txn.commit_transaction(WAIT_S)
    plain = Producer({"bootstrap.servers": shared_cluster.kafka_bootstrap})
    plain.produce(topic, value=b"after")
    plain.flush(WAIT_S)
    run()
    assert sorted(landed()) == sorted([*committed, *(b"open-%d" % i for i in range(20)), b"after"])
