"""ember vs Apache Kafka 4.x (KRaft) and Spark's Kafka connector, side by side in one run.

Starts a 3-broker ember cluster (ZooKeeper + 3 brokers) and a 3-node Kafka KRaft cluster on
127.0.0.1, runs the same workloads against both (interleaved, ``--repeats`` runs each; the table
shows the median, min-max and best of them), and writes ``vs_kafka.md`` (table), ``vs_kafka.png``
(chart) and ``vs_kafka.json`` (every sample) to ``--out``, and the JSON again as
``--out``/history/<UTC date>T<time>Z-<short commit>.json. ``--compare-to OLD.json`` then compares
this run with an older one (compare.py; exit code 1 when a headline row regressed). Everything it
started is stopped and its temporary directory removed, also on failure or Ctrl-C.

Workloads (``--only`` takes a comma list of these names):

  produce      producer throughput, 100 B records, acks=1 RF=1 and acks=all RF=3
  latency      end-to-end latency p50/p99/p99.9 at a fixed rate (acks=all RF=3)
  consume      consumer throughput from the beginning of a topic
  spark-read   Spark batch read: count() and sum(length(value))
  spark-write  Spark streaming write, availableNow, into an RF=3 topic
  footprint    broker RSS after the load, cluster cold start, one broker restart
  round-trips  one small request's round trip and broker CPU: ListOffsets earliest/latest, one at a
               time on one connection, as Spark's connector sends two per poll (round_trips.py)
  scale        the cost per record: 1-8 producer processes, records of 10 B-100 KB, each compression.type
               (per-record clients: ember's send, confluent-kafka through ember's Kafka listener and on Kafka)
  partitions   topics of 6 to 5,000 partitions (RF 3): create, produce acks=all, consume, idle CPU, RSS and
               open files per broker, Spark count() (partitions.py); not in the default set:
               ``--only partitions --out bench/results/partitions``

Run it with ``bash bench/vs_kafka/run.sh [options]`` (set-up first: Kafka jars, Spark's connector,
confluent-kafka and matplotlib into .venv), or directly with ``.venv/bin/python bench/vs_kafka/run.py``.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]           # this folder's modules, then bench/'s

import compare  # noqa: E402
import workloads  # noqa: E402
from partitions import partition_scale  # noqa: E402
from report import write  # noqa: E402
from round_trips import request_round_trips  # noqa: E402
from systems import EmberSystem, KafkaSystem, System  # noqa: E402
from workloads import Row, log  # noqa: E402

ALL = ("produce", "latency", "consume", "spark-read", "spark-write", "footprint", "round-trips", "scale",
       "partitions")
#: What a run without ``--only`` measures: the partitions workload takes about 45 minutes on its own.
DEFAULT = tuple(name for name in ALL if name != "partitions")
READ_TOPIC = "read"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(DEFAULT),
                        help=f"comma list of workloads (default: {', '.join(DEFAULT)}; also: partitions)")
    parser.add_argument("--partition-counts", default="6,100,1000,5000",
                        help="partitions: topic sizes (default 6,100,1000,5000)")
    parser.add_argument("--partition-records", type=int, default=100_000,
                        help="partitions: records produced and consumed per topic (default 100k)")
    parser.add_argument("--partition-repeats", type=int, default=3,
                        help="partitions: create/produce/consume runs per size and system (default 3)")
    parser.add_argument("--partition-spark-max", type=int, default=1000,
                        help="partitions: Spark rows only up to this many partitions (default 1000; 0: none)")
    parser.add_argument("--records", type=int, default=1_000_000, help="records per producer run (default 1M)")
    parser.add_argument("--consume-records", type=int, default=1_000_000, help="records per consumer run (default 1M)")
    parser.add_argument("--spark-records", type=int, default=2_000_000,
                        help="records in the topic Spark reads (default 2M; the issue's figure is 10000000)")
    parser.add_argument("--write-records", type=int, default=1_000_000, help="rows per Spark streaming write (default 1M)")
    parser.add_argument("--latency-rate", type=int, default=20_000, help="records/s for the latency run (default 20k)")
    parser.add_argument("--latency-seconds", type=float, default=10.0, help="length of one latency run (default 10 s)")
    parser.add_argument("--round-trip-requests", type=int, default=4_000,
                        help="round-trips: requests per run (default 4,000: Spark's per million records)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="runs per system and case, interleaved; the median is the headline figure (default 5)")
    parser.add_argument("--scale-repeats", type=int, default=3,
                        help="runs per system and case of the scale rows (default 3: they are many)")
    parser.add_argument("--out", type=Path, default=HERE.parent / "results", help="where the results go (default bench/results)")
    parser.add_argument("--compare-to", type=Path, metavar="OLD.json",
                        help="after the run, compare it with this earlier vs_kafka.json (or a history/ file): "
                             "compare.py's table; exit code 1 when a headline row regressed")
    args = parser.parse_args()
    args.only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(args.only) - set(ALL))
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; choose from {', '.join(ALL)}")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.compare_to is not None and not args.compare_to.is_file():
        parser.error(f"--compare-to {args.compare_to}: no such file")   # before minutes of benchmarking
    return args


def spark_with_kafka_connector() -> Any:
    """One local[2] session with both sources: ember's (registered) and Spark's ``kafka``."""
    from ember.sources import register
    from ember.spark_env import spark_session

    spark = spark_session("ember-vs-kafka")
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def run_workloads(args: argparse.Namespace, systems: list[System], work: Path) -> list[Row]:
    rows: list[Row] = []
    selected = set(args.only)
    if "produce" in selected:
        rows += workloads.producer_throughput(systems, args.records, args.repeats)
    if "latency" in selected:
        rows += workloads.end_to_end_latency(systems, args.latency_rate, args.latency_seconds, args.repeats)
    if selected & {"consume", "spark-read"}:
        workloads.load_read_topic(systems, READ_TOPIC, max(args.spark_records if "spark-read" in selected else 0,
                                                           args.consume_records if "consume" in selected else 0))
    if "consume" in selected:
        rows += workloads.consumer_throughput(systems, READ_TOPIC, args.consume_records, args.repeats)
    if selected & {"spark-read", "spark-write"}:
        log("starting Spark (local[2]) with the ember source and Spark's Kafka connector")
        spark = spark_with_kafka_connector()
        try:
            if "spark-read" in selected:
                rows += workloads.spark_read(spark, systems, READ_TOPIC, args.spark_records, args.repeats)
            if "spark-write" in selected:
                rows += workloads.spark_write(spark, systems, args.write_records, args.repeats, work)
        finally:
            spark.stop()
    if "footprint" in selected:   # before round-trips and scale: "after the load" means the same load as in earlier runs
        rows += workloads.footprint(systems, {s.name: s.cold_start_s for s in systems})
    if "round-trips" in selected:
        rows += request_round_trips(systems, args.round_trip_requests, args.repeats)
    if "scale" in selected:
        rows += workloads.scale(systems, args.scale_repeats)
    if "partitions" in selected:
        counts = [int(n) for n in args.partition_counts.split(",") if n.strip()]
        spark = spark_with_kafka_connector() if args.partition_spark_max > 0 else None
        try:
            rows += partition_scale(systems, counts, args.partition_records, args.partition_repeats, spark,
                                    args.partition_spark_max)
        finally:
            if spark is not None:
                spark.stop()
    return rows


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine())
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {memory_gb:.0f} GiB, {platform.system()} {platform.release()}"


def header(args: argparse.Namespace) -> str:
    import confluent_kafka
    import pyspark

    from ember.jars import KAFKA_VERSION
    client = confluent_kafka.version()
    client = client[0] if isinstance(client, tuple) else client
    kafka = KAFKA_VERSION
    only = set(args.only)
    runs, sizes, topics = [], [], ""
    if only - {"partitions"}:
        runs.append(f"{args.repeats} interleaved runs per system and case")
        sizes.append(f"Sizes: producer {args.records:,} records per run; consumer {args.consume_records:,}; Spark "
                     f"read {args.spark_records:,}; Spark write {args.write_records:,}; latency "
                     f"{args.latency_rate:,} records/s for {args.latency_seconds:g} s. Producers: linger.ms=5, "
                     f"batch.size=256 KiB, idempotence on for acks=all (both), off for acks=1 "
                     f"(`bench/vs_kafka/README.md` says what each row measures).")
        topics = " Topics have 6 partitions (the partitions rows excepted)." if "partitions" in only else \
            " Topics have 6 partitions."
    if "partitions" in only:
        runs.append(f"{args.partition_repeats} interleaved runs per system and case" if only == {"partitions"}
                    else f"{args.partition_repeats} for the partitions rows")
        sizes.append(f"Partitions rows: one topic per run of each of {args.partition_counts.replace(',', ', ')} "
                     f"partitions (RF 3), {args.partition_records:,} records of 100 B (acks=all, linger.ms=5, "
                     f"idempotent), read back by a new group; both systems through confluent-kafka (ember's Kafka "
                     f"listener); Spark count() up to {args.partition_spark_max:,} partitions "
                     f"(`bench/vs_kafka/partitions.py` says what each row measures).")
    command = "`bash bench/vs_kafka/run.sh " + " ".join(sys.argv[1:]) + "`"
    return "\n".join([
        "# ember vs Apache Kafka",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M %Z')} on {machine()}, shared with other work (median of "
        f"{', '.join(runs)}, with their min–max and best). Both clusters run "
        f"at once on 127.0.0.1: ember = ZooKeeper + 3 broker processes; Kafka {kafka} = 3 combined "
        f"broker+controller KRaft nodes (JVM options of kafka-server-start.sh: 1 GiB heap, G1). Clients: "
        f"ember.client vs confluent-kafka {client} (librdkafka {confluent_kafka.libversion()[0]}); Spark {pyspark.__version__} "
        f"local[2]: the ember source/sink vs spark-sql-kafka-0-10.{topics} ember measured: "
        f"{os.environ.get('EMBER_BENCH_SOURCE', 'working tree')}.",
        "",
        " ".join(sizes) + f" Command: {command}.",
        "",
        "ember / Kafka is the plain ratio of the two medians; *better* says which system wins the row and by how much. "
        "Footprint rows are measured once.",
    ])


def install_signal_handlers() -> None:
    """SIGTERM/SIGHUP unwind like Ctrl-C, so the ``finally`` blocks stop both clusters."""
    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)


def start(factory: Callable[[Path], System], root: Path, started: list[System]) -> None:
    log(f"starting {factory.__name__.removesuffix('System').lower()} cluster (3 brokers)")
    system = factory(root)
    started.append(system)
    log(f"{system.name} cluster up in {system.cold_start_s:.1f} s: {system.clients.bootstrap}")


def main() -> int:
    args = parse_args()
    install_signal_handlers()
    work = Path(tempfile.mkdtemp(prefix="ember-vs-kafka-"))
    systems: list[System] = []
    started_at = time.perf_counter()
    try:
        start(EmberSystem, work / "ember", systems)
        start(KafkaSystem, work / "kafka", systems)
        rows = run_workloads(args, systems, work)
    finally:
        for system in reversed(systems):
            try:
                system.stop()
            except Exception as error:          # keep stopping the others
                log(f"stopping {system.name} failed: {error!r}")
        shutil.rmtree(work, ignore_errors=True)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    history = write(rows, args.out, header(args), settings)
    log(f"done in {time.perf_counter() - started_at:.0f} s: {args.out / 'vs_kafka.md'}, {args.out / 'vs_kafka.png'}, "
        f"{history}")
    print()
    print((args.out / "vs_kafka.md").read_text())
    if args.compare_to is not None:
        return compare.main([str(args.compare_to), str(args.out / "vs_kafka.json")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
