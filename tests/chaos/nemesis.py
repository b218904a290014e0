"""The nemesis: at seeded random, injects a fault into a :class:`LocalCluster`, holds it, heals it.

Faults (``KINDS``): SIGKILL of a broker, of the controller, of a partition's leader, of two
brokers at once; SIGTERM of a broker (a clean shutdown, which must finish in time); SIGSTOP of a
leader past ``zookeeper.session.timeout.ms``; ZooKeeper stopped and restarted; a broker's
ZooKeeper session expired while the broker runs; and, when the run mounts a fault FUSE file
system under each broker (``DISK_KINDS``, root only: tests/faults/faultfs.py), a broker's disk
failing with EIO or turning read-only mid-append, then working again while the broker runs (it
must reopen its offline logs by itself and be back in every partition's ISR within
``ChaosBounds.disk_heal_s``). Faults come in shuffled rounds of every kind, so
a short run still sees each kind once. Healing is bounded and timed: every restarted broker must
serve again, and every broker whose session expired must register again with a new session,
within ``ChaosBounds``; a miss is recorded as a liveness violation (:mod:`checker`).

Where the cluster stands (controller, leaders, registrations) is read from ZooKeeper directly by
:class:`ZkProbe`, not through the clients under test.
"""
from __future__ import annotations

import json
import random
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from ember.cluster.partition_state_store import StoredState, read_state
from ember.cluster.records import PartitionState
from ember.errors import EmberError
from ember.launcher.local import LocalCluster
from ember.zk import zk_paths
from ember.zk.zk_session import RECONNECT_MAX_DELAY_S

from .history import Fault, History

#: Tries at expiring a session the broker keeps winning back (see Nemesis._expire_session).
EXPIRE_ATTEMPTS = 5

KINDS = ("kill-broker", "kill-controller", "kill-leader", "kill-two", "terminate-broker",
         "pause-leader", "zookeeper-down", "expire-session")
#: Faults of a broker's disk: its fault file system's mode while held (the run must mount them).
DISK_FAULTS = {"disk-eio": "eio", "disk-read-only": "erofs"}
DISK_KINDS = tuple(DISK_FAULTS)
ALL_KINDS = KINDS + DISK_KINDS


@dataclass(frozen=True)
class ChaosBounds:
    """How long faults are held and how long healing may take."""
    session_timeout_s: float
    hold_s: tuple[float, float] = (1.0, 6.0)
    zookeeper_down_s: tuple[float, float] = (2.0, 15.0)   # often past the session timeout
    pause_factor: tuple[float, float] = (1.5, 2.5)    # SIGSTOP held this many session timeouts
    gap_s: tuple[float, float] = (1.0, 4.0)            # between healing and the next fault
    restart_s: float = 45.0                            # a restarted broker serves again
    shutdown_s: float = 30.0                           # a SIGTERMed broker exits
    reregister_s: float = 45.0                         # a broker with an expired session registers again
    zookeeper_start_s: float = 30.0
    disk_heal_s: float = 60.0                          # a healed disk's broker is back in every ISR


class ZkProbe:
    """The harness's own read-only view of the cluster's ZooKeeper state (below ``/ember``)."""

    def __init__(self, connect: str, timeout_s: float = 10.0) -> None:
        self.connect = connect
        self.timeout_s = timeout_s
        self.client = KazooClient(hosts=connect + zk_paths.CHROOT, timeout=timeout_s,
                                  connection_retry=KazooRetry(max_tries=-1, max_delay=RECONNECT_MAX_DELAY_S))
        self.client.start(timeout=timeout_s)

    def _read(self, read: Callable[[], object], default: object) -> object:
        """``read()``, retried while ZooKeeper is unreachable, ``default`` after the timeout."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return read()
            except NoNodeError:
                return default
            except (KazooException, KazooTimeoutError):
                if time.monotonic() > deadline:
                    return default
                time.sleep(0.2)

    def state(self, topic: str, partition: int) -> Optional[PartitionState]:
        """The partition's state (its initial state while it has no state znode), None if gone."""
        stored = self._read(lambda: read_state(self.client, topic, partition), None)
        return stored.state if isinstance(stored, StoredState) else None

    def isr(self, topic: str, partition: int) -> list[int]:
        state = self.state(topic, partition)
        return list(state.isr) if state is not None else []

    def controller(self) -> Optional[int]:
        data = self._read(lambda: self.client.get(zk_paths.CONTROLLER)[0], None)
        return json.loads(data)["broker_id"] if data else None

    def leader(self, topic: str, partition: int) -> Optional[int]:
        state = self.state(topic, partition)
        return state.leader if state is not None and state.leader >= 0 else None

    def registration_owner(self, broker_id: int) -> Optional[int]:
        """The ZooKeeper session id owning the broker's registration (None: not registered)."""
        stat = self._read(lambda: self.client.exists(zk_paths.broker(broker_id)), None)
        return stat.ephemeralOwner if stat is not None else None

    def close(self) -> None:
        self.client.stop()
        self.client.close()


