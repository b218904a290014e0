"""Kafka Connect 4.2 in distributed mode (its worker jar from Maven Central, ``python -m ember.jars
fetch kafka-connect``) against an ember cluster: the worker creates its compacted config, offset and
status topics, a FileStreamSource -> topic -> FileStreamSink pipeline made over its REST API delivers
every line, and a restarted worker resumes from the offsets it stored."""
from __future__ import annotations

import json
import socket
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from kafka_helpers import create_topic, java_service

from ember.client import Admin
from waiting import eventually

INTERNAL_TOPICS = ("connect-configs", "connect-offsets", "connect-status")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def connect_worker(bootstrap: str, work: Path) -> Iterator[str]:
    """A distributed worker (its REST URL), as ``connect-distributed.sh worker.properties`` runs it."""
    from ember.jars import KAFKA_CONNECT

    port = free_port()
    properties = work / "worker.properties"
    properties.write_text("\n".join([
        f"bootstrap.servers={bootstrap}", "group.id=connect-cluster",
        "key.converter=org.apache.kafka.connect.storage.StringConverter",
        "value.converter=org.apache.kafka.connect.storage.StringConverter",
        *(f"{kind}.storage.topic=connect-{name}" for kind, name in (("config", "configs"), ("offset", "offsets"),
                                                                    ("status", "status"))),
        *(f"{kind}.storage.replication.factor=3" for kind in ("config", "offset", "status")),
        "offset.flush.interval.ms=500", f"listeners=http://127.0.0.1:{port}",
        "plugin.discovery=service_load"]) + "\n")       # the file connectors declare themselves as services
    url = f"http://127.0.0.1:{port}"
    with java_service(KAFKA_CONNECT.classpath, "org.apache.kafka.connect.cli.ConnectDistributed", properties,
                      work / "connect.log") as worker:
        def up() -> bool:
            assert worker.poll() is None, f"the Connect worker exited {worker.returncode}: see {work / 'connect.log'}"
            try:
                return urllib.request.urlopen(f"{url}/connectors", timeout=2).status == 200
            except OSError:
                return False
        eventually(up, "the Connect worker's REST API", timeout_s=120)
        yield url


def rest(url: str, path: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(f"{url}{path}", json.dumps(body).encode() if body else None,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_connect_distributed_runs_a_file_pipeline_and_resumes_after_a_restart(shared_cluster, tmp_path, topic_name):
    create_topic(shared_cluster.kafka_bootstrap, topic_name, partitions=1, replication_factor=3)
    source, sink = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("".join(f"line {n}\n" for n in range(200)))
    with connect_worker(shared_cluster.kafka_bootstrap, tmp_path) as url:
        rest(url, "/connectors", {"name": "file-in", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "file": str(source),
            "topic": topic_name, "tasks.max": "1"}})
        rest(url, "/connectors", {"name": "file-out", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "file": str(sink),
            "topics": topic_name, "tasks.max": "1"}})
        eventually(lambda: len(lines(sink)) >= 200, "every line through the pipeline", timeout_s=90)
        assert lines(sink) == [f"line {n}" for n in range(200)]
        states = {name: rest(url, f"/connectors/{name}/status")["tasks"][0]["state"] for name in ("file-in", "file-out")}
        assert states == {"file-in": "RUNNING", "file-out": "RUNNING"}
        time.sleep(1.5)                  # past offset.flush.interval.ms: the source's file position is stored
    with Admin(shared_cluster.bootstrap) as admin:
        for topic in INTERNAL_TOPICS:
            assert admin.describe_topic(topic).config.get("cleanup.policy") == "compact", topic
    with source.open("a") as more:
        more.write("".join(f"line {n}\n" for n in range(200, 300)))
    with connect_worker(shared_cluster.kafka_bootstrap, tmp_path) as url:        # the same connectors, from storage
        eventually(lambda: len(lines(sink)) >= 300, "the lines written while the worker was down", timeout_s=90)
        time.sleep(2)
        assert lines(sink) == [f"line {n}" for n in range(300)]              # resumed: nothing twice, nothing lost
        assert sorted(rest(url, "/connectors")) == ["file-in", "file-out"]
