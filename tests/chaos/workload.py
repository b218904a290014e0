"""The clients a chaos run drives against the cluster, each on its own thread, recording into the
:class:`History`: idempotent acks=all producers with unique values, a live consumer reading every
partition from offset 0, a consumer-group member committing offsets, a high-watermark sampler,
and a watchdog that reports sends older than the delivery bound while the run goes on.
"""
from __future__ import annotations

import faulthandler
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import pyarrow as pa

from ember.client import Consumer, OffsetAndMetadata, Producer, TopicPartition
from ember.errors import EmberError

from .history import PENDING, ConsumerLog, History, ProducerLog, record_value

logger = logging.getLogger("chaos")


@dataclass(frozen=True)
class ClientSettings:
    """Timeouts of every client in the run (Kafka's names)."""
    delivery_timeout_ms: int = 30000
    request_timeout_ms: int = 10000
    session_timeout_ms: int = 6000      # of the group member
    commit_interval_s: float = 1.0
    close_s: float = 30.0               # bound on every close()

    @property
    def delivery_bound_s(self) -> float:
        """How long a send may take to resolve: delivery.timeout.ms plus one request timeout of margin
        (an in-flight request is answered or timed out before its batch can expire)."""
        return (self.delivery_timeout_ms + self.request_timeout_ms) / 1000 + 5.0


class Worker(threading.Thread):
    """A client thread: ``open`` the client, ``step`` until stopped, then ``finish`` (bounded and
    timed by the runner through :meth:`stop`)."""

    def __init__(self, name: str, history: History) -> None:
        super().__init__(name=name, daemon=True)
        self.history = history
        self.error: Optional[BaseException] = None
        self._halt = threading.Event()
        self._finished = threading.Event()

    def run(self) -> None:
        try:
            self.open()
            while not self._halt.is_set():
                self.step()
            self.finish()
        except BaseException as exc:   # reported by the runner, never a silent dead thread
            self.error = exc
        finally:
            self._finished.set()

    def stop(self, bound_s: float) -> None:
        """Ask the worker to finish and wait up to ``bound_s``; a miss is a liveness violation."""
        started = time.monotonic()
        self._halt.set()
        finished = self._finished.wait(bound_s)
        self.history.timing(f"{self.name} finish (flush and close)", time.monotonic() - started if finished else None,
                            bound_s)

    def open(self) -> None: ...
    def step(self) -> None: ...
    def finish(self) -> None: ...

    def timed(self, what: str, bound_s: float, call: Callable[[], object]) -> None:
        """Run ``call`` and record how long it took against ``bound_s``."""
        started = time.monotonic()
        call()
        self.history.timing(f"{self.name} {what}", time.monotonic() - started, bound_s)


class ProducerWorker(Worker):
    """Sends ``rate`` unique records a second, spread round-robin over the partitions: one record
    per ``send`` (``columnar=False``) or ``chunk``-row tables per ``send_batch``."""

    def __init__(self, producer: int, bootstrap: str, topic: str, partitions: int, rate: float,
                 history: History, settings: ClientSettings, columnar: bool, chunk: int = 200) -> None:
        super().__init__(f"producer-{producer}", history)
        self.log = ProducerLog(producer)
        history.producers.append(self.log)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.rate, self.settings, self.columnar, self.chunk = rate, settings, columnar, chunk
        self.producer: Optional[Producer] = None
        self._began = 0.0
        self._next_partition = producer % partitions

    def open(self) -> None:
        self.producer = Producer(self.bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                                 delivery_timeout_ms=self.settings.delivery_timeout_ms,
                                 request_timeout_ms=self.settings.request_timeout_ms)
        self._began = time.monotonic()

    def step(self) -> None:
        due = int(self.rate * (time.monotonic() - self._began)) - len(self.log)
        if due < (self.chunk if self.columnar else 1):
            time.sleep(0.01)
            return
        partition = self._next_partition
        self._next_partition = (partition + 1) % self.partitions
        if self.columnar:
            self._send_table(partition, self.chunk)
        else:
            for _ in range(min(due, 500)):
                self._send_one(partition)

    def _send_one(self, partition: int) -> None:
        seq = self.log.sent(partition)
        try:
            future = self.producer.send(self.topic, record_value(self.log.producer, seq), partition=partition)
        except EmberError as exc:
            self.log.failed(seq, exc)
            return
        future.add_callback(lambda metadata: self.log.acked(seq, metadata.offset))
        future.add_errback(lambda error: self.log.failed(seq, error))

    def _send_table(self, partition: int, count: int) -> None:
        first = self.log.sent(partition, count)
        values = pa.array([record_value(self.log.producer, seq) for seq in range(first, first + count)], pa.binary())
        try:
            future = self.producer.send_batch(self.topic, pa.table({"value": values}), partition=partition)
        except EmberError as exc:
            self.log.failed(first, exc, count)
            return

        def done(result: Any) -> None:
            error = result.exception()
            if error is not None:
                self.log.failed(first, error, count)
                return
            seq = first
            for batch in result.result()[TopicPartition(self.topic, partition)]:
                self.log.acked(seq, batch.base_offset, batch.record_count)
                seq += batch.record_count
        future.add_done_callback(done)

    def finish(self) -> None:
        self.timed("flush()", self.settings.delivery_bound_s, self._flush)
        self.timed("close()", self.settings.close_s, lambda: self.producer.close(timeout=self.settings.close_s / 2))

    def _flush(self) -> None:
        try:
            self.producer.flush(timeout=self.settings.delivery_bound_s)
        except EmberError:
            pass   # what stayed unresolved is reported by the checker


