"""Spark throughput of the ``ember`` source and sink, in one run and one SparkSession (local[2]).

Produces N records (16-byte keys, 100-byte values; ``spark_read_bench.records``) into a topic of
one local broker, then measures (records/s):

* ``batch count``: ``spark.read.format("ember").load().count()``, ``readPath=direct`` (segment
  files) vs ``readPath=broker``;
* ``stream read``: a streaming ``availableNow`` query, ember source -> Spark's ``noop`` sink,
  direct vs broker (a fresh checkpoint each run, ``startingOffsets=earliest``);
* ``batch write``: ``df.write.format("ember")`` of the topic's key + value (read direct) into a new
  topic, ``acks=all``;
* ``stream write``: a streaming ``availableNow`` query, ember source (direct) -> ember sink, into a
  new topic, exactly-once (the default), ``acks=all``.

The write figures include the direct read of their input (compare with the read rows). Each figure
is the best of ``--repeats`` runs (default 1; writes go to a fresh topic each run).

    .venv/bin/python bench/spark_bench.py [--records 2000000 | --records 10000000] [--partitions 4]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from itertools import count
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_read_bench import CHUNK, records  # noqa: E402  (shared with the read bench)

from ember.client import Admin, Consumer, Producer, TopicPartition  # noqa: E402
from ember.launcher.local import LocalCluster  # noqa: E402
from ember.sources import register  # noqa: E402
from ember.spark_env import spark_session  # noqa: E402

TOPIC = "spark-bench"


def fill(bootstrap: str, topic: str, total: int, partitions: int) -> None:
    """Create ``topic`` and produce ``total`` records, round-robin chunks over its partitions."""
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topic(topic, partitions=partitions)
    with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=5) as producer:
        for n, start in enumerate(range(0, total, CHUNK)):
            producer.send_batch(topic, records(min(CHUNK, total - start), start), partition=n % partitions)
        producer.flush(600)


def stored(bootstrap: str, topic: str, partitions: int) -> int:
    """Records in ``topic`` (sum of its end offsets)."""
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        return sum(consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)]).values())


def best(count_: int, run: Callable[[], int], repeats: int) -> tuple[float, float]:
    """(seconds, records/s) of the fastest of ``repeats`` runs; each run returns the records it handled,
    which must be ``count_``."""
    elapsed = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        handled = run()
        elapsed = min(elapsed, time.perf_counter() - started)
        assert handled == count_, f"handled {handled:,d} records, expected {count_:,d}"
    return elapsed, count_ / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    total, partitions = args.records, args.partitions

    with tempfile.TemporaryDirectory(prefix="ember-spark-bench-") as tmp, \
            LocalCluster(Path(tmp) / "cluster", broker_count=1) as cluster:
        bootstrap = cluster.bootstrap
        print(f"producing {total:,d} records into {partitions} partitions ...", flush=True)
        fill(bootstrap, TOPIC, total, partitions)
        spark = spark_session("ember-spark-bench")
        register(spark)
        runs = count()

        def options(reader, path: str):
            return (reader.format("ember").option("bootstrap", bootstrap).option("topic", TOPIC)
                    .option("readPath", path).option("storageRoot", str(cluster.data_dir)))

        def batch_count(path: str) -> Callable[[], int]:
            return lambda: options(spark.read, path).load().count()

        def stream(path: str, sink: Callable) -> int:
            """An availableNow query from the ember source into ``sink(writeStream)``; its input rows."""
            df = options(spark.readStream, path).option("startingOffsets", "earliest").load()
            writer = df.writeStream.option("checkpointLocation", f"{tmp}/checkpoint-{next(runs)}")
            query = sink(writer).trigger(availableNow=True).start()
            query.awaitTermination()
            assert query.exception() is None, query.exception()
            return sum(p["numInputRows"] for p in query.recentProgress)

        def stream_read(path: str) -> Callable[[], int]:
            return lambda: stream(path, lambda w: w.format("noop"))

        def new_topic() -> str:
            topic = f"{TOPIC}-out-{next(runs)}"
            with Admin(bootstrap_servers=bootstrap) as admin:
                admin.create_topic(topic, partitions=partitions)
            return topic

        def batch_write() -> int:
            topic = new_topic()
            (options(spark.read, "direct").load().select("key", "value").write.format("ember").mode("append")
             .option("bootstrap", bootstrap).option("topic", topic).option("acks", "all").save())
            return stored(bootstrap, topic, partitions)

        def stream_write() -> int:
            topic = new_topic()
            stream("direct", lambda w: w.format("ember").option("bootstrap", bootstrap).option("topic", topic)
                   .option("acks", "all"))
            return stored(bootstrap, topic, partitions)

        for path in ("direct", "broker"):  # warm-up: Python workers, JIT, page cache
            assert batch_count(path)() == total, f"readPath={path} did not read every produced record"

        cases = [("batch count", "direct", batch_count("direct")), ("batch count", "broker", batch_count("broker")),
                 ("stream read", "direct", stream_read("direct")), ("stream read", "broker", stream_read("broker")),
                 ("batch write", "direct", batch_write), ("stream write EO", "direct", stream_write)]
        results = []
        for name, path, run in cases:
            seconds, rate = best(total, run, args.repeats)
            print(f"  {name:16s} {path:7s} {seconds:8.2f} s  {rate:>12,.0f} records/s", flush=True)
            results.append((name, path, seconds, rate))
        spark.stop()

    rates = {(name, path): rate for name, path, _, rate in results}
    print(f"\n{total:,d} records x {16 + 100} bytes, {partitions} partitions, local[2], 1 broker, "
          f"best of {args.repeats}")
    print(f"{'case':17s}{'read path':>10s}{'seconds':>10s}{'records/s':>14s}{'MB/s':>9s}{'broker/direct':>15s}")
    for name, path, seconds, rate in results:
        ratio = f"{rate / rates[(name, 'direct')]:.2f}" if path == "broker" else ""
        print(f"{name:17s}{path:>10s}{seconds:>10.2f}{rate:>14,.0f}{rate * 116 / 1e6:>9.1f}{ratio:>15s}")


if __name__ == "__main__":
    main()
