"""`LocalCluster.stop` (what `ember cluster down` runs) stops every process even when a step fails,
writes nothing while doing so, and names each failure."""
from __future__ import annotations

import errno
import subprocess
import time
from pathlib import Path
from typing import Iterator, NoReturn

import pytest

from ember.launcher.local import STATE_FILE, BrokerProcess, ClusterStopFailed, LocalCluster
from ember.launcher.zookeeper_server import ZooKeeperServer, free_port


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Stand-ins for broker and ZooKeeper processes: each leads its own process group, as the
    launcher's processes do."""
    processes = [subprocess.Popen(["sleep", "60"], start_new_session=True) for _ in range(3)]
    yield processes
    for process in processes:
        process.kill()
        process.wait(5)


def _cluster(tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]) -> LocalCluster:
    cluster = LocalCluster(tmp_path, broker_count=2)
    for broker_id, process in ((1, sleepers[0]), (2, sleepers[1])):
        cluster.brokers[broker_id] = BrokerProcess(broker_id, free_port(), tmp_path / f"broker-{broker_id}",
                                                   pid=process.pid)
    cluster.zookeeper = ZooKeeperServer(tmp_path / "zookeeper", free_port())
    cluster.zookeeper.data_dir.mkdir()
    (cluster.zookeeper.data_dir / "zookeeper.pid").write_text(str(sleepers[2].pid))
    cluster.save()
    return cluster


def _no_space(*args: object, **kwargs: object) -> NoReturn:
    raise OSError(errno.ENOSPC, "No space left on device")


def _wait_stopped(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_running(pid) for pid in pids):
        time.sleep(0.05)
    return [pid for pid in pids if _running(pid)]


def test_stop_writes_nothing_so_no_space_cannot_fail_it(tmp_path: Path, sleepers: list[subprocess.Popen[bytes]],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = LocalCluster.load(_cluster(tmp_path, sleepers).data_dir)
    monkeypatch.setattr(Path, "write_text", _no_space)
    monkeypatch.setattr(Path, "write_bytes", _no_space)
    monkeypatch.setattr("builtins.open", _no_space)
    cluster.stop(timeout_s=2)
    assert _wait_stopped([p.pid for p in sleepers]) == []
    assert not (tmp_path / STATE_FILE).exists()


def test_stop_stops_every_process_when_one_step_fails_and_names_each_failure(
        tmp_path: Path, sleepers: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = LocalCluster.load(_cluster(tmp_path, sleepers).data_dir)
    original = LocalCluster._stop_broker

    def broker_1_fails(self: LocalCluster, broker_id: int, sig: int, timeout_s: float) -> bool:
        if broker_id == 1:
            raise OSError(errno.EIO, "Input/output error")
        return original(self, broker_id, sig, timeout_s)

    monkeypatch.setattr(LocalCluster, "_stop_broker", broker_1_fails)
    monkeypatch.setattr(LocalCluster, "save", _no_space)   # and the state file cannot be updated either
    with pytest.raises(ClusterStopFailed) as failed:
        cluster.stop(timeout_s=2)
    message = str(failed.value)
    assert f"broker 1 (pid {sleepers[0].pid}): [Errno 5] Input/output error" in message
    assert "state file" in message and "No space left on device" in message
    assert "broker 2" not in message and "ZooKeeper:" not in message
    assert _wait_stopped([sleepers[1].pid, sleepers[2].pid]) == []   # the others were still stopped
    assert _running(sleepers[0].pid)
    assert (tmp_path / STATE_FILE).exists()                          # a later `cluster down` finds broker 1


def test_zookeeper_space_reserve_is_real_blocks_and_stop_frees_it(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "zk", free_port())
    server.data_dir.mkdir()
    server.make_reserve(4 << 20)
    assert server.reserve_path.stat().st_blocks * 512 >= 4 << 20      # allocated, not sparse
    assert server.release_reserve() >= 4 << 20
    assert not server.reserve_path.exists()
    assert server.release_reserve() == 0
