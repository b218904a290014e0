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


def test_a_client_command_before_cluster_up_names_cluster_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """No --bootstrap, no $EMBER_BOOTSTRAP and no cluster under $EMBER_DATA: the last-resort address
    refuses, and the error says that no cluster runs there and how to start one."""
    from ember import cli
    from ember.commands import topics
    from ember.launcher.zookeeper_server import free_port

    nowhere = f"127.0.0.1:{free_port()}"   # stands for 9092, which a developer's cluster may hold
    monkeypatch.delenv("EMBER_BOOTSTRAP", raising=False)
    monkeypatch.setattr(topics, "DEFAULT_BOOTSTRAP", nowhere)
    monkeypatch.setattr(topics, "DEFAULT_DATA", str(tmp_path))
    hint = f"no cluster is running under {tmp_path}"
    for argv in (["topics", "describe", "clicks"], ["topics", "list"]):
        assert cli.main(argv) == 1
        err = capsys.readouterr().err
        assert "BrokerNotAvailable" in err and hint in err and f"`ember cluster up --data {tmp_path}`" in err, err
    for argv in (["consume", "clicks"], ["produce", "clicks"]):   # their own check, before any client waits
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert hint in str(exit_.value) and f"`ember cluster up --data {tmp_path}`" in str(exit_.value)
        assert "bootstrap_servers" not in str(exit_.value)   # a Python client's keyword, not the CLI's
    assert cli.main(["topics", "list", "--bootstrap", nowhere.replace("127.0.0.1", "localhost")]) == 1
    assert hint not in capsys.readouterr().err   # an address of the user's own: no guess about the cluster


@pytest.mark.integration
def test_delete_records_beyond_the_high_watermark_names_the_valid_offsets(shared_cluster: LocalCluster,
                                                                         topic_name: str) -> None:
    from ember.client import Admin

    with Admin(shared_cluster.bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
    out = _ember("topics", "delete-records", topic_name, "--partition", "0", "--offset", "100",
                 "--bootstrap", shared_cluster.bootstrap)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out
    assert "high watermark 0" in out.stderr and f"`ember topics describe {topic_name}`" in out.stderr
    assert "--offset -1" in out.stderr and "auto_offset_reset" not in out.stderr   # not a consumer's hint


@pytest.mark.integration
@pytest.mark.parametrize("start", [[], ["--from-beginning"]], ids=["latest", "from-beginning"])
def test_consume_says_within_seconds_that_it_waits_and_why_nothing_shows(shared_cluster: LocalCluster,
                                                                          topic_name: str, start: list[str]) -> None:
    """An idle ``consume`` prints nothing on stdout, so it says once on stderr that it is waiting:
    without --from-beginning, that it reads only new records."""
    from ember.client import Admin, Producer

    with Admin(shared_cluster.bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
    with Producer(shared_cluster.bootstrap, acks="all") as producer:
        producer.send(topic_name, b"old", partition=0).get(timeout=10)
    proc = subprocess.Popen([sys.executable, "-m", "ember.cli", "consume", topic_name, "--bootstrap",
                             shared_cluster.bootstrap, "--timeout-ms", "30000", *start],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()   # long before --timeout-ms ends the command
        assert proc.poll() is None, line
    finally:
        proc.kill()
        proc.communicate()
    assert line.startswith(f"waiting for records in {topic_name}: ") and "Ctrl-C" in line, line
    assert "30000 ms" in line and "--timeout-ms" in line
    if start:
        assert "1 record(s) so far" in line
    else:
        assert "starts at the end of the topic" in line and "--from-beginning" in line
