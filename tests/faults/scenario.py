"""Issue 23's acceptance scenario on real file systems: a 3-broker cluster (``ember cluster up``) whose
log directories sit on small tmpfs mounts, a topic of 3 partitions (RF 3, ``min.insync.replicas=2``),
an idempotent acks=all confluent-kafka producer of 1 KB records, a disk that fills, then space back
(while the brokers run, or after ``ember cluster down`` + ``ember cluster up``).

Cases (:data:`CASES`):

* ``one-broker``: broker 1's file system fills (filler file + the producer's own writes).
* ``all-brokers``: every broker's file system fills.
* ``segment-roll``: every broker's file system runs out of inodes (blocks left free), so appends
  go on until the active segment is full and the roll that creates the next one fails (tiny
  ``segment.bytes``).
* ``issue``: the issue's layout: the whole data directory (ZooKeeper, its space reserve, every
  broker) on one tmpfs, filled.
* ``eio``: broker 1's data directory is a fault FUSE file system (:mod:`tests.faults.faultfs`)
  switched to EIO mid-append (writes, fsyncs, truncations, creations and renames fail), then back
  to working.
* ``fsync-eio``: the same, failing only fsyncs (the flush timer's, every ``flush.ms``) while writes
  work.
* ``read-only``: the same, failing every mutating call with EROFS while reads work, as after
  ext4's ``errors=remount-ro``.

For the last two, "the disk filling" below is the switch and "space back" the switch back; their
broker must also have met the fault (the file system failed calls), and every partition's ISR must
be whole again within ``ONLINE_WITHIN_S``: the broker reopens its offline logs by itself
(platform/ingest/offline_log_recovery.py), or at the restart.

Checked (:class:`Outcome`, each a line of ``problems`` when it fails): no fatal librdkafka error; a
storage or replication error (a delivery report or a client log line naming it, not
``_MSG_TIMED_OUT``) within ``TOLD_WITHIN_S`` of the disk filling; ``ember cluster down`` works on
the full disk; every partition has a leader within ``ONLINE_WITHIN_S`` of space returning or of
``ember cluster up``; every acknowledged record reads back at its offset, unchanged, and no value
appears twice; no torn batch in any segment of any replica but a tail (before the restart,
recovery truncates it), none after.

A real read-only remount is not to be had: the kernel refuses ``mount -o remount,ro`` while a file
is open for writing (EBUSY: every broker holds its active segment open), hence the FUSE file system;
tests/log/disk_faults.py injects the same errors into the log alone.
"""
from __future__ import annotations

import contextlib
import logging
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ember.launcher.local import LocalCluster
from ember.record.batch import check_batch

from .disks import Tmpfs, mounted
from .faultfs import FaultFs

TOPIC = "full-disk"
PARTITIONS = 3
BROKERS = 3
RECORD_BYTES = 1024
TOLD_WITHIN_S = 15.0
ONLINE_WITHIN_S = 90.0
#: The fault file system's mode for each case that fails calls rather than filling a disk.
FS_FAULTS = {"eio": "eio", "fsync-eio": "eio-fsync", "read-only": "erofs"}
CASES = ("one-broker", "all-brokers", "segment-roll", "issue", *FS_FAULTS)
RECOVERIES = ("running", "restart")
#: librdkafka's words for broker errors that say why a write was refused (storage, replicas, leadership).
CAUSES = ("Disk error", "in-sync replicas", "Not leader", "not the leader", "out of order sequence",
          "skipped sequence", "Request timed out", "KAFKA_STORAGE_ERROR", "NOT_ENOUGH_REPLICAS", "NOT_LEADER")
REPO = Path(__file__).resolve().parents[2]
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sizes:
    """How big: each broker's tmpfs (per-broker cases), the shared one (``issue``), segments."""
    broker_disk: int = 32 << 20
    shared_disk: int = 80 << 20
    segment_bytes: int = 1 << 20
    roll_segment_bytes: int = 64 << 10
    leave: int = 2 << 20           # the filler leaves this much for the producer to fill
    grow_to: int = 64 << 20         # each broker's tmpfs after space returns (shared: twice its size)
    produce_after_s: float = 5.0    # keep producing after space returns (running) or after `up`
    rate: float = 500.0             # records/s (each broker holds every record: RF 3)


