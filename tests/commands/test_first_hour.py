"""A newcomer's first hour with the CLI: ``ember --version``; ``ember cluster down`` run twice says
plainly that nothing runs any more (no broker error, no --bootstrap hint); ``ember cluster status``
without a cluster says the same."""
from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from ember.launcher.local import STATE_FILE, LocalCluster


def _ember(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ember.cli", *args], capture_output=True, text=True, timeout=60)


def test_version_prints_the_installed_package_version() -> None:
    out = _ember("--version")
    assert out.returncode == 0, out
    assert out.stdout.strip() == f"ember {importlib.metadata.version('ember')}"


def test_down_and_status_without_a_cluster_say_so_plainly(tmp_path: Path) -> None:
    down = _ember("cluster", "down", "--data", str(tmp_path))
    assert (down.returncode, down.stderr) == (0, ""), down
    assert down.stdout.strip() == f"no cluster is running under {tmp_path} (no {STATE_FILE} there): nothing to stop"
    status = _ember("cluster", "status", "--data", str(tmp_path / "never-created"))
    assert status.returncode == 1 and status.stderr == "", status
    assert f"no cluster is running under {tmp_path / 'never-created'}" in status.stdout
    assert not (tmp_path / "never-created").exists()    # status creates nothing


@pytest.mark.integration
def test_cluster_down_twice_the_second_time_says_nothing_runs(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster", broker_count=1)
    try:
        cluster.start(timeout_s=45)
        first = _ember("cluster", "down", "--data", str(cluster.data_dir))
        assert first.returncode == 0 and f"stopped the cluster under {cluster.data_dir}" in first.stdout, first
        second = _ember("cluster", "down", "--data", str(cluster.data_dir))
        assert second.returncode == 0, second
        assert f"no cluster is running under {cluster.data_dir}" in second.stdout
        assert "BrokerNotAvailable" not in second.stdout + second.stderr and "--bootstrap" not in second.stderr
    finally:
        if (cluster.data_dir / STATE_FILE).exists():
            cluster.stop()
