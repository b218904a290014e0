"""Compacted topics, ember vs Kafka 4.2 side by side (issue "Compacted topics"): the same confluent-kafka
producer writes the same keyed records into a compacted topic on each (one broker each, one partition,
``min.cleanable.dirty.ratio=0.01``, ``log.cleaner.backoff.ms=200`` on both), then:

* time to compact: the records go in under ``min.compaction.lag.ms=1h`` (nothing is cleanable); the
  clock starts when that is set to 0 and stops when the cleaner's checkpoint reaches the active
  segment (every sealed segment cleaned); the log's bytes before and after;
* read speed of the compacted topic: a confluent-kafka consumer from the beginning to the end;
* the table read in Spark: ember's ``latestByKey`` against ``format("kafka")`` +
  ``groupBy(key).agg(max_by(struct(value, offset), offset))`` over Kafka.

Repeats are interleaved (a new topic per system and repeat); medians with min-max are reported.

    .venv/bin/python bench/vs_kafka/compaction.py [--records 2000000] [--keys 20000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent.parent)]   # this folder, bench/, the repository

from samples import median_and_range  # noqa: E402
from systems import EmberSystem, KafkaSystem, kafka_client_bootstrap  # noqa: E402
from workloads import interleaved, log  # noqa: E402

VALUE_SIZE = 100
#: about this many segments per log, so most of it is sealed (the active segment is never cleaned)
SEGMENTS = 20
CLEANER_BACKOFF_MS = 200


def create(system: Any, topic: str, records: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    # min.compaction.lag.ms holds the cleaner off while the records go in: the clock starts when it is lifted
    config = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "3600000",
              "segment.bytes": str(max(1 << 20, records * (VALUE_SIZE + 20) // SEGMENTS))}
    admin = AdminClient({"bootstrap.servers": kafka_client_bootstrap(system)})
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(60)


def partition_dir(system: Any, topic: str) -> Path:
    if system.name == "ember":
        return Path(next(iter(system.cluster.brokers.values())).data_dir) / f"{topic}-0"
    node = next(iter(system.cluster.nodes.values()))
    return node.root / "data" / f"{topic}-0"


def cleaned_to(system: Any, topic: str) -> int:
    """The first dirty offset the system's cleaner checkpointed for partition 0 (0 if none yet)."""
    directory = partition_dir(system, topic)
    path = directory / "cleaner-offset-checkpoint" if system.name == "ember" else \
        directory.parent / "cleaner-offset-checkpoint"
    try:
        lines = path.read_text().split("\n")
    except FileNotFoundError:
        return 0
    if system.name == "ember":
        return int(lines[2]) if len(lines) > 2 and lines[2].strip() else 0
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == topic and parts[1] == "0":
            return int(parts[2])
    return 0


def log_bytes(system: Any, topic: str) -> tuple[int, int, int]:
    """(bytes of the partition's .log files, of its sealed ones, base offset of its active segment);
    a file a cleaning renames under the look is left out."""
    sizes = {}
    for path in partition_dir(system, topic).glob("*.log"):
        try:
            sizes[int(path.name.split(".")[0])] = path.stat().st_size
        except FileNotFoundError:
            continue
    active = max(sizes)
    return sum(sizes.values()), sum(size for base, size in sizes.items() if base != active), active


def produce(system: Any, topic: str, records: int, keys: int) -> float:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": kafka_client_bootstrap(system), "acks": "1", "linger.ms": 5,
                         "batch.size": 256 * 1024,
                         "queue.buffering.max.kbytes": 64 * 1024, "queue.buffering.max.messages": 2_000_000,
                         "log_level": 3})
    rng = random.Random(7)
    value = os.urandom(VALUE_SIZE)
    names = [b"key-%d" % k for k in range(keys)]
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value, names[rng.randrange(keys)])
                break
            except BufferError:
                producer.poll(0.005)
    producer.flush(300)
    return time.perf_counter() - started


def release(system: Any, topic: str) -> None:
    """Lift min.compaction.lag.ms: every sealed segment becomes cleanable."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    admin = AdminClient({"bootstrap.servers": kafka_client_bootstrap(system)})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(60)


def wait_compacted(system: Any, topic: str, timeout_s: float = 900) -> float:
    """Seconds from lifting the lag until the cleaner's checkpoint reaches the active segment."""
    started = time.perf_counter()
    release(system, topic)
    while time.perf_counter() - started < timeout_s:
        _, _, active = log_bytes(system, topic)
        if active == 0:
            raise RuntimeError(f"{system.name}: {topic} has one segment only: nothing to compact")
        if cleaned_to(system, topic) >= active:
            return time.perf_counter() - started
        time.sleep(0.1)
    raise TimeoutError(f"{system.name}: {topic} not compacted within {timeout_s:.0f} s")


