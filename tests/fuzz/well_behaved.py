"""The well-behaved client that must keep working while the broker is fuzzed.

On its own topic (which no fuzzed request can name) it produces unique values with an idempotent
``acks=all`` producer, reads them with a group consumer that commits, and asks Admin about the
topic, in rounds, for the whole run. Every acknowledged record is remembered with the offset its
acknowledgement named; :meth:`WellBehavedClient.verify` reads the topic back from the start and
demands exactly those records at exactly those offsets.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict

from ember.client import Admin, Consumer, Producer, TopicPartition

#: Longest a round (produce + flush, poll, admin call) may take while the broker is fuzzed.
ROUND_TIMEOUT_S = 60.0
RECORDS_PER_ROUND = 50


class WellBehavedClient(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, partitions: int, group_id: str) -> None:
        super().__init__(name="well-behaved-client", daemon=True)
        self.bootstrap, self.topic, self.partitions, self.group_id = bootstrap, topic, partitions, group_id
        self.acked: dict[int, dict[int, bytes]] = defaultdict(dict)    # partition -> offset -> value
        self.consumed = 0
        self.rounds = 0
        self.failures: list[str] = []
        self.longest_round_s = 0.0
        self._stop_event = threading.Event()

    def stop(self, timeout_s: float = ROUND_TIMEOUT_S * 3) -> None:
        self._stop_event.set()
        self.join(timeout_s)
        if self.is_alive():
            self.failures.append(f"the well-behaved client did not stop within {timeout_s:.0f}s")

    def run(self) -> None:
        try:
            with Producer(self.bootstrap, acks="all", linger_ms=5, request_timeout_ms=int(ROUND_TIMEOUT_S * 500),
                          delivery_timeout_ms=int(ROUND_TIMEOUT_S * 1000)) as producer, \
                    Consumer(self.topic, bootstrap_servers=self.bootstrap, group_id=self.group_id,
                             auto_offset_reset="earliest") as consumer, Admin(self.bootstrap) as admin:
                while not self._stop_event.is_set():
                    started = time.monotonic()
                    self._round(producer, consumer, admin)
                    self.rounds += 1
                    self.longest_round_s = max(self.longest_round_s, time.monotonic() - started)
                    self._stop_event.wait(0.05)
        except Exception as exc:   # any failure of a well-behaved client is a finding
            self.failures.append(f"round {self.rounds}: {type(exc).__name__}: {exc}")

    def _round(self, producer: Producer, consumer: Consumer, admin: Admin) -> None:
        base = self.rounds * RECORDS_PER_ROUND
        values = [b"good-%d" % (base + i) for i in range(RECORDS_PER_ROUND)]
        futures = [producer.send(self.topic, value, key=b"%d" % (i % 7)) for i, value in enumerate(values)]
        producer.flush(ROUND_TIMEOUT_S)
        for value, future in zip(values, futures):
            metadata = future.get(0)
            self.acked[metadata.partition][metadata.offset] = value
        self.consumed += sum(len(records) for records in consumer.poll(200).values())
        if self.rounds % 20 == 0:
            description = admin.describe_topic(self.topic)
            if len(description.partitions) != self.partitions:
                raise AssertionError(f"Admin described {len(description.partitions)} partitions of {self.topic}")

    def verify(self, timeout_s: float = ROUND_TIMEOUT_S) -> list[str]:
        """After the run: the topic holds exactly the acknowledged records at their offsets."""
        problems = list(self.failures)
        if not self.acked:
            return problems + ["the well-behaved client got no record acknowledged"]
        read: dict[int, dict[int, bytes]] = defaultdict(dict)
        expected = sum(len(offsets) for offsets in self.acked.values())
        with Consumer(bootstrap_servers=self.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(self.topic, p) for p in range(self.partitions)])
            deadline = time.monotonic() + timeout_s
            while sum(len(o) for o in read.values()) < expected and time.monotonic() < deadline:
                for tp, records in consumer.poll(500).items():
                    for record in records:
                        if record.offset in read[tp.partition]:
                            problems.append(f"{self.topic}-{tp.partition} offset {record.offset} read twice")
                        read[tp.partition][record.offset] = record.value
        for partition in range(self.partitions):
            if read[partition] != self.acked[partition]:
                missing = sorted(set(self.acked[partition]) - set(read[partition]))[:5]
                extra = sorted(set(read[partition]) - set(self.acked[partition]))[:5]
                problems.append(f"{self.topic}-{partition}: log differs from the acknowledged records "
                                f"(missing offsets {missing}, unexpected {extra})")
            offsets = sorted(read[partition])
            if offsets != list(range(len(offsets))):
                problems.append(f"{self.topic}-{partition}: offsets are not contiguous from 0")
        if self.consumed == 0:
            problems.append("the well-behaved group consumer read nothing during the run")
        return problems

    @property
    def acknowledged(self) -> int:
        return sum(len(offsets) for offsets in self.acked.values())
