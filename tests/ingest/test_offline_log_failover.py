"""A leader whose log of a partition goes offline, on a real cluster (3 brokers, RF=3,
min.insync.replicas=2): the broker reports it to the controller, leadership moves to another ISR
member within seconds, the old leader leaves the ISR, an idempotent acks=all producer keeps
producing, every acknowledged record reads back once, and the broker's /readyz says why it is
not ready. Once the disk works again the same broker process reopens the log, clears its report,
catches up and rejoins the ISR, is ready again, and leads again with every acknowledged record.

The disk failure is real as far as the broker can tell: its ``os.fsync`` fails with EIO for the
files of that partition once the test writes a trigger file. The failing fsync comes from a
``sitecustomize`` module the test puts on the broker processes' PYTHONPATH (test code only: the
broker has no hook for it). A full tmpfs would not do: a write the full disk refuses is undone
and leaves the log online (docs/log.md, "Failures"); only what cannot be undone takes it offline.
"""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families
from replication_helpers import (
    FAST,
    consume_values,
    create_topic,
    disk_values,
    partition_meta,
    wait_for_isr,
)

from ember.client import Admin, Producer, TopicPartition
from ember.errors import ElectionNotNeeded
from ember.launcher.local import LocalCluster
from ember.zk import zk_paths
from waiting import eventually

pytestmark = pytest.mark.integration

FAILING_FSYNC = '''
import errno
import os

_trigger = os.environ.get("EMBER_TEST_FAIL_FSYNC")
if _trigger:
    _real_fsync = os.fsync

    def _fsync(fd):
        try:
            with open(_trigger) as f:
                prefix = f.read().strip()
        except OSError:
            prefix = ""
        if prefix:
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                path = ""
            if path.startswith(prefix):
                raise OSError(errno.EIO, os.strerror(errno.EIO))
        return _real_fsync(fd)

    os.fsync = _fsync
'''


def readiness(host: str, port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/readyz", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def failing_fsync_cluster(make_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[LocalCluster, Path]:
    """3 brokers whose fsync fails for files under the path written into the returned trigger file."""
    hook = tmp_path / "failing-fsync"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FAILING_FSYNC)
    trigger = tmp_path / "fail-fsync-under"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("EMBER_TEST_FAIL_FSYNC", str(trigger))
    return make_cluster(brokers=3, config={**FAST, "min.insync.replicas": "2"}, metrics=True), trigger


def offline_gauges(host: str, port: int, topic: str) -> tuple[float | None, float | None]:
    """(ember_log_log_offline of ``topic``-0, ember_log_logmanager_offlinelogs) as scraped."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "ember_log_log_offline" and sample.labels == {"topic": topic, "partition": "0"}:
                found["log"] = sample.value
            elif sample.name == "ember_log_logmanager_offlinelogs":
                found["broker"] = sample.value
    return found.get("log"), found.get("broker")


def offline_report(cluster: LocalCluster, broker_id: int) -> list[dict] | None:
    """The broker's ``/brokers/offline_replicas/<id>`` replicas in ZooKeeper (None: no znode)."""
    client = KazooClient(hosts=cluster.zk_connect + zk_paths.CHROOT, timeout=10)
    client.start(timeout=10)
    try:
        found = client.exists(zk_paths.offline_replicas(broker_id))
        return json.loads(client.get(zk_paths.offline_replicas(broker_id))[0])["partitions"] if found else None
    finally:
        client.stop()
        client.close()


