"""The transactional workload's clients and its nemesis kinds.

* :class:`ProducerProcess`: one transactional producer (:mod:`txn_producer` on librdkafka, or its
  Java twin ``TxnProducer.java`` on Kafka's KafkaProducer, :mod:`txn_java`), a separate OS
  process with a fixed ``transactional.id``, reporting through its events file; SIGKILLed and
  started again by the nemesis, SIGTERMed (finish the transaction, exit) at the end.
* :class:`TxnConsumer`: a librdkafka consumer on a thread (read_committed or read_uncommitted)
  reading every partition from offset 0, recording each poll (partition, offset, value) in order.
* :class:`TxnNemesis`: :class:`nemesis.Nemesis` with two kinds of its own: ``kill-txn-producer``
  (SIGKILL a producer mid-transaction, hold, start it again with the same transactional id: its
  ``init_transactions()`` must fence the old instance and abort its open transaction) and
  ``kill-txn-coordinator`` (SIGKILL the broker coordinating a producer's transactional id, found
  with the coordinator's own rule, :func:`ember.groups.coordinator.coordinator_id`, then restart).
"""
from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from ember.groups.coordinator import coordinator_id
from ember.launcher.local import LocalCluster

from . import txn_java
from .history import Fault
from .nemesis import KINDS, ChaosBounds, Nemesis
from .txn_history import TxnConsumerLog, TxnHistory, read_events

logger = logging.getLogger("chaos.txn")

SCRIPT = Path(__file__).with_name("txn_producer.py")
TXN_KINDS = ("kill-txn-producer", "kill-txn-coordinator")
#: the producers' client: confluent-kafka (librdkafka: transaction protocol version 1), Kafka's Java
#: client (version 2 when the broker advertises the transaction.version feature), or both
TXN_CLIENTS = ("librdkafka", "java", "mixed")
#: Every kind a transactional run injects by default: the record harness's and its own.
ALL_TXN_KINDS = KINDS + TXN_KINDS


def transactional_id(producer: int) -> str:
    return f"chaos-txn-{producer}"   # as txn_producer.py names it


def producer_clients(txn_client: str, producers: int) -> list[str]:
    """Each producer's client: ``mixed`` alternates, counting back from the last producer (the
    one abandoned mid-transaction at the end, which only the coordinator's timeout ends), Java."""
    if txn_client not in TXN_CLIENTS:
        raise ValueError(f"txn_client {txn_client!r} is none of {', '.join(TXN_CLIENTS)}")
    if txn_client != "mixed":
        return [txn_client] * producers
    return ["java" if (producers - 1 - i) % 2 == 0 else "librdkafka" for i in range(producers)]


