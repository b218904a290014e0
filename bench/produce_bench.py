"""Producer throughput and latency against one real broker, beside the log's own append rate.

One producer thread, 100-byte values, acks=1, replication factor 1, one broker started with
LocalCluster. Reports, in one run:

* ``send``: records/s and MB/s (value bytes) through ``Producer.send`` + ``flush``, and the
  send-to-acknowledgement latency p50/p99 of a sample of records, both at full speed (mostly
  queueing behind earlier records) and at a steady 2000 records/s;
* ``send_batch``: MB/s for a whole Arrow table, without keys and with keys (vectorized murmur2);
* the ceiling: ``ember.log.Log.append_as_leader`` appending the same batches in-process;

and the ratios of each client path to that ceiling. ``--profile`` runs the ``send`` loop under
cProfile and prints its hot spots.

    .venv/bin/python bench/produce_bench.py [--records 1000000] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from ember.client import Admin, Producer
from ember.launcher.local import LocalCluster
from ember.log import Log
from ember.record import build_batch

VALUE_SIZE = 100
MB = 1_000_000


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def bench_send(bootstrap: str, topic: str, records: int, profile: bool) -> dict[str, float]:
    value = os.urandom(VALUE_SIZE)
    latencies: list[float] = []
    with Producer(bootstrap, acks=1, linger_ms=5) as producer:
        producer.send(topic, value).get(30)   # metadata and connection warm-up
        profiler = cProfile.Profile() if profile else None
        started = time.perf_counter()
        if profiler:
            profiler.enable()
        send = producer.send
        for i in range(records):
            if i % 1000 == 0:
                sent_at = time.perf_counter()
                send(topic, value).add_callback(lambda _, t=sent_at: latencies.append(time.perf_counter() - t))
            else:
                send(topic, value)
        sent = time.perf_counter()
        producer.flush(120)
        elapsed = time.perf_counter() - started
        if profiler:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
    return {"records_per_s": records / elapsed, "mb_per_s": records * VALUE_SIZE / elapsed / MB,
            "send_only_records_per_s": records / (sent - started),
            "p50_ms": percentile(latencies, 0.5) * 1000, "p99_ms": percentile(latencies, 0.99) * 1000}


def bench_paced_latency(bootstrap: str, topic: str, records: int = 2000, per_s: int = 2000) -> tuple[float, float]:
    """Send-to-ack latency p50/p99 (ms) at a modest steady rate, where queueing does not dominate."""
    value = os.urandom(VALUE_SIZE)
    latencies: list[float] = []
    with Producer(bootstrap, acks=1, linger_ms=5) as producer:
        producer.send(topic, value).get(30)
        started = time.perf_counter()
        for i in range(records):
            while time.perf_counter() < started + i / per_s:
                time.sleep(0.0002)
            sent_at = time.perf_counter()
            producer.send(topic, value).add_callback(lambda _, t=sent_at: latencies.append(time.perf_counter() - t))
        producer.flush(60)
    return percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000


def value_table(rows: int, keyed: bool) -> pa.Table:
    value = os.urandom(VALUE_SIZE)
    columns = {"value": pa.array([value] * rows, pa.binary())}
    if keyed:
        columns["key"] = pa.array([b"key-%07d" % i for i in range(rows)], pa.binary())
    return pa.table(columns)


def bench_send_batch(bootstrap: str, topic: str, table: pa.Table) -> float:
    with Producer(bootstrap, acks=1) as producer:
        producer.send_batch(topic, table.slice(0, 1000)).result(30)   # warm-up
        started = time.perf_counter()
        producer.send_batch(topic, table).result(120)
        elapsed = time.perf_counter() - started
    return table.num_rows * VALUE_SIZE / elapsed / MB


def bench_log_append(records: int, batch_records: int) -> float:
    """The ceiling: append pre-built batches of the same records straight into a Log."""
    value = os.urandom(VALUE_SIZE)
    raw = build_batch(pa.table({"value": pa.array([value] * batch_records, pa.binary())}))
    with tempfile.TemporaryDirectory() as directory:
        log = Log.open(Path(directory) / "bench-0")
        started = time.perf_counter()
        for _ in range(records // batch_records):
            log.append_as_leader(raw, 0)
        elapsed = time.perf_counter() - started
        log.close()
    return (records // batch_records) * batch_records * VALUE_SIZE / elapsed / MB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--profile", action="store_true", help="cProfile the send loop")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as directory, LocalCluster(Path(directory), broker_count=1) as cluster:
        with Admin(cluster.bootstrap) as admin:
            for name in ("send", "batch", "keyed"):
                admin.create_topic(f"bench-{name}", partitions=1 if name != "keyed" else 6)
        send = bench_send(cluster.bootstrap, "bench-send", args.records, args.profile)
        paced_p50, paced_p99 = bench_paced_latency(cluster.bootstrap, "bench-send")
        batch_mb = bench_send_batch(cluster.bootstrap, "bench-batch", value_table(args.records, keyed=False))
        keyed_mb = bench_send_batch(cluster.bootstrap, "bench-keyed", value_table(args.records, keyed=True))
    ceiling_small = bench_log_append(args.records, 1500)   # about what linger_ms=5 collects
    ceiling_large = bench_log_append(args.records, 8000)   # about a send_batch chunk (~1 MB)

    print(f"\nproduce bench: {args.records:,} records of {VALUE_SIZE} bytes, acks=1, RF=1, one broker\n")
    print(f"  log append (in-process, 1500-record batches)    {ceiling_small:9.1f} MB/s")
    print(f"  log append (in-process, 8000-record batches)    {ceiling_large:9.1f} MB/s")
    print(f"  send + flush                                    {send['mb_per_s']:9.1f} MB/s  "
          f"{send['records_per_s']:,.0f} records/s  (send calls alone {send['send_only_records_per_s']:,.0f}/s)"
          f"   ratio {send['mb_per_s'] / ceiling_small:.2f}")
    print(f"  send latency at full speed (queueing)           p50 {send['p50_ms']:.1f} ms  p99 {send['p99_ms']:.1f} ms")
    print(f"  send latency at 2000 records/s (linger_ms=5)    p50 {paced_p50:.1f} ms  p99 {paced_p99:.1f} ms")
    print(f"  send_batch, no keys                             {batch_mb:9.1f} MB/s   ratio {batch_mb / ceiling_large:.2f}")
    print(f"  send_batch, keyed (6 partitions, murmur2)       {keyed_mb:9.1f} MB/s   ratio {keyed_mb / ceiling_large:.2f}")


if __name__ == "__main__":
    main()