def test_a_leader_whose_log_goes_offline_hands_leadership_to_another_isr_member(
        make_cluster, topic_name, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, trigger = failing_fsync_cluster(make_cluster, tmp_path, monkeypatch)
    # flush.messages=1: every append fsyncs, so the first append after the trigger takes the log offline
    create_topic(cluster.bootstrap, topic_name, min_insync=2, **{"flush.messages": "1"})
    before = wait_for_isr(cluster, topic_name, {1, 2, 3})
    old = before["leader"]

    acked: list[bytes] = []
    with Producer(cluster.bootstrap, acks="all", enable_idempotence=True, linger_ms=1,
                  delivery_timeout_ms=30000, request_timeout_ms=10000, retry_backoff_ms=50, metadata_max_age_ms=1000) as producer:
        for i in range(20):
            producer.send(topic_name, b"before-%d" % i, partition=0).get(timeout=30)
            acked.append(b"before-%d" % i)
        trigger.write_text(str(cluster.brokers[old].data_dir / f"{topic_name}-0"))
        failed_at = time.monotonic()
        first = producer.send(topic_name, b"after-0", partition=0)
        first.get(timeout=40)          # without the failover: KAFKA_STORAGE_ERROR until the delivery timeout
        took = time.monotonic() - failed_at
        acked.append(b"after-0")
        futures = [(b"after-%d" % i, producer.send(topic_name, b"after-%d" % i, partition=0)) for i in range(1, 200)]
        for value, future in futures:
            future.get(timeout=30)
            acked.append(value)

    others = [b for b in cluster.brokers if b != old]
    after = eventually(lambda: (m := partition_meta(cluster, topic_name, ask=others)) and m["leader"] != old and m,
                       "the new leader")
    assert took < 15, f"leadership took {took:.1f}s to move"
    print(f"leadership moved in {took:.2f}s")
    assert after["leader"] in others and after["leader_epoch"] > before["leader_epoch"]
    assert old not in after["isr"] and set(after["isr"]) == set(others)
    assert [value for _, value in consume_values(cluster.bootstrap, topic_name, len(acked))] == acked

    broker = cluster.brokers[old]
    status, body = readiness(broker.host, broker.metrics_port)
    assert status == 503 and not body["ready"]
    assert any("logs offline after a disk failure" in r and f"{topic_name}-0" in r for r in body["reasons"])


def test_a_log_gone_offline_comes_back_without_a_restart_once_the_disk_works_again(
        make_cluster, topic_name, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader's log goes offline and leadership moves away; then the disk works again. With
    the default log.offline.retry.interval.ms and no manual step, the same broker process reopens
    the log within 90 s: its report leaves ZooKeeper, it catches up and rejoins the ISR, its
    gauges drop to 0 and /readyz is ready; a preferred election makes it leader again, and it
    serves every acknowledged record, once, in order (also read from its own files). While the
    disk still fails, the retries leave the log offline."""
    cluster, trigger = failing_fsync_cluster(make_cluster, tmp_path, monkeypatch)
    create_topic(cluster.bootstrap, topic_name, min_insync=2, **{"flush.messages": "1"})
    before = wait_for_isr(cluster, topic_name, {1, 2, 3})
    old = before["leader"]
    assert before["replicas"][0] == old          # the preferred replica leads a new topic
    broker = cluster.brokers[old]
    pid = broker.pid

    acked: list[bytes] = []
    with Producer(cluster.bootstrap, acks="all", enable_idempotence=True, linger_ms=1, delivery_timeout_ms=60000,
                  request_timeout_ms=10000, retry_backoff_ms=50, metadata_max_age_ms=1000) as producer:
        def send(values: list[bytes]) -> None:
            futures = [(value, producer.send(topic_name, value, partition=0)) for value in values]
            for value, future in futures:
                future.get(timeout=60)
                acked.append(value)

        send([b"before-%d" % i for i in range(20)])
        trigger.write_text(str(broker.data_dir / f"{topic_name}-0"))
        send([b"offline-%d" % i for i in range(100)])    # the first one takes the log offline
        others = {b for b in cluster.brokers if b != old}
        eventually(lambda: (m := partition_meta(cluster, topic_name, ask=others)) and set(m["isr"]) == others,
                   "the offline replica out of the ISR")
        assert [(r["topic"], r["partition"]) for r in offline_report(cluster, old) or []] == [(topic_name, 0)]
        assert offline_gauges(broker.host, broker.metrics_port, topic_name) == (1, 1)
        assert readiness(broker.host, broker.metrics_port)[0] == 503
        eventually(lambda: "its disk does not work yet" in broker.log_path.read_text(), "a failed disk probe",
                   timeout_s=30)                         # a retry round met the failing disk: it stays offline
        assert offline_gauges(broker.host, broker.metrics_port, topic_name) == (1, 1)

        trigger.write_text("")                             # the disk works again
        healed = time.monotonic()
        wait_for_isr(cluster, topic_name, {1, 2, 3}, ask=others)
        eventually(lambda: offline_report(cluster, old) is None, "the offline report removed", timeout_s=30)
        eventually(lambda: readiness(broker.host, broker.metrics_port)[0] == 200, "the broker ready", timeout_s=30)
        back_in = time.monotonic() - healed
        assert back_in < 90, f"the replica took {back_in:.1f}s to come back"
        print(f"back in the ISR {back_in:.1f}s after the disk healed")
        assert offline_gauges(broker.host, broker.metrics_port, topic_name) == (0, 0)
        assert broker.pid == pid and os.path.exists(f"/proc/{pid}")    # no restart

        with Admin(cluster.bootstrap) as admin:
            [result] = admin.elect_leaders([TopicPartition(topic_name, 0)])
        assert result.error is None or isinstance(result.error, ElectionNotNeeded), result
        eventually(lambda: (m := partition_meta(cluster, topic_name)) and m["leader"] == old, "the old leader back")
        send([b"back-%d" % i for i in range(20)])

    assert [value for _, value in consume_values(cluster.bootstrap, topic_name, len(acked))] == acked
    assert disk_values(cluster, old, topic_name, len(acked)) == acked
