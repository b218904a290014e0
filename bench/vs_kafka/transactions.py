"""Transactions, ember vs Kafka 4.2 side by side (issue "Transactions"), through the same client
(confluent-kafka/librdkafka) on 3-broker clusters of each, topics of 6 partitions RF 3:

* transactional producer throughput, transactions of 100 and of 10,000 records of 100 B (begin,
  produce, commit in a loop; records/s over the whole loop, commits included);
* read_committed consumer throughput from the beginning of the 10,000-record-transaction topic,
  one in ten of its transactions aborted (records/s of what it reads);
* end-to-end latency of a committed record: transactions of 10 records at a fixed rate, the time
  from ``produce()`` to a read_committed consumer receiving it (p50, p99);
* ember only: the cost of read_committed in the Spark source, ``count()`` read_committed against
  read_uncommitted over the same topic, on each read path.

Repeats are interleaved (a new topic per system and repeat); medians with min-max are reported.

    .venv/bin/python bench/vs_kafka/transactions.py [--records 1000000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent.parent)]   # this folder, bench/, the repository

from samples import median_and_range  # noqa: E402
from systems import EmberSystem, KafkaSystem, kafka_client_bootstrap  # noqa: E402
from workloads import interleaved, log  # noqa: E402

VALUE = b"x" * 100
PARTITIONS = 6
ABORT_EVERY = 10          # of the 10,000-record transactions, one in ten is aborted
LATENCY_TXNS_PER_S = 50
LATENCY_TXN_RECORDS = 10
LATENCY_SECONDS = 10


def producer(system: Any, transactional_id: str) -> Any:
    from confluent_kafka import Producer
    made = Producer({"bootstrap.servers": kafka_client_bootstrap(system), "transactional.id": transactional_id, "linger.ms": 5,
                     "batch.size": 256 * 1024, "queue.buffering.max.messages": 2_000_000,
                     "queue.buffering.max.kbytes": 1024 * 1024, "log_level": 3})
    made.init_transactions(60)
    return made


def produce_transactions(system: Any, topic: str, records: int, per_txn: int, abort_every: int = 0) -> float:
    """records/s of a loop of transactions of ``per_txn`` records (every ``abort_every``-th aborted)."""
    made = producer(system, f"bench-{topic}")
    started = time.perf_counter()
    for txn in range(records // per_txn):
        made.begin_transaction()
        for _ in range(per_txn):
            while True:
                try:
                    made.produce(topic, VALUE)
                    break
                except BufferError:
                    made.poll(0.005)
        if abort_every and txn % abort_every == abort_every - 1:
            made.flush(120)          # written, then aborted (librdkafka purges what it has not sent)
            made.abort_transaction(120)
        else:
            made.commit_transaction(120)
    elapsed = time.perf_counter() - started
    made.flush(60)
    return records / elapsed


def consume_committed(system: Any, topic: str, expected: int) -> float:
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": kafka_client_bootstrap(system), "group.id": f"read-{topic}",
                         "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed", "log_level": 3})
    consumer.subscribe([topic])
    count, started = 0, time.perf_counter()
    try:
        while count < expected:
            if time.perf_counter() - started > 600:
                raise TimeoutError(f"{system.name}: read {count:,} of {expected:,} committed records of {topic}")
            for message in consumer.consume(10_000, 1.0):
                if message.error() is None:
                    count += 1
        if count != expected:
            raise RuntimeError(f"{system.name}: read {count:,} committed records, expected {expected:,}")
        return count / (time.perf_counter() - started)
    finally:
        consumer.close()


def committed_latency(system: Any, topic: str) -> tuple[float, float]:
    """(p50, p99) ms from produce() to a read_committed consumer receiving the record."""
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": kafka_client_bootstrap(system), "group.id": f"lat-{topic}",
                         "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "fetch.wait.max.ms": 5, "log_level": 3})
    consumer.subscribe([topic])
    latencies: list[float] = []
    total = LATENCY_TXNS_PER_S * LATENCY_SECONDS * LATENCY_TXN_RECORDS
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set() and len(latencies) < total:
            for message in consumer.consume(1000, 0.1):
                if message.error() is None:
                    latencies.append((time.perf_counter() - float(message.value())) * 1000)
    reader = threading.Thread(target=read, daemon=True)
    made = producer(system, f"lat-{topic}")
    consumer.consume(1, 2.0)        # joined and assigned before the clock starts
    reader.start()
    started = time.perf_counter()
    for txn in range(LATENCY_TXNS_PER_S * LATENCY_SECONDS):
        due = started + txn / LATENCY_TXNS_PER_S
        time.sleep(max(0.0, due - time.perf_counter()))
        made.begin_transaction()
        for _ in range(LATENCY_TXN_RECORDS):
            made.produce(topic, b"%.6f" % time.perf_counter())
        made.commit_transaction(60)
    reader.join(60)
    stop.set()
    consumer.close()
    if len(latencies) < total:
        raise RuntimeError(f"{system.name}: {len(latencies)} of {total} committed records arrived")
    ordered = sorted(latencies)
    return ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.99)]


def spark_count(spark: Any, system: Any, topic: str, isolation: str, read_path: str) -> tuple[int, float]:
    reader = (spark.read.format("ember").option("bootstrap", system.clients.bootstrap).option("topic", topic)
              .option("isolationLevel", isolation).option("readPath", read_path))
    if read_path == "direct":
        reader = reader.option("storageRoot", str(system.cluster.data_dir))
    started = time.perf_counter()
    rows = reader.load().count()
    return rows, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per throughput run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE.parent / "results" / "transactions.md")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="transactions-bench-"))
    systems = [EmberSystem(root / "ember"), KafkaSystem(root / "kafka")]
    results: dict[tuple[str, str], list[float]] = {}

    def note(system: Any, name: str, value: float) -> None:
        results.setdefault((system.name, name), []).append(value)
    spark = None
    try:
        from run import spark_with_kafka_connector
        spark = spark_with_kafka_connector()
        for index, system in enumerate(interleaved(systems, args.repeats)):
            repeat = index // len(systems)
            small, large, lat = (f"txn{n}-{repeat}" for n in ("100", "10k", "lat"))
            for topic in (small, large, lat):
                system.create_topic(topic, PARTITIONS, 3)
            small_rate = produce_transactions(system, small, args.records // 5, 100)
            large_rate = produce_transactions(system, large, args.records, 10_000, ABORT_EVERY)
            committed = args.records - (args.records // 10_000) // ABORT_EVERY * 10_000
            read_rate = consume_committed(system, large, committed)
            p50, p99 = committed_latency(system, lat)
            log(f"{system.name:5s} repeat {repeat}: 100/txn {small_rate:,.0f} rec/s, 10k/txn {large_rate:,.0f} rec/s, "
                f"read_committed {read_rate:,.0f} rec/s, committed e2e p50 {p50:.1f} ms p99 {p99:.1f} ms")
            note(system, "small", small_rate)
            note(system, "large", large_rate)
            note(system, "read", read_rate)
            note(system, "p50", p50)
            note(system, "p99", p99)
            if system.name == "ember":
                for read_path in ("broker", "direct"):
                    spark_count(spark, system, large, "read_committed", read_path)      # warm-up
                    for isolation in ("read_committed", "read_uncommitted"):
                        rows, seconds = spark_count(spark, system, large, isolation, read_path)
                        want = committed if isolation == "read_committed" else args.records
                        if rows != want:
                            raise RuntimeError(f"Spark {isolation} {read_path} counted {rows:,}, expected {want:,}")
                        note(system, f"spark_{read_path}_{isolation}", rows / seconds)
                log(f"ember repeat {repeat}: Spark count() " + ", ".join(
                    f"{k.split('_', 1)[1]} {results[('ember', k)][-1]:,.0f} rec/s"
                    for k in sorted(key for _, key in results if key.startswith("spark_"))))
    finally:
        if spark is not None:
            spark.stop()
        for system in systems:
            system.stop()
    write(args, results)


def write(args: argparse.Namespace, results: dict[tuple[str, str], list[float]]) -> None:
    rows: list[tuple[str, str, Callable[[float, float], float]]] = [
        ("transactional producer, transactions of 100 records [records/s]", "small", lambda e, k: e / k),
        ("transactional producer, transactions of 10,000 records, 1 in 10 aborted [records/s]", "large",
         lambda e, k: e / k),
        ("read_committed consumer from the beginning of that topic [records/s]", "read", lambda e, k: e / k),
        (f"committed record end to end, p50 ({LATENCY_TXNS_PER_S} transactions/s of {LATENCY_TXN_RECORDS}) [ms]",
         "p50", lambda e, k: k / e),
        ("same, p99 [ms]", "p99", lambda e, k: k / e),
    ]
    lines = ["# Transactions: ember vs Kafka 4.2\n",
             f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on this host (2 cores, shared), 3 brokers each, "
             f"topics of {PARTITIONS} partitions RF 3, confluent-kafka on both (ember through its Kafka listener), "
             f"records of {len(VALUE)} B, {args.records:,} records per 10,000-record-transaction run "
             f"({args.records // 5:,} for the 100-record one), median (min-max) of {args.repeats} interleaved repeats. "
             f"Command: `.venv/bin/python bench/vs_kafka/transactions.py --records {args.records} "
             f"--repeats {args.repeats}`. *ember better by* > 1 means ember wins the row.\n",
             "| row | ember | Kafka | ember better by |", "|---|---:|---:|---:|"]
    for label, key, better in rows:
        ember, kafka = results[("ember", key)], results[("kafka", key)]
        lines.append(f"| {label} | {median_and_range(ember)} | {median_and_range(kafka)} | "
                     f"{better(statistics.median(ember), statistics.median(kafka)):.2f} |")
    lines += ["", "The cost of read_committed in ember's Spark source (`count()` of the 10,000-record-transaction "
                  "topic, records/s of what each isolation level reads):", "",
              "| read path | read_committed | read_uncommitted | committed / uncommitted |", "|---|---:|---:|---:|"]
    for read_path in ("broker", "direct"):
        committed = results[("ember", f"spark_{read_path}_read_committed")]
        uncommitted = results[("ember", f"spark_{read_path}_read_uncommitted")]
        lines.append(f"| {read_path} | {median_and_range(committed)} | {median_and_range(uncommitted)} | "
                     f"{statistics.median(committed) / statistics.median(uncommitted):.2f} |")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
