"""Exactly-once streaming writes: a re-run micro-batch, or a task re-run after being killed, adds no
duplicates to the sink topic."""
from __future__ import annotations

import re
import select
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StructField, StructType
from spark_helpers import create_topic, produce

from ember.client import Consumer, TopicPartition
from ember.client.partitioner import partition_for_key
from ember.errors import OutOfOrderSequenceNumber
from ember.sources import writer
from ember.sources.options import OptionError, WriterOptions, writer_options
from ember.sources.writer import EmberStreamWriter, ExactlyOnceWrite, TaskIdentity

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
    out = stored_partitions(bootstrap, topic, partitions)
    return [v for p in range(partitions) for v in out[p]]


def stored_partitions(bootstrap: str, topic: str, partitions: int) -> dict[int, list[bytes]]:
    """The values of each partition of ``topic``, in offset order."""
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
    return out


def task_input(batches: int = 8, rows: int = 100) -> list[pa.RecordBatch]:
    """What a Spark task would be given: Arrow batches of rows, every third one without a key."""
    def row_key(i: int) -> bytes | None:
        return None if i % 3 == 0 else b"key-%d" % (i % 11)
    return [pa.record_batch({"key": pa.array([row_key(i) for i in range(b * rows, (b + 1) * rows)], pa.binary()),
                             "value": pa.array([b"value-%05d" % i * 5 for i in range(b * rows, (b + 1) * rows)])})
            for b in range(batches)]


def expected_partitions(batches: list[pa.RecordBatch], partitions: int, identity: TaskIdentity = IDENTITY
                        ) -> dict[int, list[bytes]]:
    """The values the task must leave in each partition, in the task's order: keyed rows by
    murmur2, the others round-robin by position in the task (from the task's partition id)."""
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    position = identity.partition_id
    for batch in batches:
        for key, value in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist()):
            out[position % partitions if key is None else partition_for_key(key, partitions)].append(value)
            position += 1
    return out


def ordered_runs(values: list[bytes]) -> int:
    """Into how many consecutive runs ``values`` (v<source partition>-<i>) split, cut greedily, in
    which every source partition's rows appear in its order: 1 = the partition kept the order."""
    runs, last = 1, {}
    for value in values:
        source, i = re.fullmatch(rb"v(\d+)-(\d+)", value).groups()
        if last.get(source, -1) >= int(i):
            runs, last = runs + 1, {}
        last[source] = int(i)
    return runs


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
    by_partition = stored_partitions(bootstrap, sink, 3)
    got = [v for values in by_partition.values() for v in values]
    assert set(got) == {f"v{p}-{i}".encode() for p, n in ((0, 40), (1, 30)) for i in range(n)}
    assert (len(got) == 70) is exactly_once   # at-least-once: the re-run batch's rows are there twice
    # A source partition is read by one task per micro-batch, in offset order: every sink partition
    # keeps that order (at-least-once: then once more for the re-run batch's repeated rows).
    assert all(ordered_runs(values) == 1 if exactly_once else ordered_runs(values) <= 2
               for values in by_partition.values()), by_partition


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
    # Every row once, and each partition in the task's order (several producer ids per partition).
    assert stored_partitions(bootstrap, topic_name, 2) == expected_partitions(task_input(), 2)


class FakeBrokers:
    """The cluster as ExactlyOnceWrite's unit tests see it (``brokers.producer`` is patched over the
    writer's Producer): a log per partition that a batch joins when its producer delivers it. Each
    producer delivers on its own thread, in order, ``delays[producer_id]`` seconds per batch, so a
    producer can overtake another as connections can; sequences must follow on per (producer id,
    partition), as a broker checks them. ``fail`` = (producer id, partition, n): that producer's
    n-th batch to the partition fails."""

    def __init__(self, partitions: int, delays: dict[int, float] | None = None,
                 fail: tuple[int, int, int] | None = None) -> None:
        self.partitions, self.delays, self.fail = partitions, delays or {}, fail
        self.lock = threading.Lock()
        self.log: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        self.sent: list[tuple[int, int, int, tuple[bytes, ...]]] = []   # (id, partition, sequence, values)
        self.next_sequence: dict[tuple[int, int], int] = {}
        self.open = self.most_open = 0

    def producer(self, *, producer_id: int, **_: object) -> "FakeProducer":
        with self.lock:
            self.open += 1
            self.most_open = max(self.most_open, self.open)
        return FakeProducer(self, producer_id)

    def deliver(self, producer_id: int, partition: int, sequence: int, values: tuple[bytes, ...], nth: int) -> None:
        time.sleep(self.delays.get(producer_id, 0))
        with self.lock:
            if (producer_id, partition, nth) == self.fail:
                raise RuntimeError("delivery failed")
            expected = self.next_sequence.get((producer_id, partition), 0)
            if sequence != expected:
                raise OutOfOrderSequenceNumber(f"sequence {sequence}, expected {expected}")
            self.next_sequence[producer_id, partition] = sequence + len(values)
            self.log[partition] += values


