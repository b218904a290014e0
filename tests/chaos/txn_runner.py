"""One transactional chaos run: a 3-broker cluster with real ZooKeeper, a replicated topic,
transactional producer processes (:mod:`txn_producer`) and a read_committed and a read_uncommitted
librdkafka consumer (:mod:`txn_workload`), the nemesis (every kind of the record harness plus the
producer kill and the coordinator's broker) for ``duration_s``; then drain, wait for every
transaction to end, read the whole log both ways with ember's consumer, and check
(:mod:`txn_checker`). Used by ``python -m tests.chaos --transactions`` and test_txn_chaos_run.py."""
from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, cast

from ember.client import Consumer, TopicPartition
from ember.errors import EmberError
from ember.launcher.local import LocalCluster

from .checker import CheckResult, replicas_identical
from .final_state import read_replicas, stop_cluster, wait_settled
from .history import FinalState
from .nemesis import ChaosBounds
from .runner import BROKERS, broker_config, create_topic
from .txn_checker import check_txn
from .txn_history import TxnConsumerLog, TxnFinal, TxnHistory, read_events
from .txn_java import compiled
from .txn_producer import CALL_TIMEOUT_S
from .txn_workload import ALL_TXN_KINDS, ProducerProcess, TxnConsumer, TxnNemesis, producer_clients

TOPIC = "chaos-txn"
CLEANUP_INTERVAL_MS = 2000
#: bound on a producer instance's init_transactions() from its start (the nemesis's bound after a restart)
INIT_BOUND_S = 90.0


@dataclass(frozen=True)
class TxnChaosConfig:
    duration_s: float
    seed: int
    data_dir: Path
    partitions: int = 4
    producers: int = 3
    txn_rate: float = 0.0                # transactions/s per producer (0: as fast as each goes)
    abort_every: int = 4                 # about one transaction in this many is aborted on purpose
    transaction_timeout_ms: int = 10000
    kinds: tuple[str, ...] = ALL_TXN_KINDS
    session_timeout_ms: int = 3000
    min_faults: int = 0
    settle_s: float = 120.0
    abandon_last: bool = True            # at the end, SIGKILL the last producer mid-transaction for good
    progress_every_s: float = 10.0
    #: the producers' client (txn_workload.TXN_CLIENTS): librdkafka (transaction protocol v1),
    #: java (KafkaProducer: v2 when the broker advertises it) or mixed (alternating, the last one Java)
    txn_client: str = "mixed"

    def clients(self) -> list[str]:
        return producer_clients(self.txn_client, self.producers)

    def bounds(self) -> ChaosBounds:
        return ChaosBounds(session_timeout_s=self.session_timeout_ms / 1000)

    @property
    def lso_bound_s(self) -> float:
        """How long after the drain a transaction may still hold a partition's LSO back: its
        timeout, the coordinator's abort interval, and a margin for the markers."""
        return (self.transaction_timeout_ms + CLEANUP_INTERVAL_MS) / 1000 + 30.0


@dataclass
class TxnChaosReport:
    config: TxnChaosConfig
    history: TxnHistory
    final: Optional[TxnFinal]
    results: list[CheckResult]
    seconds: float
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors and bool(self.results) and all(r.ok for r in self.results)

    def summary(self) -> str:
        h = self.history
        kinds = Counter(f.kind for f in h.faults)
        counts = h.counts()
        calls = Counter(t.end_call or "none" for t in h.txns.values() if t.outcome == "unknown")
        reads = ", ".join(f"{c.name} {len(c.polls):,}" + (f" (errors {c.errors})" if c.errors else "")
                          for c in h.consumers)
        lines = [
            f"transactional chaos run: seed {self.config.seed}, {self.seconds / 60:.1f} min "
            f"({self.config.duration_s:.0f}s of faults), {BROKERS} brokers, topic {TOPIC!r} {self.config.partitions} "
            f"partitions, RF=3, min.insync.replicas=2, {self.config.producers} producer processes ("
            + "; ".join(f"{client} {', '.join(str(i) for i, c in enumerate(self.config.clients()) if c == client)}"
                        for client in sorted(set(self.config.clients()))) + ")",
            f"faults: {len(h.faults)} — " + ", ".join(f"{k} {kinds[k]}" for k in sorted(kinds)),
            f"transactions: {len(h.txns):,} ({counts['writes']:,} writes): committed {counts['committed']:,}, "
            f"aborted {counts['aborted']:,}, unknown {counts['unknown']:,} (killed {counts['killed']:,}; "
            f"unknown by the call made: {dict(calls)}); producer instances initialised {len(h.inits)}, "
            f"killed {len(h.kills)}" + (f"; init errors {h.init_errors}" if h.init_errors else ""),
            f"consumers read: {reads}",
            *[f"consumer replaced: {restart}" for restart in h.client_restarts],
        ]
        if self.final is not None:
            f = self.final
            lines.append(f"final: read_committed {len(f.committed_read.polls):,} records, read_uncommitted "
                         f"{len(f.uncommitted_read.polls):,}; LSO = HW "
                         + ("after " + f"{f.lso_caught_up_s:.1f}s" if f.lso_caught_up_s is not None else "NEVER")
                         + f"; HW {f.high_watermarks}, LSO {f.last_stable}")
        lines += ["checks:", *[f"  {r}" for r in self.results], *[f"  ERROR {e}" for e in self.errors],
                  f"RESULT: {'PASS' if self.ok else 'FAIL'}"]
        return "\n".join(lines)


