"""``ember produce`` reads lines as kafka-console-producer does (``--property parse.key``,
``parse.headers`` and their separators, ``null.marker``, ``ignore.error``) and configures its producer
with Kafka's names (``--producer-property``, ``--producer.config`` with ``bootstrap.servers`` and
``compression.type``); unknown names are refused, naming them."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from ember.client import Admin, Consumer, TopicPartition
from ember.commands.produce import LineError, LineFormat
from ember.launcher.local import LocalCluster

TIMEOUT_S = 60


def ember(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ember.cli", *args], input=stdin, capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def read_all(cluster: LocalCluster, topic: str, count: int) -> list[tuple]:
    consumer = Consumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, 0)])
        got: list[tuple] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got += [(r.key, r.value, r.headers) for r in batch]
        return got
    finally:
        consumer.close()


def test_line_format_follows_kafkas_line_reader() -> None:
    both = LineFormat(parse_key=True, parse_headers=True, null_marker=b"NULL")
    assert both.parse(b"a:1,b:2\tk\tv\tw", 1) == (b"k", b"v\tw", [("a", b"1"), ("b", b"2")])
    assert both.parse(b"a:NULL,\tNULL\tNULL", 1) == (None, None, [("a", None)])
    assert both.parse(b"NULL\tk\tv", 1) == (b"k", b"v", None)
    with pytest.raises(LineError, match="line 3 has no headers.delimiter"):
        both.parse(b"kv", 3)
    with pytest.raises(LineError, match="header 'a' has no headers.key.separator"):
        both.parse(b"a\tk\tv", 1)
    lenient = LineFormat(parse_key=True, key_separator=b"::", ignore_error=True)
    assert lenient.parse(b"no key here", 1) == (None, b"no key here", None)
    assert lenient.parse(b"k::v::w", 1) == (b"k", b"v::w", None)


def test_headers_keys_and_producer_properties_reach_the_topic(shared_cluster: LocalCluster, topic_name: str,
                                                              tmp_path: Path) -> None:
    with Admin(shared_cluster.bootstrap) as admin:
        admin.create_topic(topic_name)
    config = tmp_path / "producer.properties"
    config.write_text(f"bootstrap.servers={shared_cluster.bootstrap}\ncompression.type=snappy\nlinger.ms=50\n")
    lines = "trace=1;app=web|k1=hello\nempty=|k2=-\n-|-=tombstone\n"
    out = ember("produce", topic_name, "--producer.config", str(config), "--producer-property", "acks=1",
                "--property", "parse.headers=true", "--property", "headers.delimiter=|",
                "--property", "headers.separator=;", "--property", "headers.key.separator==",
                "--property", "parse.key=true", "--property", "key.separator==", "--property", "null.marker=-",
                stdin=lines)
    assert out.returncode == 0 and "3 records sent" in out.stderr, out
    assert read_all(shared_cluster, topic_name, 3) == [
        (b"k1", b"hello", [("trace", b"1"), ("app", b"web")]),
        (b"k2", None, [("empty", b"")]),
        (None, b"tombstone", [])]


def test_a_line_without_its_separator_stops_the_producer_naming_the_line(shared_cluster: LocalCluster,
                                                                          topic_name: str) -> None:
    with Admin(shared_cluster.bootstrap) as admin:
        admin.create_topic(topic_name)
    out = ember("produce", topic_name, "--bootstrap", shared_cluster.bootstrap, "--property", "parse.key=true",
                "--property", "key.separator=:", stdin="k:v\nno separator\nk:w\n")
    assert out.returncode == 1, out
    assert "1 record sent" in out.stderr
    assert "line 2 has no key.separator ':'" in out.stderr and "ignore.error=true" in out.stderr


@pytest.mark.parametrize("flag, pair, named", [
    ("--producer-property", "client.idd=x", "unsupported property 'client.idd'"),
    ("--producer-property", "linger.ms=soon", "linger.ms=soon: expected a number"),
    ("--property", "parse.kee=true", "--property parse.kee: unknown"),
])
def test_unknown_or_malformed_properties_are_refused_naming_them(flag: str, pair: str, named: str) -> None:
    out = ember("produce", "t", "--bootstrap", "127.0.0.1:1", flag, pair, stdin="x\n")
    assert out.returncode in (1, 2) and "Traceback" not in out.stderr, out
    assert named in out.stderr
