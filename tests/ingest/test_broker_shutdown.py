"""A broker's shutdown is bounded whatever ZooKeeper does, and still flushes its logs and
checkpoints; a local cluster starts once and leaves nothing running behind."""
from __future__ import annotations

import os
import signal
import subprocess

import pytest

from ember.client import Admin, Producer
from ember.launcher.local import STATE_FILE, LocalCluster
from ember.log import checkpoint

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 3000
#: The ZooKeeper steps get at most the session timeout; the local steps take well under this.
SHUTDOWN_BOUND_S = SESSION_TIMEOUT_MS / 1000 + 20


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_broker_stops_on_sigterm_in_bounded_time_while_zookeeper_is_down(make_cluster, topic_name):
    cluster = make_cluster(brokers=1, config={"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS)})
    with Admin(bootstrap_servers=cluster.bootstrap) as admin:
        admin.create_topic(topic_name, partitions=1, replication_factor=1)
    with Producer(bootstrap_servers=cluster.bootstrap, acks=1) as producer:
        producer.send(topic_name, b"before the outage").get(timeout=30)
    cluster.zookeeper.stop()

    broker = cluster.brokers[1]
    process = cluster._processes[1]
    os.killpg(process.pid, signal.SIGTERM)
    try:
        returncode = process.wait(SHUTDOWN_BOUND_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"broker still running {SHUTDOWN_BOUND_S}s after SIGTERM with ZooKeeper down")
    assert returncode == 0
    broker.pid = None
    assert "broker 1 stopped" in (broker.data_dir / "broker.log").read_text()
    # Logs were flushed and closed: the recovery point covers the record written before the outage.
    recovery_point = checkpoint.read_offset(broker.data_dir / f"{topic_name}-0" / checkpoint.RECOVERY_POINT)
    assert recovery_point == 1


def test_starting_a_cluster_twice_and_leaving_its_with_block_leaves_no_process(tmp_path):
    cluster = LocalCluster(tmp_path / "cluster", broker_count=1)
    with cluster.start() as same:    # what `make demo` does: start(), then a with block
        assert same is cluster
        pids = [b.pid for b in cluster.brokers.values()] + [cluster.zookeeper.process.pid]
        assert cluster.start() is cluster
        assert [b.pid for b in cluster.brokers.values()] + [cluster.zookeeper.process.pid] == pids
        assert all(alive(pid) for pid in pids)
    assert not any(alive(pid) for pid in pids)
    assert not (tmp_path / "cluster" / STATE_FILE).exists()
