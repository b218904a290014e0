"""Reading a topic back in transaction tests, both isolation levels, with librdkafka (the Kafka
listener) and with ember's consumer, and read_committed with ember's Spark source (a unique module
name: test folders share sys.path)."""
from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from ember.client import Consumer, TopicPartition

#: How long a read waits for what it expects (transaction tests' bound).
READ_S = 30.0


def librdkafka_values(kafka_bootstrap: str, topic: str, partitions: int, isolation: str, expect: int,
                      timeout_s: float = READ_S) -> list[bytes]:
    """Every value librdkafka reads from the start of each partition until ``expect`` arrived (then
    a second more, to catch extras) or the timeout."""
    consumer = KafkaConsumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"g-{time.monotonic_ns()}",
                              "isolation.level": isolation, "enable.auto.commit": False,
                              "auto.offset.reset": "earliest"})
    try:
        consumer.assign([KafkaTopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        deadline, settle = time.monotonic() + timeout_s, None
        while time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.2):
                if message.error() is None:
                    values.append(message.value())
                elif message.error().code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(message.error())
            if len(values) >= expect:
                settle = settle or time.monotonic() + 1.0
                if time.monotonic() > settle:
                    break
        return values
    finally:
        consumer.close()


def ember_values(bootstrap: str, topic: str, partitions: int, isolation: str,
                 timeout_s: float = READ_S) -> list[bytes]:
    """Every value ember's consumer reads from the start of each partition to its end (the last
    stable offset for read_committed)."""
    with Consumer(bootstrap_servers=bootstrap, isolation_level=isolation, auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                values += [r.value for r in records]
        return values


def spark_values(spark: Any, bootstrap: str, topic: str) -> list[bytes]:
    """Every value of ``topic`` in one batch read by ember's Spark source (``format("ember")``)
    with its default isolation level, read_committed: up to each partition's last stable offset."""
    frame = spark.read.format("ember").option("bootstrap", bootstrap).option("topic", topic).load()
    return [bytes(row["value"]) for row in frame.select("value").collect()]
