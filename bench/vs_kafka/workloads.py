"""The workloads of the ember-vs-Kafka benchmark, each written once against ``systems.System``.

Every workload runs its cases for both systems interleaved (ember, Kafka, then Kafka, ember, ...)
and keeps every one of the ``repeats`` runs: other processes share the machine's two cores, so one
case can run 2-3x apart from one run to the next. Each returns ``Row``s: the samples of each system;
the median is the headline figure, min-max its spread (``stats``).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import random
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from produce_bench import percentile  # bench/ helpers (run.py puts bench/ on sys.path)
from samples import Stats, stats
from spark_read_bench import records as keyed_records
from systems import Clients, KafkaClients, ProduceSettings, System, rss_mb

VALUE_SIZE = 100
PARTITIONS = 6
MB = 1e6


@dataclass
class Row:
    """One line of the results: every sample of each system and which direction is better.
    ``ember`` and ``kafka`` are the medians; ratios are of medians."""

    group: str
    case: str
    unit: str
    ember_samples: list[float]
    kafka_samples: list[float]
    higher_is_better: bool
    ember_mode: str = ""
    kafka_mode: str = ""
    #: Rows the run measured once (footprint): no spread to show.
    single: bool = field(default=False)

    @property
    def ember_stats(self) -> Stats:
        return stats(self.ember_samples, self.higher_is_better)

    @property
    def kafka_stats(self) -> Stats:
        return stats(self.kafka_samples, self.higher_is_better)

    @property
    def ember(self) -> float:
        return self.ember_stats.median

    @property
    def kafka(self) -> float:
        return self.kafka_stats.median

    @property
    def ratio(self) -> float:
        return self.ember / self.kafka if self.kafka else float("nan")

    @property
    def ember_wins(self) -> bool:
        return self.ratio > 1 if self.higher_is_better else self.ratio < 1


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def interleaved(systems: Sequence[System], repeats: int) -> list[System]:
    """ember, Kafka, Kafka, ember, ember, Kafka, ...: neither system always runs first."""
    order: list[System] = []
    for r in range(repeats):
        order += list(systems) if r % 2 == 0 else list(reversed(systems))
    return order


def best_time(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def pair_rows(group: str, case: str, unit: str, higher_is_better: bool,
              samples: dict[tuple[str, str], list[float]], ember_modes: Sequence[str], kafka_mode: str) -> list[Row]:
    """One row per ember mode, each against Kafka's single mode for the same case."""
    return [Row(group, case, unit, samples[("ember", mode)], samples[("kafka", kafka_mode)], higher_is_better,
                mode, kafka_mode) for mode in ember_modes]


# -- producer throughput -----------------------------------------------------------------------

