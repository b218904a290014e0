"""The development cluster (LocalCluster: ``ember cluster up``, the tests' clusters) starts its
brokers with ``group.initial.rebalance.delay.ms=0``, as Kafka's shipped server.properties does, so
a new group's first member gets its partitions at once; the broker's built-in default stays
Kafka's 3000 ms, and a caller's ``broker_config`` wins."""
from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from ember.client import Admin, Consumer
from ember.ingest.broker_config import BROKER_CONFIGS
from ember.launcher import local
from ember.launcher.local import BrokerProcess, LocalCluster
from ember.wire.config_def import read_properties

DELAY = "group.initial.rebalance.delay.ms"


class _Spawned:
    def __init__(self, command: list[str], **kwargs: object) -> None:
        self.command = command
        self.pid = 4242


def _spawned_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: LocalCluster) -> dict[str, str]:
    spawned: list[_Spawned] = []
    monkeypatch.setattr(local.subprocess, "Popen", lambda command, **kw: spawned.append(_Spawned(command)) or spawned[-1])
    cluster.zookeeper = local.ZooKeeperServer(tmp_path / "zookeeper", 2181)
    cluster._spawn(BrokerProcess(1, 9092, tmp_path / "broker-1"))
    (command,) = [s.command for s in spawned]
    return read_properties(Path(command[command.index("--config") + 1]))


def test_development_brokers_start_without_an_initial_rebalance_delay(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    assert _spawned_config(tmp_path, monkeypatch, LocalCluster(tmp_path))[DELAY] == "0"


def test_a_callers_broker_config_wins_over_the_development_default(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = LocalCluster(tmp_path, broker_config={DELAY: "3000"})
    assert _spawned_config(tmp_path, monkeypatch, cluster)[DELAY] == "3000"


def test_the_brokers_built_in_default_stays_kafkas() -> None:
    assert BROKER_CONFIGS[DELAY].default == 3000


@pytest.mark.integration
def test_a_new_groups_first_member_is_assigned_without_waiting(shared_cluster: LocalCluster) -> None:
    topic, group = f"t-{uuid.uuid4().hex[:10]}", f"g-{uuid.uuid4().hex[:10]}"
    with Admin(shared_cluster.bootstrap) as admin:
        admin.create_topic(topic, partitions=2, replication_factor=1)
    consumer = Consumer(topic, bootstrap_servers=shared_cluster.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        started = time.monotonic()
        while not consumer.assignment() and time.monotonic() - started < 10:
            consumer.poll(timeout_ms=50)
        waited, assigned = time.monotonic() - started, len(consumer.assignment())
    finally:
        consumer.close()
    assert assigned == 2, "no assignment within 10 s"
    assert waited < 2.5, f"first assignment after {waited:.1f}s (Kafka's production default alone waits 3 s)"


def _spawned_command(monkeypatch: pytest.MonkeyPatch, cluster: LocalCluster, broker: BrokerProcess) -> list[str]:
    spawned: list[_Spawned] = []
    monkeypatch.setattr(local.subprocess, "Popen", lambda command, **kw: spawned.append(_Spawned(command)) or spawned[-1])
    cluster._spawn(broker)
    (command,) = [s.command for s in spawned]
    return command


def test_a_broker_sharing_zookeepers_file_system_keeps_room_for_it_and_one_on_its_own_disk_does_not(
        tmp_path: Path, tmpfs, monkeypatch: pytest.MonkeyPatch) -> None:   # tmpfs first: unmounted after Popen is back
    """log.dir.min.free.bytes only where ZooKeeper's file system is a broker's log disk: set on every
    broker, it refused every append of a broker on a small disk of its own (a CI fault run)."""
    own_disk_dir = tmpfs("8m") / "broker-2"     # mounted before Popen is replaced
    cluster = LocalCluster(tmp_path)
    cluster.zookeeper = local.ZooKeeperServer(tmp_path / "zookeeper", 2181)
    cluster.zookeeper.data_dir.mkdir(parents=True)
    shared = _spawned_command(monkeypatch, cluster, BrokerProcess(1, 9092, tmp_path / "broker-1"))
    room = local.zookeeper_reserve_size(tmp_path)
    assert shared[shared.index("--override") + 1] == f"log.dir.min.free.bytes={room}"
    own_disk = _spawned_command(monkeypatch, cluster, BrokerProcess(2, 9094, own_disk_dir))
    assert "--override" not in own_disk
