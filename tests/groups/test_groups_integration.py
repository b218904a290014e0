"""Consumer groups against a real cluster: member processes, SIGKILL, commits, the CLI."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Iterator

import pytest

from ember.client import Admin, Consumer, Producer, TopicPartition
from ember.cluster.local import LocalCluster
from ember.errors import IllegalGeneration, NonEmptyGroup, UnknownMemberId
from ember.groups.admin import GroupAdmin
from ember.groups.coordinator_client import CoordinatorClient
from ember.ingest.metadata_client import MetadataClient
from ember.ingest.protocol import ApiKey

pytestmark = pytest.mark.integration

MEMBER = Path(__file__).with_name("member.py")
WAIT_S = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """3 brokers (groups spread over coordinators); a short initial rebalance delay keeps tests quick."""
    with LocalCluster(tmp_path_factory.mktemp("groups"), broker_count=3,
                      broker_config={"group.initial.rebalance.delay.ms": "300"}) as running:
        yield running


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.1)


def create(cluster: LocalCluster, topic: str, partitions: int) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, partitions=partitions, replication_factor=2)


def produce(cluster: LocalCluster, topic: str, start: int, count: int) -> None:
    with Producer(cluster.bootstrap, acks="all") as producer:
        for i in range(start, start + count):
            producer.send(topic, b"v%d" % i, key=b"k%d" % i)
        producer.flush(30)


class Member:
    def __init__(self, cluster: LocalCluster, topic: str, group: str, out: Path, assignor: str = "range") -> None:
        self.out = out
        self.process = subprocess.Popen([sys.executable, str(MEMBER), cluster.bootstrap, topic, group, str(out),
                                         "--assignor", assignor])

    def lines(self) -> list[tuple[int, int, str]]:
        if not self.out.exists():
            return []
        rows = [line.split() for line in self.out.read_text().splitlines()]
        return [(int(p), int(o), v) for p, o, v in rows]

    def state(self) -> dict:
        try:
            return json.loads(Path(str(self.out) + ".state").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {"generation": -1, "assignment": []}

    def stop(self) -> None:
        Path(str(self.out) + ".stop").touch()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for member in started:
        if member.process.poll() is None:
            member.stop()


def start_members(cluster: LocalCluster, topic: str, group: str, count: int, tmp_path: Path,
                  started: list[Member], assignor: str = "range") -> list[Member]:
    new = [Member(cluster, topic, group, tmp_path / f"{group}-{len(started) + i}.out", assignor) for i in range(count)]
    started += new
    return new


def settled(group: list[Member], partitions: int) -> bool:
    """Every live member reports the same generation and together they own every partition once."""
    states = [m.state() for m in group if m.process.poll() is None]
    owned = [p for s in states for p in s["assignment"]]
    return (len({s["generation"] for s in states}) == 1 and states[0]["generation"] > 0
            and sorted(owned) == list(range(partitions)))


def values(group: list[Member]) -> Counter:
    return Counter(v for m in group for _, _, v in m.lines())


def test_three_members_share_six_partitions_each_record_once(cluster: LocalCluster, topic_name: str,
                                                              tmp_path: Path, members: list[Member]) -> None:
    create(cluster, topic_name, 6)
    group = start_members(cluster, topic_name, "g-share", 3, tmp_path, members)
    wait_for(lambda: settled(group, 6) and all(len(m.state()["assignment"]) == 2 for m in group), "3 x 2 partitions")
    produce(cluster, topic_name, 0, 600)
    wait_for(lambda: sum(values(group).values()) >= 600, "600 records consumed")
    for m in group:
        m.stop()
    seen = values(group)
    assert seen == Counter(f"v{i}" for i in range(600))          # every record, exactly once
    for m in group:                                               # each member read only its partitions
        assert {p for p, _, _ in m.lines()} <= set(m.state()["assignment"])


def test_sigkilled_member_partitions_move_nothing_committed_is_skipped(
        cluster: LocalCluster, topic_name: str, tmp_path: Path, members: list[Member]) -> None:
    create(cluster, topic_name, 6)
    group = start_members(cluster, topic_name, "g-kill", 3, tmp_path, members)
    wait_for(lambda: settled(group, 6) and all(m.state()["assignment"] for m in group), "3 members settled")
    produce(cluster, topic_name, 0, 300)
    wait_for(lambda: all(m.lines() for m in group), "every member consumed something")
    victim, survivors = group[0], group[1:]
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait(10)
    produce(cluster, topic_name, 300, 300)
    # session timeout 3 s: the survivors take over the victim's partitions, from its last commit
    wait_for(lambda: settled(survivors, 6), "the survivors own all 6 partitions", timeout_s=30)
    wait_for(lambda: set(values(group)) >= {f"v{i}" for i in range(600)}, "every record consumed")
    for m in survivors:
        m.stop()
    seen = values(group)
    assert set(seen) == {f"v{i}" for i in range(600)}
    duplicated = [v for v, n in seen.items() if n > 1]
    # at least once: only what the victim read after its last commit may be read twice
    assert set(duplicated) <= {v for _, _, v in victim.lines()}


def test_two_groups_each_see_everything(cluster: LocalCluster, topic_name: str, tmp_path: Path,
                                        members: list[Member]) -> None:
    create(cluster, topic_name, 4)
    produce(cluster, topic_name, 0, 400)
    a = start_members(cluster, topic_name, "g-a", 2, tmp_path, members, assignor="roundrobin")
    b = start_members(cluster, topic_name, "g-b", 1, tmp_path, members, assignor="sticky")
    everything = Counter(f"v{i}" for i in range(400))
    wait_for(lambda: values(a) == everything and values(b) == everything, "both groups read all 400")


def test_commit_with_a_stale_generation_is_rejected(cluster: LocalCluster, topic_name: str) -> None:
    create(cluster, topic_name, 2)
    metadata = MetadataClient(cluster.bootstrap)
    with CoordinatorClient(metadata, "g-stale", 30) as coordinator:
        def join(member_id: str, topics: list[str]) -> dict:
            return coordinator.request(ApiKey.JOIN_GROUP, {
                "group_id": "g-stale", "member_id": member_id, "client_id": "test", "session_timeout_ms": 10000,
                "rebalance_timeout_ms": 10000, "topics": topics, "protocols": ["range"]})

        def commit(member_id: str, generation: int) -> None:
            coordinator.request(ApiKey.OFFSET_COMMIT, {
                "group_id": "g-stale", "member_id": member_id, "generation": generation,
                "offsets": [{"topic": topic_name, "partition": 0, "offset": 5}]})

        first = join("", [topic_name])
        assert len(first["assignment"]) == 2
        second = join(first["member_id"], [topic_name, "other-topic"])     # new subscription: rebalance
        assert second["generation"] == first["generation"] + 1
        with pytest.raises(IllegalGeneration):
            commit(first["member_id"], first["generation"])
        with pytest.raises(UnknownMemberId):
            commit("nobody", second["generation"])
        commit(first["member_id"], second["generation"])
        with pytest.raises(NonEmptyGroup):                                  # a member is active
            commit("", -1)
    metadata.close()
    with GroupAdmin(cluster.bootstrap) as admin:
        assert {p.partition: p.committed for p in admin.describe_group("g-stale").partitions}[
            TopicPartition(topic_name, 0)] == 5


def ember(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ember.cli", *args, "--bootstrap", cluster.bootstrap],
                          capture_output=True, text=True, timeout=WAIT_S)


def drain(cluster: LocalCluster, topic: str, group: str, expected: int) -> list:
    """Consume ``expected`` records as a one-member group, commit, leave."""
    records: list = []
    with Consumer(topic, bootstrap_servers=cluster.bootstrap, group_id=group, auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        deadline = time.monotonic() + WAIT_S
        while len(records) < expected and time.monotonic() < deadline:
            for batch in consumer.poll(200).values():
                records += batch
        consumer.commit()
    return records


def test_describe_lag_is_exact_and_reset_offsets_replays(cluster: LocalCluster, topic_name: str) -> None:
    create(cluster, topic_name, 2)
    produce(cluster, topic_name, 0, 100)
    assert len(drain(cluster, topic_name, "g-reset", 100)) == 100
    produce(cluster, topic_name, 100, 30)
    with GroupAdmin(cluster.bootstrap) as admin:
        description = admin.describe_group("g-reset")
        assert description.state == "Empty" and not description.members
        with Admin(cluster.bootstrap) as topics:
            hw = {p.partition: p.high_watermark for p in topics.describe_topic(topic_name).partitions}
        assert sum(hw.values()) == 130
        for p in description.partitions:
            assert p.log_end == hw[p.partition.partition]
            assert p.lag == p.log_end - p.committed
        assert sum(p.lag for p in description.partitions) == 30
        assert "g-reset" in admin.list_groups()

    dry = ember(cluster, "groups", "reset-offsets", "g-reset", "--topic", topic_name, "--to-earliest")
    assert dry.returncode == 0, dry.stderr
    assert "dry run" in dry.stdout
    with GroupAdmin(cluster.bootstrap) as admin:
        assert sum(p.lag for p in admin.describe_group("g-reset").partitions) == 30      # unchanged
    done = ember(cluster, "groups", "reset-offsets", "g-reset", "--topic", topic_name, "--to-earliest", "--execute")
    assert done.returncode == 0, done.stderr
    replayed = drain(cluster, topic_name, "g-reset", 130)
    assert sorted(r.value for r in replayed) == sorted(b"v%d" % i for i in range(130))  # everything again

    to_offset = ember(cluster, "groups", "reset-offsets", "g-reset", "--to-offset", "10", "--execute")
    assert to_offset.returncode == 0, to_offset.stderr
    with GroupAdmin(cluster.bootstrap) as admin:
        assert {p.committed for p in admin.describe_group("g-reset").partitions} == {10}
    future = ember(cluster, "groups", "reset-offsets", "g-reset", "--to-datetime", "2999-01-01T00:00:00Z", "--execute")
    assert future.returncode == 0, future.stderr
    with GroupAdmin(cluster.bootstrap) as admin:
        assert sum(p.lag for p in admin.describe_group("g-reset").partitions) == 0

    deleted = ember(cluster, "groups", "delete", "g-reset")
    assert deleted.returncode == 0, deleted.stderr
    missing = ember(cluster, "groups", "describe", "g-reset")
    assert missing.returncode == 1 and "GroupIdNotFound" in missing.stderr


def test_reset_and_delete_refused_while_members_run(cluster: LocalCluster, topic_name: str, tmp_path: Path,
                                                    members: list[Member]) -> None:
    create(cluster, topic_name, 2)
    group = start_members(cluster, topic_name, "g-busy", 1, tmp_path, members)
    wait_for(lambda: settled(group, 2), "the member joined")
    described = ember(cluster, "groups", "describe", "g-busy")
    assert described.returncode == 0 and "Stable" in described.stdout and "member ember-consumer-" in described.stdout
    reset = ember(cluster, "groups", "reset-offsets", "g-busy", "--topic", topic_name, "--to-latest", "--execute")
    assert reset.returncode == 1 and "NonEmptyGroup" in reset.stderr
    delete = ember(cluster, "groups", "delete", "g-busy")
    assert delete.returncode == 1 and "NonEmptyGroup" in delete.stderr


def test_cli_consume_with_group_commits_and_resumes(cluster: LocalCluster, topic_name: str) -> None:
    create(cluster, topic_name, 3)
    produce(cluster, topic_name, 0, 50)
    first = ember(cluster, "consume", topic_name, "--group", "g-cli", "--from-beginning", "--max-messages", "50")
    assert first.returncode == 0 and len(first.stdout.splitlines()) == 50, first.stderr
    produce(cluster, topic_name, 50, 5)
    second = ember(cluster, "consume", topic_name, "--group", "g-cli", "--timeout-ms", "3000")
    assert sorted(second.stdout.splitlines()) == sorted(f"v{i}" for i in range(50, 55))   # resumed at the commit