class FakeProducer:
    """A fixed-identity producer of :class:`FakeBrokers`: one delivery thread (its connection)."""

    def __init__(self, brokers: FakeBrokers, producer_id: int) -> None:
        self.brokers, self.producer_id = brokers, producer_id
        self.connection = ThreadPoolExecutor(1)
        self.sequences: dict[int, int] = {}
        self.batches: dict[int, int] = {}
        self.closed = False

    def partitions_for(self, topic: str) -> set[int]:
        return set(range(self.brokers.partitions))

    def send_batch(self, topic: str, table: pa.Table, partition: int) -> Future:
        assert not self.closed, "send on a closed producer"
        sequence, nth = self.sequences.get(partition, 0), self.batches.get(partition, 0)
        self.sequences[partition], self.batches[partition] = sequence + table.num_rows, nth + 1
        values = tuple(table.column("value").to_pylist())
        self.brokers.sent.append((self.producer_id, partition, sequence, values))
        return self.connection.submit(self.brokers.deliver, self.producer_id, partition, sequence, values, nth)

    def flush(self) -> None:
        self.connection.submit(lambda: None).result()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.connection.shutdown(wait=True)
            with self.brokers.lock:
                self.brokers.open -= 1


def run_fake_task(monkeypatch, brokers: FakeBrokers, batches: list[pa.RecordBatch]) -> None:
    monkeypatch.setattr(writer, "Producer", brokers.producer)
    options = WriterOptions(bootstrap="fake:9092", topic="t", acks="all", exactly_once=True)
    ExactlyOnceWrite(options, IDENTITY, max_request_size=SMALL_REQUESTS).run(iter(batches))


def chunks_per_partition(brokers: FakeBrokers) -> dict[int, int]:
    return {p: len({pid for pid, partition, *_ in brokers.sent if partition == p}) for p in range(brokers.partitions)}


def test_a_later_chunk_never_overtakes_an_earlier_one(monkeypatch) -> None:
    """Chunks 0 and 2 of each partition are delivered slowly: chunks 1 and 3 (other producers) wait
    for them, so each partition holds its rows in the task's order."""
    brokers = FakeBrokers(2, delays={IDENTITY.producer_id(0): 0.03, IDENTITY.producer_id(2): 0.02})
    batches = task_input(batches=16)
    run_fake_task(monkeypatch, brokers, batches)
    assert all(chunks >= 4 for chunks in chunks_per_partition(brokers).values()), chunks_per_partition(brokers)
    assert brokers.log == expected_partitions(batches, 2)
    assert brokers.open == 0   # every producer closed
    assert brokers.most_open <= 3, brokers.most_open   # finished chunks' producers do not pile up


def test_same_rows_give_the_same_batches_under_any_arrow_batching(monkeypatch) -> None:
    """What dedup on a re-run needs: the same producer ids, sequences and cut points, however Spark
    cut the task's rows into Arrow batches and however fast the brokers answer."""
    table = pa.Table.from_batches(task_input(batches=16))
    runs = []
    for batches, delays in ((table.to_batches(max_chunksize=100), {IDENTITY.producer_id(0): 0.02}),
                            (table.to_batches(max_chunksize=333), {IDENTITY.producer_id(1): 0.02}),
                            (table.combine_chunks().to_batches(), {})):
        brokers = FakeBrokers(2, delays)
        run_fake_task(monkeypatch, brokers, batches)
        runs.append(sorted(brokers.sent))
    assert runs[0] == runs[1] == runs[2]
    chunks = max(chunks_per_partition(brokers).values())
    assert chunks >= 4 and {pid for pid, *_ in runs[0]} == {IDENTITY.producer_id(c) for c in range(chunks)}


def test_a_failed_chunk_fails_the_task_before_the_next_chunk_goes_out(monkeypatch) -> None:
    pid = IDENTITY.producer_id(0)
    brokers = FakeBrokers(2, delays={pid: 0.03}, fail=(pid, 0, 4))   # partition 0's last batch of chunk 0
    with pytest.raises(RuntimeError, match="delivery failed"):
        run_fake_task(monkeypatch, brokers, task_input(batches=16))
    assert [sent for sent in brokers.sent if sent[1] == 0 and sent[0] != pid] == []
    assert brokers.open == 0


def test_exactly_once_refuses_acks_0() -> None:
    schema = StructType([StructField("value", BinaryType())])
    options = {"bootstrap": "127.0.0.1:1", "topic": "t", "acks": "0"}
    with pytest.raises(OptionError, match="exactlyOnce"):
        EmberStreamWriter(writer_options(options), schema)
    EmberStreamWriter(writer_options({**options, "exactlyOnce": "false"}), schema)   # at-least-once may use acks=0