def session_password(session_id: int) -> bytes:
    """The password ZooKeeper gives a session: ``java.util.Random(id ^ superSecret).nextBytes(16)``
    (``ZooKeeperServer.generatePasswd``, superSecret 0xB3415C00 in 3.x), so a test can act as the
    session's owner, as Curator's ``KillSession`` does."""
    mask = (1 << 48) - 1
    seed = ((session_id ^ 0xB3415C00) ^ 0x5DEECE66D) & mask
    out = bytearray()
    while len(out) < 16:
        seed = (seed * 0x5DEECE66D + 0xB) & mask
        word = seed >> 16                                  # Random.next(32)
        out += word.to_bytes(4, "little")[:16 - len(out)]  # nextBytes: low byte first
    return bytes(out)


def expire_session(connect: str, session_id: int, timeout_s: float = 10.0) -> None:
    """Expire a live ZooKeeper session that another process owns: connect as that session (the
    server moves it to this connection) and close it, which deletes its ephemeral nodes."""
    client = KazooClient(hosts=connect, timeout=timeout_s, client_id=(session_id, session_password(session_id)))
    try:
        client.start(timeout=timeout_s)
        client.stop()
    finally:
        client.close()


class Nemesis(threading.Thread):
    """Injects, holds and heals faults until ``stop()``; every fault is recorded in the history.
    A subclass adds kinds of its own by naming them in ``extra_kinds`` and injecting them in
    :meth:`inject_extra` (the transactional workload's producer kill, tests/chaos/txn_workload.py)."""

    extra_kinds: tuple[str, ...] = ()

    def __init__(self, cluster: LocalCluster, topic: str, partitions: int, history: History,
                 rng: random.Random, bounds: ChaosBounds, kinds: tuple[str, ...] = KINDS,
                 progress: Callable[[str], None] = lambda message: None, disks: Optional[dict[int, Any]] = None) -> None:
        super().__init__(name="chaos-nemesis", daemon=True)
        unknown = set(kinds) - set(ALL_KINDS) - set(self.extra_kinds)
        if unknown or not kinds:
            raise ValueError(f"fault kinds must be among {ALL_KINDS + self.extra_kinds}, got {sorted(kinds)}")
        if set(kinds) & set(DISK_KINDS) and not disks:
            raise ValueError(f"{sorted(set(kinds) & set(DISK_KINDS))} need a fault file system under each broker")
        #: broker id -> its fault file system (tests.faults.faultfs.FaultFs), for the disk faults
        self.disks = disks or {}
        self.cluster, self.topic, self.partitions = cluster, topic, partitions
        self.history, self.rng, self.bounds, self.kinds = history, rng, bounds, kinds
        self.progress = progress
        self.probe = ZkProbe(cluster.zk_connect)
        self.error: Optional[BaseException] = None
        self._halt = threading.Event()
        self._round: list[str] = []

    def stop(self, timeout_s: float) -> None:
        """Stop injecting, heal what is broken, and wait (bounded) for the thread."""
        started = time.monotonic()
        self._halt.set()
        self.join(timeout_s)
        self.history.timing("nemesis stop (heal the last fault)",
                            None if self.is_alive() else time.monotonic() - started, timeout_s)
        self.probe.close()

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                self.inject(self._next_kind())
                self._halt.wait(self.rng.uniform(*self.bounds.gap_s))
        except BaseException as exc:   # the run fails with it rather than silently stopping faults
            self.error = exc

    def _next_kind(self) -> str:
        if not self._round:
            self._round = list(self.kinds)
            self.rng.shuffle(self._round)
        return self._round.pop()

    def inject(self, kind: str) -> Fault:
        """One fault of ``kind``: inject, hold (cut short by ``stop``), heal; recorded when healed."""
        brokers = sorted(self.cluster.brokers)
        fault = Fault(kind, (), time.monotonic())
        if kind in self.extra_kinds:
            self.inject_extra(fault, brokers)
        elif kind == "zookeeper-down":
            self._zookeeper_down(fault)
        elif kind == "expire-session":
            self._expire_session(fault, self.rng.choice(brokers))
        elif kind == "pause-leader":
            self._pause(fault, self._leader_or_any(brokers))
        elif kind == "terminate-broker":
            self._terminate(fault, self.rng.choice(brokers))
        elif kind in DISK_FAULTS:
            self._disk(fault, self.rng.choice(brokers))
        else:
            self._kill(fault, self._victims(kind, brokers))
        fault.healed_at = time.monotonic()
        self.history.faults.append(fault)
        self.progress(f"fault {len(self.history.faults)}: {kind} {list(fault.targets)} "
                      f"held {fault.healed_at - fault.injected_at:.1f}s {fault.note}".rstrip())
        return fault

    def inject_extra(self, fault: Fault, brokers: list[int]) -> None:
        """Inject, hold and heal a fault of one of ``extra_kinds`` (setting its targets and note)."""
        raise NotImplementedError(fault.kind)

    def _victims(self, kind: str, brokers: list[int]) -> list[int]:
        if kind == "kill-two":
            return sorted(self.rng.sample(brokers, 2))
        if kind == "kill-controller":
            return [self.probe.controller() or self.rng.choice(brokers)]
        if kind == "kill-leader":
            return [self._leader_or_any(brokers)]
        return [self.rng.choice(brokers)]

    def _leader_or_any(self, brokers: list[int]) -> int:
        partition = self.rng.randrange(self.partitions)
        leader = self.probe.leader(self.topic, partition)
        return leader if leader is not None else self.rng.choice(brokers)

    def _hold(self, span: tuple[float, float]) -> None:
        self._halt.wait(self.rng.uniform(*span))

    # -- faults ------------------------------------------------------------------------------

    def _kill(self, fault: Fault, victims: list[int]) -> None:
        fault.targets = tuple(victims)
        for broker_id in victims:
            self.cluster.kill_broker(broker_id, signal.SIGKILL)
        self._hold(self.bounds.hold_s)
        for broker_id in victims:
            self._restart(broker_id, fault.kind)

    def _terminate(self, fault: Fault, broker_id: int) -> None:
        fault.targets = (broker_id,)
        started = time.monotonic()
        # kill_broker escalates to SIGKILL at the timeout: reaching it means SIGTERM was ignored.
        self.cluster.kill_broker(broker_id, signal.SIGTERM, timeout_s=self.bounds.shutdown_s)
        took = time.monotonic() - started
        self.history.timing(f"broker {broker_id} shutdown on SIGTERM", took if took < self.bounds.shutdown_s else None,
                            self.bounds.shutdown_s)
        self._hold(self.bounds.hold_s)
        self._restart(broker_id, fault.kind)

    def _restart(self, broker_id: int, why: str) -> None:
        started = time.monotonic()
        try:
            self.cluster.restart_broker(broker_id, timeout_s=self.bounds.restart_s)
            took: Optional[float] = time.monotonic() - started
        except EmberError as exc:
            took = None
            self.progress(f"broker {broker_id} did not serve again after {why}: {exc}; starting it again")
            self.cluster.restart_broker(broker_id, timeout_s=self.bounds.restart_s)
        self.history.timing(f"broker {broker_id} serves again after {why}", took, self.bounds.restart_s)

    def _pause(self, fault: Fault, broker_id: int) -> None:
        fault.targets = (broker_id,)
        owner = self.probe.registration_owner(broker_id)
        self.cluster.pause_broker(broker_id)
        started = time.monotonic()
        try:
            low, high = self.bounds.pause_factor
            self._hold((low * self.bounds.session_timeout_s, high * self.bounds.session_timeout_s))
        finally:
            self.cluster.resume_broker(broker_id)
        paused = time.monotonic() - started
        if paused < self.bounds.session_timeout_s:    # cut short by the run's end: the session may live on
            outcome = self._await_registered(fault, broker_id, time.monotonic())
        else:
            outcome = self._await_new_session(fault, broker_id, owner, time.monotonic())
        fault.note = f"(paused {paused:.1f}s, {outcome})"

    def _expire_session(self, fault: Fault, broker_id: int) -> None:
        fault.targets = (broker_id,)
        owner = self.probe.registration_owner(broker_id)
        if owner is None:
            fault.note = "(not registered: nothing to expire)"
            return
        started = time.monotonic()
        # Taking the session over makes the broker reconnect at once; if it gets in between our
        # connect and close, it wins the session back. Expire again while the old session still
        # owns the registration (bounded).
        injected = False
        for attempt in range(1, EXPIRE_ATTEMPTS + 1):  # noqa: B007 (reported after the loop)
            try:
                expire_session(self.cluster.zk_connect, owner)
            except KazooTimeoutError:
                # ZooKeeper did not take the connection in time (an overloaded host): another attempt
                self.progress(f"expire-session: no ZooKeeper connection for session {owner:#x} in time; again")
                continue
            injected = True
            if self._wait_for_owner(broker_id, lambda now: now != owner, 2 * self.bounds.session_timeout_s):
                break
        if not injected:
            fault.note = "(ZooKeeper took no connection in time: not injected)"
            return
        outcome = self._await_new_session(fault, broker_id, owner, started)
        fault.note = f"({outcome}, {attempt} attempt{'s' if attempt > 1 else ''})"

    def _await_new_session(self, fault: Fault, broker_id: int, old_owner: Optional[int], started: float) -> str:
        """Bounded wait (from ``started``) until the broker is registered again under a session
        other than ``old_owner``; how long it took is a liveness timing. Returns what happened."""
        what = f"broker {broker_id} registers again after {fault.kind}"
        if self._wait_for_owner(broker_id, lambda now: now is not None and now != old_owner,
                                started + self.bounds.reregister_s - time.monotonic()):
            took = time.monotonic() - started
            self.history.timing(what, took, self.bounds.reregister_s)
            return f"new session after {took:.1f}s"
        self.history.timing(what, None, self.bounds.reregister_s)
        return "NO new session"

    def _await_registered(self, fault: Fault, broker_id: int, started: float) -> str:
        """Bounded wait until the broker is registered under any session (a pause shorter than
        the session timeout need not cost the broker its session)."""
        what = f"broker {broker_id} is registered after a short {fault.kind}"
        if self._wait_for_owner(broker_id, lambda now: now is not None,
                                started + self.bounds.reregister_s - time.monotonic()):
            took = time.monotonic() - started
            self.history.timing(what, took, self.bounds.reregister_s)
            return f"registered after {took:.1f}s"
        self.history.timing(what, None, self.bounds.reregister_s)
        return "NOT registered"

    def _wait_for_owner(self, broker_id: int, done: Callable[[Optional[int]], bool], timeout_s: float) -> bool:
        """Whether the session owning the broker's registration (None: unregistered) satisfies
        ``done`` within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not done(self.probe.registration_owner(broker_id)):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def _disk(self, fault: Fault, broker_id: int) -> None:
        """The broker's disk fails (EIO, or read-only) under its appends, held, then works again
        while it runs; bounded wait for it to be back in every partition's ISR by itself (its
        offline logs reopened every log.offline.retry.interval.ms)."""
        fault.targets = (broker_id,)
        disk = self.disks[broker_id]
        disk.switch(DISK_FAULTS[fault.kind])
        try:
            self._hold(self.bounds.hold_s)
        finally:
            disk.switch("ok")
        failed = sum(disk.state().get("failed", {}).values())
        started = time.monotonic()
        what = f"broker {broker_id} back in every ISR after {fault.kind}"
        deadline = started + self.bounds.disk_heal_s
        while not all(broker_id in self.probe.isr(self.topic, p) for p in range(self.partitions)):
            if time.monotonic() > deadline:
                self.history.timing(what, None, self.bounds.disk_heal_s)
                fault.note = f"(NOT back in every ISR; {failed} failed calls so far)"
                return
            time.sleep(0.2)
        took = time.monotonic() - started
        self.history.timing(what, took, self.bounds.disk_heal_s)
        fault.note = f"(back in every ISR after {took:.1f}s; {failed} failed calls so far)"

    def _zookeeper_down(self, fault: Fault) -> None:
        zookeeper = self.cluster.zookeeper
        assert zookeeper is not None
        fault.targets = ("zookeeper",)
        zookeeper.stop()
        try:
            self._hold(self.bounds.zookeeper_down_s)
        finally:
            started = time.monotonic()
            zookeeper.start(timeout_s=self.bounds.zookeeper_start_s)
            self.cluster.save()
        self.history.timing("ZooKeeper serves again after a restart", time.monotonic() - started,
                            self.bounds.zookeeper_start_s)
