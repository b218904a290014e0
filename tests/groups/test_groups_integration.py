"""Consumer groups against a real cluster: member processes, SIGKILL, commits, the CLI."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import Future
from pathlib import Path
from typing import Callable, Iterator

import pytest

from ember.client import Admin, Consumer, OffsetAndMetadata, Producer, TopicPartition
from ember.client.coordinator_client import MEMBER_ID_REQUIRED, CoordinatorClient
from ember.client.metadata import MetadataClient
from ember.errors import (
    BrokerNotAvailable,
    CoordinatorNotAvailable,
    IllegalGeneration,
    KafkaTimeoutError,
    NonEmptyGroup,
    UnknownMemberId,
)
from ember.launcher.local import LocalCluster
from ember.wire.api_keys import ApiKey

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


def raw_join(coordinator: CoordinatorClient, group: str, member_id: str, topics: list[str],
             session_timeout_ms: int = 10000) -> dict:
    """JoinGroup as a client does: a first join (no member id) gets MEMBER_ID_REQUIRED and an id."""
    body = {"group_id": group, "member_id": member_id, "client_id": "test", "session_timeout_ms": session_timeout_ms,
            "rebalance_timeout_ms": 10000, "topics": topics, "protocols": ["range"]}
    if not member_id:
        first = coordinator.request(ApiKey.JOIN_GROUP, body, accept=(MEMBER_ID_REQUIRED,))
        assert first["error_code"] == MEMBER_ID_REQUIRED and first["member_id"]
        body["member_id"] = first["member_id"]
    return coordinator.request(ApiKey.JOIN_GROUP, body)


def test_commit_with_a_stale_generation_is_rejected(cluster: LocalCluster, topic_name: str) -> None:
    create(cluster, topic_name, 2)
    metadata = MetadataClient(cluster.bootstrap)
    with CoordinatorClient(metadata, "g-stale", 30) as coordinator:
        def join(member_id: str, topics: list[str]) -> dict:
            return raw_join(coordinator, "g-stale", member_id, topics)

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
    with Admin(cluster.bootstrap) as admin:
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
    with Admin(cluster.bootstrap) as admin:
        description = admin.describe_group("g-reset")
        assert description.state == "Empty" and not description.members
        hw = {p.partition: p.high_watermark for p in admin.describe_topic(topic_name).partitions}
        assert sum(hw.values()) == 130
        for p in description.partitions:
            assert p.log_end == hw[p.partition.partition]
            assert p.lag == p.log_end - p.committed
        assert sum(p.lag for p in description.partitions) == 30
        assert "g-reset" in admin.list_groups()

    dry = ember(cluster, "groups", "reset-offsets", "g-reset", "--topic", topic_name, "--to-earliest")
    assert dry.returncode == 0, dry.stderr
    assert "dry run" in dry.stdout
    with Admin(cluster.bootstrap) as admin:
        assert sum(p.lag for p in admin.describe_group("g-reset").partitions) == 30      # unchanged
    done = ember(cluster, "groups", "reset-offsets", "g-reset", "--topic", topic_name, "--to-earliest", "--execute")
    assert done.returncode == 0, done.stderr
    replayed = drain(cluster, topic_name, "g-reset", 130)
    assert sorted(r.value for r in replayed) == sorted(b"v%d" % i for i in range(130))  # everything again

    to_offset = ember(cluster, "groups", "reset-offsets", "g-reset", "--to-offset", "10", "--execute")
    assert to_offset.returncode == 0, to_offset.stderr
    with Admin(cluster.bootstrap) as admin:
        assert {p.committed for p in admin.describe_group("g-reset").partitions} == {10}
    future = ember(cluster, "groups", "reset-offsets", "g-reset", "--to-datetime", "2999-01-01T00:00:00Z", "--execute")
    assert future.returncode == 0, future.stderr
    with Admin(cluster.bootstrap) as admin:
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


# -- review fixes ------------------------------------------------------------------------------

def events(member: Member) -> list[dict]:
    path = Path(str(member.out) + ".events")
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def ownership(group: list[Member]) -> list[tuple[int, int, float, float, int]]:
    """(partition, generation, from, to, member index) from the members' rebalance listeners."""
    spans = []
    for index, member in enumerate(group):
        held: dict[int, tuple[int, float]] = {}
        for e in events(member):
            if e["event"] == "assigned":
                held = {p: (e["generation"], e["time"]) for p in e["partitions"]}
            else:
                spans += [(p, gen, start, e["time"], index) for p, (gen, start) in held.items()]
                held = {}
        spans += [(p, gen, start, float("inf"), index) for p, (gen, start) in held.items()]
    return spans


