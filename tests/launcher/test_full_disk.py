"""A full disk: the cluster's own tools (`ember cluster down|status`, `ember topics describe`) keep
working on a data directory whose file system has no free byte left.

The file system is real: a 64 MiB tmpfs mounted by the test (root only), filled by a filler file
while a 1-broker cluster runs on it."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from ember.launcher.local import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def small_fs(tmpfs: Callable[[str], Path]) -> Path:
    """A 64m tmpfs (root only; unmounted at teardown)."""
    return tmpfs("64m")


def fill(directory: Path) -> None:
    """Write a filler file until the file system refuses one more byte."""
    with open(directory / "filler", "wb", buffering=0) as out:
        for chunk in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    out.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    with pytest.raises(OSError) as refused:
        (directory / "probe").write_text("x")
    assert refused.value.errno == errno.ENOSPC


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its parent counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def cluster_pids(data: Path) -> list[int]:
    cluster = LocalCluster.load(data)
    assert cluster.zookeeper is not None
    zk_pid = int((cluster.zookeeper.data_dir / "zookeeper.pid").read_text())
    return [zk_pid] + [b.pid for b in cluster.brokers.values() if b.pid is not None]


def wait_gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


def ember(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ember.cli", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd or REPO, env={**os.environ, **(env or {})})


def test_cluster_down_stops_every_process_on_a_full_disk(small_fs: Path) -> None:
    data = small_fs / "cluster"
    cluster = LocalCluster(data, broker_count=1)
    pids: list[int] = []
    try:
        cluster.start(timeout_s=45)
        pids = cluster_pids(data)
        (data / "zookeeper" / "space-reserve").unlink(missing_ok=True)   # an operator already gave ZooKeeper's reserve away
        fill(small_fs)
        LocalCluster.load(data).stop(timeout_s=5)    # what `ember cluster down` does
        assert wait_gone(pids) == []
    finally:
        _stop_quietly(cluster, pids)


def test_cli_status_describe_and_down_answer_on_a_full_disk(small_fs: Path) -> None:
    data = small_fs / "cluster"
    up = ember("cluster", "up", "--brokers", "1", "--data", str(data))
    pids: list[int] = []
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        pids = cluster_pids(data)
        bootstrap = LocalCluster.load(data).bootstrap
        assert ember("topics", "create", "t", "--bootstrap", bootstrap).returncode == 0
        fill(small_fs)
        # the client side writes nothing: not in its working directory, not in its temp directory
        described = ember("topics", "describe", "t", "--bootstrap", bootstrap, cwd=small_fs,
                          env={"TMPDIR": str(small_fs), "HOME": str(small_fs)})
        assert described.returncode == 0, described.stdout + described.stderr
        assert "topic t  partitions 1" in described.stdout
        status = ember("cluster", "status", "--data", str(data), cwd=small_fs, env={"TMPDIR": str(small_fs)})
        assert status.returncode in (0, 1), status.stdout + status.stderr
        assert "zookeeper" in status.stdout and "broker 1" in status.stdout, status.stdout + status.stderr
        down = ember("cluster", "down", "--data", str(data), cwd=small_fs, env={"TMPDIR": str(small_fs)})
        assert down.returncode == 0, down.stdout + down.stderr
        assert "stopped the cluster" in down.stdout
        assert "freed ZooKeeper's space reserve" in down.stdout
        assert wait_gone(pids) == []
    finally:
        _stop_quietly(None, pids)


def _stop_quietly(cluster: LocalCluster | None, pids: list[int]) -> None:
    """Teardown: whatever the test left running goes, so the tmpfs can be unmounted."""
    if cluster is not None:
        try:
            cluster.stop(timeout_s=5)
        except Exception:  # teardown after a failed test: kill by pid below
            pass
    for pid in pids:
        try:
            os.killpg(pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
    wait_gone(pids, 5.0)


def test_zookeeper_on_its_own_file_system_keeps_serving_when_the_log_directories_fill(
        small_fs: Path, tmp_path: Path) -> None:
    """``--zookeeper-data`` on another file system: filling the brokers' one leaves ZooKeeper room."""
    data = small_fs / "cluster"
    zk_dir = tmp_path / "zookeeper"
    up = ember("cluster", "up", "--brokers", "1", "--data", str(data), "--zookeeper-data", str(zk_dir))
    pids: list[int] = []
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        pids = cluster_pids(data)
        assert (zk_dir / "zoo.cfg").exists() and not (data / "zookeeper").exists()
        assert not (zk_dir / "space-reserve").exists()   # its own file system needs none
        fill(small_fs)
        from kazoo.client import KazooClient
        client = KazooClient(hosts=LocalCluster.load(data).zk_connect, timeout=10)
        client.start(timeout=10)
        try:
            client.create("/full-disk-probe", b"still writing")   # a ZooKeeper transaction: a log write
            assert client.get("/full-disk-probe")[0] == b"still writing"
        finally:
            client.stop()
            client.close()
        down = ember("cluster", "down", "--data", str(data))
        assert down.returncode == 0, down.stdout + down.stderr
        assert wait_gone(pids) == []
    finally:
        _stop_quietly(None, pids)
