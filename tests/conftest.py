"""Shared fixtures: real local clusters (ZooKeeper + broker processes) started by ember's own launcher,
a lone ZooKeeper, and the one SparkSession of the test run."""
from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

# Clusters the tests start with `ember cluster up` take free ports, not the fixed layout (9092...),
# and client commands never find a developer's cluster under data/cluster by default.
os.environ["EMBER_PORT_BASE"] = "0"
os.environ.setdefault("EMBER_DATA", str(Path(__file__).resolve().parent / ".no-cluster-here"))

from ember.launcher.local import LocalCluster
from ember.launcher.zookeeper_server import ZooKeeperServer, free_port


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A real ZooKeeper server alone, for tests of ZooKeeper-side classes (one per test module)."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk"), free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A 3-broker cluster shared by tests that only create their own topics and never fault-inject."""
    with LocalCluster(tmp_path_factory.mktemp("shared-cluster"), broker_count=3) as cluster:
        yield cluster


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    """Start private clusters for tests that kill, pause or restart processes; stopped at teardown."""
    clusters: list[LocalCluster] = []

    def start(brokers: int = 1, config: dict[str, str] | None = None, metrics: bool = False) -> LocalCluster:
        cluster = LocalCluster(tmp_path / f"cluster-{len(clusters)}", broker_count=brokers,
                               broker_config=dict(config or {}), metrics=metrics)
        clusters.append(cluster)
        return cluster.start()

    yield start
    for cluster in clusters:
        cluster.stop()


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the run (local[2], 2 shuffle partitions), with ``ember`` registered;
    every Spark test (sources, jobs) shares it."""
    from ember.sources import register
    from ember.spark_env import spark_session

    session = spark_session("ember-sources-tests", extra={"spark.sql.shuffle.partitions": "2",
                                                          "spark.default.parallelism": "2"})
    register(session)
    yield session
    session.stop()


@pytest.fixture
def topic_name() -> str:
    """A fresh topic name, so tests sharing a cluster never see each other's data."""
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mounts size-limited tmpfs file systems (``tmpfs("2m")``, a fresh directory each) for tests
    of a full disk; all unmounted at teardown. Root only: the test is skipped otherwise."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a size-limited tmpfs needs root")
        mount_point = tmp_path / f"tmpfs-{len(mounted)}"
        mount_point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
                              capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
        mounted.append(mount_point)
        return mount_point

    yield mount
    for mount_point in reversed(mounted):
        if subprocess.run(["umount", str(mount_point)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=30)