def test_coordinator_sigkill_never_gives_a_partition_to_two_members(
        make_cluster: Callable[..., LocalCluster], topic_name: str, tmp_path: Path, members: list[Member]) -> None:
    from ember.groups.coordinator import coordinator_id

    cluster = make_cluster(3, {"group.initial.rebalance.delay.ms": "300"})
    create(cluster, topic_name, 6)
    group = start_members(cluster, topic_name, "g-move", 2, tmp_path, members)
    # a slow member: it hears of a rebalance only at its next poll, 1.5 s later
    slow = Member(cluster, topic_name, "g-move", tmp_path / "g-move-slow.out")
    slow.process.kill()
    slow.process = subprocess.Popen([sys.executable, str(MEMBER), cluster.bootstrap, topic_name, "g-move",
                                     str(slow.out), "--poll-pause", "1.5"])
    members.append(slow)
    group.append(slow)
    wait_for(lambda: settled(group, 6) and all(m.state()["assignment"] for m in group), "3 members settled")
    produce(cluster, topic_name, 0, 300)
    wait_for(lambda: all(m.lines() for m in group), "every member consumed something")
    before = group[0].state()["generation"]
    cluster.kill_broker(coordinator_id("g-move", cluster.brokers))
    produce(cluster, topic_name, 300, 300)
    wait_for(lambda: set(values(group)) >= {f"v{i}" for i in range(600)}, "every record consumed")
    try:
        wait_for(lambda: settled(group, 6) and group[0].state()["generation"] > before,
                 "a new generation at the new coordinator", timeout_s=30)
    finally:
        for m in group:
            Path(str(m.out) + ".stop").touch()
        for m in group:
            m.stop()
        assert_one_owner_at_a_time(group)
    assert set(values(group)) == {f"v{i}" for i in range(600)}           # at least once


def assert_one_owner_at_a_time(group: list[Member]) -> None:
    spans = ownership(group)
    owners: dict[tuple[int, int], set[int]] = {}
    for p, gen, _, _, who in spans:
        owners.setdefault((gen, p), set()).add(who)
    for (gen, p), who in owners.items():                                  # one owner per generation
        assert len(who) == 1, (gen, p, sorted(who))
    for p, gen, start, end, who in spans:                                 # and never two at once
        for q, gen2, start2, end2, who2 in spans:
            if q == p and who2 != who:
                assert end <= start2 or end2 <= start, (p, gen, who, gen2, who2)


