"""Spark batch read throughput of the ``ember`` source, beside reading the same records from files.

Produces N records (16-byte keys, 100-byte values) into a topic of one local broker, then
measures, in one run and one SparkSession (local[2]):

* ``ember direct``: ``spark.read.format("ember")`` with ``readPath=direct`` (segment files);
* ``ember broker``: the same read through the broker (``readPath=broker``);
* ``spark parquet``: Spark reading the same records from a Parquet file (Spark's own floor);
* ``pyarrow parquet`` / ``pyarrow ipc``: pyarrow reading the same records in-process (no Spark);

each read is consumed by Spark's ``noop`` sink (every row crosses into the JVM, nothing is
written). pyarrow reads copy the file's bytes into memory (no memory map). Each figure is the
best of 3 runs. Prints records/s and each path's ratio to the references.

    .venv/bin/python bench/spark_read_bench.py [--records 1000000 | --10m] [--partitions 4]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from ember.client import Admin, Producer
from ember.launcher.local import LocalCluster
from ember.sources import register
from ember.spark_env import spark_session

KEY_SIZE, VALUE_SIZE = 16, 100
CHUNK = 100_000
TOPIC = "spark-read-bench"


def records(count: int, offset: int) -> pa.Table:
    """``count`` records with distinct keys; the values share random bytes (compression-neutral)."""
    value = os.urandom(VALUE_SIZE)
    return pa.table({
        "key": pa.array([f"{i:016d}".encode() for i in range(offset, offset + count)], pa.binary()),
        "value": pa.array([value] * count, pa.binary()),
        "timestamp": pa.array([1_700_000_000_000 + i for i in range(offset, offset + count)], pa.int64()),
    })


def produce(bootstrap: str, total: int, partitions: int, files: Path) -> tuple[Path, Path]:
    """Fill the topic (round-robin chunks over partitions) and write the same records to Parquet
    and Arrow IPC files; returns the two file paths."""
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topic(TOPIC, partitions=partitions)
    parquet, ipc = files / "records.parquet", files / "records.arrow"
    with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=5) as producer, \
            pq.ParquetWriter(parquet, records(1, 0).schema) as pq_writer, \
            pa.OSFile(str(ipc), "wb") as sink, pa.ipc.new_file(sink, records(1, 0).schema) as ipc_writer:
        for n, start in enumerate(range(0, total, CHUNK)):
            table = records(min(CHUNK, total - start), start)
            producer.send_batch(TOPIC, table, partition=n % partitions)
            pq_writer.write_table(table)
            ipc_writer.write_table(table)
        producer.flush(600)
    return parquet, ipc


def timed(label: str, count: int, run: Callable[[], object], repeats: int = 3) -> float:
    """records/s of the fastest of ``repeats`` full reads of ``count`` records."""
    elapsed = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        elapsed = min(elapsed, time.perf_counter() - started)
    rate = count / elapsed
    print(f"{label:16s} {count:>11,d} records  {elapsed:7.2f} s  {rate:>13,.0f} records/s", flush=True)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--10m", dest="ten_million", action="store_true", help="read 10,000,000 records")
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    total = 10_000_000 if args.ten_million else args.records

    with tempfile.TemporaryDirectory(prefix="ember-spark-bench-") as tmp, \
            LocalCluster(Path(tmp) / "cluster", broker_count=1) as cluster:
        print(f"producing {total:,d} records into {args.partitions} partitions ...", flush=True)
        parquet, ipc = produce(cluster.bootstrap, total, args.partitions, Path(tmp))
        spark = spark_session("ember-spark-read-bench")
        register(spark)

        def ember(path: str):
            return (spark.read.format("ember").option("bootstrap", cluster.bootstrap).option("topic", TOPIC)
                    .option("readPath", path).option("storageRoot", str(cluster.data_dir)).load())

        for path in ("direct", "broker"):  # also the warm-up: Python workers, JIT, page cache
            assert ember(path).count() == total, f"readPath={path} did not read every produced record"

        def noop(df) -> Callable[[], None]:
            return lambda: df.write.format("noop").mode("overwrite").save()

        rates = {
            "ember direct": timed("ember direct", total, noop(ember("direct"))),
            "ember broker": timed("ember broker", total, noop(ember("broker"))),
            "spark parquet": timed("spark parquet", total, noop(spark.read.parquet(str(parquet)))),
            "pyarrow parquet": timed("pyarrow parquet", total, lambda: pq.read_table(parquet)),
            "pyarrow ipc": timed("pyarrow ipc", total, lambda: pa.ipc.open_file(pa.OSFile(str(ipc))).read_all()),
        }
        spark.stop()

    print("\nratios (records/s of the row / records/s of the column)")
    references = ["spark parquet", "pyarrow parquet", "pyarrow ipc"]
    print(f"{'':16s}" + "".join(f"{r:>17s}" for r in references))
    for path in ("ember direct", "ember broker"):
        print(f"{path:16s}" + "".join(f"{rates[path] / rates[r]:>17.2f}" for r in references))
    print(f"{'broker/direct':16s}{rates['ember broker'] / rates['ember direct']:>17.2f}")


if __name__ == "__main__":
    main()
