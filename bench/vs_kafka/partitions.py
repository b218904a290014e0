"""The partitions workload: one topic of N partitions (RF 3) per system for each N of
``--partition-counts``, the same confluent-kafka clients on both (ember through its Kafka listener):

* create: CreateTopics until every partition has a leader and a full ISR (seconds);
* produce: ``--partition-records`` records of 100 B, acks=all, linger 5 ms, idempotent;
* consume: a new group reading them all from the beginning (join included);
* then, once per N and system: end-to-end p99 latency (confluent-kafka on both, acks=all, a new
  topic of N partitions: a warm-up record to every partition, and once the consumer has them
  all, E2E_RATE records/s for E2E_SECONDS: the latency of a cluster serving every partition, not
  of its first fetches), idle CPU of each broker over IDLE_MEASURE_S (both clusters idle), RSS
  and open files of each broker (the mean of the three);
* Spark ``count()`` of that topic, ember's direct and broker paths vs Spark's Kafka connector on
  Kafka, up to ``--partition-spark-max`` partitions (the connector pays a consumer per partition:
  about 0.3 s each here, 5 minutes at 1,000).

Create, produce and consume run ``--partition-repeats`` times per N, interleaved, each on a new
topic (deleted afterwards); the other rows are measured once (``single``).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import struct
import time
import uuid
from typing import Any, Callable, Sequence

from report import PARTITIONS_PREFIX
from systems import KafkaClients, ProduceSettings, System, create_with_kafka_admin, kafka_client_bootstrap, rss_mb
from workloads import VALUE_SIZE, Row, collect, cpu_seconds, interleaved, latency_percentiles, log, pace

VALUE = b"v" * 100
IDLE_SETTLE_S = 5
IDLE_MEASURE_S = 20
#: After a deletion, before the next topic is created.
DELETE_SETTLE_S = 15
TIMEOUT_S = 600
E2E_RATE = 1000
E2E_SECONDS = 6.0


def broker_pids(system: System) -> list[int]:
    return [pid for name, pid in system.processes().items() if name != "zookeeper"]


def create(bootstrap: str, topic: str, partitions: int) -> float:
    """Seconds until Metadata shows every partition with a leader and a full ISR (RF 3)."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.list_topics(timeout=10)          # connected before the clock starts
    started = time.perf_counter()
    create_with_kafka_admin(admin, topic, partitions, 3)
    return time.perf_counter() - started


def produce(bootstrap: str, topic: str, records: int) -> float:
    """acks=all, idempotent, linger 5 ms: records/s until every record is acknowledged."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "log_level": 3})
    failed: list[Any] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failed.append(error)

    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, VALUE, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
    undelivered = producer.flush(TIMEOUT_S)
    if undelivered or failed:   # a failed delivery counts as done for flush(): the consumer would wait for it
        raise RuntimeError(f"{undelivered:,} records to {topic} undelivered after {TIMEOUT_S} s, {len(failed):,} "
                           f"failed{f' (first: {failed[0]})' if failed else ''}")
    return records / (time.perf_counter() - started)


def consume(bootstrap: str, topic: str, records: int) -> float:
    """A new group from the beginning, join included: records/s until all are read."""
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"partitions-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 3})
    started, seen = time.perf_counter(), 0
    try:
        consumer.subscribe([topic])
        while seen < records:
            if time.perf_counter() - started > TIMEOUT_S:
                raise RuntimeError(f"consumed {seen:,} of {records:,} records of {topic} in {TIMEOUT_S} s")
            seen += sum(1 for message in consumer.consume(10_000, 1.0) if message.error() is None)
    finally:
        consumer.close()
    return seen / (time.perf_counter() - started)


def idle_cpu_percent(systems: Sequence[System]) -> dict[str, float]:
    """Mean CPU of each system's brokers while nothing runs, in % of a core."""
    time.sleep(IDLE_SETTLE_S)
    pids = {system.name: broker_pids(system) for system in systems}
    before = {name: [cpu_seconds(pid) for pid in ps] for name, ps in pids.items()}
    time.sleep(IDLE_MEASURE_S)
    return {name: statistics.mean((cpu_seconds(pid) - b) / IDLE_MEASURE_S * 100 for pid, b in zip(ps, before[name]))
            for name, ps in pids.items()}


def spark_count(spark: Any, system: System, mode: str, topic: str, records: int) -> float:
    started = time.perf_counter()
    count = system.clients.spark_read(spark, mode, topic).count()
    if count != records:
        raise RuntimeError(f"{system.name} Spark read ({mode}) of {topic} counted {count:,}, expected {records:,}")
    return records / (time.perf_counter() - started)


