"""Stable addresses (issue "A newcomer's first hour", item 11): ``ember cluster up`` puts a cluster
on a fixed port layout (broker 1 on 9092, its Kafka listener on 9093, ...; ``--port-base`` moves
it), keeps it across ``down`` and ``up``, and client commands find the cluster's brokers without
an address copied by hand. A taken port is named before anything starts, and a start that fails
half-way leaves nothing running."""
from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ember.errors import EmberError
from ember.launcher.local import LocalCluster, PortLayout, port_free

pytestmark = pytest.mark.integration


def free_base(brokers: int) -> int:
    """A port base whose whole layout (ZooKeeper, listeners, metrics) is free now."""
    for _ in range(200):
        layout = PortLayout(random.randrange(16000, 28000, 2))
        ports = [layout.zookeeper] + [p for b in range(1, brokers + 1)
                                      for p in (layout.ember(b), layout.kafka(b), layout.metrics(b))]
        if all(port_free(p) for p in ports):
            return layout.base
    raise AssertionError("no free port block found")


def ember(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("EMBER_PORT_BASE", "EMBER_BOOTSTRAP")}
    return subprocess.run([sys.executable, "-m", "ember.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**environment, **(env or {})})


def test_the_port_layout_follows_kafkas_and_moves_with_the_base() -> None:
    default = PortLayout()
    assert (default.zookeeper, default.ember(1), default.kafka(1), default.ember(3), default.kafka(3),
            default.metrics(1), default.metrics(3)) == (2181, 9092, 9093, 9096, 9097, 9644, 9646)
    moved = PortLayout(10092)
    assert (moved.zookeeper, moved.ember(2), moved.kafka(2), moved.metrics(2)) == (3181, 10094, 10095, 10645)
    with pytest.raises(EmberError, match="1024-65535"):
        PortLayout(7000).check(3)


def test_a_cluster_keeps_its_ports_across_down_and_up_and_client_commands_find_it(tmp_path: Path) -> None:
    data, base = tmp_path / "cluster", free_base(1)
    finds = {"EMBER_DATA": str(data)}     # as a user with the cluster under their default directory
    try:
        up = ember("cluster", "up", "--brokers", "1", "--port-base", str(base), "--data", str(data))
        assert up.returncode == 0, up.stderr
        assert f"bootstrap: 127.0.0.1:{base}\n" in up.stdout and f"127.0.0.1:{base + 1}" in up.stdout, up.stdout
        created = ember("topics", "create", "stable", "--partitions", "1", env=finds)
        assert created.returncode == 0, created.stderr
        assert ember("cluster", "down", "--data", str(data)).returncode == 0

        again = ember("cluster", "up", "--brokers", "1", "--data", str(data))    # no --port-base: the last one
        assert again.returncode == 0, again.stderr
        assert f"bootstrap: 127.0.0.1:{base}\n" in again.stdout, again.stdout
        listed = ember("topics", "list", env=finds)
        assert listed.returncode == 0 and "stable" in listed.stdout.split(), listed
    finally:
        ember("cluster", "down", "--data", str(data))


def test_a_taken_port_is_named_before_anything_starts(tmp_path: Path) -> None:
    data, base = tmp_path / "cluster", free_base(1)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", base + 1))
        holder.listen()
        up = ember("cluster", "up", "--brokers", "1", "--port-base", str(base), "--data", str(data), timeout=60)
    assert up.returncode == 1, up
    assert f"PortInUse: port {base + 1} (broker 1's KAFKA listener) already in use" in up.stderr, up.stderr
    assert "--port-base" in up.stderr
    assert not (data / "cluster.json").exists() and not (data / "zookeeper" / "zookeeper.pid").exists()


def test_a_start_that_fails_half_way_stops_what_it_started(tmp_path: Path) -> None:
    """Broker 2 cannot use its data directory: ZooKeeper and broker 1 were already running, and
    ``with LocalCluster(...).start()`` never reaches ``__exit__`` to stop them."""
    data = tmp_path / "cluster"
    data.mkdir()
    (data / "broker-2").write_text("a file where broker 2's directory should be")
    cluster = LocalCluster(data, broker_count=2)
    with pytest.raises((EmberError, OSError)):
        cluster.start(timeout_s=30)
    assert cluster.zookeeper is not None
    ports = [cluster.zookeeper.port, cluster.brokers[1].port, cluster.brokers[1].kafka_port]
    assert all(port is not None and port_free(port) for port in ports), "ZooKeeper or broker 1 still listens"