class ConsumerWorker(Worker):
    """A consumer client on a thread; closed (bounded, timed) when the worker finishes."""

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, history: History,
                 settings: ClientSettings, log: ConsumerLog) -> None:
        super().__init__(name, history)
        self.bootstrap, self.topic, self.settings, self.log = bootstrap, topic, settings, log
        self.tps = [TopicPartition(topic, p) for p in range(partitions)]
        self.consumer: Optional[Consumer] = None

    def record(self, batches: dict[TopicPartition, pa.RecordBatch]) -> None:
        for tp, batch in batches.items():
            self.log.read(tp.partition, batch.column("offset"), batch.column("value"))

    def failed(self, error: EmberError) -> None:
        """Count a client error (the run goes on: retrying is the client's and this loop's job)."""
        self.log.errors[type(error).__name__] += 1
        logger.info("%s: %s: %s", self.name, type(error).__name__, error)

    def finish(self) -> None:
        self.timed("close()", self.settings.close_s, self.consumer.close)


class LiveConsumer(ConsumerWorker):
    """Reads every partition from offset 0 as records become readable, recording each record
    and the positions it reports."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, history: History,
                 settings: ClientSettings) -> None:
        super().__init__("live-consumer", bootstrap, topic, partitions, history, settings, history.live)

    def open(self) -> None:
        self.consumer = Consumer(bootstrap_servers=self.bootstrap, auto_offset_reset="earliest",
                                 fetch_max_wait_ms=200, request_timeout_ms=self.settings.request_timeout_ms)
        self.consumer.assign(self.tps)
        for tp in self.tps:
            self.consumer.seek(tp, 0)

    def step(self) -> None:
        try:
            self.record(self.consumer.poll_batches(timeout_ms=200))
            for tp in self.tps:
                self.log.position(tp.partition, self.consumer.position(tp))
        except EmberError as exc:
            self.failed(exc)
            time.sleep(0.1)

    def positions(self) -> dict[int, int]:
        """The last position recorded per partition."""
        return {p: seen[-1] for p, seen in self.log.positions.items() if seen}


class GroupMember(ConsumerWorker):
    """A member of a consumer group on the topic that commits its positions every
    ``commit_interval_s``; acknowledged commits go to the history."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, group: str, history: History,
                 settings: ClientSettings) -> None:
        super().__init__("group-member", bootstrap, topic, partitions, history, settings, history.group)
        self.group = group
        self._last_commit = 0.0

    def open(self) -> None:
        self.consumer = Consumer(self.topic, bootstrap_servers=self.bootstrap, group_id=self.group,
                                 enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=200,
                                 session_timeout_ms=self.settings.session_timeout_ms,
                                 heartbeat_interval_ms=self.settings.session_timeout_ms // 4,
                                 request_timeout_ms=self.settings.request_timeout_ms)

    def step(self) -> None:
        try:
            self.record(self.consumer.poll_batches(timeout_ms=200))
            if time.monotonic() - self._last_commit >= self.settings.commit_interval_s:
                self._last_commit = time.monotonic()
                offsets = {tp: self.consumer.position(tp) for tp in self.consumer.assignment()}
                self.consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
                self.history.commits.extend((tp.partition, o) for tp, o in offsets.items())
        except EmberError as exc:
            self.failed(exc)
            time.sleep(0.1)


class HighWatermarkSampler(ConsumerWorker):
    """Samples every partition's high watermark (ListOffsets latest, as consumers see it)."""

    interval_s = 0.25

    def __init__(self, bootstrap: str, topic: str, partitions: int, history: History,
                 settings: ClientSettings) -> None:
        super().__init__("hw-sampler", bootstrap, topic, partitions, history, settings, ConsumerLog())

    def open(self) -> None:
        self.consumer = Consumer(bootstrap_servers=self.bootstrap, request_timeout_ms=self.settings.request_timeout_ms)

    def step(self) -> None:
        try:
            for tp, hw in self.consumer.end_offsets(self.tps).items():
                self.history.high_watermark(tp.partition, hw)
        except EmberError as exc:
            self.failed(exc)
        self._halt.wait(self.interval_s)


class Watchdog(Worker):
    """Reports (once per producer) a send still unresolved past the delivery bound, with every
    thread's stack written to ``stacks``, so a hang is seen while the run goes on."""

    def __init__(self, history: History, stacks: Path) -> None:
        super().__init__("watchdog", history)
        self.stacks = stacks
        self._oldest = {}   # producer -> first seq that may be unresolved
        self._reported: set[int] = set()

    def step(self) -> None:
        now = time.monotonic()
        for log in list(self.history.producers):
            seq = self._oldest.get(log.producer, 0)
            while seq < len(log) and log.offsets[seq] != PENDING:
                seq += 1
            self._oldest[log.producer] = seq
            if (seq < len(log) and now - log.sent_at[seq] > self.history.delivery_bound_s
                    and log.producer not in self._reported):
                self._reported.add(log.producer)
                with open(self.stacks, "a") as out:
                    out.write(f"--- producer {log.producer} seq {seq} unresolved after "
                              f"{now - log.sent_at[seq]:.0f}s; stacks:\n")
                    out.flush()
                    faulthandler.dump_traceback(out, all_threads=True)
                self.history.stalls.append(f"producer {log.producer}: seq {seq} still unresolved "
                                           f"{now - log.sent_at[seq]:.0f}s after send; stacks in {self.stacks}")
        self._halt.wait(2.0)