def partition_scale(systems: Sequence[System], counts: Sequence[int], records: int, repeats: int,
                    spark: Any = None, spark_max: int = 1000) -> list[Row]:
    rows: list[Row] = []
    for count in counts:
        try:
            rows += _count_rows(systems, count, records, repeats, spark, spark_max)
        except RuntimeError as exc:   # a count that fails leaves its rows out; the others still make the table
            log(f"{count:>6,} partitions: stopped, its rows left out: {exc}")
    return rows


def _count_rows(systems: Sequence[System], count: int, records: int, repeats: int, spark: Any,
                spark_max: int) -> list[Row]:
    """Every row of one partition count (its topics deleted afterwards, also when it fails)."""
    rows: list[Row] = []
    ember, kafka = systems[0].name, systems[1].name
    group = f"{PARTITIONS_PREFIX}{count:,} partitions (RF 3)"
    kept: dict[str, str] = {}           # the last topic of each system: idle, footprint and Spark rows
    try:
        samples: dict[tuple[str, str], list[float]] = {}
        for system in interleaved(systems, repeats):
            for topic in [kept.pop(system.name)] if system.name in kept else []:
                delete_and_settle(system, topic)
            topic = f"partitions-{count}-{uuid.uuid4().hex[:8]}"
            bootstrap = kafka_client_bootstrap(system)
            created = create(bootstrap, topic, count)
            kept[system.name] = topic
            produced = produce(bootstrap, topic, records)
            consumed = consume(bootstrap, topic, records)
            log(f"{count:>6,} partitions {system.name:5s}: created in {created:.2f} s, produced {produced:,.0f} "
                f"records/s (acks=all), consumed {consumed:,.0f} records/s")
            for case, value in (("create", created), ("produce", produced), ("consume", consumed)):
                samples.setdefault((system.name, case), []).append(value)
        p99 = e2e_p99_each(systems, count)
        idle = idle_cpu_percent(systems)
        footprint = {system.name: ([rss_mb(pid) for pid in broker_pids(system)],
                                   [len(os.listdir(f"/proc/{pid}/fd")) for pid in broker_pids(system)])
                     for system in systems}
        log(f"{count:>6,} partitions: idle CPU per broker {idle}; RSS and open files {footprint}")

        def row(case: str, unit: str, higher: bool, ember_samples: list[float], kafka_samples: list[float],
                single: bool = False, ember_mode: str = "", kafka_mode: str = "") -> Row:
            return Row(group, case, unit, ember_samples, kafka_samples, higher, ember_mode, kafka_mode, single)
        rows += [row("create the topic (leaders and full ISRs)", "s", False,
                     samples[(ember, "create")], samples[(kafka, "create")]),
                 row("produce, acks=all, confluent-kafka", "records/s", True,
                     samples[(ember, "produce")], samples[(kafka, "produce")]),
                 row("consume, new group, confluent-kafka", "records/s", True,
                     samples[(ember, "consume")], samples[(kafka, "consume")]),
                 *([row(f"end-to-end p99 at {E2E_RATE:,} records/s, acks=all, confluent-kafka", "ms", False,
                        [p99[ember]], [p99[kafka]], True)] if p99 else []),
                 row("idle CPU per broker", "% of a core", False, [idle[ember]], [idle[kafka]], True),
                 row("RSS per broker", "MB", False, [statistics.mean(footprint[ember][0])],
                     [statistics.mean(footprint[kafka][0])], True),
                 row("open files per broker", "files", False, [statistics.mean(footprint[ember][1])],
                     [statistics.mean(footprint[kafka][1])], True)]
        if spark is not None and count <= spark_max:
            rows += spark_rows(spark, systems, kept, records, row, warm_connector=count <= 100)
    finally:
        for system in systems:
            for topic in [kept.pop(system.name)] if system.name in kept else []:
                delete_and_settle(system, topic)
    return rows


def e2e_p99_each(systems: Sequence[System], count: int) -> dict[str, float]:
    """:func:`e2e_p99_ms` of each system; empty (no row, the run goes on) when one fails: at
    5,000 partitions ember took minutes to acknowledge a warm-up record per partition right
    after creating the topic."""
    try:
        return {system.name: e2e_p99_ms(system, count) for system in systems}
    except (RuntimeError, TimeoutError) as exc:
        log(f"{count:>6,} partitions: no end-to-end row ({exc})")
        return {}


