"""A local ember cluster: one real ZooKeeper server and N real broker processes on loopback.

Used by ``ember cluster up|down|status``, the test fixtures and the benchmarks. ``ember cluster
up`` gives a cluster fixed ports (:class:`PortLayout`: broker 1 on 127.0.0.1:9092, its Kafka
listener on 9093, ...), so its addresses survive restarts; tests and jobs have every port picked
fresh, so their clusters never collide. A broker keeps its port across restarts either way. The
cluster's layout (ports, pids) is written to ``<data>/cluster.json`` so a later ``ember cluster
status|down`` (and every client command, for its default bootstrap) can find it; neither
``status`` nor ``down`` writes anything, so both work on a full disk (docs/operations.md, "A full
disk"). A ``secure`` cluster puts every listener on TLS with client certificates
(:mod:`ember.launcher.cluster_tls`), and with ``sasl`` on SASL_SSL with SCRAM users
(:mod:`ember.launcher.cluster_sasl`).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from ember.errors import BrokerNotAvailable, EmberError
from ember.launcher.cluster_sasl import ClusterSasl
from ember.launcher.cluster_tls import ClusterTls
from ember.launcher.scrape import readiness
from ember.launcher.zookeeper_server import ZooKeeperServer, free_port, is_healthy, read_pid, terminate
from ember.security.private_files import write_private
from ember.wire.api_keys import ApiKey
from ember.wire.frame import FRAME_LENGTH, decode_response, encode_request
from ember.zk.zk_session import ZkSession, ZooKeeperTls

STATE_FILE = "cluster.json"
#: Where ``ember cluster up`` puts a cluster, and where client commands look for one.
DEFAULT_DATA = os.environ.get("EMBER_DATA", "data/cluster")
#: ``ember cluster up`` warns when the data directory's file system has less free than this ...
LOW_SPACE_BYTES = 1 << 30
#: ... or less than this fraction of its size free.
LOW_SPACE_FRACTION = 0.10
#: Broker properties of a development cluster, under the caller's ``broker_config`` (which wins).
#: As in Kafka's shipped config/server.properties, a new group's first rebalance does not wait for
#: more members (the broker's built-in default, for production, is Kafka's 3000 ms): a developer's
#: first consumer gets its partitions at once. docs/groups.md.
DEVELOPMENT_BROKER_CONFIG = {"group.initial.rebalance.delay.ms": "0"}


class ClusterStopFailed(EmberError):
    """A process of the local cluster could not be stopped."""
    hint = "see `ember cluster status --data DIR`, then stop the listed pids by hand"


class PortInUse(EmberError):
    """A port of the local cluster's fixed layout is taken by another process."""
    hint = "stop what listens there, or give this cluster other ports with `ember cluster up --port-base N`"


#: The fixed port layout of ``ember cluster up`` (docs/operations.md, "Ports"): broker N's ember
#: listener on DEFAULT_PORT_BASE + 2(N-1) and its KAFKA listener on the next port (as a lone
#: broker's default listeners EMBER://127.0.0.1:9092,KAFKA://127.0.0.1:9093), its metrics on
#: 9644 + N - 1, ZooKeeper on 2181; ``--port-base B`` moves every port by B - 9092.
DEFAULT_PORT_BASE = 9092
ZOOKEEPER_PORT = 2181
METRICS_PORT = 9644


@dataclass(frozen=True)
class PortLayout:
    """Where each process of a cluster with port base ``base`` listens."""
    base: int = DEFAULT_PORT_BASE

    @property
    def shift(self) -> int:
        return self.base - DEFAULT_PORT_BASE

    @property
    def zookeeper(self) -> int:
        return ZOOKEEPER_PORT + self.shift

    def ember(self, broker_id: int) -> int:
        return self.base + 2 * (broker_id - 1)

    def kafka(self, broker_id: int) -> int:
        return self.ember(broker_id) + 1

    def metrics(self, broker_id: int) -> int:
        return METRICS_PORT + self.shift + broker_id - 1

    def check(self, broker_count: int) -> None:
        """Refuse a layout whose ports overlap or leave the unprivileged range (1024-65535)."""
        if self.kafka(broker_count) >= self.metrics(1):
            raise EmberError(f"{broker_count} brokers do not fit the port layout: at most "
                             f"{(METRICS_PORT - DEFAULT_PORT_BASE) // 2}")
        lowest, highest = self.zookeeper, self.metrics(broker_count)
        if lowest < 1024 or highest > 65535:
            raise EmberError(f"--port-base {self.base} puts ports at {lowest}-{highest}; keep them within 1024-65535 "
                             f"(a base from {DEFAULT_PORT_BASE - ZOOKEEPER_PORT + 1024} to "
                             f"{65535 - (METRICS_PORT - DEFAULT_PORT_BASE) - broker_count + 1})")


