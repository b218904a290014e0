"""One chaos run: a 3-broker cluster with real ZooKeeper, a replicated topic, the workload of
:mod:`workload`, the :mod:`nemesis` for ``duration_s``, then drain, settle, read the final state
and check it (:mod:`checker`). Used by ``python -m tests.chaos`` and the pytest CI variant."""
from __future__ import annotations

import importlib
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ember.client import Admin
from ember.launcher.local import LocalCluster

from .checker import CheckResult, check
from .final_state import committed_offsets, final_state, read_replicas, stop_cluster, wait_settled
from .history import History
from .nemesis import ALL_KINDS, DISK_KINDS, KINDS, ChaosBounds, Nemesis
from .workload import ClientSettings, GroupMember, HighWatermarkSampler, LiveConsumer, ProducerWorker, Watchdog, Worker

#: The fault FUSE file system of tests/faults (the disk-* faults), by whichever name this package has:
#: ``tests.faults`` under ``python -m tests.chaos``, ``faults`` under pytest (tests/ has no __init__.py).
faultfs = importlib.import_module(f"{__package__.rpartition('.')[0]}.faults.faultfs".lstrip("."))

TOPIC = "chaos"
GROUP = "chaos-group"
BROKERS = 3


def broker_config(session_timeout_ms: int) -> dict[str, str]:
    """Brokers that notice faults quickly: short ZooKeeper sessions and ISR lag, fast fetch retries,
    and preferred-leader moves every 10 s (so leadership moves without faults too)."""
    return {"zookeeper.session.timeout.ms": str(session_timeout_ms),
            "replica.fetch.backoff.ms": "200",
            "replica.lag.time.max.ms": "5000",
            "leader.imbalance.check.interval.seconds": "10",
            "min.insync.replicas": "2"}


@dataclass(frozen=True)
class ChaosConfig:
    """A run's shape. Rates are records per second per producer."""
    duration_s: float
    seed: int
    data_dir: Path
    partitions: int = 4
    record_producers: int = 1           # one ``send`` per record
    record_rate: float = 300.0
    columnar_producers: int = 1         # ``send_batch`` of ``chunk`` rows
    columnar_rate: float = 1000.0
    chunk: int = 200
    kinds: tuple[str, ...] = KINDS
    session_timeout_ms: int = 3000
    clients: ClientSettings = field(default_factory=ClientSettings)
    min_faults: int = 0                 # keep injecting past the duration until this many were healed
    settle_s: float = 120.0             # after the last fault: full ISR, consumers caught up
    progress_every_s: float = 10.0

    def bounds(self) -> ChaosBounds:
        return ChaosBounds(session_timeout_s=self.session_timeout_ms / 1000)


@dataclass
class ChaosReport:
    config: ChaosConfig
    history: History
    results: list[CheckResult]
    seconds: float
    errors: list[str] = field(default_factory=list)   # workers or nemesis that died

    @property
    def ok(self) -> bool:
        return not self.errors and all(r.ok for r in self.results)

    def summary(self) -> str:
        h = self.history
        kinds = Counter(f.kind for f in h.faults)
        records = Counter()
        for log in h.producers:
            records.update(log.counts())
        send_errors = Counter()
        for log in h.producers:
            send_errors.update(log.errors)
        lines = [
            f"chaos run: seed {self.config.seed}, {self.seconds / 60:.1f} min "
            f"({self.config.duration_s:.0f}s of faults), {BROKERS} brokers, topic {TOPIC!r} "
            f"{self.config.partitions} partitions, RF=3, min.insync.replicas=2",
            f"faults: {len(h.faults)} — " + ", ".join(f"{k} {kinds[k]}" for k in ALL_KINDS if kinds[k]),
            f"records: sent {records['sent']:,}, acknowledged {records['acked']:,}, failed {records['failed']:,}, "
            f"unresolved {records['pending']:,}"
            + (f"; send errors: {dict(send_errors)}" if send_errors else ""),
            f"live consumer read {h.live.count():,} (errors {dict(h.live.errors) or 'none'}); "
            f"group member read {h.group.count():,}, {len(h.commits):,} offsets committed "
            f"(errors {dict(h.group.errors) or 'none'})",
            "checks:", *[f"  {r}" for r in self.results], *[f"  ERROR {e}" for e in self.errors],
            f"RESULT: {'PASS' if self.ok else 'FAIL'}",
        ]
        return "\n".join(lines)