def e2e_p99_ms(system: System, count: int) -> float:
    """p99 of produce → consume (ms) through confluent-kafka on a new topic of ``count``
    partitions, once the consumer (its own process) has been served a warm-up record of every
    partition; the topic is deleted afterwards, then the settling time."""
    topic = f"partitions-latency-{count}-{uuid.uuid4().hex[:8]}"
    bootstrap = kafka_client_bootstrap(system)
    create(bootstrap, topic, count)
    total = int(E2E_RATE * E2E_SECONDS)
    context = mp.get_context("spawn")
    ready, results = context.Event(), context.Queue()
    tail = context.Process(target=_primed_tail, args=(bootstrap, topic, count, total, ready, results), daemon=True)
    tail.start()
    try:
        producer = KafkaClients(bootstrap)._producer(ProduceSettings("all", 3))
        for partition in range(count):
            producer.produce(topic, b"warm-up", partition=partition)
        if producer.flush(TIMEOUT_S):
            raise TimeoutError(f"{system.name}: the warm-up of {topic} was not delivered in {TIMEOUT_S} s")
        deadline = time.monotonic() + TIMEOUT_S
        while not ready.wait(1):
            if not tail.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{system.name}: the latency consumer of {topic} did not read the warm-up "
                                   f"(exit code {tail.exitcode})")

        def send(value: bytes) -> None:
            producer.produce(topic, value)
            producer.poll(0)
        pace(send, os.urandom(VALUE_SIZE - 8), E2E_RATE, total)
        producer.flush(60)
        p50, p99, p999 = latency_percentiles(collect(results, tail))
    finally:
        tail.join(10)
        if tail.is_alive():
            tail.kill()
        delete_and_settle(system, topic)
    log(f"{count:>6,} partitions {system.name:5s}: end-to-end p50 {p50:.1f} ms, p99 {p99:.1f} ms, p99.9 {p999:.1f} ms "
        f"at {E2E_RATE:,} records/s")
    return p99


def _primed_tail(bootstrap: str, topic: str, partitions: int, expected: int, ready: Any, results: Any) -> None:
    """Child process: every partition from its beginning; ``ready`` once a warm-up record of each
    arrived, then now - the send time in each timed value (ns)."""
    from confluent_kafka import OFFSET_BEGINNING
    consumer = KafkaClients(bootstrap)._consumer(topic, partitions, OFFSET_BEGINNING)
    unpack = struct.Struct(">q").unpack_from
    warmed: set[int] = set()
    latencies: list[int] = []
    deadline = time.monotonic() + 2 * TIMEOUT_S + E2E_SECONDS     # the parent's warm-up waits, then its run
    try:
        while len(latencies) < expected and time.monotonic() < deadline:
            first = consumer.poll(0.1)
            if first is None:
                continue
            messages = [first, *consumer.consume(10_000, 0)]
            now = time.time_ns()
            for message in messages:
                value = message.value() if message.error() is None else None
                if value is not None and len(value) == VALUE_SIZE:
                    latencies.append(now - unpack(value)[0])
                elif value is not None:
                    warmed.add(message.partition())
            if len(warmed) == partitions:
                ready.set()
    finally:
        consumer.close()
    results.put(latencies)


def delete_and_settle(system: System, topic: str) -> None:
    """Delete a topic and give the brokers time to remove its logs, so the next run does not
    measure the deletion of thousands of partitions (at 5,000, ember's produce runs that
    overlapped it were about 40x slower, Kafka's 2-3x)."""
    started = time.perf_counter()
    system.delete_topic(topic)
    time.sleep(DELETE_SETTLE_S)
    log(f"deleted {system.name} {topic} ({time.perf_counter() - started:.1f} s with the settling time)")


def spark_rows(spark: Any, systems: Sequence[System], topics: dict[str, str], records: int,
               row: Callable[..., Row], warm_connector: bool) -> list[Row]:
    """count() once per path, each after a warm-up read (the connector's only with ``warm_connector``:
    at 1,000 partitions one read takes minutes): ember direct and broker vs the connector."""
    ember, kafka = systems
    for system, mode in ((ember, "direct"), (ember, "broker"), (kafka, "kafka"))[:3 if warm_connector else 2]:
        spark_count(spark, system, mode, topics[system.name], records)
    connector = [spark_count(spark, kafka, "kafka", topics[kafka.name], records)]
    return [row("Spark count()", "records/s", True,
                [spark_count(spark, ember, mode, topics[ember.name], records)], connector, True,
                f"readPath={mode}", 'format("kafka")') for mode in ("direct", "broker")]