@dataclass
class BrokerProcess:
    broker_id: int
    port: int
    data_dir: Path
    host: str = "127.0.0.1"
    pid: int | None = None
    metrics_port: int | None = None   # /metrics, /livez, /readyz when the cluster serves metrics
    kafka_port: int | None = None     # the broker's KAFKA listener (Kafka's protocol)
    log_dir_count: int = 1            # log directories (log.dirs): data_dir, then data_dir-disk2, ...

    @property
    def log_dirs(self) -> list[Path]:
        """Its log directories: ``data_dir`` (which also holds its broker.log), then siblings."""
        return [self.data_dir] + [self.data_dir.with_name(f"{self.data_dir.name}-disk{n}")
                                  for n in range(2, self.log_dir_count + 1)]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def kafka_address(self) -> str | None:
        return f"{self.host}:{self.kafka_port}" if self.kafka_port is not None else None

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"broker-{self.broker_id}.log"


@dataclass
class LocalCluster:
    """Start, inspect, fault-inject and stop a local cluster rooted at ``data_dir``."""

    data_dir: Path
    broker_count: int = 1
    broker_config: dict[str, str] = field(default_factory=dict)
    #: Log directories per broker (``log.dirs``, Kafka's JBOD); all under ``data_dir``.
    log_dirs_per_broker: int = 1
    metrics: bool = False   # each broker serves metrics on its own loopback port
    secure: bool = False    # every listener on TLS, client certificates required
    sasl: bool = False      # with secure: every listener on SASL_SSL (SCRAM users admin and broker)
    #: ZooKeeper's directory (config, snapshots, transaction logs); None: ``<data_dir>/zookeeper``.
    #: Put it on another file system and a full log directory cannot stop ZooKeeper's writes.
    zookeeper_dir: Path | None = None
    #: Fixed ports (``ember cluster up``: a cluster keeps its addresses across restarts); None:
    #: ports picked fresh, so clusters of tests and jobs never collide.
    ports: PortLayout | None = None
    zookeeper: ZooKeeperServer | None = None
    brokers: dict[int, BrokerProcess] = field(default_factory=dict)
    _processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    _started: bool = field(default=False, repr=False)
    _context: ssl.SSLContext | None = field(default=None, repr=False)
    #: Loaded from the state file (:meth:`load`): ``broker_config`` is not known (the state file does
    #: not keep it), so a broker started again reuses the overrides file ``up`` wrote.
    _loaded: bool = field(default=False, repr=False)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers.values())

    @property
    def metrics_addresses(self) -> dict[int, str]:
        """HOST:PORT of each broker's metrics endpoint (empty when metrics are off)."""
        return {b.broker_id: f"{b.host}:{b.metrics_port}" for b in self.brokers.values() if b.metrics_port}

    @property
    def kafka_bootstrap(self) -> str:
        """Bootstrap servers for Kafka clients (every broker's KAFKA listener)."""
        return ",".join(b.kafka_address for b in self.brokers.values() if b.kafka_address)

    @property
    def tls(self) -> ClusterTls | None:
        """The certificates of a secure cluster (None: plaintext)."""
        return ClusterTls(self.data_dir / "tls") if self.secure else None

    @property
    def scram(self) -> ClusterSasl | None:
        """The SCRAM users of a secure cluster with SASL (None: no SASL)."""
        return ClusterSasl(self.data_dir / "sasl") if self.secure and self.sasl else None

    @property
    def client_options(self) -> dict[str, object]:
        """Keywords an ember client of this cluster needs besides the bootstrap list ({} in plaintext):
        the client certificate and, with SASL, the admin user's login."""
        options: dict[str, object] = dict(self.tls.client_security().options()) if self.tls else {}
        return {**options, **(self.scram.client_options() if self.scram else {})}

    def _register_users(self) -> None:
        """The SCRAM users into ZooKeeper (over TLS, as a broker), before any broker starts."""
        assert self.tls is not None and self.scram is not None
        session = ZkSession(self.zk_connect, 6000, ZooKeeperTls(str(self.tls.ca), str(self.tls.broker.keystore)))
        session.start()
        try:
            self.scram.register_users(session)
        finally:
            session.close()

    def _zookeeper(self, port: int) -> ZooKeeperServer:
        directory = self.zookeeper_dir or self.data_dir / "zookeeper"
        return self.tls.zookeeper_server(directory, port) if self.tls else ZooKeeperServer(directory, port)

    def _client_context(self) -> ssl.SSLContext | None:
        if self.tls is not None and self._context is None:
            self._context = self.tls.client_security().ssl_context()
        return self._context

    @property
    def zk_connect(self) -> str:
        assert self.zookeeper is not None
        return self.zookeeper.connect_string

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0,
              progress: Callable[[str], object] = lambda message: None) -> "LocalCluster":
        """Start ZooKeeper and the brokers; on a cluster this object already started, do nothing
        (so ``with LocalCluster(...).start() as c`` starts it once). When starting fails, what was
        started is stopped before the failure is raised (``__exit__`` never runs then)."""
        if self._started:
            return self
        try:
            return self._start(timeout_s, progress)
        except BaseException as failure:
            try:
                self.stop()
            except ClusterStopFailed as exc:
                failure.add_note(f"and stopping what had started failed: {exc}")
            raise

    def _start(self, timeout_s: float, progress: Callable[[str], object]) -> "LocalCluster":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.secure:
            progress(f"TLS: certificates under {ClusterTls.create(self.data_dir / 'tls').directory}")
        if self.secure and self.sasl:
            progress(f"SCRAM: users admin and broker, passwords in {ClusterSasl.create(self.data_dir / 'sasl').credentials_file}")
        if self.ports is not None:
            self._check_ports_free(self.ports)
        if self.zookeeper is None:
            self.zookeeper = self._zookeeper(self.ports.zookeeper if self.ports else free_port())
        progress(f"starting ZooKeeper on {self.zookeeper.connect_string}")
        self.zookeeper.start()
        self._reserve_for_zookeeper(progress)
        if self.scram is not None:
            self._register_users()
        for broker_id in range(1, self.broker_count + 1):
            self.brokers.setdefault(broker_id, self._broker_process(broker_id))
        for broker in self.brokers.values():
            progress(f"starting broker {broker.broker_id} on {broker.address}")
            self._spawn(broker)
        self._started = True
        self.save()
        progress(f"waiting for the brokers to answer (up to {timeout_s:.0f} s)")
        self.wait_healthy(timeout_s)
        progress(f"cluster ready: bootstrap {self.bootstrap}")
        return self

    def _broker_process(self, broker_id: int) -> BrokerProcess:
        layout = self.ports
        return BrokerProcess(broker_id, layout.ember(broker_id) if layout else free_port(),
                             self.data_dir / f"broker-{broker_id}",
                             metrics_port=(layout.metrics(broker_id) if layout else free_port()) if self.metrics else None,
                             kafka_port=layout.kafka(broker_id) if layout else free_port(),
                             log_dir_count=self.log_dirs_per_broker)

    def _check_ports_free(self, layout: PortLayout) -> None:
        """Fail before starting anything when a port of the layout is taken, naming it."""
        layout.check(self.broker_count)
        wanted = [(layout.zookeeper, "ZooKeeper")]
        for broker_id in range(1, self.broker_count + 1):
            wanted += [(layout.ember(broker_id), f"broker {broker_id}'s ember listener"),
                       (layout.kafka(broker_id), f"broker {broker_id}'s KAFKA listener")]
            if self.metrics:
                wanted.append((layout.metrics(broker_id), f"broker {broker_id}'s metrics"))
        taken = [f"{port} ({what})" for port, what in wanted if not port_free(port)]
        if taken:
            raise PortInUse(f"port{'s' if len(taken) > 1 else ''} {', '.join(taken)} already in use on 127.0.0.1 "
                            f"(another cluster, or a Kafka or ZooKeeper of your own?)")

    def stop(self, timeout_s: float = 15.0, progress: Callable[[str], object] = lambda message: None) -> None:
        """Stop brokers (SIGTERM, then SIGKILL after ``timeout_s`` each), then ZooKeeper.

        Needs no free space: it first deletes ZooKeeper's space reserve (giving the stopping
        processes room), writes nothing while stopping, and removes the state file once nothing
        is left running. Every process is stopped even if stopping another one failed; each
        failure is reported in the :class:`ClusterStopFailed` raised at the end, and the state
        file then keeps naming what remains (updated when the disk takes the write), so
        ``ember cluster down`` can try again."""
        failures: list[str] = []
        if self.zookeeper is not None:
            try:
                freed = self.zookeeper.release_reserve()
                if freed:
                    progress(f"freed ZooKeeper's space reserve ({_size(freed)})")
            except Exception as exc:  # report it, stop the processes regardless
                failures.append(f"ZooKeeper's space reserve {self.zookeeper.reserve_path}: {_describe(exc)}")
        for broker_id, broker in list(self.brokers.items()):
            pid = broker.pid
            try:
                self._stop_broker(broker_id, signal.SIGTERM, timeout_s)
                if pid is not None:
                    progress(f"stopped broker {broker_id} (pid {pid})")
            except Exception as exc:  # every process is stopped, each failure reported
                failures.append(f"broker {broker_id} (pid {pid}): {_describe(exc)}")
        if self.zookeeper is not None:
            try:
                self.zookeeper.stop(timeout_s)
                progress(f"stopped ZooKeeper on {self.zookeeper.connect_string}")
            except Exception as exc:
                failures.append(f"ZooKeeper: {_describe(exc)}")
        self._started = False
        if failures:
            try:
                self.save()
            except OSError as exc:
                failures.append(f"state file {self.data_dir / STATE_FILE} not updated ({_describe(exc)}): "
                                f"it still names every process, the stopped ones too")
            raise ClusterStopFailed("could not stop " + "; ".join(failures))
        try:
            (self.data_dir / STATE_FILE).unlink(missing_ok=True)
        except OSError as exc:   # e.g. a file system remounted read-only: every process is stopped anyway
            progress(f"note: could not remove {self.data_dir / STATE_FILE} ({_describe(exc)}); "
                     f"nothing of the cluster is running")

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- brokers -----------------------------------------------------------------------------

    def _spawn(self, broker: BrokerProcess) -> None:
        broker.data_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "ember.cli", "broker", "start", "--id", str(broker.broker_id),
                   "--zookeeper", self.zk_connect, "--listen", broker.address, "--data", str(broker.data_dir)]
        if broker.kafka_port is not None:
            command += ["--listeners", f"KAFKA://{broker.kafka_address}"]
        if broker.log_dir_count > 1:
            command += ["--log-dirs", ",".join(str(d) for d in broker.log_dirs)]
        listeners = ("EMBER", "KAFKA")
        properties = {**DEVELOPMENT_BROKER_CONFIG, **(self.tls.broker_properties(listeners) if self.tls else {}),
                      **(self.scram.broker_properties(listeners) if self.scram else {}), **self.broker_config}
        config = self.data_dir / "broker-overrides.properties"
        if not (self._loaded and config.exists()):
            write_private(config, "".join(f"{k}={v}\n" for k, v in properties.items()))
        command += ["--config", str(config)]
        room = self._zookeeper_room(broker)
        if room:
            command += ["--override", f"log.dir.min.free.bytes={room}"]
        if broker.metrics_port is not None:
            command += ["--metrics-listen", f"{broker.host}:{broker.metrics_port}"]
        with open(broker.log_path, "ab") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        self._processes[broker.broker_id] = process
        broker.pid = process.pid

    def kill_broker(self, broker_id: int, sig: int = signal.SIGKILL, timeout_s: float = 15.0) -> None:
        """Send ``sig`` to a broker; SIGKILL/SIGTERM wait for it to exit (SIGTERM escalates) and
        record it in the state file (when the disk takes the write: a stale pid is harmless)."""
        if self._stop_broker(broker_id, sig, timeout_s):
            with contextlib.suppress(OSError):
                self.save()

    def _stop_broker(self, broker_id: int, sig: int, timeout_s: float) -> bool:
        """Send ``sig``; True when the broker was stopped (SIGTERM/SIGKILL). Writes nothing."""
        broker = self.brokers[broker_id]
        if broker.pid is None:
            return False
        if sig == signal.SIGTERM:
            terminate(broker.pid, timeout_s)
        else:
            try:
                os.killpg(broker.pid, sig)
            except ProcessLookupError:
                pass
        if sig in (signal.SIGTERM, signal.SIGKILL):
            process = self._processes.pop(broker_id, None)
            if process is not None:
                process.wait(timeout_s)
            broker.pid = None
            return True
        return False

    def pause_broker(self, broker_id: int) -> None:
        self.kill_broker(broker_id, signal.SIGSTOP)

    def resume_broker(self, broker_id: int) -> None:
        self.kill_broker(broker_id, signal.SIGCONT)

    def restart_broker(self, broker_id: int, timeout_s: float = 60.0) -> None:
        """Start a stopped (or killed) broker again on the same port and data directory."""
        broker = self.brokers[broker_id]
        if broker.pid is not None:
            self.kill_broker(broker_id, signal.SIGTERM)
        self._spawn(broker)
        self.save()
        wait_for_broker(broker, timeout_s, context=self._client_context())

    def broker_running(self, broker_id: int) -> bool:
        """Whether the broker's recorded pid is a live process of this broker (not a stale pid of a
        killed broker, possibly reused by an unrelated process)."""
        broker = self.brokers[broker_id]
        if broker.pid is None:
            return False
        try:
            os.kill(broker.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:   # alive, someone else's: not ours
            return False
        try:
            argv = Path(f"/proc/{broker.pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return True   # no /proc: trust the live pid
        return b"ember.cli" in argv and b"--id" in argv and str(broker_id).encode() in argv \
            and str(broker.data_dir).encode() in argv

    def broker_answers(self, broker_id: int) -> bool:
        """Whether the broker runs (:meth:`broker_running`) and answers an ApiVersions request."""
        broker = self.brokers[broker_id]
        return self.broker_running(broker_id) and broker_responds(broker.host, broker.port,
                                                                  context=self._client_context())

    def start_broker(self, broker_id: int, timeout_s: float = 60.0,
                     progress: Callable[[str], object] = lambda message: None) -> None:
        """Start a broker that is not running (killed, crashed, stopped) on its port and data
        directory, and wait until it answers, as ``start`` does; raises BrokerNotAvailable when it
        exits or does not answer within ``timeout_s``. A stale pid is forgotten, never signalled."""
        broker = self.brokers[broker_id]
        if self.broker_running(broker_id):
            raise BrokerNotAvailable(f"broker {broker_id} is running already (pid {broker.pid})")
        broker.pid = None
        progress(f"starting broker {broker_id} on {broker.address}")
        self._spawn(broker)
        self.save()
        wait_for_broker(broker, timeout_s, self._processes.get(broker_id), self._client_context())
        progress(f"broker {broker_id} ready on {broker.address} (pid {broker.pid})")

    def stop_broker(self, broker_id: int, timeout_s: float = 15.0,
                    progress: Callable[[str], object] = lambda message: None) -> bool:
        """SIGTERM one broker (SIGKILL after ``timeout_s``) and record it; False when it was not running."""
        broker = self.brokers[broker_id]
        if not self.broker_running(broker_id):
            if broker.pid is not None:   # a stale pid: forget it, never signal it
                broker.pid = None
                with contextlib.suppress(OSError):
                    self.save()
            return False
        pid = broker.pid
        progress(f"stopping broker {broker_id} (pid {pid})")
        self.kill_broker(broker_id, signal.SIGTERM, timeout_s)
        progress(f"stopped broker {broker_id} (pid {pid})")
        return True

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        for broker in self.brokers.values():
            if broker.pid is not None:
                wait_for_broker(broker, timeout_s, self._processes.get(broker.broker_id), self._client_context())

    # -- state file --------------------------------------------------------------------------

    def save(self) -> None:
        state = {
            "zookeeper": {"port": self.zookeeper.port, "pid": read_pid(self.zookeeper.data_dir / "zookeeper.pid"),
                          "data_dir": str(self.zookeeper.data_dir)}
            if self.zookeeper else None,
            "brokers": [{**asdict(b), "data_dir": str(b.data_dir)} for b in self.brokers.values()],
            "secure": self.secure,
            "sasl": self.sasl,
        }
        path = self.data_dir / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, data_dir: Path) -> "LocalCluster":
        """The cluster described by ``<data_dir>/cluster.json`` (written by ``start``)."""
        path = data_dir / STATE_FILE
        if not path.exists():
            raise BrokerNotAvailable(f"no cluster found under {data_dir} (start one with `ember cluster up`)")
        state = json.loads(path.read_text())
        cluster = cls(data_dir, broker_count=len(state["brokers"]), secure=bool(state.get("secure", False)),
                      sasl=bool(state.get("sasl", False)),
                      metrics=any(b.get("metrics_port") for b in state["brokers"]), _loaded=True)
        if state["zookeeper"]:
            if state["zookeeper"].get("data_dir"):
                cluster.zookeeper_dir = Path(state["zookeeper"]["data_dir"])
            cluster.zookeeper = cluster._zookeeper(state["zookeeper"]["port"])
        for b in state["brokers"]:
            cluster.brokers[b["broker_id"]] = BrokerProcess(b["broker_id"], b["port"], Path(b["data_dir"]), b["host"], b["pid"],
                                                            b.get("metrics_port"), b.get("kafka_port"),
                                                            b.get("log_dir_count", 1))
        return cluster

    def _zookeeper_room(self, broker: BrokerProcess) -> int:
        """Free space ``broker`` keeps (``log.dir.min.free.bytes``) when a log directory of it shares
        ZooKeeper's file system: the reserve's size, so its appends stop before they take ZooKeeper's
        room; 0 when none does (its own disk, e.g. a mount of its own)."""
        if self.zookeeper is None:
            return 0
        try:
            zookeeper_fs = self.zookeeper.data_dir.stat().st_dev
            if all(d.stat().st_dev != zookeeper_fs for d in broker.log_dirs if d.exists()):
                return 0
            return zookeeper_reserve_size(self.zookeeper.data_dir)
        except OSError:     # ZooKeeper's directory gone or unreadable: nothing to keep room for
            return 0

    def _reserve_for_zookeeper(self, progress: Callable[[str], object]) -> None:
        """Keep room for ZooKeeper when it shares the log directories' file system: the brokers
        stop appending before less than the reserve size is free (``log.dir.min.free.bytes``), and
        a file of real blocks in its directory, which ``stop`` deletes first and an operator
        deletes to give ZooKeeper room on a full disk (docs/operations.md, "A full disk")."""
        assert self.zookeeper is not None
        if self.data_dir.stat().st_dev != self.zookeeper.data_dir.stat().st_dev:
            return   # its own file system: the brokers' logs cannot fill it
        size = zookeeper_reserve_size(self.data_dir)
        try:
            self.zookeeper.make_reserve(size)
        except OSError as exc:
            progress(f"WARNING: no space reserve for ZooKeeper ({_describe(exc)}): a full disk can stop it")
            return
        progress(f"ZooKeeper's space reserve: {_size(size)} in {self.zookeeper.reserve_path} "
                 f"(delete it to give ZooKeeper room on a full disk)")

    def status(self) -> dict[str, object]:
        """Liveness of ZooKeeper and each broker, as shown by ``ember cluster status``."""
        zk = self.zookeeper
        usage = shutil.disk_usage(self.data_dir)
        reserve = zk.reserve_path if zk and zk.reserve_path.exists() else None
        return {
            "disk": {"free": usage.free, "total": usage.total, "reserve": str(reserve) if reserve else None,
                     "text": f"{_size(usage.free)} free of {_size(usage.total)}"
                             + (f", ZooKeeper's space reserve {reserve}" if reserve else "")},
            "zookeeper": {"address": zk.connect_string if zk else None,
                          "healthy": bool(zk and is_healthy(zk.host, zk.port, zk.client_context()))},
            "brokers": [{"id": b.broker_id, "address": b.address, "kafka_address": b.kafka_address, "pid": b.pid,
                         "healthy": b.pid is not None and broker_responds(b.host, b.port,
                                                                          context=self._client_context()),
                         "readiness": readiness(b.host, b.metrics_port) if b.metrics_port and b.pid else None}
                        for b in self.brokers.values()],
        }


def zookeeper_reserve_size(directory: Path) -> int:
    """64 MiB (ZooKeeper's transaction log preallocation), at most 5% of the file system."""
    return min(64 << 20, shutil.disk_usage(directory).total // 20)


def low_space_warning(directory: Path) -> str | None:
    """One WARNING line when the file system ``directory`` (or its nearest existing parent) is on
    has less than 1 GiB or less than 10% free; None when there is room."""
    existing = directory.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    usage = shutil.disk_usage(existing)
    if usage.free >= LOW_SPACE_BYTES and usage.free >= usage.total * LOW_SPACE_FRACTION:
        return None
    percent = 100 * usage.free / usage.total if usage.total else 0.0
    return (f"WARNING: low disk space for {directory}: {_size(usage.free)} free of {_size(usage.total)} "
            f"({percent:.0f}%; warning under {_size(LOW_SPACE_BYTES)} or {LOW_SPACE_FRACTION:.0%}). When it fills, "
            f"appends to the logs fail, and ZooKeeper, on the same file system unless --zookeeper-data puts it "
            f"elsewhere, can stop (deleting its space reserve gives it room); see docs/operations.md, \"A full disk\"")


def _size(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def broker_responds(host: str, port: int, timeout_s: float = 2.0, context: ssl.SSLContext | None = None) -> bool:
    """True when a broker at host:port answers an ApiVersions request (over TLS with ``context``)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw, \
                (context.wrap_socket(raw, server_hostname=host) if context else raw) as sock:
            sock.sendall(b"".join(encode_request(ApiKey.API_VERSIONS, 0, 1, {})))
            header = _recv_exact(sock, FRAME_LENGTH.size)
            response = decode_response(_recv_exact(sock, FRAME_LENGTH.unpack(header)[0]))
            return response.correlation_id == 1 and response.body.get("error_code") == 0
    except (OSError, ValueError):
        return False


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            raise ConnectionError("connection closed")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def wait_for_broker(broker: BrokerProcess, timeout_s: float, process: subprocess.Popen[bytes] | None = None,
                    context: ssl.SSLContext | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise BrokerNotAvailable(
                f"broker {broker.broker_id} exited with code {process.returncode}; see {broker.log_path}")
        if broker_responds(broker.host, broker.port, timeout_s=1.0, context=context):
            return
        time.sleep(0.1)
    raise BrokerNotAvailable(f"broker {broker.broker_id} did not become healthy on {broker.address} "
                             f"within {timeout_s:.0f}s; see {broker.log_path}")


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could bind ``port`` now (as the brokers do: SO_REUSEADDR, so a port whose
    last connections linger in TIME_WAIT counts as free)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def local_bootstrap(data_dir: Path) -> str | None:
    """The ember bootstrap list of the cluster ``ember cluster up`` started under ``data_dir``
    (None: no cluster there, or its state file unreadable)."""
    try:
        return LocalCluster.load(data_dir).bootstrap or None
    except (EmberError, OSError, ValueError, KeyError):
        return None