def run_chaos(config: ChaosConfig, progress: Callable[[str], None] = print) -> ChaosReport:
    """Run the workload under faults for ``config.duration_s``, then drain and check."""
    if (config.data_dir / "cluster").exists():
        raise FileExistsError(f"{config.data_dir / 'cluster'} holds an earlier run; give the run a new directory")
    started = time.monotonic()
    rng = random.Random(config.seed)
    history = History(config.clients.delivery_bound_s)
    cluster = LocalCluster(config.data_dir / "cluster", broker_count=BROKERS,
                           broker_config=broker_config(config.session_timeout_ms))
    errors: list[str] = []
    # The disk faults need each broker's data directory on a fault file system (root only; raises
    # tests.faults.disks.CannotMount where FUSE is unavailable), mounted before the brokers start.
    disks = {b: faultfs.FaultFs(config.data_dir / "cluster" / f"broker-{b}", config.data_dir / "backing" / f"broker-{b}",
                        config.data_dir / "faultfs") for b in range(1, BROKERS + 1)} \
        if set(config.kinds) & set(DISK_KINDS) else {}
    try:
        for disk in disks.values():
            disk.mount()
        cluster.start(progress=progress)
        create_topic(cluster.bootstrap, TOPIC, config.partitions)
        wait_settled(cluster.bootstrap, TOPIC, set(cluster.brokers), history, config.settle_s)
        producers = _producers(config, cluster.bootstrap, history)
        live = LiveConsumer(cluster.bootstrap, TOPIC, config.partitions, history, config.clients)
        consumers: list[Worker] = [
            live,
            GroupMember(cluster.bootstrap, TOPIC, config.partitions, GROUP, history, config.clients),
            HighWatermarkSampler(cluster.bootstrap, TOPIC, config.partitions, history, config.clients)]
        watchdog = Watchdog(history, config.data_dir / "stalls.txt")
        for worker in (*producers, *consumers, watchdog):
            worker.start()
        nemesis = Nemesis(cluster, TOPIC, config.partitions, history, rng, config.bounds(), config.kinds,
                          progress=progress, disks=disks)
        nemesis.start()
        _report_until(config, history, started, progress, [*producers, *consumers, nemesis])

        bounds = config.bounds()
        nemesis.stop(bounds.zookeeper_down_s[1] + bounds.zookeeper_start_s + 2 * bounds.restart_s
                     + bounds.shutdown_s + bounds.reregister_s)
        progress("faults stopped; draining producers")
        for producer in producers:
            producer.stop(config.clients.delivery_bound_s + config.clients.close_s + 10)
        described = wait_settled(cluster.bootstrap, TOPIC, set(cluster.brokers), history, config.settle_s)
        high_watermarks = {p: d.high_watermark for p, d in described.items()}
        _await_live_consumer(live, high_watermarks, history, config.settle_s)
        for worker in (*consumers, watchdog):
            worker.stop(config.clients.close_s)
        committed = committed_offsets(cluster.bootstrap, TOPIC, GROUP, config.partitions)
        errors += [f"{w.name}: {type(w.error).__name__}: {w.error}" for w in (*producers, *consumers, watchdog)
                   if w.error is not None]
        if nemesis.error is not None:
            errors.append(f"nemesis: {type(nemesis.error).__name__}: {nemesis.error}")
        progress("stopping the cluster; reading every replica's segment files")
        stop_cluster(cluster, history, config.bounds().shutdown_s)
        final = final_state(read_replicas(cluster, TOPIC, high_watermarks), high_watermarks, committed)
        progress("checking")
        results = check(history, final)
    finally:
        try:
            cluster.stop()
        finally:
            for disk in disks.values():
                disk.unmount()
    return ChaosReport(config, history, results, time.monotonic() - started, errors)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """A topic replicated on every broker, acks=all needing 2 in-sync replicas."""
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, partitions=partitions, replication_factor=BROKERS,
                           config={"min.insync.replicas": "2"})


def _producers(config: ChaosConfig, bootstrap: str, history: History) -> list[ProducerWorker]:
    out = [ProducerWorker(i, bootstrap, TOPIC, config.partitions, config.record_rate, history, config.clients,
                          columnar=False) for i in range(config.record_producers)]
    out += [ProducerWorker(config.record_producers + i, bootstrap, TOPIC, config.partitions, config.columnar_rate,
                           history, config.clients, columnar=True, chunk=config.chunk)
            for i in range(config.columnar_producers)]
    return out


def _report_until(config: ChaosConfig, history: History, started: float, progress: Callable[[str], None],
                  running: list) -> None:
    """Print progress every ``progress_every_s`` until the duration is over and ``min_faults``
    were injected (bounded: a fault takes well under a minute), or a thread died."""
    reported = time.monotonic()
    end = reported + config.duration_s
    limit = end + 60.0 * config.min_faults
    while time.monotonic() < end or (len(history.faults) < config.min_faults and time.monotonic() < limit):
        time.sleep(min(config.progress_every_s, max(1.0, end - time.monotonic())))
        dead = [t.name for t in running if t.error is not None]
        if dead:
            progress(f"stopping early: {', '.join(dead)} failed")
            return
        if time.monotonic() - reported >= config.progress_every_s:
            reported = time.monotonic()
            counts = Counter()
            for log in history.producers:
                counts.update(log.counts())
            progress(f"[{reported - started:6.0f}s] faults {len(history.faults)} | acked {counts['acked']:,} "
                     f"failed {counts['failed']:,} unresolved {counts['pending']:,} | "
                     f"live read {history.live.count():,} | commits {len(history.commits):,}"
                     + (f" | STALLS {len(history.stalls)}" if history.stalls else ""))


def _await_live_consumer(live: LiveConsumer, high_watermarks: dict[int, int], history: History, bound_s: float) -> None:
    """Bounded wait for the live consumer to read up to every high watermark."""
    started = time.monotonic()
    while time.monotonic() - started < bound_s:
        positions = live.positions()
        if all(positions.get(p, 0) >= hw for p, hw in high_watermarks.items()):
            history.timing("live consumer catches up", time.monotonic() - started, bound_s)
            return
        time.sleep(0.2)
    history.timing("live consumer catches up", None, bound_s)

