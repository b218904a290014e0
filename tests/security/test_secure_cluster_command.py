"""``ember cluster up --secure`` prints client configuration that works as printed: the JSON of
ember client keywords for Python, and the client.properties the ember CLI reads through
``EMBER_CLIENT_CONFIG`` (the same file Kafka's Java tools take), both logging in with SCRAM as the
cluster's admin user, whose password is never printed and sits in owner-only files."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ember.client import Consumer, Producer, TopicPartition

pytestmark = pytest.mark.integration

TIMEOUT_S = 120


def ember(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ember.cli", *args], capture_output=True, text=True,
                          timeout=TIMEOUT_S, env={**os.environ, **(env or {})})


def test_cluster_up_secure_prints_a_config_that_clients_use_as_printed(tmp_path: Path):
    data = tmp_path / "cluster"
    up = ember("cluster", "up", "--secure", "--brokers", "1", "--data", str(data))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        client_json = re.search(r"Producer\(\*\*json\.load\(open\('([^']+)'\)\)\)", up.stdout)[1]
        exports = dict(pair.split("=", 1) for pair in re.search(r"export (.+)", up.stdout)[1].split())
        assert exports["EMBER_CLIENT_CONFIG"] in up.stdout and "security.protocol=SASL_SSL" in up.stdout
        password = json.loads((data / "sasl" / "credentials.json").read_text())["admin"]
        assert password not in up.stdout   # printed masked; the files holding it are the owner's only
        assert all((data / "tls" / name).stat().st_mode & 0o077 == 0
                   for name in ("client.json", "client.properties", "librdkafka.properties"))

        created = ember("topics", "create", "secured", "--partitions", "2", env=exports)
        assert created.returncode == 0, created.stderr
        refused = ember("topics", "list", env={**exports, "EMBER_CLIENT_CONFIG": ""})
        assert refused.returncode == 1 and "SslAuthenticationFailed" in refused.stderr

        config = json.loads(Path(client_json).read_text())
        with Producer(**config, acks="all") as producer:
            producer.send("secured", b"over tls", partition=1).get(timeout=30)
        consumer = Consumer(**config, auto_offset_reset="earliest")
        try:
            consumer.assign([TopicPartition("secured", 1)])
            records = []
            for _ in range(60):
                records += [r for batch in consumer.poll(timeout_ms=500).values() for r in batch]
                if records:
                    break
        finally:
            consumer.close()
        assert [r.value for r in records] == [b"over tls"]
        status = ember("cluster", "status", "--data", str(data))
        assert status.returncode == 0, status.stdout   # ZooKeeper and the broker answer over TLS
    finally:
        down = ember("cluster", "down", "--data", str(data))
        assert down.returncode == 0, down.stderr