def run_txn_chaos(config: TxnChaosConfig, progress: Callable[[str], None] = print) -> TxnChaosReport:
    if (config.data_dir / "cluster").exists():
        raise FileExistsError(f"{config.data_dir / 'cluster'} holds an earlier run; give the run a new directory")
    clients = config.clients()
    if "java" in clients:
        compiled()                       # before the cluster: a compile error fails fast, outside every bound
    started = time.monotonic()
    rng = random.Random(config.seed)
    # a transaction may flush, commit and then abort (after an abortable error), each call bounded
    history = TxnHistory(delivery_bound_s=0.0, txn_bound_s=3 * CALL_TIMEOUT_S + 10)
    brokers = {**broker_config(config.session_timeout_ms),
               "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(CLEANUP_INTERVAL_MS)}
    cluster = LocalCluster(config.data_dir / "cluster", broker_count=BROKERS, broker_config=brokers)
    producers: list[ProducerProcess] = []
    consumers: list[TxnConsumer] = []
    nemesis: Optional[TxnNemesis] = None
    errors: list[str] = []
    final: Optional[TxnFinal] = None
    results: list[CheckResult] = []
    try:
        cluster.start(progress=progress)
        create_topic(cluster.bootstrap, TOPIC, config.partitions)
        wait_settled(cluster.bootstrap, TOPIC, set(cluster.brokers), history, config.settle_s)
        kafka = cluster.kafka_bootstrap
        for isolation in ("read_committed", "read_uncommitted"):
            log = TxnConsumerLog(f"librdkafka {isolation}", isolation)
            history.consumers.append(log)
            consumers.append(TxnConsumer(log, kafka, TOPIC, config.partitions))
        producers = [ProducerProcess(i, kafka, TOPIC, config.partitions, config.data_dir, config.seed,
                                     config.txn_rate, config.abort_every, config.transaction_timeout_ms, client)
                     for i, client in enumerate(clients)]
        for consumer in consumers:
            consumer.start()
        launched = time.monotonic()
        for producer in producers:
            producer.start()
        _await_first_inits(producers, launched, history)   # faults start once every producer runs transactions
        nemesis = TxnNemesis(cluster, TOPIC, config.partitions, history, rng, config.bounds(), config.kinds,
                             producers, progress=progress, init_bound_s=INIT_BOUND_S)
        nemesis.start()
        _report_until(config, history, producers, consumers, nemesis, started, progress)

        bounds = config.bounds()
        nemesis.stop(bounds.zookeeper_down_s[1] + bounds.zookeeper_start_s + 2 * bounds.restart_s
                     + bounds.shutdown_s + bounds.reregister_s + nemesis.init_bound_s)
        if nemesis.error is not None:
            errors.append(f"nemesis: {type(nemesis.error).__name__}: {nemesis.error}")
        progress("faults stopped; stopping the producers")
        drained = _stop_producers(config, producers, history)
        for producer in producers:
            history.add_events(producer.index, read_events(producer.events))
            if producer.crashes():
                errors.append(f"producer {producer.index}: instances exited by themselves with {producer.crashes()} "
                              f"(see {producer.output})")
        described = wait_settled(cluster.bootstrap, TOPIC, set(cluster.brokers), history, config.settle_s)
        progress("waiting for every transaction to end (LSO = HW)")
        final = _final_reads(cluster.bootstrap, config, drained)
        progress(f"final read: {len(final.committed_read.polls):,} committed, {len(final.uncommitted_read.polls):,} "
                 "records in all; waiting for the consumers to catch up")
        _await_consumers(consumers, final, history, config.settle_s)
        for consumer in consumers:
            if not consumer.stop(30.0):
                history.timing(f"{consumer.name} close()", None, 30.0)
            elif consumer.close_s is not None:
                history.timing(f"{consumer.name} close()", consumer.close_s, 30.0)
            if consumer.error is not None:
                errors.append(f"{consumer.name}: {type(consumer.error).__name__}: {consumer.error}")
        progress("stopping the cluster; reading every replica's segment files")
        stop_cluster(cluster, history, bounds.shutdown_s)
        hws = {p: d.high_watermark for p, d in described.items()}
        replicas = read_replicas(cluster, TOPIC, hws)
        progress("checking")
        results = [*check_txn(history, final), replicas_identical(FinalState(hws, {}, replicas))]
    finally:
        try:
            if nemesis is not None and nemesis.is_alive():  # type: ignore[comparison-overlap]
                nemesis.stop(5.0)
            for producer in producers:
                producer.kill()
            for consumer in consumers:
                consumer.stop(5.0)
        finally:
            cluster.stop()
    return TxnChaosReport(config, history, final, results, time.monotonic() - started, errors)


def _await_first_inits(producers: list[ProducerProcess], launched: float, history: TxnHistory) -> None:
    """Bounded wait for every producer's first ``init`` (a JVM takes seconds to get there), timed:
    the nemesis's first faults then hit producers inside transactions."""
    pending = list(producers)
    while pending:
        for producer in list(pending):
            inits = [json.loads(line)["t"] for line in read_events(producer.events)
                     if '"ev": "init"' in line and line.endswith("}")]
            over = time.monotonic() - launched > INIT_BOUND_S
            if inits or over or not producer.alive():
                took = inits[0] - launched if inits else None
                history.timing(f"producer {producer.index} ({producer.client}) first init_transactions", took,
                               INIT_BOUND_S)
                pending.remove(producer)
        time.sleep(0.1)


def _stop_producers(config: TxnChaosConfig, producers: list[ProducerProcess], history: TxnHistory) -> float:
    """SIGTERM every producer (each finishes its transaction, bounded), except the last one when
    ``abandon_last``: SIGKILLed mid-transaction and left dead, so only the coordinator's timeout
    can end its transaction. Returns when the drain ended (monotonic)."""
    abandoned = producers[-1] if config.abandon_last and producers else None
    if abandoned is not None:
        deadline = time.monotonic() + 10.0   # its writes in the log, preferably: only the timeout ends it
        while (abandoned.last_event() or {}).get("ev") != "flushed" and time.monotonic() < deadline:
            time.sleep(0.005)
        abandoned.kill()
        history.kills.append((abandoned.index, time.monotonic()))
    bound = 2 * CALL_TIMEOUT_S + 10
    for producer in producers:
        if producer is not abandoned:
            history.timing(f"producer {producer.index} stops on SIGTERM", producer.stop(bound), bound)
    return time.monotonic()


def _ends(consumer: Consumer, tps: list[TopicPartition]) -> Optional[dict[int, int]]:
    try:
        return {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}
    except EmberError:
        return None


def _final_reads(bootstrap: str, config: TxnChaosConfig, drained: float) -> TxnFinal:
    """Wait (bounded from the drain) until every partition's last stable offset equals its high
    watermark, then read the whole log read_committed (to the LSO) and read_uncommitted (to the
    HW) with ember's consumer."""
    tps = [TopicPartition(TOPIC, p) for p in range(config.partitions)]
    committed = Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                         auto_offset_reset="earliest", enable_auto_commit=False)
    uncommitted = Consumer(bootstrap_servers=bootstrap, isolation_level="read_uncommitted",
                           auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        lso: dict[int, int] = {}
        hw: dict[int, int] = {}
        caught_up: Optional[float] = None
        while time.monotonic() - drained < config.lso_bound_s + 30:
            lso, hw = _ends(committed, tps) or lso, _ends(uncommitted, tps) or hw
            if lso and lso == hw:
                caught_up = time.monotonic() - drained
                break
            time.sleep(0.5)
        return TxnFinal(lso, hw, _read_all(committed, tps, "final read_committed (ember)", "read_committed"),
                        _read_all(uncommitted, tps, "final read_uncommitted (ember)", "read_uncommitted"),
                        caught_up, config.lso_bound_s)
    finally:
        committed.close()
        uncommitted.close()


def _read_all(consumer: Consumer, tps: list[TopicPartition], name: str, isolation: str,
              bound_s: float = 120.0) -> TxnConsumerLog:
    """Every record from offset 0 up to the end offsets of the consumer's isolation level."""
    log = TxnConsumerLog(name, isolation)
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    deadline = time.monotonic() + bound_s
    ends = _retried_ends(consumer, tps, deadline)
    while any(consumer.position(tp) < ends[tp] for tp in tps):
        if time.monotonic() > deadline:
            log.errors["final read timed out"] = 1
            break
        try:
            for tp, records in consumer.poll(timeout_ms=200).items():
                for record in records:
                    log.read(tp.partition, record.offset, cast(Optional[bytes], record.value))
        except EmberError as exc:
            log.errors[type(exc).__name__] = log.errors.get(type(exc).__name__, 0) + 1
            time.sleep(0.2)
    for tp in tps:
        log.positions[tp.partition] = consumer.position(tp)
    return log


def _retried_ends(consumer: Consumer, tps: list[TopicPartition], deadline: float) -> dict[TopicPartition, int]:
    while True:
        try:
            return consumer.end_offsets(tps)
        except EmberError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _await_consumers(consumers: list[TxnConsumer], final: TxnFinal, history: TxnHistory, bound_s: float) -> None:
    """Bounded wait for each consumer to have read the last record below its end. A consumer that
    misses the bound because librdkafka wedged its own threads (:meth:`TxnConsumer.wedged`,
    librdkafka issue #5476) is replaced in ``consumers`` by a new instance reading on from where it
    stopped, which must catch up within the bound in its turn (a cluster that starves consumers
    starves the new one too); the replacement is noted in ``history.client_restarts``."""
    last: dict[str, dict[int, int]] = {"read_committed": {}, "read_uncommitted": {}}
    for isolation, read in (("read_committed", final.committed_read), ("read_uncommitted", final.uncommitted_read)):
        for poll in read.polls:
            last[isolation][poll.partition] = max(last[isolation].get(poll.partition, -1), poll.offset)
    started = time.monotonic()    # one bound for all of them, as the consumers read at once
    for index, consumer in enumerate(consumers):
        target = last[consumer.log.isolation]
        took = _catch_up(consumer, target, started, bound_s)
        if took is None and consumer.wedged():
            successor = consumer.successor()
            history.client_restarts.append(f"{consumer.name}: librdkafka's main thread blocked on a lock for good "
                                           f"(librdkafka #5476) at {dict(sorted(consumer.reached.items()))}; "
                                           "a new instance reads on from there")
            successor.start()
            consumers[index] = successor
            took = _catch_up(successor, target, time.monotonic(), bound_s)
        history.timing(f"{consumer.name} catches up", took, bound_s)


def _catch_up(consumer: TxnConsumer, target: dict[int, int], started: float, bound_s: float) -> Optional[float]:
    """Seconds from ``started`` until ``consumer`` read up to ``target`` (partition -> offset), None
    past ``bound_s``."""
    while any(consumer.reached.get(p, -1) < o for p, o in target.items()):
        if time.monotonic() - started > bound_s:
            return None
        time.sleep(0.2)
    return time.monotonic() - started


def _report_until(config: TxnChaosConfig, history: TxnHistory, producers: list[ProducerProcess],
                  consumers: list[TxnConsumer], nemesis: TxnNemesis, started: float,
                  progress: Callable[[str], None]) -> None:
    reported = time.monotonic()
    end = reported + config.duration_s
    limit = end + 60.0 * config.min_faults
    kinds = set(config.kinds)
    while time.monotonic() < end or ((len(history.faults) < config.min_faults
                                      or not kinds <= {f.kind for f in history.faults}) and time.monotonic() < limit):
        time.sleep(min(config.progress_every_s, max(1.0, end - time.monotonic())))
        dead = [c.name for c in consumers if c.error is not None] + (["nemesis"] if nemesis.error is not None else [])
        if dead:
            progress(f"stopping early: {', '.join(dead)} failed")
            return
        if time.monotonic() - reported >= config.progress_every_s:
            reported = time.monotonic()
            ends: Counter[str] = Counter()
            for producer in producers:
                for line in read_events(producer.events):
                    if '"end"' in line:
                        ends[line.split('"outcome": "')[1].split('"')[0] if '"outcome": "' in line else "?"] += 1
            progress(f"[{reported - started:6.0f}s] faults {len(history.faults)} | transactions "
                     f"{dict(ends)} | read committed {len(consumers[0].log.polls):,} "
                     f"uncommitted {len(consumers[1].log.polls):,}")