LONG = Sizes(broker_disk=80 << 20, segment_bytes=4 << 20, roll_segment_bytes=256 << 10, leave=8 << 20,
             grow_to=200 << 20, produce_after_s=20.0, rate=1000.0)


def value_of(seq: int) -> bytes:
    head = b"%012d:" % seq
    return head + bytes((seq + i) % 251 for i in range(RECORD_BYTES - len(head)))


@dataclass
class Outcome:
    case: str
    recovery: str
    acked: int = 0
    read_back: int = 0
    failed_reports: dict[str, int] = field(default_factory=dict)   # delivery report error -> count
    #: per partition: seconds after the disk filled until its first acknowledgement or telling error, which
    heard: dict[int, tuple[float, str] | None] = field(default_factory=dict)
    told_app: list[tuple[float, str]] = field(default_factory=list)   # what the application itself saw
    online_after_s: float | None = None
    isr_full_after_s: float | None = None   # until every partition's ISR held every broker again
    down_rc: int | None = None
    fatal: list[str] = field(default_factory=list)
    torn: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        told = ", ".join(f"p{p}: {h[1]} after {h[0]:.1f}s" if h else f"p{p}: nothing" for p, h in self.heard.items())
        online = f"{self.online_after_s:.1f}s" if self.online_after_s is not None else "never"
        isr = f"{self.isr_full_after_s:.1f}s" if self.isr_full_after_s is not None else "never"
        lines = [f"{self.case}/{self.recovery}: acked {self.acked}, read back {self.read_back}, told: {told}, "
                 f"online after {online}, full ISR after {isr}, failed reports {self.failed_reports or '{}'}, "
                 f"`down` exit {self.down_rc}"]
        lines.append(f"  the application itself saw: {self.told_app or 'no failed report, no log line above debug'}")
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  PROBLEM: {p}" for p in self.problems]
        return "\n".join(lines)


class ProducerWorker(threading.Thread):
    """An idempotent acks=all confluent-kafka producer of 1 KB records, round robin over the
    partitions, recording every acknowledgement, every failed report, every client error and log
    line, each with its time."""

    def __init__(self, bootstrap: str, rate: float, first_seq: int = 0, **config: Any) -> None:
        super().__init__(daemon=True, name="full-disk-producer")
        self.acked: dict[tuple[int, int], bytes] = {}
        self.acked_somewhere: list[tuple[int, bytes]] = []   # acknowledged without an offset (librdkafka can)
        self.ack_times: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        self.failed: list[tuple[float, str]] = []
        self.client_errors: list[tuple[float, str, bool]] = []   # time, name, fatal
        self.log_lines: list[tuple[float, str, int]] = []   # time, text, logging level
        self.seq = first_seq
        self.rate = rate
        self.stop_event = threading.Event()
        self.left: int | None = None
        self.lock = threading.Lock()
        logger = logging.getLogger(f"librdkafka.{id(self)}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.addHandler(_Lines(self.log_lines))
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "batch.size": 16384, "queue.buffering.max.messages": 2000,
                                  "message.timeout.ms": 120_000, "debug": "msg", "error_cb": self._error,
                                  "logger": logger, **config})

    def _error(self, err: KafkaError) -> None:
        with self.lock:
            self.client_errors.append((time.monotonic(), err.name() + ": " + err.str(), err.fatal()))

    def _report(self, err: KafkaError | None, msg: Any) -> None:
        with self.lock:
            if err is None and (msg.offset() is None or msg.offset() < 0):   # acknowledged, offset unknown
                self.acked_somewhere.append((msg.partition(), msg.value()))
            elif err is None:
                self.acked[(msg.partition(), msg.offset())] = msg.value()
                self.ack_times[msg.partition()].append(time.monotonic())
            else:
                self.failed.append((time.monotonic(), err.name()))

    def run(self) -> None:
        started, first = time.monotonic(), self.seq
        while not self.stop_event.is_set():
            ahead = (self.seq - first) / self.rate - (time.monotonic() - started)
            if ahead < -1.0:   # stalled (the queue was full): go on at the rate, no burst
                started, first, ahead = time.monotonic(), self.seq, 0.0
            if ahead > 0:
                self.producer.poll(min(ahead, 0.1))
                continue
            try:
                self.producer.produce(TOPIC, value_of(self.seq), partition=self.seq % PARTITIONS,
                                      on_delivery=self._report)
                self.seq += 1
                self.producer.poll(0)
            except BufferError:      # the queue is full: the brokers take nothing
                self.producer.poll(0.05)
            except Exception as exc:   # e.g. a fatal error: recorded, the worker stops
                self.client_errors.append((time.monotonic(), f"produce raised {exc!r}", True))
                return

    def finish(self, flush_s: float, purge: bool = False) -> int:
        """Stop producing, wait up to ``flush_s`` for reports (purging what is left with
        ``purge``); how many records had no report."""
        self.stop_event.set()
        self.join(10)
        self.left = self.producer.flush(flush_s)
        if purge and self.left:
            self.producer.purge()
            self.producer.flush(10)
        return self.left