def consume_all(system: Any, topic: str) -> tuple[int, float]:
    from confluent_kafka import Consumer, KafkaError
    consumer = Consumer({"bootstrap.servers": kafka_client_bootstrap(system), "group.id": f"read-{topic}",
                         "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "enable.partition.eof": True, "log_level": 3})
    consumer.subscribe([topic])
    count, started = 0, time.perf_counter()
    try:
        while time.perf_counter() - started < 600:
            for message in consumer.consume(10_000, 1.0):
                if message.error():
                    if message.error().code() == KafkaError._PARTITION_EOF:
                        return count, time.perf_counter() - started
                    raise RuntimeError(message.error())
                count += 1
        raise TimeoutError(f"{system.name}: reading {topic} did not end")
    finally:
        consumer.close()


def spark_table(spark: Any, system: Any, topic: str) -> tuple[int, float]:
    started = time.perf_counter()
    if system.name == "ember":
        frame = (spark.read.format("ember").option("bootstrap", system.clients.bootstrap).option("topic", topic)
                 .option("latestByKey", "true").load())
        rows = frame.count()
    else:
        frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", system.clients.bootstrap)
                 .option("subscribe", topic).option("startingOffsets", "earliest").option("endingOffsets", "latest")
                 .load())
        from pyspark.sql import functions as F
        rows = frame.groupBy("key").agg(F.max_by("value", "offset").alias("value")).where("value IS NOT NULL").count()
    return rows, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE.parent / "results" / "compaction.md")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="compaction-bench-"))
    systems = [EmberSystem(root / "ember", brokers=1, broker_config={"log.cleaner.backoff.ms": str(CLEANER_BACKOFF_MS)}),
               KafkaSystem(root / "kafka", brokers=1, overrides={"log.cleaner.backoff.ms": CLEANER_BACKOFF_MS})]
    results: dict[tuple[str, str], list[float]] = {}

    def note(system: Any, name: str, value: float) -> None:
        results.setdefault((system.name, name), []).append(value)
    spark = None
    try:
        from run import spark_with_kafka_connector
        spark = spark_with_kafka_connector()
        for index, system in enumerate(interleaved(systems, args.repeats)):
            repeat = index // len(systems)
            topic = f"compact-{repeat}"
            create(system, topic, args.records)
            produced_s = produce(system, topic, args.records, args.keys)
            before, sealed_before, _ = log_bytes(system, topic)
            compact_s = wait_compacted(system, topic)
            after, sealed_after, active = log_bytes(system, topic)
            count, read_s = consume_all(system, topic)
            spark_table(spark, system, topic)               # warm-up: the JVM, Python workers, page cache
            rows, table_s = spark_table(spark, system, topic)
            if rows != args.keys:
                raise RuntimeError(f"{system.name}: the table read has {rows} rows, expected {args.keys}")
            log(f"{system.name:5s} repeat {repeat}: produced in {produced_s:.1f} s, compacted in {compact_s:.1f} s, "
                f"sealed segments {sealed_before / 1e6:,.0f} -> {sealed_after / 1e6:,.2f} MB (all {before / 1e6:,.0f} "
                f"-> {after / 1e6:,.1f} MB, active from offset {active:,}), read {count:,} records in {read_s:.2f} s, "
                f"table of {rows:,} keys in {table_s:.2f} s")
            note(system, "compact_s", compact_s)
            note(system, "before_mb", sealed_before / 1e6)
            note(system, "after_mb", sealed_after / 1e6)
            note(system, "sealed_records", count - (args.records - active))
            note(system, "read_rate", count / read_s)
            note(system, "table_s", table_s)
    finally:
        if spark is not None:
            spark.stop()
        for system in systems:
            system.stop()
    write(args, results)


def write(args: argparse.Namespace, results: dict[tuple[str, str], list[float]]) -> None:
    rows: list[tuple[str, str, Callable[[float, float], float]]] = [
        ("time to compact (min.compaction.lag.ms lifted -> every sealed segment cleaned) [s]", "compact_s",
         lambda e, k: k / e),
        ("sealed segments before compaction [MB]", "before_mb", lambda e, k: k / e),
        ("sealed segments after compaction [MB] (the active segment is never cleaned)", "after_mb",
         lambda e, k: k / e),
        ("records left in the sealed segments (the keys' latest: at most the key count)", "sealed_records",
         lambda e, k: k / e),
        ("reading the compacted topic from the beginning, confluent-kafka consumer [records/s]", "read_rate",
         lambda e, k: e / k),
        ("the topic as a table in Spark: ember latestByKey vs format(\"kafka\") + groupBy [s]", "table_s",
         lambda e, k: k / e),
    ]
    lines = ["# Compacted topics: ember vs Kafka 4.2\n",
             f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on this host (2 cores, shared), "
             f"{args.records:,} records of {VALUE_SIZE} B over {args.keys:,} keys, one partition, one broker each, "
             f"median (min-max) of {args.repeats} interleaved repeats. Command: "
             f"`.venv/bin/python bench/vs_kafka/compaction.py --records {args.records} --keys {args.keys} "
             f"--repeats {args.repeats}`. *ember better by* > 1 means ember wins the row.\n",
             "| row | ember | Kafka | ember better by |", "|---|---:|---:|---:|"]
    for label, key, better in rows:
        ember, kafka = results[("ember", key)], results[("kafka", key)]
        lines.append(f"| {label} | {median_and_range(ember)} | {median_and_range(kafka)} | "
                     f"{better(statistics.median(ember), statistics.median(kafka)):.2f} |")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