def test_failed_offset_fetch_after_join_is_retried(cluster: LocalCluster, topic_name: str) -> None:
    create(cluster, topic_name, 2)
    produce(cluster, topic_name, 0, 20)
    with Consumer(topic_name, bootstrap_servers=cluster.bootstrap, group_id="g-fetchfail",
                  auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        real = consumer._fetch_committed
        failures = [CoordinatorNotAvailable("injected")]

        def flaky(partitions):
            if failures:
                raise failures.pop()
            return real(partitions)
        consumer._fetch_committed = flaky
        with pytest.raises(CoordinatorNotAvailable):
            consumer.poll(5000)
        records: list = []
        deadline = time.monotonic() + WAIT_S
        while len(records) < 20 and time.monotonic() < deadline:
            records += [r for batch in consumer.poll(500).values() for r in batch]
        assert len(records) == 20 and len(consumer.assignment()) == 2


def test_member_that_lost_its_membership_cannot_commit(cluster: LocalCluster, topic_name: str) -> None:
    create(cluster, topic_name, 1)
    produce(cluster, topic_name, 0, 5)
    tp = TopicPartition(topic_name, 0)
    with Consumer(topic_name, bootstrap_servers=cluster.bootstrap, group_id="g-lost", auto_offset_reset="earliest",
                  enable_auto_commit=False, max_poll_interval_ms=1500, session_timeout_ms=1000,
                  heartbeat_interval_ms=100) as consumer:
        wait_for(lambda: bool(consumer.poll(200)) or False, "records")
        generation = consumer.generation()
        assert generation > 0 and consumer.member_id()
        consumer.commit({tp: OffsetAndMetadata(1, "")})
        time.sleep(2.5)                                    # no poll: the heartbeat thread leaves the group
        assert consumer.generation() == -1
        with pytest.raises((UnknownMemberId, IllegalGeneration)):
            consumer.commit({tp: OffsetAndMetadata(999, "")})
        assert consumer.committed(tp) == 1                 # not overwritten as a standalone commit


def test_commit_timeout_is_kafka_timeout_and_close_still_leaves(cluster: LocalCluster, topic_name: str) -> None:
    create(cluster, topic_name, 1)
    consumer = Consumer(topic_name, bootstrap_servers=cluster.bootstrap, group_id="g-timeout",
                        auto_offset_reset="earliest", request_timeout_ms=1000)
    consumer.poll(4000)
    assert consumer.generation() > 0
    real_send = consumer._coordinator.send
    consumer._coordinator.send = lambda *args, **kwargs: Future()          # the coordinator never answers
    with pytest.raises(KafkaTimeoutError):
        consumer.commit({TopicPartition(topic_name, 0): OffsetAndMetadata(0, "")})
    consumer._coordinator.send = real_send

    def failing_commit(offsets=None):
        raise RuntimeError("injected commit failure")
    consumer.commit = failing_commit
    consumer._positions[TopicPartition(topic_name, 0)] = 0
    with pytest.raises(RuntimeError):
        consumer.close()
    with Admin(cluster.bootstrap) as admin:
        assert admin.describe_group("g-timeout").members == ()                # left despite the failure


def test_manually_assigned_consumer_commits_on_close(cluster: LocalCluster, topic_name: str) -> None:
    create(cluster, topic_name, 1)
    produce(cluster, topic_name, 0, 10)
    tp = TopicPartition(topic_name, 0)
    consumer = Consumer(bootstrap_servers=cluster.bootstrap, group_id="g-manual", auto_offset_reset="earliest",
                        enable_auto_commit=True, auto_commit_interval_ms=600000)
    consumer.assign([tp])
    got: list = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < 10 and time.monotonic() < deadline:
        got += [r for batch in consumer.poll(200).values() for r in batch]
    consumer.close()
    with Admin(cluster.bootstrap) as admin:
        assert {p.partition: p.committed for p in admin.describe_group("g-manual").partitions}[tp] == 10


def test_describe_with_a_deleted_topic_and_list_with_a_broker_down(cluster: LocalCluster, topic_name: str) -> None:
    create(cluster, topic_name, 1)
    kept = topic_name + "-kept"
    create(cluster, kept, 1)
    produce(cluster, kept, 0, 3)
    with Admin(cluster.bootstrap) as admin:
        admin.commit_offsets("g-deleted", {TopicPartition(topic_name, 0): 0, TopicPartition(kept, 0): 1})
        assert admin._coordinator("g-deleted") is admin._coordinator("g-deleted")   # one client per group
        admin.delete_topic(topic_name)
    wait_for(lambda: ember(cluster, "groups", "describe", "g-deleted").returncode == 0, "describe works")
    with Admin(cluster.bootstrap) as admin:
        by_tp = {p.partition: p for p in admin.describe_group("g-deleted").partitions}
        assert by_tp[TopicPartition(topic_name, 0)].log_end is None and by_tp[TopicPartition(topic_name, 0)].lag is None
        assert by_tp[TopicPartition(kept, 0)].lag == 2
        real = admin._metadata.request

        def broker_two_down(api_key, body, *args, broker_id=None, **kwargs):
            if api_key == ApiKey.LIST_GROUPS and broker_id == 2:
                raise BrokerNotAvailable("injected: broker 2 is down")
            return real(api_key, body, *args, broker_id=broker_id, **kwargs)
        admin._metadata.request = broker_two_down
        listing = admin.list_groups()
        assert set(listing.unreachable) == {2}
    described = ember(cluster, "groups", "describe", "g-deleted")
    row = [line.split() for line in described.stdout.splitlines() if line.split()[:2] == [topic_name, "0"]]
    assert row and row[0][3] == "-" and row[0][4] == "-"