class _Lines(logging.Handler):
    """librdkafka's log lines that name a broker error, timed."""
    WORDS = ("rror", "STORAGE", "REPLICAS", "torage", "replicas", "LEADER", "timed out", "fatal", "Fatal")

    def __init__(self, lines: list[tuple[float, str, int]]) -> None:
        super().__init__()
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if any(word in text for word in self.WORDS):
            self.lines.append((time.monotonic(), text, record.levelno))


def ember(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ember.cli", *args], capture_output=True, text=True,
                          timeout=timeout_s, cwd=REPO)


def eventually(check: Callable[[], Any], timeout_s: float, step_s: float = 0.25) -> Any:
    """``check()``'s first truthy result within ``timeout_s``; None if none."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result or time.monotonic() >= deadline:
            return result
        time.sleep(step_s)


def _partitions(bootstrap: str) -> dict[int, Any]:
    """The topic's partitions as a Kafka client's metadata shows them ({} while it cannot tell)."""
    try:
        topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=5).topics
    except Exception:
        return {}
    return dict(topics[TOPIC].partitions) if TOPIC in topics and topics[TOPIC].error is None else {}


def isr_full(bootstrap: str) -> bool:
    """Whether every partition has a leader and every broker in its ISR."""
    parts = _partitions(bootstrap)
    return len(parts) == PARTITIONS and all(p.leader >= 0 and len(p.isrs) == BROKERS for p in parts.values())


def partitions_online(bootstrap: str) -> bool:
    parts = _partitions(bootstrap)
    return len(parts) == PARTITIONS and all(p.leader >= 0 for p in parts.values())


def read_all(bootstrap: str, timeout_s: float = 60) -> dict[tuple[int, int], bytes]:
    """Every record of the topic, from offset 0 to each partition's high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "full-disk-check", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS) if ends[p] > 0])
        got: dict[tuple[int, int], bytes] = {}
        done = {p for p in range(PARTITIONS) if ends[p] == 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    done.add(message.partition())
                continue
            got[(message.partition(), message.offset())] = message.value()
            if message.offset() + 1 >= ends[message.partition()]:
                done.add(message.partition())
        return got
    finally:
        consumer.close()


def torn_batches(data_dirs: list[Path], tail_allowed: bool) -> list[str]:
    """Every segment of every replica, batch by batch (length, CRC): where a batch is torn. A torn
    batch at the very end of a partition's last segment is fine when ``tail_allowed``."""
    found = []
    for data_dir in data_dirs:
        for partition_dir in sorted(data_dir.glob(f"{TOPIC}-*")):
            segments = sorted(partition_dir.glob("*.log"))
            for segment in segments:
                data = segment.read_bytes()
                position = 0
                while position < len(data):
                    try:
                        position += check_batch(data, position).size
                    except Exception as exc:
                        last = segment == segments[-1]
                        if not (tail_allowed and last):
                            found.append(f"{segment} at byte {position} of {len(data)}: {exc}")
                        else:
                            _log.info("torn tail (recovery truncates it): %s at %d of %d", segment, position, len(data))
                        break
    return found


def broker_lines(data: Path, words: tuple[str, ...] = ("WARNING", "ERROR", "Traceback")) -> str:
    """The brokers' warnings and errors, for a report."""
    out = []
    for path in sorted(data.glob("broker-*.log")):
        with contextlib.suppress(OSError):
            lines = [line for line in path.read_text(errors="replace").splitlines() if any(w in line for w in words)]
            out.append(f"--- {path.name}: {len(lines)} lines\n" + "\n".join(lines[:15]))
    return "\n".join(out)


def run_case(root: Path, case: str, recovery: str, sizes: Sizes = Sizes(),
             progress: Callable[[str], object] = lambda message: None) -> Outcome:
    """One run of the scenario under ``root`` (a fresh directory); mounts and unmounts its tmpfs."""
    assert case in CASES and recovery in RECOVERIES
    data = root / "cluster"
    mounts: Sequence[Tmpfs | FaultFs]
    if case == "issue":
        mounts = [Tmpfs(data, sizes.shared_disk)]
        targets = mounts
    elif case in FS_FAULTS:   # broker 1 on the fault file system (backed by root's disk), the others not
        mounts = [FaultFs(data / "broker-1", root / "backing" / "broker-1", root / "faultfs")]
        targets = mounts
    else:
        inodes = 64 if case == "segment-roll" else None
        mounts = [Tmpfs(data / f"broker-{b}", sizes.broker_disk, inodes) for b in range(1, BROKERS + 1)]
        targets = mounts[:1] if case == "one-broker" else mounts
    outcome = Outcome(case, recovery)
    with mounted(mounts):
        try:
            _run(data, case, recovery, sizes, targets, outcome, progress)
        finally:
            if (data / "cluster.json").exists():
                down = ember("cluster", "down", "--data", str(data))
                if down.returncode != 0:
                    outcome.problems.append(f"final `ember cluster down` failed: {down.stdout}{down.stderr}")
            if outcome.problems:
                outcome.notes.append("broker log lines:\n" + broker_lines(data))
    return outcome


def _run(data: Path, case: str, recovery: str, sizes: Sizes, targets: Sequence[Any], outcome: Outcome,
         progress: Callable[[str], object]) -> None:
    segment_bytes = sizes.roll_segment_bytes if case == "segment-roll" else sizes.segment_bytes
    up = ember("cluster", "up", "--brokers", str(BROKERS), "--data", str(data))
    assert up.returncode == 0, up.stdout + up.stderr
    cluster = LocalCluster.load(data)
    bootstrap = cluster.kafka_bootstrap
    broker_dirs = [b.data_dir for b in cluster.brokers.values()]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics([NewTopic(TOPIC, PARTITIONS, BROKERS, config={
        "min.insync.replicas": "2", "segment.bytes": str(segment_bytes)})], operation_timeout=30)
    created[TOPIC].result(timeout=30)
    assert eventually(lambda: partitions_online(bootstrap), 30), "the topic never came online"

    worker = ProducerWorker(bootstrap, sizes.rate)
    worker.start()
    assert eventually(lambda: len(worker.acked) >= 300, 60), f"nothing acknowledged before the fault: {worker.failed[:5]}"
    if case in FS_FAULTS:
        progress(f"{case}/{recovery}: {len(worker.acked)} acked, switching {targets[0].path} to {FS_FAULTS[case]}")
        for fs in targets:
            fs.switch(FS_FAULTS[case])
        full_at = filling_at = time.monotonic()
    else:
        filling_at = time.monotonic()
        full_at = _fill(case, sizes, targets, worker, progress, recovery)
        if not full_at:
            outcome.problems.append(f"the disk never filled within 60s (free: {[t.free() for t in targets]})")
            worker.finish(5, purge=True)
            return
    progress(f"{case}/{recovery}: full; producing into it for {TOLD_WITHIN_S:.0f}s")
    time.sleep(TOLD_WITHIN_S)
    acked_full = len(worker.acked)
    leaderless = {p for p, meta in _partitions(bootstrap).items() if meta.leader < 0}
    _told(worker, filling_at, full_at, leaderless, outcome)
    if case in FS_FAULTS:
        _met_the_fault(data, targets, outcome)

    if recovery == "running":
        if case in FS_FAULTS:
            for fs in targets:
                fs.switch("ok")
        for tmpfs in targets if case not in FS_FAULTS else []:
            tmpfs.release()
            if case == "segment-roll":   # the few inodes freed would go at the next rolls: grow too
                tmpfs.resize(tmpfs.size, inodes=100_000)
        back_at = time.monotonic()
        progress(f"{case}/{recovery}: space back while the brokers run")
        online = eventually(lambda: partitions_online(bootstrap) and time.monotonic(), ONLINE_WITHIN_S + 5)
        outcome.online_after_s = online - back_at if online else None
        whole = eventually(lambda: isr_full(bootstrap) and time.monotonic(), ONLINE_WITHIN_S + 5)
        outcome.isr_full_after_s = whole - back_at if whole else None
        grew = eventually(lambda: len(worker.acked) > acked_full + 200 and time.monotonic(), ONLINE_WITHIN_S)
        if not grew:
            outcome.problems.append(f"no record acknowledged within {ONLINE_WITHIN_S:.0f}s of space returning "
                                    f"({len(worker.acked) - acked_full} since the disk filled)")
        time.sleep(sizes.produce_after_s)
        left = worker.finish(60, purge=True)
        if left:
            outcome.notes.append(f"{left} record(s) still unreported 60s after producing stopped (purged)")
    else:
        left = worker.finish(5, purge=True)
        down = ember("cluster", "down", "--data", str(data))
        outcome.down_rc = down.returncode
        if down.returncode != 0:
            outcome.problems.append(f"`ember cluster down` on the full disk: exit {down.returncode}: "
                                    f"{down.stdout.strip()} {down.stderr.strip()}")
            return
        outcome.torn += torn_batches(broker_dirs, tail_allowed=True)
        for tmpfs in targets:
            if case in FS_FAULTS:
                tmpfs.switch("ok")
                continue
            tmpfs.release()
            tmpfs.resize(max(sizes.grow_to, 2 * tmpfs.size), inodes=100_000 if case == "segment-roll" else None)
        up = ember("cluster", "up", "--brokers", str(BROKERS), "--data", str(data))
        up_at = time.monotonic()
        if up.returncode != 0:
            outcome.problems.append(f"`ember cluster up` after space returned: {up.stdout}{up.stderr}")
            return
        bootstrap = LocalCluster.load(data).kafka_bootstrap
        online = eventually(lambda: partitions_online(bootstrap) and time.monotonic(), ONLINE_WITHIN_S + 5)
        outcome.online_after_s = online - up_at if online else None
        whole = eventually(lambda: isr_full(bootstrap) and time.monotonic(), ONLINE_WITHIN_S + 5)
        outcome.isr_full_after_s = whole - up_at if whole else None
        after = ProducerWorker(bootstrap, sizes.rate, first_seq=worker.seq)
        after.start()
        time.sleep(sizes.produce_after_s)
        left_after = after.finish(60, purge=True)
        if left_after:
            outcome.problems.append(f"{left_after} record(s) produced after `cluster up` unreported within 60s")
        _merge(worker, after)
    if case in FS_FAULTS:
        outcome.notes += _said(data, "broker-1", ("back online",), 3)
        if outcome.isr_full_after_s is None or outcome.isr_full_after_s > ONLINE_WITHIN_S:
            outcome.problems.append(f"broker 1 was not back in every partition's ISR within {ONLINE_WITHIN_S:.0f}s "
                                    f"of its disk working again")
        elif not eventually(lambda: isr_full(bootstrap), 15):   # and it stayed: no new failure on a working disk
            outcome.problems.append("broker 1 left a partition's ISR again after it came back on a working disk")
    _check(data, bootstrap, broker_dirs, worker, outcome)


def _fill(case: str, sizes: Sizes, targets: Sequence[Tmpfs], worker: ProducerWorker,
          progress: Callable[[str], object], recovery: str) -> float | None:
    """Fill the ``targets`` (blocks, or inodes for ``segment-roll``); when they were full, or None."""
    progress(f"{case}/{recovery}: {len(worker.acked)} acked, filling {[str(t.path) for t in targets]}")
    if case == "segment-roll":
        for tmpfs in targets:
            tmpfs.fill_inodes()
    else:   # the filler leaves the producer room, then takes what its writes left (a leader refusing
        # appends stops its followers' writes too, so the producer alone may never fill every disk);
        # in ``issue`` ZooKeeper's space reserve stays until `down` (or the operator) frees it
        for tmpfs in targets:
            tmpfs.fill(sizes.leave)
        eventually(lambda: all(t.free() < (64 << 10) for t in targets), 20, step_s=0.1)
        for tmpfs in targets:
            tmpfs.fill(0)
    return eventually(lambda: all(t.full() for t in targets) and time.monotonic(), 60, step_s=0.05) or None


def _met_the_fault(data: Path, targets: Sequence[FaultFs], outcome: Outcome) -> None:
    """That the fault file systems failed calls (the broker met the fault, the run is not vacuous),
    when first, and the broker's first lines about it."""
    for fs in targets:
        state, first = fs.state(), fs.first_failure_after_s()
        outcome.notes.append(f"{fs.path.name} ({fs.mode}): failed calls {state.get('failed') or 'none'}, the first "
                             + (f"{first:.2f}s after the switch" if first is not None else "never"))
        if not state.get("failed"):
            outcome.problems.append(f"{fs.path.name}'s file system failed no call in {fs.mode} mode: the broker "
                                    f"never met the fault")
        outcome.notes += _said(data, fs.path.name, ("offline after a disk failure", "Input/output error",
                                                    "Read-only file system"), 2)


def _said(data: Path, broker: str, words: tuple[str, ...], most: int) -> list[str]:
    """The broker's first ``most`` log lines with one of ``words``, for the notes."""
    try:
        lines = (data / f"{broker}.log").read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [f"{broker}.log: {line[:300]}" for line in lines if any(w in line for w in words)][:most]


def _told(worker: ProducerWorker, filling_at: float, full_at: float, leaderless: set[int],
          outcome: Outcome) -> None:
    """What the producer heard once the disk filled, per partition: the first acknowledgement, or the
    first broker error naming the cause (a failed delivery report other than ``_MSG_TIMED_OUT``, or
    librdkafka's line about a failed ProduceRequest), whichever came first, and when. A partition
    with neither within ``TOLD_WITHIN_S`` hung: its requests went unanswered (the issue's "nothing but
    _MSG_TIMED_OUT"). Except one whose every replica went offline as the disk filled: ember refuses
    appends ``log.dir.min.free.bytes`` before the file system is full, so its producer may have been
    told (KAFKA_STORAGE_ERROR) before ``full_at``; it then has no leader (``leaderless``), so no
    request of its can be waiting for an answer: its first error since ``filling_at`` counts."""
    with worker.lock:
        heard: dict[int, tuple[float, str]] = {}
        for partition, times in worker.ack_times.items():
            after = [t for t in times if t > full_at]
            if after:
                heard[partition] = (after[0] - full_at, "acknowledged")
        told_app = [(t - full_at, f"delivery report {name}") for t, name in worker.failed
                    if t > full_at and name != "_MSG_TIMED_OUT"]
        told_app += [(t - full_at, text[:160]) for t, text, level in worker.log_lines
                     if t > full_at and level > logging.DEBUG]
        for t, text, _ in worker.log_lines:
            match = re.search(TOPIC + r" \[(\d+)\]", text)
            if not match or not any(cause in text for cause in CAUSES):
                continue
            partition = int(match.group(1))
            if t > full_at or (t > filling_at and partition in leaderless):
                if partition not in heard or heard[partition][0] > t - full_at:
                    reason = next(cause for cause in CAUSES if cause in text)
                    heard[partition] = (t - full_at, f"error {reason!r}"
                                        + (", then no leader" if t <= full_at else ""))
    outcome.heard = {p: heard.get(p) for p in range(PARTITIONS)}
    outcome.told_app = sorted(told_app)[:3]
    late = [p for p, h in outcome.heard.items() if h is None or h[0] > TOLD_WITHIN_S]
    if late:
        outcome.problems.append(f"partition(s) {late} neither acknowledged nor answered with an error within "
                                f"{TOLD_WITHIN_S:.0f}s of the disk filling: {outcome.heard}")


def _merge(worker: ProducerWorker, after: ProducerWorker) -> None:
    worker.acked.update(after.acked)
    worker.acked_somewhere += after.acked_somewhere
    worker.failed += after.failed
    worker.client_errors += after.client_errors


def _check(data: Path, bootstrap: str, broker_dirs: list[Path], worker: ProducerWorker, outcome: Outcome) -> None:
    outcome.acked = len(worker.acked) + len(worker.acked_somewhere)
    if worker.acked_somewhere:
        outcome.notes.append(f"{len(worker.acked_somewhere)} record(s) acknowledged without an offset")
    for _, name in worker.failed:
        outcome.failed_reports[name] = outcome.failed_reports.get(name, 0) + 1
    outcome.fatal = [name for _, name, fatal in worker.client_errors if fatal]
    if outcome.fatal:
        outcome.problems.append(f"fatal producer error(s): {outcome.fatal[:3]}")
    if outcome.online_after_s is None or outcome.online_after_s > ONLINE_WITHIN_S:
        outcome.problems.append(f"not every partition had a leader within {ONLINE_WITHIN_S:.0f}s")
        return
    records = read_all(bootstrap)
    outcome.read_back = len(records)
    missing = [(k, v[:13]) for k, v in sorted(worker.acked.items()) if k not in records]
    changed = [k for k, v in sorted(worker.acked.items()) if k in records and records[k] != v]
    if missing:
        outcome.problems.append(f"{len(missing)} acknowledged record(s) not read back, e.g. {missing[:5]}")
    if changed:
        outcome.problems.append(f"{len(changed)} acknowledged record(s) changed, e.g. {changed[:5]}")
    where = {(p, v): (p, o) for (p, o), v in records.items()}
    lost = [v[:13] for p, v in worker.acked_somewhere if (p, v) not in where]
    if lost:
        outcome.problems.append(f"{len(lost)} record(s) acknowledged without an offset not read back, e.g. {lost[:5]}")
    seen: dict[bytes, tuple[int, int]] = {}
    twice = []
    for key, value in sorted(records.items()):
        if value in seen:
            twice.append((seen[value], key))
        seen[value] = key
    if twice:
        outcome.problems.append(f"{len(twice)} value(s) written twice, e.g. {twice[:5]}")
    down = ember("cluster", "down", "--data", str(data))
    if down.returncode != 0:
        outcome.problems.append(f"`ember cluster down` at the end: {down.stdout}{down.stderr}")
        return
    torn_after = torn_batches(broker_dirs, tail_allowed=False)
    outcome.torn += torn_after
    if outcome.torn:
        outcome.problems.append(f"torn batch(es) beyond a recoverable tail: {outcome.torn[:5]}")
