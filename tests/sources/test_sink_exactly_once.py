"""Exactly-once streaming writes: a re-run micro-batch, or a task re-run after being killed, adds no
duplicates to the sink topic."""
from __future__ import annotations

import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StructField, StructType

from ember.client import Consumer, TopicPartition
from ember.sources.options import OptionError, WriterOptions, writer_options
from ember.sources.writer import EmberStreamWriter, ExactlyOnceWrite, TaskIdentity
from spark_helpers import create_topic, produce

IDENTITY = TaskIdentity("query-under-test", batch_id=7, partition_id=1)
SMALL_REQUESTS = 4096   # ~40 rows of task_input() per batch: many batches (and producer ids) per partition


def copy_query(spark, bootstrap: str, source: str, sink: str, checkpoint: Path, exactly_once: bool):
    """source -> sink in micro-batches of at most 30 records; partition 1's rows lose their key
    (placed by row position)."""
    return (spark.readStream.format("ember").option("bootstrap", bootstrap).option("topic", source)
            .option("startingOffsets", "earliest").option("maxRecordsPerTrigger", 30).load()
            .select(F.when(F.col("partition") == 0, F.col("key")).alias("key"), "value")
            .writeStream.format("ember").option("bootstrap", bootstrap).option("topic", sink)
            .option("exactlyOnce", str(exactly_once).lower())
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())


def finish(query) -> list[int]:
    """Wait for an availableNow query; the batch ids it ran."""
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    return [p["batchId"] for p in query.recentProgress]


def forget_last_commit(checkpoint: Path) -> int:
    """Simulate a crash after the sink wrote the last micro-batch but before Spark committed it."""
    last = max(int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    return last


def stored_values(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    """Every value in ``topic`` (all partitions, each in offset order)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        remaining = sum(consumer.end_offsets(tps).values())
        deadline = time.monotonic() + 60
        while remaining > 0:   # more may arrive meanwhile
            assert time.monotonic() < deadline, f"{remaining} records of {topic!r} never arrived"
            for tp, records in consumer.poll(1000).items():
                out[tp.partition] += [r.value for r in records]
                remaining -= len(records)
    return [v for p in range(partitions) for v in out[p]]


def task_input(batches: int = 8, rows: int = 100) -> list[pa.RecordBatch]:
    """What a Spark task would be given: Arrow batches of rows, every third one without a key."""
    def row_key(i: int) -> bytes | None:
        return None if i % 3 == 0 else b"key-%d" % (i % 11)
    return [pa.record_batch({"key": pa.array([row_key(i) for i in range(b * rows, (b + 1) * rows)], pa.binary()),
                             "value": pa.array([b"value-%05d" % i * 5 for i in range(b * rows, (b + 1) * rows)])})
            for b in range(batches)]


def run_task(bootstrap: str, topic: str, batches) -> None:
    options = WriterOptions(bootstrap=bootstrap, topic=topic, acks="all", exactly_once=True)
    ExactlyOnceWrite(options, IDENTITY, max_request_size=SMALL_REQUESTS).run(batches)


def stalled_task(bootstrap: str, topic: str) -> None:
    """The child process of the kill test: sends half its input, then hangs until killed."""
    def stalled():
        yield from task_input()[:4]
        print("sent", flush=True)
        time.sleep(600)
    run_task(bootstrap, topic, stalled())


@pytest.mark.spark
@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactlyOnce", "atLeastOnce"])
def test_rerun_micro_batch_adds_no_duplicates(spark, shared_cluster, topic_name, tmp_path, exactly_once: bool) -> None:
    bootstrap, source, sink = shared_cluster.bootstrap, f"{topic_name}-in", f"{topic_name}-out"
    create_topic(bootstrap, source, partitions=2)
    create_topic(bootstrap, sink, partitions=3, replication_factor=2)
    produce(bootstrap, source, {0: 40, 1: 30})
    checkpoint = tmp_path / "checkpoint"
    assert len(finish(copy_query(spark, bootstrap, source, sink, checkpoint, exactly_once))) > 1
    last = forget_last_commit(checkpoint)

    assert finish(copy_query(spark, bootstrap, source, sink, checkpoint, exactly_once))[0] == last   # re-ran
    got = stored_values(bootstrap, sink, 3)
    assert set(got) == {f"v{p}-{i}".encode() for p, n in ((0, 40), (1, 30)) for i in range(n)}
    assert (len(got) == 70) is exactly_once   # at-least-once: the re-run batch's rows are there twice


@pytest.mark.integration
def test_task_rerun_after_kill_sends_every_row_once(shared_cluster, topic_name) -> None:
    bootstrap = shared_cluster.bootstrap
    create_topic(bootstrap, topic_name, partitions=2, replication_factor=2)
    child = subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                               f"from {Path(__file__).stem} import stalled_task; stalled_task(*sys.argv[1:])",
         bootstrap, topic_name], stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([child.stdout], [], [], 120)
        assert ready, "the task child never reported that it had sent its first batches"
        assert child.stdout.readline() == "sent\n"
        deadline = time.monotonic() + 30
        while not stored_values(bootstrap, topic_name, 2) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    partial = len(stored_values(bootstrap, topic_name, 2))
    assert 0 < partial < 800

    run_task(bootstrap, topic_name, iter(task_input()))
    run_task(bootstrap, topic_name, iter(task_input()))   # and a re-run of a task that had finished
    got = stored_values(bootstrap, topic_name, 2)
    assert sorted(got) == sorted(v for batch in task_input() for v in batch.column("value").to_pylist())


def test_exactly_once_refuses_acks_0() -> None:
    schema = StructType([StructField("value", BinaryType())])
    options = {"bootstrap": "127.0.0.1:1", "topic": "t", "acks": "0"}
    with pytest.raises(OptionError, match="exactlyOnce"):
        EmberStreamWriter(writer_options(options), schema)
    EmberStreamWriter(writer_options({**options, "exactlyOnce": "false"}), schema)   # at-least-once may use acks=0
