"""Many partitions, ember then Kafka on the same host: one topic of ``--partitions`` partitions
(RF 3, 3 brokers each), created with confluent-kafka's AdminClient; ``--records`` 100-byte records
produced with acks=all (idempotent, linger 5 ms; ``partitions.produce`` of the vs_kafka partitions
workload, which measures the same with repeats and Spark); a group consumer reading them all (join included); then the
CPU each idle broker uses and its RSS. One run per system, one after the other (not at once: the
idle figures would measure the other cluster too). Numbers are for comparing the two systems in
one run on one host, not capacity.

    .venv/bin/python bench/partition_scale_bench.py --partitions 1000 --records 100000

Needs the vs_kafka set-up (``bash bench/vs_kafka/setup.sh``: Kafka's jars, confluent-kafka).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "vs_kafka"), str(HERE)]

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka_cluster import KafkaCluster  # noqa: E402
from partitions import consume, produce  # noqa: E402
from systems import rss_mb  # noqa: E402
from workloads import cpu_seconds  # noqa: E402

from ember.launcher.local import LocalCluster  # noqa: E402

TOPIC = "partition-scale"
IDLE_SETTLE_S = 10
IDLE_MEASURE_S = 30


def run(name: str, bootstrap: str, pids: list[int], partitions: int, records: int,
        log: Callable[[str], None]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    started = time.monotonic()
    admin.create_topics([NewTopic(TOPIC, partitions, 3)])[TOPIC].result(600)
    log(f"{name}: created {partitions} partitions (RF 3) in {time.monotonic() - started:.2f} s")
    log(f"{name}: produced {records:,} records, acks=all, {produce(bootstrap, TOPIC, records):,.0f} records/s")
    log(f"{name}: consumed {records:,} records (group, join included), "
        f"{consume(bootstrap, TOPIC, records):,.0f} records/s")
    time.sleep(IDLE_SETTLE_S)
    before = [cpu_seconds(pid) for pid in pids]
    time.sleep(IDLE_MEASURE_S)
    idle = [round((cpu_seconds(pid) - b) / IDLE_MEASURE_S * 100, 1) for pid, b in zip(pids, before)]
    log(f"{name}: idle CPU per broker {idle} % of a core; RSS {[round(rss_mb(pid)) for pid in pids]} MB; "
        f"open files {[len(os.listdir(f'/proc/{pid}/fd')) for pid in pids]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--systems", default="ember,kafka", help="comma list: ember, kafka")
    args = parser.parse_args()

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    systems = args.systems.split(",")
    if set(systems) - {"ember", "kafka"}:
        parser.error(f"unknown system in {args.systems!r}")
    root = Path(tempfile.mkdtemp(prefix="partition-scale-"))
    try:
        for system in systems:
            if system == "ember":
                with LocalCluster(root / "ember", broker_count=3) as ember:
                    run("ember", ember.kafka_bootstrap, [b.pid for b in ember.brokers.values() if b.pid],
                        args.partitions, args.records, log)
            else:
                with KafkaCluster(root / "kafka", node_count=3) as kafka:
                    run("kafka", kafka.bootstrap, [n.pid for n in kafka.nodes.values() if n.pid],
                        args.partitions, args.records, log)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
