"""A leader whose log of a partition goes offline, on a real cluster (3 brokers, RF=3,
min.insync.replicas=2): the broker reports it to the controller, leadership moves to another ISR
member within seconds, the old leader leaves the ISR, an idempotent acks=all producer keeps
producing, every acknowledged record reads back once, and the broker's /readyz says why it is
not ready.

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
from replication_helpers import FAST, consume_values, create_topic, eventually, partition_meta, wait_for_isr

from ember.client import Producer

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


def test_a_leader_whose_log_goes_offline_hands_leadership_to_another_isr_member(
        make_cluster, topic_name, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hook = tmp_path / "failing-fsync"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FAILING_FSYNC)
    trigger = tmp_path / "fail-fsync-under"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("EMBER_TEST_FAIL_FSYNC", str(trigger))
    cluster = make_cluster(brokers=3, config={**FAST, "min.insync.replicas": "2"}, metrics=True)
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
