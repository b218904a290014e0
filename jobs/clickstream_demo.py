"""The main job: user-activity tracking end to end on a local ember cluster.

Starts a real cluster (ZooKeeper + 3 brokers), creates ``clicks`` (6 partitions, RF 3), produces a
user-activity stream (users, pages, actions, event times) while ``stream_to_delta`` streams it into
a Delta table, shows progress, then prints per-user and per-minute counts, the query's lag per
partition, and verifies the table against what was produced (every record exactly once).

    .venv/bin/python jobs/clickstream_demo.py [--events 300000] [--data data/demo]
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa

from ember.client import Admin, Producer
from ember.launcher.local import LocalCluster
from ember.spark_env import spark_session
from stream_to_delta import parse_args as stream_args
from stream_to_delta import start_stream

TOPIC = "clicks"
PAGES = ["/", "/search", "/cart", "/checkout"] + [f"/products/{i}" for i in range(40)]
ACTIONS = ["view", "view", "view", "click", "click", "add_to_cart", "purchase"]
EVENT_SCHEMA = "user STRING, page STRING, action STRING, ts LONG"
START_MS = 1_790_000_000_000  # event time of the first click (fixed: results are reproducible)


def generate(events: int, users: int, chunk: int, seed: int = 7):
    """Yield Arrow tables of clicks (key = user id, value = JSON) in event-time order."""
    rng = random.Random(seed)
    for first in range(0, events, chunk):
        rows = min(chunk, events - first)
        user_ids = [f"user-{rng.randrange(users):04d}" for _ in range(rows)]
        times = [START_MS + (first + i) * 600_000 // events for i in range(rows)]  # 10 minutes of clicks
        values = [json.dumps({"user": u, "page": rng.choice(PAGES), "action": rng.choice(ACTIONS), "ts": t})
                  for u, t in zip(user_ids, times)]
        yield pa.table({"key": pa.array([u.encode() for u in user_ids], pa.binary()),
                        "value": pa.array([v.encode() for v in values], pa.binary()),
                        "timestamp": pa.array(times, pa.int64())}), Counter(user_ids)


def produce(bootstrap: str, events: int, users: int, expected: Counter, done: threading.Event) -> None:
    with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=20) as producer:
        for table, per_user in generate(events, users, chunk=max(1000, events // 30)):
            producer.send_batch(TOPIC, table).result(timeout=60)
            expected.update(per_user)
            time.sleep(0.1)  # a stream, not one bulk load
    done.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--users", type=int, default=500)
    parser.add_argument("--data", type=Path, default=Path("data/demo"))
    args = parser.parse_args(argv)
    shutil.rmtree(args.data, ignore_errors=True)
    started = time.monotonic()

    with LocalCluster(args.data / "cluster", broker_count=3).start(progress=lambda m: print(f"[cluster] {m}")) as cluster:
        with Admin(bootstrap_servers=cluster.bootstrap) as admin:
            admin.create_topic(TOPIC, partitions=6, replication_factor=3)
        print(f"[topic] created {TOPIC}: 6 partitions, replication factor 3")

        spark = spark_session("ember-clickstream-demo")
        spark.sparkContext.setLogLevel("ERROR")
        table = str((args.data / "delta" / "clicks").resolve())
        query = start_stream(spark, stream_args([
            "--bootstrap", cluster.bootstrap, "--topic", TOPIC, "--table", table,
            "--checkpoint", str((args.data / "checkpoints" / "clicks").resolve()),
            "--value-format", "json", "--schema", EVENT_SCHEMA, "--interval", "2 seconds",
            "--storage-root", str((args.data / "cluster").resolve())]))

        expected: Counter = Counter()
        produced = threading.Event()
        producer = threading.Thread(target=produce, args=(cluster.bootstrap, args.events, args.users, expected, produced))
        producer.start()
        rows_in_delta = wait_for_stream(spark, query, table, args.events, produced)
        producer.join(timeout=60)
        end_offsets = (query.lastProgress or {}).get("sources", [{}])[0].get("endOffset")
        query.stop()

        ok = report(spark, table, expected, args.events, rows_in_delta)
        print_lag(cluster.bootstrap, end_offsets)
        spark.stop()
    print(f"\n{'VERIFIED' if ok else 'FAILED'}: demo finished in {time.monotonic() - started:.0f}s")
    return 0 if ok else 1


def wait_for_stream(spark, query, table: str, events: int, produced: threading.Event, timeout_s: float = 150) -> int:
    """Show progress until the stream has written every produced event (bounded)."""
    deadline = time.monotonic() + timeout_s
    written = 0
    while time.monotonic() < deadline:
        time.sleep(2)
        if query.exception():
            raise query.exception()
        progress = query.lastProgress or {}
        written = sum(p.get("numInputRows", 0) for p in query.recentProgress) if query.recentProgress else 0
        print(f"[stream] batch {progress.get('batchId', '-'):>3}  rows so far {written:>8,}/{events:,}"
              f"  last batch {progress.get('numInputRows', 0):>7,} rows"
              f"  {progress.get('processedRowsPerSecond', 0.0):>9,.0f} rows/s")
        if produced.is_set() and written >= events:
            break
    return spark.read.format("delta").load(table).count()


def report(spark, table: str, expected: Counter, events: int, rows: int) -> bool:
    from pyspark.sql import functions as F

    clicks = spark.read.format("delta").load(table)
    print("\nTop users by clicks:")
    per_user = clicks.groupBy("user").count()
    per_user.orderBy(F.desc("count"), "user").show(5, truncate=False)
    print("Clicks per minute of event time:")
    (clicks.withColumn("minute", F.date_format(F.timestamp_millis("ts"), "yyyy-MM-dd HH:mm"))
     .groupBy("minute").agg(F.count("*").alias("clicks"),
                            F.sum(F.when(F.col("action") == "purchase", 1).otherwise(0)).alias("purchases"))
     .orderBy("minute").show(12, truncate=False))
    unique = clicks.select("partition", "offset").distinct().count()
    actual = {row["user"]: row["count"] for row in per_user.collect()}
    checks = {
        f"rows in Delta = events produced ({rows:,} = {events:,})": rows == events,
        f"no duplicate (partition, offset) ({unique:,} unique)": unique == rows,
        "per-user counts match the producer's": actual == dict(expected),
    }
    for text, passed in checks.items():
        print(f"  [{'ok' if passed else 'FAIL'}] {text}")
    return all(checks.values())


def print_lag(bootstrap: str, end_offsets: str | dict | None) -> None:
    """Lag of the streaming query per partition: high watermark − the query's last committed offset."""
    if isinstance(end_offsets, str):
        end_offsets = json.loads(end_offsets)
    committed = {int(p): o for p, o in (end_offsets or {}).get(TOPIC, {}).items()}
    with Admin(bootstrap_servers=bootstrap) as admin:
        description = admin.describe_topic(TOPIC)
    print("\nConsumer lag of the streaming query:")
    print(f"  {'partition':>9} {'high watermark':>15} {'query offset':>13} {'lag':>6}")
    for partition in description.partitions:
        done = committed.get(partition.partition, 0)
        print(f"  {partition.partition:>9} {partition.high_watermark:>15,} {done:>13,} {partition.high_watermark - done:>6,}")


if __name__ == "__main__":
    sys.exit(main())