def producer_throughput(systems: Sequence[System], records: int, repeats: int) -> list[Row]:
    """``records`` keyless 100-byte values per run, acks=1/RF=1 and acks=all/RF=3; records/s
    from the first send to the last acknowledgement."""
    value = os.urandom(VALUE_SIZE)
    rows: list[Row] = []
    for settings in (ProduceSettings("1", 1), ProduceSettings("all", 3)):
        samples: dict[tuple[str, str], list[float]] = {}
        for system in systems:              # warm-up, not counted: Kafka's JIT, both sides' caches
            for mode in system.clients.produce_modes:
                produce_run(system, mode, settings, value, max(1, records // 5), f"warm-{settings.acks}-{mode}")
        broker_cpu: dict[tuple[str, str], list[float]] = {}
        client_cpu: dict[tuple[str, str], list[float]] = {}
        for run, system in enumerate(interleaved(systems, repeats)):
            for mode in system.clients.produce_modes:
                sample = produce_run(system, mode, settings, value, records, f"produce-{settings.acks}-{mode}-{run}")
                log(f"produce {settings.label:13s} {system.name:5s} {mode:10s} {sample.rate:>12,.0f} records/s, "
                    f"per 1M: brokers {sample.broker_s:.2f} CPU s, client {sample.client_s:.2f}")
                samples.setdefault((system.name, mode), []).append(sample.rate)
                broker_cpu.setdefault((system.name, mode), []).append(sample.broker_s)
                client_cpu.setdefault((system.name, mode), []).append(sample.client_s)
        ember_modes, kafka_modes = modes(systems, "produce_modes")
        rows += pair_rows("Producer throughput (100 B records)", settings.label, "records/s", True, samples,
                          ember_modes, kafka_modes[0])
        rows += cpu_rows(f"producing (100 B records, {settings.label})", "written", broker_cpu, client_cpu,
                         ember_modes, kafka_modes[0])
    return rows


def produce_run(system: System, mode: str, settings: ProduceSettings, value: bytes, records: int,
                topic: str) -> "CpuSample":
    """records/s of one producer run into a new topic, with the CPU both sides spent on it. The
    topic is deleted afterwards: these rows measure the cost per record, and ~40 topics left
    behind would make the later runs measure the partition count too (issue 25's rows do that)."""
    system.create_topic(topic, PARTITIONS, settings.replication_factor)
    try:
        with system.clients.produce_job(mode, topic, settings, value, records) as job:
            with CpuMeter(system) as meter:
                rate = records / best_time(job)
            return CpuSample(rate, *meter.per_million(records))
    finally:
        system.delete_topic(topic)


def modes(systems: Sequence[System], attribute: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    by_name = {s.name: getattr(s.clients, attribute) for s in systems}
    return by_name["ember"], by_name["kafka"]


# -- end-to-end latency ------------------------------------------------------------------------

def _tail_process(clients: Clients, topic: str, expected: int, ready: Any, results: Any) -> None:
    """Child process: consume the (new, empty) topic from its beginning — from the end would race
    with the first sends — and compute now - the send time in each value (ns)."""
    latencies: list[int] = []
    unpack = struct.Struct(">q").unpack_from
    with clients.tail_values(topic, PARTITIONS) as poll:
        poll()
        ready.set()
        deadline = time.monotonic() + 600
        while len(latencies) < expected and time.monotonic() < deadline:
            values = poll()
            now = time.time_ns()
            latencies += [now - unpack(v)[0] for v in values if len(v) == VALUE_SIZE]   # not the warm-up
    results.put(latencies)


def end_to_end_latency(systems: Sequence[System], rate: int, seconds: float, repeats: int) -> list[Row]:
    """Produce at a fixed ``rate`` (acks=all, RF=3) with the send time in each value; a consumer in
    its own process (so neither side's client threads share a GIL) measures receive - send.
    The first second is warm-up and not counted. Each percentile's row keeps that percentile of
    every run (its median is the headline, as elsewhere)."""
    settings = ProduceSettings("all", 3)
    runs: dict[str, list[list[float]]] = {}
    for run, system in enumerate(interleaved(systems, repeats)):
        # ember twice: its own clients, and confluent-kafka through its Kafka listener (the same client as Kafka's row)
        kafka_bootstrap = getattr(system.clients, "kafka_bootstrap", "")
        cases = [(system.name, system.clients)] + ([("ember-kafka-client", KafkaClients(kafka_bootstrap))]
                                                    if system.name == "ember" and kafka_bootstrap else [])
        for name, clients in cases:
            figures = latency_percentiles(latency_run(system, clients, f"latency-{run}-{len(runs.get(name, []))}-"
                                                      f"{name}", rate, seconds))
            log(f"latency {name:18s} at {rate:,}/s: p50 {figures[0]:.2f} ms  p99 {figures[1]:.2f} ms  "
                f"p99.9 {figures[2]:.2f} ms")
            runs.setdefault(name, []).append(figures)
    group = f"End-to-end latency at {rate:,} records/s ({settings.label})"
    rows = [Row(group, name, "ms", [run[i] for run in runs["ember"]], [run[i] for run in runs["kafka"]], False,
                "send → poll_batches", "produce → consume")
            for i, name in enumerate(("p50", "p99", "p99.9"))]
    if "ember-kafka-client" in runs:
        rows += [Row(group, name, "ms", [run[i] for run in runs["ember-kafka-client"]],
                     [run[i] for run in runs["kafka"]], False, "kafka-client: produce → consume", "produce → consume")
                 for i, name in enumerate(("p50", "p99", "p99.9"))]
    return rows


def latency_run(owner: System, clients: Clients, topic: str, rate: int, seconds: float) -> list[int]:
    """One run of the end-to-end latency case into a new acks=all RF=3 topic of ``owner``, sent and
    read with ``clients``: every latency (ns) but the first second's."""
    settings = ProduceSettings("all", 3)
    total = int(rate * seconds)
    padding = os.urandom(VALUE_SIZE - 8)
    context = mp.get_context("spawn")
    owner.create_topic(topic, PARTITIONS, settings.replication_factor)
    ready, results = context.Event(), context.Queue()
    tail = context.Process(target=_tail_process, args=(clients, topic, total, ready, results), daemon=True)
    tail.start()
    try:
        if not ready.wait(60):
            raise TimeoutError("latency consumer did not start")
        with clients.paced_producer(topic, settings) as send:
            pace(send, padding, rate, total)
        return collect(results, tail)[rate:]       # drop the first second
    finally:
        tail.join(10)
        if tail.is_alive():
            tail.kill()
        owner.delete_topic(topic)   # as produce_run: later runs measure records, not the partition count


def latency_percentiles(latencies: list[int]) -> list[float]:
    """p50, p99 and p99.9 in milliseconds."""
    return [percentile(latencies, q) / 1e6 for q in (0.5, 0.99, 0.999)]


def collect(results: Any, process: Any, timeout_s: float = 120) -> list[int]:
    """The child's latencies; fails at once if the child died instead of waiting out the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return results.get(timeout=1)
        except queue.Empty:
            if not process.is_alive():
                raise RuntimeError(f"latency consumer exited with code {process.exitcode}") from None
    raise TimeoutError("latency consumer did not report")


def pace(send: Callable[[bytes], None], padding: bytes, rate: int, total: int) -> None:
    """Send ``total`` values at ``rate`` per second, each starting with its send time (ns)."""
    started = time.perf_counter()
    sent = 0
    pack = struct.Struct(">q").pack
    while sent < total:
        due = min(total, int((time.perf_counter() - started) * rate) + 1)
        while sent < due:
            send(pack(time.time_ns()) + padding)
            sent += 1
        time.sleep(0.0005)


# -- consumer throughput, Spark ------------------------------------------------------------------

def read_records(count: int, start: int) -> pa.Table:
    """spark_read_bench's records (16-byte keys, 100-byte values) stamped with the current time:
    its fixed 2023 timestamps are older than the 7-day retention both systems apply, and Kafka
    deletes such segments (even the active one) at its first retention check, mid-benchmark."""
    table = keyed_records(count, start)
    now_ms = time.time_ns() // 1_000_000
    timestamps = pa.array(range(now_ms, now_ms + count), pa.int64())
    return table.set_column(table.schema.get_field_index("timestamp"), "timestamp", timestamps)


def load_read_topic(systems: Sequence[System], topic: str, records: int, chunk: int = 500_000) -> None:
    """The topic the consumer and Spark-read workloads read: 16-byte keys, 100-byte values."""
    for system in systems:
        system.create_topic(topic, PARTITIONS, 1)
        started = time.perf_counter()
        for start in range(0, records, chunk):
            system.clients.load_table(topic, read_records(min(chunk, records - start), start))
        count = system.record_count(topic)
        if count != records:
            raise RuntimeError(f"{system.name} topic {topic} holds {count} records, expected {records}")
        log(f"loaded {records:,} records into {system.name} {topic} in {time.perf_counter() - started:.1f} s")


def broker_cpu_s(system: System) -> float:
    """CPU seconds (user + system) the system's broker processes have used so far."""
    return sum(cpu_seconds(pid) for label, pid in system.processes().items() if label.startswith("broker"))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")    # utime, stime (fields 14, 15)


def client_cpu_s(jvm_pid: int | None = None) -> float:
    """CPU seconds the client side has used so far: this process (every thread: librdkafka's, the
    ember clients') and, for Spark rows, the Spark JVM with its Python workers (its process tree).
    Brokers are children of this process too, but not of the JVM, so neither count is theirs."""
    times = os.times()
    return times.user + times.system + (tree_cpu_seconds(jvm_pid) if jvm_pid else 0.0)


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of ``root`` and its living descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue    # exited meanwhile
            children.setdefault(parent, []).append(int(entry.name))
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        try:
            total += cpu_seconds(pid)
        except OSError:
            continue
        todo += children.get(pid, [])
    return total


@dataclass
class CpuSample:
    """One run's rate and the CPU seconds per million records of the brokers and of the client."""
    rate: float
    broker_s: float
    client_s: float


class CpuMeter:
    """CPU both sides spent between ``__enter__`` and ``__exit__``: where the time of a run went.
    When the client's CPU about equals the run's wall time, the client is the bottleneck whatever
    the broker does (the note of issue 24 and the README's "Where ember loses" use these rows)."""

    def __init__(self, system: System, jvm_pid: int | None = None) -> None:
        self.system, self.jvm_pid = system, jvm_pid
        self.broker_s = self.client_s = 0.0

    def __enter__(self) -> "CpuMeter":
        self._broker, self._client = broker_cpu_s(self.system), client_cpu_s(self.jvm_pid)
        return self

    def __exit__(self, *exc: object) -> None:
        self.broker_s = broker_cpu_s(self.system) - self._broker
        self.client_s = client_cpu_s(self.jvm_pid) - self._client

    def per_million(self, records: int) -> tuple[float, float]:
        return self.broker_s * 1e6 / records, self.client_s * 1e6 / records


def cpu_rows(what: str, verb: str, broker_cpu: dict[tuple[str, str], list[float]],
             client_cpu: dict[tuple[str, str], list[float]], ember_modes: Sequence[str], kafka_mode: str) -> list[Row]:
    """The two CPU rows of a workload: the brokers' and the client's CPU seconds per 1M records."""
    return (pair_rows(f"Broker CPU while {what}", f"all brokers, per 1M records {verb}", "s", False, broker_cpu,
                      ember_modes, kafka_mode)
            + pair_rows(f"Client CPU while {what}", f"the client process(es), per 1M records {verb}", "s", False,
                        client_cpu, ember_modes, kafka_mode))


def consumer_throughput(systems: Sequence[System], topic: str, records: int, repeats: int) -> list[Row]:
    """Read the first ``records`` of the topic from the beginning; records/s, and the CPU the
    brokers spent per million records meanwhile (what the serving side costs, apart from the client)."""
    samples: dict[tuple[str, str], list[float]] = {}
    broker_cpu: dict[tuple[str, str], list[float]] = {}
    client_cpu: dict[tuple[str, str], list[float]] = {}
    for system in interleaved(systems, repeats):
        for mode in system.clients.consume_modes:
            with system.clients.consume_job(mode, topic, PARTITIONS, records) as job:
                with CpuMeter(system) as meter:
                    rate = records / best_time(job)
            broker_s, client_s = meter.per_million(records)
            log(f"consume {system.name:5s} {mode:12s} {rate:>12,.0f} records/s, per 1M: brokers {broker_s:.2f} CPU s, "
                f"client {client_s:.2f}")
            samples.setdefault((system.name, mode), []).append(rate)
            broker_cpu.setdefault((system.name, mode), []).append(broker_s)
            client_cpu.setdefault((system.name, mode), []).append(client_s)
    ember_modes, kafka_modes = modes(systems, "consume_modes")
    return (pair_rows("Consumer throughput (116 B records, RF=1)", "from the beginning", "records/s", True, samples,
                      ember_modes, kafka_modes[0])
            + cpu_rows("consuming (116 B records, RF=1)", "read", broker_cpu, client_cpu, ember_modes, kafka_modes[0]))


def spark_read(spark: Any, systems: Sequence[System], topic: str, records: int, repeats: int) -> list[Row]:
    """``count()`` and ``sum(length(value))`` of the whole topic through each system's Spark source."""
    queries: dict[str, Callable[[Any], object]] = {
        "count()": lambda frame: frame.count(),
        "sum(length(value))": lambda frame: frame.selectExpr("sum(length(value))").collect()[0][0],
    }
    expected = {"count()": records, "sum(length(value))": records * VALUE_SIZE}
    for system in systems:                       # warm-up: JVM classes, Python workers, page cache
        for mode in system.clients.spark_read_modes:
            count = system.clients.spark_read(spark, mode, topic).count()
            if count != records:
                raise RuntimeError(f"{system.name} Spark read ({mode}) counted {count:,} records, expected {records:,}")
    samples: dict[tuple[str, str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    spark_cpu: dict[tuple[str, str], list[float]] = {}
    jvm_pid = spark.sparkContext._gateway.proc.pid     # the Spark JVM (spark-submit execs java)
    for system in interleaved(systems, repeats):
        for mode in system.clients.spark_read_modes:
            for name, query in queries.items():
                answer: list[object] = []
                with CpuMeter(system, jvm_pid) as meter:
                    elapsed = best_time(lambda: answer.append(query(system.clients.spark_read(spark, mode, topic))))
                broker_s, client_s = meter.per_million(records)
                if answer[0] != expected[name]:
                    raise RuntimeError(f"{system.name} {mode} {name} = {answer[0]}, expected {expected[name]}")
                log(f"spark read {system.name:5s} {mode:7s} {name:19s} {records / elapsed:>12,.0f} records/s, "
                    f"per 1M: brokers {broker_s:.2f} CPU s, Spark {client_s:.2f}")
                samples.setdefault((system.name, mode, name), []).append(records / elapsed)
                cpu.setdefault((system.name, mode), []).append(broker_s)
                spark_cpu.setdefault((system.name, mode), []).append(client_s)
    ember_modes, kafka_modes = modes(systems, "spark_read_modes")
    group = f"Spark batch read of {records:,} records (local[2])"

    def label(mode: str) -> str:
        return 'format("kafka") via the Kafka listener' if mode == "kafka" else f"readPath={mode}"
    return ([Row(group, name, "records/s", samples[("ember", mode, name)], samples[("kafka", kafka_modes[0], name)],
                 True, label(mode), 'format("kafka")') for name in queries for mode in ember_modes]
            + [Row(f"Broker CPU during the Spark batch read ({records:,} records)", "all brokers, per 1M records read",
                   "s", cpu[("ember", mode)], cpu[("kafka", kafka_modes[0])], False, label(mode), 'format("kafka")')
               for mode in ember_modes if mode != "direct"]   # the direct path reads segment files, not brokers
            + [Row(f"Spark CPU during the Spark batch read ({records:,} records)",
                   "driver + JVM + Python workers, per 1M records read", "s", spark_cpu[("ember", mode)],
                   spark_cpu[("kafka", kafka_modes[0])], False, label(mode), 'format("kafka")') for mode in ember_modes])


def spark_write(spark: Any, systems: Sequence[System], records: int, repeats: int, work: Path) -> list[Row]:
    """Stream the same rows (key, value) from Parquet files into a new RF=3 topic with
    ``trigger(availableNow=True)``; records/s from ``start()`` to the end of the run."""
    source = work / "spark-write-source"
    write_parquet(source, records, files=4)
    warm = work / "spark-write-warm"
    write_parquet(warm, 1000, files=1)

    def stream(path: Path) -> Any:
        return spark.readStream.schema("key BINARY, value BINARY").parquet(str(path))

    def run(system: System, path: Path, rows: int, name: str) -> float:
        system.create_topic(name, PARTITIONS, 3)
        writer = system.clients.spark_write(stream(path), name, work / f"checkpoint-{system.name}-{name}")
        started = time.perf_counter()
        writer.trigger(availableNow=True).start().awaitTermination()
        elapsed = time.perf_counter() - started
        count = system.record_count(name)
        if count != rows:
            raise RuntimeError(f"{system.name} sink wrote {count} records to {name}, expected {rows}")
        return rows / elapsed

    for system in systems:
        run(system, warm, 1000, "spark-write-warm")
    samples: dict[str, list[float]] = {}
    for index, system in enumerate(interleaved(systems, repeats)):
        rate = run(system, source, records, f"spark-write-{index}")
        log(f"spark write {system.name:5s} {rate:>12,.0f} records/s")
        samples.setdefault(system.name, []).append(rate)
    return [Row("Spark streaming write (availableNow)", f"{records:,} rows → RF=3 topic", "records/s",
                samples["ember"], samples["kafka"], True, 'format("ember")', 'format("kafka")')]


def write_parquet(directory: Path, records: int, files: int) -> None:
    """``records`` keyed rows split over ``files`` Parquet files (so Spark gets parallel tasks)."""
    directory.mkdir(parents=True, exist_ok=True)
    per_file = -(-records // files)
    for index, start in enumerate(range(0, records, per_file)):
        table = keyed_records(min(per_file, records - start), start).select(["key", "value"])
        pq.write_table(table, directory / f"part-{index}.parquet")


# -- footprint ---------------------------------------------------------------------------------

#: How long after the load the footprint samples RSS a second time: what a broker holds once the
#: load's transient buffers are gone (an ember broker gives freed heap back every 5 s).
FOOTPRINT_SETTLE_S = 10.0


def footprint(systems: Sequence[System], cold_starts: dict[str, float]) -> list[Row]:
    """Broker RSS right after the load and once settled, the whole cluster's RSS (ember: + ZooKeeper),
    the cluster's cold start and one broker's restart (process start → first ApiVersions answer)."""
    by_name = {s.name: s for s in systems}

    def sample(when: str) -> dict[str, dict[str, float]]:
        rss = {name: {label: rss_mb(pid) for label, pid in s.processes().items()} for name, s in by_name.items()}
        for name, figures in rss.items():
            log(f"RSS {name} {when}: " + ", ".join(f"{label} {mb:.0f} MB" for label, mb in figures.items()))
        return rss

    rss = sample("right after the load")
    time.sleep(FOOTPRINT_SETTLE_S)
    settled = sample(f"{FOOTPRINT_SETTLE_S:.0f} s later")

    def brokers(name: str, figures: dict[str, dict[str, float]] = rss) -> list[float]:
        return [mb for label, mb in figures[name].items() if label.startswith("broker")]

    restarts = {name: s.restart_broker_s() for name, s in by_name.items()}
    log("broker restart: " + ", ".join(f"{name} {s:.2f} s" for name, s in restarts.items()))
    group = "Footprint"
    return [   # measured once each: one sample per system
        Row(group, "RSS per broker after the load (mean)", "MB", [mean(brokers("ember"))], [mean(brokers("kafka"))],
            False, single=True),
        Row(group, f"RSS per broker {FOOTPRINT_SETTLE_S:.0f} s after the load (mean)", "MB",
            [mean(brokers("ember", settled))], [mean(brokers("kafka", settled))], False, single=True),
        Row(group, "RSS of the whole cluster", "MB", [sum(rss["ember"].values())], [sum(rss["kafka"].values())], False,
            "3 brokers + ZooKeeper", "3 KRaft nodes", single=True),
        Row(group, "cold start of the cluster (→ every broker answers)", "s",
            [cold_starts["ember"]], [cold_starts["kafka"]], False, "ZooKeeper + 3 brokers", "3 KRaft nodes", single=True),
        Row(group, "restart of one broker (process start → ApiVersions)", "s",
            [restarts["ember"]], [restarts["kafka"]], False, single=True),
    ]


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


# -- scale: the cost per record as producers, record sizes and codecs change ---------------------

#: The families of the scale rows: every case runs both systems' per-record clients (ember's ``send``,
#: confluent-kafka through ember's Kafka listener, confluent-kafka on Kafka), acks=1 RF=1.
SCALE_PRODUCERS = (1, 2, 4, 8)
SCALE_SIZES = (10, 100, 1_000, 10_000, 100_000)
SCALE_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
#: Bytes of values per run, and records at most (a 10-byte run would otherwise take millions).
SCALE_BYTES = 50_000_000
SCALE_RECORDS = 300_000
#: Values of the codec family: JSON-like text, compressible about 3x as real events are (random bytes
#: would not compress, and every codec would measure its incompressible-input path).
CODEC_VALUE_SIZE = 1_000
SCALE_MODES = ("send", "kafka-client")


@dataclass(frozen=True)
class ScaleCase:
    group: str
    case: str
    producers: int
    value_size: int
    codec: str = "none"
    #: JSON-like values (the codec family, "none" included, so its rows compare the same records)
    text: bool = False

    @property
    def records(self) -> int:
        return max(100, min(SCALE_RECORDS, SCALE_BYTES // self.value_size))


def scale_cases() -> list[ScaleCase]:
    settings = "acks=1 RF=1"
    return ([ScaleCase(f"Scale: producer processes (100 B records, {settings})", f"{n} producer{'s' * (n > 1)}", n,
                       VALUE_SIZE) for n in SCALE_PRODUCERS]
            + [ScaleCase(f"Scale: record size (1 producer, {settings})", f"{_size_label(size)} records", 1, size)
               for size in SCALE_SIZES]
            + [ScaleCase(f"Scale: compression.type ({CODEC_VALUE_SIZE:,} B JSON-like records, {settings})", codec, 1,
                         CODEC_VALUE_SIZE, codec, text=True) for codec in SCALE_CODECS])


def _size_label(size: int) -> str:
    return f"{size // 1000} KB" if size >= 1000 else f"{size} B"


def scale_value(case: ScaleCase) -> bytes:
    if not case.text:
        return os.urandom(case.value_size)
    rng = random.Random(7)
    text = ""
    while len(text) < case.value_size:
        text += (f'{{"user_id":{rng.randrange(10**6)},"event":"{rng.choice(["view", "click", "buy"])}",'
                 f'"page":"/products/{rng.randrange(5000)}","ms":{rng.randrange(10**4)}}}')
    return text[:case.value_size].encode()


def _scale_producer(clients: Clients, mode: str, topic: str, settings: ProduceSettings, value: bytes, count: int,
                    ready: Any, go: Any, results: Any) -> None:
    """Child process: one producer, ready before the clock starts (connections, metadata), then
    ``count`` records once ``go`` is set; reports when it finished (time.monotonic, shared by all
    processes of the machine)."""
    try:
        with clients.produce_job(mode, topic, settings, value, count) as job:
            ready.release()
            if not go.wait(300):
                raise TimeoutError("the scale run never started")
            job()
        results.put(("done", time.monotonic()))
    except BaseException as error:   # the parent reports it instead of waiting out its timeout
        results.put(("error", repr(error)))
        raise


def scale_run(system: System, clients: Clients, mode: str, case: ScaleCase, value: bytes, topic: str) -> float:
    """records/s of ``case.producers`` producer processes together, from their common start to the
    last one's last acknowledgement."""
    settings = ProduceSettings("1", 1, compression=case.codec)
    system.create_topic(topic, PARTITIONS, settings.replication_factor)
    context = mp.get_context("spawn")
    ready, go, results = context.Semaphore(0), context.Event(), context.Queue()
    each = -(-case.records // case.producers)
    children = [context.Process(target=_scale_producer, args=(clients, mode, topic, settings, value, each, ready, go,
                                                              results), daemon=True) for _ in range(case.producers)]
    for child in children:
        child.start()
    try:
        for _ in children:
            if not ready.acquire(timeout=120):
                raise TimeoutError(f"a {mode} producer process did not start within 120 s")
        started = time.monotonic()
        go.set()
        ends = []
        deadline = started + 600
        while len(ends) < len(children):
            try:
                kind, what = results.get(timeout=1)
            except queue.Empty:
                if time.monotonic() > deadline or not any(child.is_alive() for child in children):
                    raise RuntimeError(f"{len(children) - len(ends)} {mode} producer process(es) did not "
                                       f"report") from None
                continue
            if kind != "done":
                raise RuntimeError(f"a {mode} producer process failed: {what}")
            ends.append(what)
        return each * case.producers / (max(ends) - started)
    finally:
        for child in children:
            child.join(30)
            if child.is_alive():
                child.kill()
        system.delete_topic(topic)   # ~130 topics otherwise: the later cases would run on a fuller cluster


def scale(systems: Sequence[System], repeats: int) -> list[Row]:
    """The scale rows (``scale_cases``), each case's systems interleaved ``repeats`` times."""
    rows: list[Row] = []
    by_name = {s.name: s for s in systems}
    ember_clients = by_name["ember"].clients
    kafka_bootstrap = getattr(ember_clients, "kafka_bootstrap", "")
    runners: list[tuple[str, System, Clients, str]] = [("ember", by_name["ember"], ember_clients, "send")]
    if kafka_bootstrap:
        runners.append(("ember", by_name["ember"], KafkaClients(kafka_bootstrap), "kafka-client"))
    runners.append(("kafka", by_name["kafka"], by_name["kafka"].clients, "produce"))
    for index, case in enumerate(scale_cases()):
        value = scale_value(case)
        samples: dict[tuple[str, str], list[float]] = {}
        for run in range(repeats):
            for name, system, clients, mode in (runners if run % 2 == 0 else runners[::-1]):
                client_mode = "produce" if mode == "kafka-client" else mode
                rate = scale_run(system, clients, client_mode, case, value, f"scale-{index}-{run}-{mode}")
                log(f"scale {case.case:14s} {name:5s} {mode:12s} {rate:>12,.0f} records/s")
                samples.setdefault((name, mode), []).append(rate)
        rows += pair_rows(case.group, case.case, "records/s", True, samples,
                          [m for n, _, _, m in runners if n == "ember"], "produce")
    return rows
