"""Kafka clients nobody here wrote (confluent-kafka / librdkafka, Kafka's own Java tools), driven
against ember's Kafka listener: topic creation, producing with delivery reports, consuming exactly N
records, running a Kafka command-line tool."""
from __future__ import annotations

import json
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ember.client import Consumer as EmberConsumer
from ember.client import TopicPartition as EmberTopicPartition

WAIT_S = 30.0
BASE_MS = 1_700_000_000_000


def records(count: int, partitions: int = 1) -> list[tuple[int, bytes | None, bytes | None, list, int]]:
    """(partition, key, value, headers, timestamp) with the edge cases: null key, null value, empty
    value, a header with a null value, no headers."""
    out = []
    for i in range(count):
        key = None if i % 7 == 1 else f"k{i}".encode()
        value = None if i % 7 == 2 else (b"" if i % 7 == 3 else f"value-{i}".encode() * (1 + i % 5))
        headers = [("n", str(i).encode()), ("empty", None)] if i % 2 == 0 else []
        out.append((i % partitions, key, value, headers, BASE_MS + 1000 * i))
    return out


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int = 1, replication_factor: int = 1,
                 config: dict[str, str] | None = None) -> None:
    client = admin(bootstrap)   # referenced until the result is in: a collected client fails its futures
    futures = client.create_topics([NewTopic(name, partitions, replication_factor, config=config or {})],
                                   operation_timeout=WAIT_S)
    futures[name].result(timeout=WAIT_S)


def produce(bootstrap: str, topic: str, items: Iterable[tuple], **config: Any) -> list[tuple[int, int]]:
    """Produce ``(partition, key, value, headers, timestamp)`` items; each one's (partition, offset),
    in the order given, raising the first delivery error."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    delivered: dict[int, Any] = {}
    for i, (partition, key, value, headers, timestamp) in enumerate(items):
        producer.produce(topic, value=value, key=key, partition=partition, headers=headers or None,
                         timestamp=timestamp, on_delivery=lambda err, msg, i=i: delivered.__setitem__(i, err or msg))
    left = producer.flush(WAIT_S)
    assert left == 0, f"{left} record(s) not delivered within {WAIT_S}s"
    errors = [d for d in delivered.values() if not hasattr(d, "offset")]
    if errors:
        raise KafkaException(errors[0])
    return [(delivered[i].partition(), delivered[i].offset()) for i in range(len(delivered))]


def consume(bootstrap: str, topic: str, starts: dict[int, int], count: int, **config: Any) -> list[tuple]:
    """Exactly ``count`` records read from ``starts`` ({partition: offset}) by an assigned consumer,
    as (partition, offset, key, value, headers, (timestamp type, timestamp))."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, **config})
    try:
        consumer.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
        got: list[tuple] = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                raise KafkaException(message.error())
            got.append((message.partition(), message.offset(), message.key(), message.value(),
                        message.headers() or [], message.timestamp()))
        assert len(got) == count, f"read {len(got)} of {count} records within {WAIT_S}s"
        return sorted(got, key=lambda m: (m[0], m[1]))
    finally:
        consumer.close()


def ember_read(cluster, topic: str, partitions: int, count: int) -> list[tuple]:
    """Records read by ember's own consumer, as (partition, offset, key, value, headers, timestamp)."""
    consumer = EmberConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest")
    try:
        consumer.assign([EmberTopicPartition(topic, p) for p in range(partitions)])
        got: list[tuple] = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got += [(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp) for r in batch]
        assert len(got) == count
        return sorted(got)
    finally:
        consumer.close()


#: log4j2 settings of the Java processes the tests start (Connect, Streams): warnings and errors only
LOG4J = "rootLogger.level = WARN\nrootLogger.appenderRef.stdout.ref = STDOUT\nappender.stdout.type = Console\n" \
        "appender.stdout.name = STDOUT\nappender.stdout.layout.type = PatternLayout\n" \
        "appender.stdout.layout.pattern = [%d] %p %m (%c)%n\n"


@contextmanager
def java_service(classpath: str, main_class: str, properties: Path, log: Path) -> Iterator[subprocess.Popen]:
    """A long-running Kafka Java process (a Connect worker, a Streams application) started with its
    properties file, logging (warnings and errors) to ``log``; terminated, then killed, at exit."""
    log4j = log.with_suffix(".log4j2.properties")
    log4j.write_text(LOG4J)
    with open(log, "a") as out:
        process = subprocess.Popen(["java", "-Xmx512m", f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath,
                                    main_class, str(properties)], stdout=out, stderr=subprocess.STDOUT)
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def run_tool(main_class: str, *args: str, stdin: str | None = None, exit_code: int = 0,
             timeout_s: float = 90.0) -> subprocess.CompletedProcess:
    """Run one of Kafka's own command-line tools (``kafka-tools`` from Maven Central, cached by
    ``make setup``) from a plain classpath, as ``kafka-*.sh`` would, asserting its exit code."""
    from ember.jars import KAFKA_TOOLS

    done = subprocess.run(["java", "-Xmx256m", "-cp", KAFKA_TOOLS.classpath, main_class, *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == exit_code, (f"{main_class} {' '.join(args)} exited {done.returncode}:\n"
                                          f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done


def tool_events(stdout: str) -> list[dict]:
    """The JSON event lines the Verifiable* tools print (what Kafka's system tests parse)."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
