"""A local Apache Kafka 4.x cluster in KRaft mode (no ZooKeeper), for side-by-side benchmarks.

Each node is a combined broker + controller started as ``java -cp '<libs>/*' kafka.Kafka
server.properties`` from the jars ``setup.sh`` fetched from Maven Central (``ember.jars.KAFKA_BROKER``), after its log dir was
formatted with ``kafka.tools.StorageTool``. Ports are picked free on 127.0.0.1, every node logs to
its own file in the cluster directory, and ``stop()`` kills whatever is still running, so a failed
run leaves no JVM behind. The JVM options are those of Kafka's ``kafka-server-start.sh`` (1 GiB
heap, G1) so memory figures are what a stock install shows. Given ``tls`` (an ember
``ClusterTls``), each node also serves an SSL listener with the same PEM certificates as a secure
ember cluster (client certificates required); brokers keep replicating over PLAINTEXT. Given
``sasl`` too (an ember ``ClusterSasl``), each node also serves a SASL_SSL listener with
SCRAM-SHA-512 (and client certificates), its ``admin`` user created at format time
(``kafka-storage format --add-scram``), as ``ember cluster up --secure`` logs its clients in.
"""
from __future__ import annotations

import base64
import ctypes
import os
import signal
import socket
import struct
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ember.jars import KAFKA_BROKER
from ember.launcher.cluster_sasl import ADMIN_USER, MECHANISM, ClusterSasl
from ember.launcher.cluster_tls import ClusterTls
from ember.launcher.zookeeper_server import free_port
from ember.security.sasl.jaas import SCRAM_MODULE

BENCH_DIR = Path(__file__).resolve().parent
# kafka-server-start.sh: KAFKA_HEAP_OPTS and KAFKA_JVM_PERFORMANCE_OPTS defaults
JVM_OPTS = ["-Xmx1G", "-Xms1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true"]
LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
"""
API_VERSIONS = 18
PR_SET_PDEATHSIG = 1


@dataclass
class KafkaNode:
    """One combined broker + controller: its ports, directories and running process."""

    node_id: int
    port: int
    controller_port: int
    root: Path
    process: subprocess.Popen | None = None
    ssl_port: int | None = None
    sasl_port: int | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None and self.process.poll() is None else None

    @property
    def config_path(self) -> Path:
        return self.root / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.root / "node.log"


@dataclass
class KafkaCluster:
    """``node_count`` KRaft nodes (each broker and controller) rooted at ``data_dir``."""

    data_dir: Path
    node_count: int = 3
    nodes: dict[int, KafkaNode] = field(default_factory=dict)
    tls: ClusterTls | None = None
    sasl: ClusterSasl | None = None     # with tls: a SASL_SSL (SCRAM-SHA-512) listener too
    #: more broker properties (a workload's own, such as the log cleaner's backoff)
    overrides: dict[str, object] = field(default_factory=dict)
    cluster_id: str = field(default_factory=lambda: _cluster_id())

    @property
    def bootstrap(self) -> str:
        return ",".join(node.address for node in self.nodes.values())

    @property
    def ssl_bootstrap(self) -> str:
        """The nodes' SSL listeners (with ``tls``)."""
        return ",".join(f"127.0.0.1:{node.ssl_port}" for node in self.nodes.values())

    @property
    def ssl_client_config(self) -> dict[str, str]:
        """librdkafka settings for the SSL listeners: the CA and the client certificate."""
        assert self.tls is not None
        return {"security.protocol": "ssl", "ssl.ca.location": str(self.tls.ca),
                "ssl.certificate.location": str(self.tls.client.cert), "ssl.key.location": str(self.tls.client.key)}

    @property
    def sasl_bootstrap(self) -> str:
        """The nodes' SASL_SSL listeners (with ``sasl``)."""
        return ",".join(f"127.0.0.1:{node.sasl_port}" for node in self.nodes.values())

    @property
    def sasl_client_config(self) -> dict[str, str]:
        """librdkafka settings for the SASL_SSL listeners: the SSL ones plus the ``admin`` login."""
        assert self.sasl is not None
        return {**self.ssl_client_config, **self.sasl.librdkafka_properties()}

    def start(self, timeout_s: float = 120.0, progress: Callable[[str], None] = lambda message: None) -> "KafkaCluster":
        """Write configs, format storage, launch every node, wait until each answers ApiVersions."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for node_id in range(1, self.node_count + 1):
            self.nodes[node_id] = KafkaNode(node_id, free_port(), free_port(), self.data_dir / f"node-{node_id}",
                                            ssl_port=free_port() if self.tls else None,
                                            sasl_port=free_port() if self.sasl else None)
        for node in self.nodes.values():
            self._configure(node)
            self._format(node)
        progress(f"starting {self.node_count} Kafka KRaft nodes on {self.bootstrap}")
        try:
            for node in self.nodes.values():
                self.spawn(node.node_id)
            for node in self.nodes.values():
                self.wait_ready(node.node_id, timeout_s)
        except BaseException:
            self.stop()
            raise
        progress(f"Kafka cluster ready: bootstrap {self.bootstrap}")
        return self

    def stop(self) -> None:
        """SIGTERM every node (a clean KRaft shutdown), SIGKILL what is left after 20 s."""
        for node in self.nodes.values():
            _signal(node, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for node in self.nodes.values():
            if node.process is None:
                continue
            try:
                node.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal(node, signal.SIGKILL)
                node.process.wait(10)
            node.process = None

    def __enter__(self) -> "KafkaCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- nodes -------------------------------------------------------------------------------

    def spawn(self, node_id: int) -> None:
        """Launch one node's JVM (its own session, so signals reach the whole process group)."""
        node = self.nodes[node_id]
        command = ["java", *JVM_OPTS, f"-Dlog4j2.configurationFile={node.root / 'log4j2.properties'}",
                   "-cp", KAFKA_BROKER.classpath, "kafka.Kafka", str(node.config_path)]
        with open(node.log_path, "ab") as log:
            node.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, preexec_fn=_die_with_parent)

    def stop_node(self, node_id: int, timeout_s: float = 30.0) -> None:
        node = self.nodes[node_id]
        _signal(node, signal.SIGTERM)
        if node.process is not None:
            node.process.wait(timeout_s)
            node.process = None

    def wait_ready(self, node_id: int, timeout_s: float) -> None:
        """Poll ApiVersions every 0.1 s (as ember's LocalCluster does) until the node answers."""
        node = self.nodes[node_id]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if node.process is not None and node.process.poll() is not None:
                raise RuntimeError(f"Kafka node {node_id} exited with {node.process.returncode}; see {node.log_path}")
            if api_versions_ok("127.0.0.1", node.port):
                return
            time.sleep(0.1)
        raise TimeoutError(f"Kafka node {node_id} not ready on {node.address} within {timeout_s:.0f}s; see {node.log_path}")

    def _configure(self, node: KafkaNode) -> None:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes.values())
        properties = {
            "process.roles": "broker,controller",
            "node.id": node.node_id,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": node.root / "data",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": min(3, self.node_count),
            "offsets.topic.num.partitions": 6,
            "transaction.state.log.replication.factor": min(3, self.node_count),
            "transaction.state.log.min.isr": 1,
            "share.coordinator.state.topic.replication.factor": min(3, self.node_count),
            "group.initial.rebalance.delay.ms": 0,
            **self.overrides,
        }
        if self.tls is not None:
            _add_listener(properties, "SSL", node.ssl_port)
            properties.update({
                "ssl.keystore.type": "PEM", "ssl.keystore.location": self.tls.broker.keystore,
                "ssl.truststore.type": "PEM", "ssl.truststore.location": self.tls.ca, "ssl.client.auth": "required"})
        if self.sasl is not None:
            _add_listener(properties, "SASL_SSL", node.sasl_port)
            properties.update({   # only clients log in: brokers replicate over PLAINTEXT
                "sasl.enabled.mechanisms": MECHANISM,
                f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": f"{SCRAM_MODULE} required;",
                "listener.name.sasl_ssl.ssl.client.auth": "required"})   # ssl.client.auth covers SSL only
        node.root.mkdir(parents=True, exist_ok=True)
        node.config_path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        (node.root / "log4j2.properties").write_text(LOG4J2.format(log=node.log_path))

    def _format(self, node: KafkaNode) -> None:
        """``kafka-storage.sh format``: writes meta.properties and the bootstrap checkpoint (with
        ``sasl``, the ``admin`` user's SCRAM credential in it: KRaft has no other store before start)."""
        command = ["java", "-Xmx256m", "-cp", KAFKA_BROKER.classpath, "kafka.tools.StorageTool", "format",
                   "-t", self.cluster_id, "-c", str(node.config_path), "--ignore-formatted"]
        if self.sasl is not None:
            command += ["--add-scram", f"{MECHANISM}=[name={ADMIN_USER},password={self.sasl.password(ADMIN_USER)}]"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"formatting Kafka node {node.node_id} failed:\n{result.stdout}{result.stderr}")


