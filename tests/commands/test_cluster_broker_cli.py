"""Restarting one broker from the CLI (issue "A newcomer's first hour", item 13): after a broker was
killed, ``ember cluster start-broker N`` brings it back on its port and data and waits until it
answers; ``ember cluster stop-broker N`` stops one; ``ember cluster up`` on a cluster with brokers
down starts only those (not "a cluster is already running"). Each through the real CLI, bounded."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from ember.launcher.local import LocalCluster, broker_responds


def _ember(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ember.cli", "cluster", *args], capture_output=True, text=True,
                          timeout=timeout)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/cmdline").read_bytes() != b""   # a zombie has none


def test_start_and_stop_broker_without_a_cluster_say_so(tmp_path: Path) -> None:
    for action in ("start-broker", "stop-broker"):
        out = _ember(action, "2", "--data", str(tmp_path), timeout=60)
        assert out.returncode == 1, out
        assert f"no cluster is running under {tmp_path}" in out.stderr, out


@pytest.mark.integration
def test_restart_and_stop_one_broker_from_the_cli(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(brokers=3, config={"log.retention.ms": "86400001"})
    data = str(cluster.data_dir)
    overrides = cluster.data_dir / "broker-overrides.properties"
    try:
        # Broker 2 is killed behind the launcher's back: the state file keeps its (now stale) pid.
        killed = cluster.brokers[2]
        assert killed.pid is not None
        os.killpg(killed.pid, signal.SIGKILL)
        cluster._processes.pop(2).wait(15)
        assert _ember("status", "--data", data, timeout=60).returncode == 1

        out = _ember("start-broker", "2", "--data", data)
        assert out.returncode == 0, out
        assert f"starting broker 2 on {killed.address}" in out.stdout
        assert f"broker 2 ready on {killed.address}" in out.stdout, out
        assert broker_responds(killed.host, killed.port)
        assert "log.retention.ms=86400001" in overrides.read_text()   # `up --config` overrides kept
        status = _ember("status", "--data", data, timeout=60)
        assert status.returncode == 0, status

        again = _ember("start-broker", "2", "--data", data, timeout=60)
        assert again.returncode == 0 and "broker 2 is running already" in again.stdout, again
        unknown = _ember("start-broker", "7", "--data", data, timeout=60)
        assert unknown.returncode == 1 and "has no broker 7 (its brokers: 1, 2, 3)" in unknown.stderr, unknown

        pid3 = LocalCluster.load(cluster.data_dir).brokers[3].pid
        assert pid3 is not None
        stop = _ember("stop-broker", "3", "--data", data, timeout=60)
        assert stop.returncode == 0, stop
        assert f"stopped broker 3 (pid {pid3})" in stop.stdout, stop
        assert not _pid_alive(pid3)
        assert LocalCluster.load(cluster.data_dir).brokers[3].pid is None
        twice = _ember("stop-broker", "3", "--data", data, timeout=60)
        assert twice.returncode == 0 and "broker 3 is not running; nothing to stop" in twice.stdout, twice
        down = _ember("status", "--data", data, timeout=60)
        assert down.returncode == 1 and "broker 3" in down.stdout, down

    finally:
        out = _ember("down", "--data", data, timeout=120)
        assert out.returncode == 0, out
        assert "stopped broker 1" in out.stdout and "stopped ZooKeeper" in out.stdout, out


@pytest.mark.integration
def test_up_brings_back_only_the_brokers_that_are_down(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(brokers=2)
    data = str(cluster.data_dir)
    try:
        cluster.kill_broker(2)
        zk = cluster.zk_connect
        up = _ember("up", "--data", data)
        assert up.returncode == 0, up
        assert "broker(s) 2 down; starting only those" in up.stdout, up
        assert "starting broker 2" in up.stdout and "starting broker 1" not in up.stdout, up
        assert "broker 2 ready" in up.stdout, up
        assert "starting ZooKeeper" not in up.stdout and f"ZooKeeper: {zk}" in up.stdout, up
        assert f"bootstrap: {cluster.bootstrap}" in up.stdout
        assert _ember("status", "--data", data, timeout=60).returncode == 0
        full = _ember("up", "--data", data, timeout=60)
        assert full.returncode == 1 and "already running" in full.stdout, full
    finally:
        assert _ember("down", "--data", data, timeout=120).returncode == 0
