"""Start and stop a real ZooKeeper server (Debian's ``zookeeper`` package) for a local cluster.

The server runs standalone with its own data directory, loopback address and port, so several
local clusters (and test runs) can live on one machine side by side. Given a PEM ``keystore``
and ``truststore`` it serves only TLS (``secureClientPort``, Netty, client certificates
required) on that port. A launcher sharing the file system with others can hold a space reserve
in the server's directory (``make_reserve``): real blocks to delete when the disk is full.
"""
from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ember.errors import EmberError
from ember.net.channel import probe

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
#: Netty's codecs: ZooKeeper's TLS server needs them, and Debian's jar manifest leaves them out.
NETTY_CODEC_JAR = Path("/usr/share/java/netty-codec.jar")
#: C1 only: the C2 compiler's work was most of this ZooKeeper's CPU when a topic of 1,000
#: partitions is created (3,000 state reads: 1.0-1.5 CPU-s with C2, 0.6 with C1 alone), taken
#: from the brokers on a small host; a launcher's ZooKeeper never runs long enough to repay it.
JVM_CPU_OPTIONS = ("-XX:TieredStopAtLevel=1",)
DEFAULTS_FILE = Path(__file__).resolve().parents[2] / "conf" / "zookeeper.properties"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
#: The space reserve a launcher may keep in the server's directory (see ``make_reserve``).
RESERVE_FILE = "space-reserve"


class ZooKeeperUnavailable(EmberError):
    """ZooKeeper could not be started or reached."""
    hint = "run `make setup` (installs Debian's zookeeper package) and check the ZooKeeper log"


@dataclass
class ZooKeeperServer:
    """A standalone ZooKeeper server process owned by this launcher."""

    data_dir: Path
    port: int
    host: str = "127.0.0.1"
    process: subprocess.Popen[bytes] | None = None
    #: PEM files of a TLS-only server: its key + certificate chain, and the CA clients' certificates need.
    keystore: Path | None = None
    truststore: Path | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.out"

    @property
    def reserve_path(self) -> Path:
        return self.data_dir / RESERVE_FILE

    def make_reserve(self, size: int) -> None:
        """Allocate ``size`` bytes of real blocks (not a sparse file) at ``reserve_path``, kept if
        already there; on failure (no room) nothing is left behind."""
        if self.reserve_path.exists() and self.reserve_path.stat().st_blocks * 512 >= size:
            return
        fd = os.open(self.reserve_path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError:
            os.close(fd)
            self.reserve_path.unlink(missing_ok=True)
            raise
        os.close(fd)

    def release_reserve(self) -> int:
        """Delete the space reserve (needs no free space); the bytes freed (0: there was none)."""
        try:
            size = self.reserve_path.stat().st_blocks * 512
            self.reserve_path.unlink()
        except FileNotFoundError:
            return 0
        return size

    def write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "zoo.cfg"
        if self.keystore is None:
            port = f"clientPort={self.port}\nclientPortAddress={self.host}\n"
        else:
            port = (f"secureClientPort={self.port}\nsecureClientPortAddress={self.host}\n"
                    "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n"
                    f"ssl.keyStore.location={self.keystore}\nssl.keyStore.type=PEM\n"
                    f"ssl.trustStore.location={self.truststore}\nssl.trustStore.type=PEM\nssl.clientAuth=need\n")
        config.write_text(DEFAULTS_FILE.read_text() + f"dataDir={self.data_dir / 'data'}\n" + port)
        return config

    def client_context(self) -> ssl.SSLContext | None:
        """How the launcher talks to a TLS server (health checks): trusting the CA, presenting
        the server's own certificate, which the CA signed for client use too."""
        if self.keystore is None:
            return None
        context = ssl.create_default_context(cafile=str(self.truststore))
        context.load_cert_chain(str(self.keystore))
        return context

    def start(self, timeout_s: float = 30.0) -> None:
        """Start the server in the background and wait until it serves requests (``is_healthy``)."""
        java = shutil.which("java")
        if java is None or not ZOOKEEPER_JAR.exists():
            raise ZooKeeperUnavailable(f"java or {ZOOKEEPER_JAR} is missing")
        classpath = str(ZOOKEEPER_JAR)
        if self.keystore is not None:
            if not NETTY_CODEC_JAR.exists():
                raise ZooKeeperUnavailable(f"{NETTY_CODEC_JAR} is missing (Debian's libnetty-java): ZooKeeper's "
                                           f"TLS port needs it")
            classpath += f":{NETTY_CODEC_JAR}"
        context = self.client_context()
        config = self.write_config()
        (self.data_dir / "data").mkdir(exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [java, "-Xmx256m", "-XX:+UseSerialGC", *JVM_CPU_OPTIONS, f"-Dzookeeper.log.dir={self.data_dir}",
                 "-cp", classpath, MAIN_CLASS, str(config)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        (self.data_dir / "zookeeper.pid").write_text(str(self.process.pid))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ZooKeeperUnavailable(
                    f"ZooKeeper exited with code {self.process.returncode}; see {self.log_path}")
            if is_healthy(self.host, self.port, context):
                return
            time.sleep(0.1)
        self.stop()
        raise ZooKeeperUnavailable(f"ZooKeeper did not answer on {self.connect_string} within {timeout_s:.0f}s")

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server (SIGTERM, SIGKILL after ``timeout_s``). Writes nothing, so a full disk
        cannot fail it; a pid file that cannot be removed (read-only file system) is left."""
        pid = self.process.pid if self.process else read_pid(self.data_dir / "zookeeper.pid")
        if pid is not None:
            terminate(pid, timeout_s)
        with contextlib.suppress(OSError):
            (self.data_dir / "zookeeper.pid").unlink(missing_ok=True)


def is_healthy(host: str, port: int, context: ssl.SSLContext | None = None) -> bool:
    """True when a ZooKeeper server at host:port serves requests (over TLS with ``context``).

    Asked with ``srvr``, not ``ruok``: ZooKeeper answers ``imok`` as soon as its port is bound,
    before it has loaded its database, and a session opened in that window waits on startup."""
    return probe((host, port), b"srvr", 1.0, context).startswith(b"Zookeeper version:")


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def terminate(pid: int, timeout_s: float) -> None:
    """SIGTERM a process group, then SIGKILL it if it has not exited in time."""
    try:
        os.killpg(pid, 15)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)
    try:
        os.killpg(pid, 9)
    except ProcessLookupError:
        pass


#: Ports :func:`free_port` gave out in this process (never given twice).
_PORTS_GIVEN: set[int] = set()
_PORTS_LOCK = threading.Lock()
_LOWEST_PORT = 10000


def _ephemeral_ports() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux's default if unreadable)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now for a server to bind soon: picked at random below the kernel's ephemeral
    range, so no outgoing connection can take it first (a port the OS picks, ``bind(0)``, comes
    from that range and was seen taken by a client's connection before the broker bound it), and
    never given twice by one process."""
    low, _ = _ephemeral_ports()
    with _PORTS_LOCK:
        for _ in range(1000 if low > _LOWEST_PORT + 1000 else 0):
            port = random.randrange(_LOWEST_PORT, low)
            if port in _PORTS_GIVEN:
                continue
            with socket.socket() as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
            _PORTS_GIVEN.add(port)
            return port
        with socket.socket() as sock:   # no room below the ephemeral range: let the OS pick
            sock.bind((host, 0))
            port = sock.getsockname()[1]
            _PORTS_GIVEN.add(port)
            return port