def _add_listener(properties: dict[str, object], name: str, port: int | None) -> None:
    """One more listener named after its security protocol, advertised as bound."""
    for key in ("listeners", "advertised.listeners"):
        properties[key] = f"{properties[key]},{name}://127.0.0.1:{port}"
    properties["listener.security.protocol.map"] = f"{properties['listener.security.protocol.map']},{name}:{name}"


def _cluster_id() -> str:
    """A random cluster id as Kafka's ``Uuid`` prints it, never starting with "-" (the storage
    tool's argument parser would take such an id for an option: 1 run in 64 failed)."""
    for _ in range(100):
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text
    raise RuntimeError("no cluster id without a leading '-' in 100 draws")


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM this node when the process that started it dies, even by
    SIGKILL, so no JVM outlives a killed benchmark (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def _signal(node: KafkaNode, sig: int) -> None:
    if node.process is None or node.process.poll() is not None:
        return
    try:
        os.killpg(node.process.pid, sig)
    except ProcessLookupError:
        pass


def api_versions_ok(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when a Kafka broker answers ApiVersions v0 with error code 0 (the same probe ember's
    ``broker_responds`` sends to an ember broker)."""
    header = struct.pack(">hhih", API_VERSIONS, 0, 1, -1)   # api key, version, correlation id, null client id
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(struct.pack(">i", len(header)) + header)
            size = struct.unpack(">i", _recv_exact(sock, 4))[0]
            correlation_id, error_code = struct.unpack(">ih", _recv_exact(sock, size)[:6])
            return correlation_id == 1 and error_code == 0
    except (OSError, struct.error):
        return False


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data
