"""What broker metrics cost: producer and consumer throughput with metrics off and on, as ratios.

One broker (LocalCluster), 100-byte records, RF 1. Per run: ``bench/produce_bench.py``'s send
loop (``Producer.send`` + ``flush``, acks=1), then one consumer reading the topic back from the
start, ``--consume-passes`` times, with ``poll_batches`` (Arrow batches, so the broker's fetch path and not per-record Python
objects sets the pace). "On" serves ``/metrics`` and is fetched every ``--scrape-interval`` seconds
meanwhile (5; Prometheus's example config scrapes every 15 s); "off" is a broker without ``metrics.listen``, which creates no
metric at all. Each round runs off and on back to back on fresh clusters (in alternating order);
the reported ratio (on / off, aim >= 0.97) is the median over rounds of each round's ratio, so
load from neighbours that drifts between rounds cancels out. Beside throughput, the broker
process's CPU seconds per million records (from /proc) are compared. Last, an accounting that
neighbours cannot blur: the metric work of the "on" runs (requests served × the bookkeeping one
request costs, timed here; scrapes × the broker CPU one scrape costs, measured on the broker)
as a share of the broker's CPU, i.e. the on/off ratio that work alone implies.

    .venv/bin/python bench/metrics_bench.py [--records 1000000] [--rounds 5] [--consume-passes 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from produce_bench import bench_send

from ember.client import Admin, Consumer, TopicPartition
from ember.launcher.local import LocalCluster
from ember.launcher.scrape import http_get, scrape
from ember.metrics.broker_metrics import BrokerMetrics
from ember.metrics.requests import RequestMetrics
from ember.wire.api_keys import ApiKey
from ember.wire.reply import Reply

TOPIC = "bench-metrics"
SCRAPES_TIMED = 50
PROMETHEUS_INTERVAL_S = 15.0


def bench_consume(bootstrap: str, records: int, passes: int) -> float:
    """Records/s reading the first ``records`` of partition 0, ``passes`` times over."""
    partition = TopicPartition(TOPIC, 0)
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([partition])
        started, read = time.perf_counter(), 0
        deadline = started + 300
        for _ in range(passes):
            consumer.seek(partition, 0)
            this_pass = 0
            while this_pass < records:
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"read {read + this_pass} of {records * passes} records in 300 s")
                this_pass += sum(batch.num_rows for batch in consumer.poll_batches(1000).values())
            read += this_pass
        return read / (time.perf_counter() - started)


def scrape_until(stop: threading.Event, host: str, port: int, interval_s: float, scrapes: list[int]) -> None:
    """Fetch /metrics like Prometheus (without parsing it here, in the producer's process)."""
    while not stop.wait(interval_s):
        http_get(host, port, "/metrics", 10)
        scrapes.append(1)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    produce_per_s: float
    consume_per_s: float
    produce_cpu_s: float     # broker CPU while producing
    consume_cpu_s: float     # broker CPU while consuming
    scrapes: int
    seconds: float           # producing and consuming, wall clock
    requests: int = 0        # requests the broker counted (metrics on)
    scrape_cpu_s: float = 0.0   # broker CPU of one scrape (metrics on)


def run(metrics: bool, records: int, passes: int, scrape_interval_s: float) -> Run:
    """One fresh one-broker cluster: produce, then consume, with the broker's CPU time of each."""
    with tempfile.TemporaryDirectory() as directory, \
            LocalCluster(Path(directory), broker_count=1, metrics=metrics) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic(TOPIC, partitions=1)
        stop, scrapes = threading.Event(), []
        scraper = None
        if metrics:
            broker = cluster.brokers[1]
            scraper = threading.Thread(target=scrape_until, args=(stop, broker.host, broker.metrics_port,
                                                                  scrape_interval_s, scrapes))
            scraper.start()
        pid = cluster.brokers[1].pid
        assert pid is not None
        started = time.perf_counter()
        try:
            cpu = cpu_seconds(pid)
            produced = bench_send(cluster.bootstrap, TOPIC, records, profile=False)["records_per_s"]
            cpu_produce, cpu = cpu_seconds(pid) - cpu, cpu_seconds(pid)
            consumed = bench_consume(cluster.bootstrap, records, passes)
            cpu_consume = cpu_seconds(pid) - cpu
        finally:
            stop.set()
            if scraper is not None:
                scraper.join(30)
        result = Run(produced, consumed, cpu_produce, cpu_consume, len(scrapes), time.perf_counter() - started)
        if metrics:
            broker = cluster.brokers[1]
            result.requests = int(scrape(broker.host, broker.metrics_port).total(
                "ember_network_requestmetrics_requests_total"))
            cpu = cpu_seconds(pid)
            for _ in range(SCRAPES_TIMED):
                http_get(broker.host, broker.metrics_port, "/metrics", 10)
            result.scrape_cpu_s = (cpu_seconds(pid) - cpu) / SCRAPES_TIMED
    return result


def bookkeeping_s(requests: int = 20000) -> float:
    """Seconds of metric work one produce request costs: its timer (count, error walk, two
    histograms, in-flight count) and its batch's topic counters."""
    observer, stats = RequestMetrics().listener("ember"), BrokerMetrics().topic(TOPIC)
    reply = Reply({"error_code": 0, "partitions": [{"topic": TOPIC, "partition": 0, "error_code": 0}]})
    started = time.perf_counter()
    for _ in range(requests):
        timer = observer.start(ApiKey.PRODUCE)
        timer.handled(reply)
        timer.done()
        stats.produced(2000, 200_000)
    return (time.perf_counter() - started) / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--consume-passes", type=int, default=5, help="times the consumer reads the topic")
    parser.add_argument("--scrape-interval", type=float, default=5.0, help="seconds between scrapes (metrics on)")
    args = parser.parse_args()

    rounds: list[dict[bool, Run]] = []
    for round_ in range(args.rounds):
        rounds.append({})
        for metrics in ((False, True) if round_ % 2 == 0 else (True, False)):
            result = rounds[-1][metrics] = run(metrics, args.records, args.consume_passes, args.scrape_interval)
            print(f"round {round_ + 1} metrics {'on ' if metrics else 'off'}: produce {result.produce_per_s:,.0f} "
                  f"records/s ({result.produce_cpu_s:.2f} broker CPU s), consume {result.consume_per_s:,.0f} "
                  f"records/s ({result.consume_cpu_s:.2f} broker CPU s), {result.scrapes} scrapes", flush=True)

    def median(metrics: bool, field: str) -> float:
        return statistics.median(getattr(r[metrics], field) for r in rounds)

    def ratio(field: str, higher_is_better: bool = True) -> float:
        pairs = [(getattr(r[True], field), getattr(r[False], field)) for r in rounds]
        return statistics.median(on / off if higher_is_better else off / on for on, off in pairs)

    consumed = args.records * args.consume_passes
    print(f"\nmetrics cost: {args.records:,} records of 100 bytes, one broker, acks=1, {args.rounds} rounds, "
          f"scraped every {args.scrape_interval:g} s\n")
    print(f"  {'':28}{'off':>12}{'on':>12}{'ratio':>8}  (median per round of on/off; CPU: off/on)")
    for name, field, scale in (("produce records/s", "produce_per_s", 1.0),
                               ("consume records/s", "consume_per_s", 1.0)):
        print(f"  {name:28}{median(False, field) * scale:>12,.0f}{median(True, field) * scale:>12,.0f}"
              f"{ratio(field):>8.3f}")
    for name, field, count in (("produce broker CPU s / 1M", "produce_cpu_s", args.records),
                               ("consume broker CPU s / 1M", "consume_cpu_s", consumed)):
        print(f"  {name:28}{median(False, field) * 1e6 / count:>12.2f}{median(True, field) * 1e6 / count:>12.2f}"
              f"{ratio(field, higher_is_better=False):>8.3f}")

    per_request = bookkeeping_s()

    def implied(interval_s: float) -> float:
        """Median over rounds of 1 - (metric work / broker CPU) with a scrape every ``interval_s``."""
        shares = [(on.requests * per_request + on.seconds / interval_s * on.scrape_cpu_s) /
                  (on.produce_cpu_s + on.consume_cpu_s) for on in (r[True] for r in rounds)]
        return 1 - statistics.median(shares)

    print(f"\n  metric work: {per_request * 1e6:.1f} us per request, "
          f"{statistics.median(r[True].scrape_cpu_s for r in rounds) * 1e3:.1f} ms broker CPU per scrape, "
          f"{statistics.median(r[True].requests for r in rounds):,.0f} requests per run"
          f"\n  on/off ratio that work implies: {implied(args.scrape_interval):.3f} scraped every "
          f"{args.scrape_interval:g} s, {implied(PROMETHEUS_INTERVAL_S):.3f} every {PROMETHEUS_INTERVAL_S:g} s, "
          f"{implied(1.0):.3f} every 1 s")


if __name__ == "__main__":
    main()