class ProducerProcess:
    """One transactional producer process; every instance of it appends to the same events file."""

    def __init__(self, index: int, bootstrap: str, topic: str, partitions: int, directory: Path, seed: int,
                 rate: float, abort_every: int, transaction_timeout_ms: int, client: str = "librdkafka") -> None:
        if client not in ("librdkafka", "java"):
            raise ValueError(f"producer client {client!r} is neither librdkafka nor java")
        self.index, self.bootstrap, self.topic, self.partitions = index, bootstrap, topic, partitions
        self.client = client
        self.events = directory / f"txn-producer-{index}.events"
        self.output = directory / f"txn-producer-{index}.log"
        self.seed, self.rate, self.abort_every, self.transaction_timeout_ms = seed, rate, abort_every, transaction_timeout_ms
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.instances = 0
        #: exit status of every instance that ended (-9: our SIGKILL; 0: a clean stop on SIGTERM)
        self.exits: list[int] = []

    @property
    def transactional_id(self) -> str:
        return transactional_id(self.index)

    def next_txn(self) -> int:
        """The number the next instance starts at: past every transaction any instance began."""
        last = -1
        for line in read_events(self.events):
            if '"begin"' in line and line.endswith("}"):
                last = max(last, json.loads(line)["txn"])
        return last + 1

    def start(self) -> None:
        if self.process is not None:
            self.exits.append(self.process.wait(10))
        self.instances += 1
        args = ["--bootstrap", self.bootstrap, "--topic", self.topic,
                "--partitions", str(self.partitions), "--producer", str(self.index),
                "--first-txn", str(self.next_txn()), "--events", str(self.events), "--seed", str(self.seed),
                "--abort-every", str(self.abort_every), "--rate", str(self.rate),
                "--transaction-timeout-ms", str(self.transaction_timeout_ms)]
        command = txn_java.command(args) if self.client == "java" else [sys.executable, str(SCRIPT), *args]
        with open(self.output, "ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def last_event(self) -> Optional[dict[str, Any]]:
        """The last complete line of the events file (read from its tail)."""
        try:
            with open(self.events, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 4096))
                lines = f.read().decode(errors="replace").splitlines()
        except FileNotFoundError:
            return None
        for line in reversed(lines):
            if line.startswith("{") and line.endswith("}"):
                return json.loads(line)
        return None

    def mid_transaction(self) -> Optional[dict[str, Any]]:
        """The last event when it is inside a transaction (begun or ending, not ended), else None."""
        event = self.last_event()
        return event if event is not None and event["ev"] in ("begin", "flushed", "end-call") else None

    def kill(self) -> None:
        """SIGKILL this instance and reap it (bounded)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                logger.warning("producer %d did not die within 10s of SIGKILL", self.index)

    def stop(self, bound_s: float) -> Optional[float]:
        """SIGTERM: finish the current transaction and exit; SIGKILL past ``bound_s``. How long it
        took (None: it had to be killed)."""
        if self.process is None:
            return 0.0
        took: Optional[float] = 0.0
        if self.process.poll() is None:
            started = time.monotonic()
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(bound_s)
                took = time.monotonic() - started
            except subprocess.TimeoutExpired:
                self.kill()
                took = None
        self.exits.append(self.process.wait(10))
        self.process = None
        return took

    def crashes(self) -> list[int]:
        """Exit statuses of instances that ended by themselves (not our SIGKILL, not a clean stop)."""
        return [code for code in self.exits if code not in (0, -signal.SIGKILL)]

    def wait_init(self, since: float, bound_s: float) -> Optional[float]:
        """Bounded wait until an instance reports ``init`` after ``since``; seconds from ``since``."""
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline:
            for line in reversed(read_events(self.events)[-50:]):
                if '"init"' in line and line.endswith("}"):
                    t = json.loads(line)["t"]
                    if t >= since:
                        return t - since
                    break
            if not self.alive():
                return None
            time.sleep(0.1)
        return None


class TxnConsumer(threading.Thread):
    """A librdkafka consumer reading every partition with ``log.isolation``, from offset 0 or from
    ``start`` (partition -> offset: a :meth:`successor`'s).

    It never calls ``position()`` or another confluent-kafka method that holds the GIL while it
    takes librdkafka's locks: librdkafka 2.16 can deadlock its own threads when a partition's leader
    goes away while an OffsetForLeaderEpoch request is in flight (``rd_kafka_toppar_forget_leader``
    against the leader re-query taking the handle's lock in the other order, librdkafka issue
    #5476), and a ``position()`` call then waited on those locks forever holding the GIL, freezing
    the whole test process (seen with gdb in a rehearsal of CI, which timed out at 90 minutes with no
    report, as one CI run had). Such an instance
    reads nothing more; :meth:`wedged` tells it from a consumer the cluster starves."""

    def __init__(self, log: TxnConsumerLog, bootstrap: str, topic: str, partitions: int,
                 start: Optional[dict[int, int]] = None) -> None:
        super().__init__(name=log.name, daemon=True)
        self.log, self.bootstrap, self.topic, self.partitions = log, bootstrap, topic, partitions
        self.start_offsets = start or {}
        self.reached: dict[int, int] = {}            # partition -> highest offset read
        self.error: Optional[BaseException] = None
        self.close_s: Optional[float] = None
        #: librdkafka's main thread of this instance (its thread id), once it exists
        self.main_thread: Optional[int] = None
        self.retired = False
        self._halt = threading.Event()
        self._lock = threading.Lock()                # a retired instance appends nothing more

    def run(self) -> None:
        from confluent_kafka import Consumer, KafkaError, TopicPartition
        try:
            with _CREATING:                          # the new threads are this instance's
                before = _threads()
                consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"chaos-{self.log.name}",
                                     "isolation.level": self.log.isolation, "enable.auto.commit": False,
                                     "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
                                     "logger": _InfoLogger(logging.getLogger(f"chaos.txn.{self.log.name}"))})
                self.main_thread = next((t for t in _threads() - before if _thread_name(t) == "rdk:main"), None)
            consumer.assign([TopicPartition(self.topic, p, self.start_offsets.get(p, 0))
                             for p in range(self.partitions)])
            try:
                while not self._halt.is_set():
                    for message in consumer.consume(500, timeout=0.2):
                        error = message.error()
                        if error is not None:
                            if error.code() != KafkaError._PARTITION_EOF:
                                self.log.errors[error.name()] = self.log.errors.get(error.name(), 0) + 1
                            continue
                        partition, offset = message.partition() or 0, message.offset() or 0
                        with self._lock:
                            if self.retired:
                                break
                            self.log.read(partition, offset, message.value())
                            self.reached[partition] = max(self.reached.get(partition, -1), offset)
            finally:
                started = time.monotonic()
                consumer.close()
                self.close_s = time.monotonic() - started
        except BaseException as exc:   # reported by the runner
            self.error = exc

    def stop(self, bound_s: float) -> bool:
        self._halt.set()
        self.join(bound_s)
        return not self.is_alive()

    def wedged(self, samples: int = 5, interval_s: float = 1.0) -> bool:
        """Whether librdkafka's main thread of this instance sits on a lock for good: in a futex
        wait without a timeout at every one of ``samples`` looks ``interval_s`` apart (it only ever
        waits with one when it works: its queue's timed waits)."""
        if self.main_thread is None:
            return False
        for sample in range(samples):
            if sample:
                time.sleep(interval_s)
            if not _untimed_futex_wait(self.main_thread):
                return False
        return True

    def successor(self) -> "TxnConsumer":
        """Retire this instance (it appends nothing more to the log) and return a new one, not yet
        started, reading on from the record after the last this one read in each partition."""
        with self._lock:
            self.retired = True
            start = {p: self.reached.get(p, -1) + 1 for p in range(self.partitions)}
        self._halt.set()
        return TxnConsumer(self.log, self.bootstrap, self.topic, self.partitions, start)


#: Serialises consumer creation, so the threads that appear during one are that consumer's.
_CREATING = threading.Lock()
_FUTEX = "202"   # x86-64's futex syscall number, as /proc/<tid>/syscall shows it


def _threads() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


def _thread_name(tid: int) -> str:
    try:
        return Path(f"/proc/self/task/{tid}/comm").read_text().strip()
    except OSError:
        return ""


def _untimed_futex_wait(tid: int) -> bool:
    """Whether thread ``tid`` of this process is blocked in a futex wait with no timeout (a mutex
    or a rwlock; a condition wait with a deadline passes a timeout): /proc's syscall arguments."""
    try:
        fields = Path(f"/proc/self/task/{tid}/syscall").read_text().split()
    except OSError:
        return False
    return len(fields) > 4 and fields[0] == _FUTEX and int(fields[4], 16) == 0


class _InfoLogger:
    """librdkafka's log lines (connection refused while a broker is down...) at INFO: expected
    under faults, they go to the run's clients.log, not to a test's captured errors."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger

    def log(self, level: int, message: str, *args: Any) -> None:
        self.logger.info(message, *args)


class TxnNemesis(Nemesis):
    """The record harness's nemesis plus the transactional kinds (:data:`TXN_KINDS`)."""

    extra_kinds: tuple[str, ...] = TXN_KINDS

    def __init__(self, cluster: LocalCluster, topic: str, partitions: int, history: TxnHistory,
                 rng: random.Random, bounds: ChaosBounds, kinds: tuple[str, ...], producers: list[ProducerProcess],
                 progress: Callable[[str], None] = lambda message: None, init_bound_s: float = 90.0) -> None:
        super().__init__(cluster, topic, partitions, history, rng, bounds, kinds, progress=progress)
        self.txn_history = history
        self.producers = producers
        self.init_bound_s = init_bound_s

    def inject_extra(self, fault: Fault, brokers: list[int]) -> None:
        if fault.kind == "kill-txn-producer":
            self._kill_producer(fault, self.rng.choice(self.producers))
        else:
            producer = self.rng.choice(self.producers)
            live = [b for b in brokers if self.probe.registration_owner(b) is not None] or brokers
            coordinator = coordinator_id(producer.transactional_id, live)
            assert coordinator is not None
            self._kill(fault, [coordinator])
            fault.note = f"(coordinator of {producer.transactional_id} among live {live})"

    def _kill_producer(self, fault: Fault, producer: ProducerProcess) -> None:
        """SIGKILL the producer while it is inside a transaction (waiting up to 5 s for one), hold,
        start a new instance with the same transactional id; it must initialise within the bound."""
        fault.targets = (f"producer-{producer.index}",)
        deadline = time.monotonic() + 5.0
        event = producer.mid_transaction()
        while event is None and time.monotonic() < deadline and not self._halt.is_set():
            time.sleep(0.01)
            event = producer.mid_transaction()
        producer.kill()
        killed_at = time.monotonic()
        self.txn_history.kills.append((producer.index, killed_at))
        where = (f"in txn {event['txn']} after its {event['ev']}" if event is not None
                 else f"outside a transaction (last event {(producer.last_event() or {}).get('ev')})")
        self._hold((0.5, 3.0))
        restarted = time.monotonic()
        producer.start()
        took = producer.wait_init(restarted, self.init_bound_s)
        self.history.timing(f"producer {producer.index} init_transactions after its restart", took, self.init_bound_s)
        fault.note = f"(killed {where}; new instance initialised " + \
            (f"after {took:.1f}s)" if took is not None else "NEVER)")
