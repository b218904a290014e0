"""``ember produce`` and ``ember consume`` never wait silently: a missing topic, an unreachable
bootstrap address or a deleted topic is one clear line naming the fix, within seconds (the time
bounds are generous: they only prove there is no 30-60 s client timeout behind the answer), and a
group commits exactly what was printed."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from ember.client import Admin, Producer
from ember.launcher.local import LocalCluster
from ember.launcher.zookeeper_server import free_port

FAST_S = 15          # "at once": far below the 30 s / 60 s client timeouts these commands used to wait
HANG_S = 45          # a command still running after this long is hanging


def ember(*args: str, stdin: str = "", timeout: float = HANG_S) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "ember.cli", *args], input=stdin, capture_output=True, text=True,
                         timeout=timeout)
    return out, time.monotonic() - started


def start(*args: str, stdin: str | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "ember.cli", *args], stdin=subprocess.PIPE if stdin else None,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def produce_values(bootstrap: str, topic: str, count: int) -> None:
    with Producer(bootstrap, acks="all") as producer:
        for i in range(count):
            producer.send(topic, f"v{i}".encode(), partition=0)
        producer.flush()


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


# -- produce ---------------------------------------------------------------------------------

def test_produce_to_a_missing_topic_fails_at_once_naming_the_create_command(shared_cluster: LocalCluster,
                                                                            topic_name: str) -> None:
    out, elapsed = ember("produce", topic_name, "--bootstrap", shared_cluster.bootstrap, stdin="hello\n")
    assert out.returncode == 1 and elapsed < FAST_S, (out, elapsed)
    line = one_line(out.stderr)
    assert f"topic {topic_name!r} does not exist" in line
    assert f"ember topics create {topic_name} " in line and "--wait-for-topic" in line


def test_produce_with_wait_for_topic_waits_for_it_to_be_created(shared_cluster: LocalCluster,
                                                                topic_name: str) -> None:
    proc = start("produce", topic_name, "--bootstrap", shared_cluster.bootstrap, "--wait-for-topic", stdin="yes")
    try:
        assert proc.stdin is not None and proc.stderr is not None
        assert "waiting up to 60000 ms" in proc.stderr.readline()      # said before waiting
        with Admin(shared_cluster.bootstrap) as admin:
            admin.create_topic(topic_name, 1, 1)
        _, err = proc.communicate("hello\n", timeout=HANG_S)
    finally:
        proc.kill()
    assert proc.returncode == 0 and f"1 record sent to {topic_name}" in err, err


def test_produce_max_block_ms_bounds_the_wait(shared_cluster: LocalCluster, topic_name: str) -> None:
    out, elapsed = ember("produce", topic_name, "--bootstrap", shared_cluster.bootstrap, "--wait-for-topic",
                         "--max-block-ms", "2000", stdin="hello\n")
    assert out.returncode == 1 and elapsed < FAST_S, (out, elapsed)
    assert "after 2000 ms (max_block_ms)" in out.stderr and f"ember topics create {topic_name}" in out.stderr


def test_produce_without_a_reachable_broker_fails_at_once() -> None:
    address = f"127.0.0.1:{free_port()}"     # nothing listens there
    out, elapsed = ember("produce", "foo", "--bootstrap", address, stdin="hi\n")
    assert out.returncode == 1 and elapsed < FAST_S, (out, elapsed)
    line = one_line(out.stderr)
    assert f"no broker reachable at {address}" in line and "--bootstrap" in line


# -- consume ---------------------------------------------------------------------------------

def test_consume_a_missing_topic_fails_at_once_without_a_record_count(shared_cluster: LocalCluster,
                                                                      topic_name: str) -> None:
    out, elapsed = ember("consume", topic_name, "--bootstrap", shared_cluster.bootstrap, "--timeout-ms", "3000")
    assert out.returncode == 1 and elapsed < FAST_S, (out, elapsed)
    line = one_line(out.stderr)
    assert f"topic {topic_name!r} does not exist" in line and f"ember topics create {topic_name} " in line
    assert "records consumed" not in out.stderr


def test_consume_wait_for_topic_honours_timeout_ms(shared_cluster: LocalCluster, topic_name: str) -> None:
    out, elapsed = ember("consume", topic_name, "--bootstrap", shared_cluster.bootstrap, "--wait-for-topic",
                         "--timeout-ms", "2000")
    assert out.returncode == 1 and 2 <= elapsed < FAST_S, (out, elapsed)
    assert "waiting up to 2000 ms" in out.stderr and "still does not exist after 2000 ms" in out.stderr


def test_consume_wait_for_topic_reads_the_topic_once_created(shared_cluster: LocalCluster, topic_name: str) -> None:
    proc = start("consume", topic_name, "--bootstrap", shared_cluster.bootstrap, "--wait-for-topic",
                 "--from-beginning", "--max-messages", "1")
    try:
        assert proc.stderr is not None
        assert "waiting for it to be created" in proc.stderr.readline()
        with Admin(shared_cluster.bootstrap) as admin:
            admin.create_topic(topic_name, 1, 1)
        produce_values(shared_cluster.bootstrap, topic_name, 1)
        out, err = proc.communicate(timeout=HANG_S)
    finally:
        proc.kill()
    assert proc.returncode == 0 and out == "v0\n", (out, err)


@pytest.mark.parametrize("timeout", [[], ["--timeout-ms", "5000"]], ids=["no-timeout", "timeout-ms"])
def test_consume_a_deleted_topic_with_a_group_says_so(shared_cluster: LocalCluster, topic_name: str,
                                                      timeout: list[str]) -> None:
    bootstrap = shared_cluster.bootstrap
    with Admin(bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
        produce_values(bootstrap, topic_name, 3)
        admin.delete_topic(topic_name)
        deadline = time.monotonic() + 20
        while topic_name in admin.list_topics() and time.monotonic() < deadline:
            time.sleep(0.2)
    out, elapsed = ember("consume", topic_name, "--bootstrap", bootstrap, "--group", f"g-{topic_name}", *timeout)
    assert out.returncode == 1 and elapsed < FAST_S, (out, elapsed)
    assert f"topic {topic_name!r}" in one_line(out.stderr)


def test_consume_stops_when_its_topic_is_deleted(shared_cluster: LocalCluster, topic_name: str) -> None:
    bootstrap = shared_cluster.bootstrap
    with Admin(bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
        produce_values(bootstrap, topic_name, 1)
        proc = start("consume", topic_name, "--bootstrap", bootstrap, "--group", f"g-{topic_name}",
                     "--from-beginning")
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "v0\n"     # consuming
            admin.delete_topic(topic_name)
            deleted = time.monotonic()
            out, err = proc.communicate(timeout=HANG_S)
        finally:
            proc.kill()
    assert proc.returncode == 1 and time.monotonic() - deleted < 30, err
    # before it, the group may log that its last commit failed (the partition was gone): say so, no traceback
    assert "Traceback" not in err and "1 records consumed" in err
    assert f"error: topic {topic_name!r} was deleted" in err.strip().splitlines()[-1], err


def test_consume_with_max_messages_commits_exactly_what_was_printed(shared_cluster: LocalCluster,
                                                                    topic_name: str) -> None:
    bootstrap = shared_cluster.bootstrap
    group = f"g-{topic_name}"
    with Admin(bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
    produce_values(bootstrap, topic_name, 100)
    args = ("consume", topic_name, "--bootstrap", bootstrap, "--group", group, "--from-beginning",
            "--max-messages", "50", "--timeout-ms", "10000")
    first, _ = ember(*args)
    assert first.returncode == 0 and first.stdout.split() == [f"v{i}" for i in range(50)], first
    with Admin(bootstrap) as admin:
        (partition,) = admin.describe_group(group).partitions
    assert partition.committed == 50
    second, _ = ember(*args)
    assert second.returncode == 0 and second.stdout.split() == [f"v{i}" for i in range(50, 100)], second
