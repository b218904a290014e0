"""Leadership the controller moves on purpose, on real clusters: unclean election when (and only
when) a topic allows it, preferred-leader election (automatic and ``ember topics elect-leaders``),
and partition reassignment under acks=all load (``ember topics reassign``).

Invariants, never timings: an offline partition says why; the preferred replica leads again once
in sync; a reassignment loses no acknowledged record and the removed broker drops its copy.
"""
from __future__ import annotations

import contextlib
import io
import signal
from typing import Any

import pytest
from replication_helpers import (
    FAST,
    BackgroundLoop,
    call,
    consume_values,
    create_topic,
    disk_values,
    partition_meta,
    produce,
    wait_for_isr,
)

from ember.cli import main
from ember.client import Admin, Producer, TopicPartition
from ember.errors import ErrorCode, LeaderNotAvailable, PreferredLeaderNotAvailable
from ember.wire.api_keys import ApiKey
from waiting import eventually

pytestmark = pytest.mark.integration


def cli(*args: str) -> tuple[int, str]:
    """Run ``ember ARGS``; (exit code, stdout)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(args))
    return code, out.getvalue()


def fully_replicated(cluster, topic: str, replication_factor: int) -> dict[str, Any]:
    """Metadata once the partition has a serving leader and all its replicas in the ISR."""
    def check() -> dict[str, Any] | None:
        meta = partition_meta(cluster, topic)
        return meta if meta and meta["leader"] >= 0 and len(meta["isr"]) == replication_factor else None
    meta = eventually(check, f"{topic}-0 fully replicated")
    return wait_for_isr(cluster, topic, set(meta["isr"]))


def wait_for_leader(cluster, topic: str, leader: int) -> dict[str, Any]:
    """Metadata once brokers show ``leader`` leading partition 0."""
    return eventually(lambda: (m := partition_meta(cluster, topic)) and m["leader"] == leader and m,
                      f"broker {leader} to lead {topic}-0")


def test_offline_partition_waits_for_its_isr_unless_the_topic_allows_unclean_election(make_cluster, topic_name):
    cluster = make_cluster(brokers=3, config=FAST)
    create_topic(cluster.bootstrap, topic_name, replication_factor=2, min_insync=1)
    meta = fully_replicated(cluster, topic_name, 2)
    leader = meta["leader"]
    follower = next(b for b in meta["replicas"] if b != leader)
    committed = [b"c%d" % i for i in range(5)]
    assert produce(cluster.brokers[leader].address, topic_name, committed, acks=-1)["error_code"] == 0

    # The follower dies and leaves the ISR; the leader takes more records, then dies too.
    cluster.kill_broker(follower, signal.SIGKILL)
    wait_for_isr(cluster, topic_name, {leader})
    assert produce(cluster.brokers[leader].address, topic_name, [b"only-on-the-leader"], acks=1)["error_code"] == 0
    cluster.kill_broker(leader, signal.SIGKILL)
    cluster.restart_broker(follower)
    offline = eventually(lambda: (m := partition_meta(cluster, topic_name)) and m["leader"] == -1
                         and "is offline" in m.get("error_message", "") and m, "the partition offline")
    assert offline["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE
    assert offline["error_message"].startswith(f"{topic_name}-0 is offline: no in-sync replica is alive (last ISR "
                                               f"[{leader}]) and unclean.leader.election.enable is false")

    # The out-of-sync follower does not lead: the controller saw it return before this election
    # request (it handles events in order), and the preferred replica cannot lead either.
    eventually(lambda: follower in {b["id"] for b in call_metadata(cluster)["brokers"]}, "the follower registered")
    with Admin(cluster.bootstrap) as admin:
        (result,) = admin.elect_leaders([TopicPartition(topic_name, 0)])
    assert isinstance(result.error, PreferredLeaderNotAvailable)
    refused = produce(cluster.brokers[follower].address, topic_name, [b"x"], acks=1)
    assert refused["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE and "is offline" in refused["error_message"]
    with Producer(cluster.bootstrap, acks=1, max_block_ms=2000) as producer:
        with pytest.raises(LeaderNotAvailable, match=f"{topic_name}-0 is offline"):
            producer.send(topic_name, b"x")

    # Allowing unclean election lets the follower lead at once, with what it has.
    with Admin(cluster.bootstrap) as admin:
        admin.alter_configs(topic_name, {"unclean.leader.election.enable": "true"})
    elected = wait_for_leader(cluster, topic_name, follower)
    assert elected["isr"] == [follower] and elected["leader_epoch"] == offline["leader_epoch"] + 1
    controller = call_metadata(cluster)["controller_id"]
    assert "data may be lost" in cluster.brokers[controller].log_path.read_text()
    assert produce(cluster.brokers[follower].address, topic_name, [b"after"], acks=-1)["error_code"] == 0

    # The old leader returns and drops the record only it had.
    cluster.restart_broker(leader)
    wait_for_isr(cluster, topic_name, {leader, follower})
    for broker_id in (leader, follower):
        assert disk_values(cluster, broker_id, topic_name, 6) == committed + [b"after"]


def call_metadata(cluster) -> dict[str, Any]:
    """Brokers and controller as a running broker sees them."""
    running = next(b for b in cluster.brokers.values() if b.pid is not None)
    return call(running.address, ApiKey.METADATA, {"topics": []})


def kill_and_restart_preferred_leader(cluster, topic: str) -> tuple[int, int]:
    """Kill the partition's preferred leader, let another broker take over, bring the preferred
    one back in sync. Returns (preferred, interim leader)."""
    meta = wait_for_isr(cluster, topic, {1, 2, 3})
    preferred = meta["replicas"][0]
    assert meta["leader"] == preferred
    cluster.kill_broker(preferred, signal.SIGKILL)
    others = [b for b in cluster.brokers if b != preferred]
    interim = wait_for_isr(cluster, topic, set(others), ask=others)["leader"]
    assert produce(cluster.brokers[interim].address, topic, [b"while-away"], acks=-1)["error_code"] == 0
    cluster.restart_broker(preferred)
    return preferred, interim


def test_preferred_leader_leads_again_after_catching_up(make_cluster, topic_name):
    cluster = make_cluster(brokers=3, config={**FAST, "leader.imbalance.check.interval.seconds": "1"})
    create_topic(cluster.bootstrap, topic_name)
    preferred, _ = kill_and_restart_preferred_leader(cluster, topic_name)
    back = wait_for_leader(cluster, topic_name, preferred)
    assert set(back["isr"]) == {1, 2, 3}
    assert produce(cluster.brokers[preferred].address, topic_name, [b"home"], acks=-1)["error_code"] == 0
    assert [v for _, v in consume_values(cluster.bootstrap, topic_name, 2)] == [b"while-away", b"home"]


def test_elect_leaders_command_moves_leadership_to_the_preferred_replica(make_cluster, topic_name):
    cluster = make_cluster(brokers=3, config={**FAST, "auto.leader.rebalance.enable": "false"})
    create_topic(cluster.bootstrap, topic_name)
    preferred, interim = kill_and_restart_preferred_leader(cluster, topic_name)
    meta = wait_for_isr(cluster, topic_name, {1, 2, 3})
    assert meta["leader"] == interim          # no automatic rebalance

    code, out = cli("topics", "elect-leaders", "--topic", topic_name, "--partition", "0",
                    "--bootstrap", cluster.bootstrap)
    assert code == 0 and f"{topic_name}-0: leader {interim} -> {preferred}" in out
    wait_for_leader(cluster, topic_name, preferred)   # the command returns once ZooKeeper holds the move
    code, out = cli("topics", "elect-leaders", "--topic", topic_name, "--bootstrap", cluster.bootstrap)
    assert code == 0 and "1 partition(s) already led by their preferred replica" in out


class LoadProducer(BackgroundLoop):
    """Sends numbered acks=all records on a thread until stopped; keeps every future."""

    interval_s = 0.005

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__()
        self.producer = Producer(bootstrap, acks="all", request_timeout_ms=5000, retry_backoff_ms=100)
        self.topic = topic
        self.futures: list[Any] = []

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.producer.flush(120)
        self.producer.close()

    def tick(self) -> None:
        self.futures.append(self.producer.send(self.topic, b"%d" % len(self.futures)))


def test_reassignment_moves_a_partition_under_acks_all_load(make_cluster, topic_name):
    # A long session keeps the paused new replica registered while the move waits for it.
    cluster = make_cluster(brokers=3, config={**FAST, "zookeeper.session.timeout.ms": "30000"})
    create_topic(cluster.bootstrap, topic_name, replication_factor=2, min_insync=2)
    meta = fully_replicated(cluster, topic_name, 2)
    removed = meta["leader"]                                   # moving the leader away is the hard case
    kept = next(b for b in meta["replicas"] if b != removed)
    added = next(b for b in cluster.brokers if b not in meta["replicas"])
    if call_metadata(cluster)["controller_id"] == added:
        cluster.restart_broker(added)   # the controller resigns: it must answer while `added` is paused

    with LoadProducer(cluster.bootstrap, topic_name) as load:
        eventually(lambda: len(load.futures) > 50 and load.futures[50].succeeded(), "records acknowledged")
        cluster.pause_broker(added)                            # the move must wait for it to catch up
        try:
            running = ",".join(cluster.brokers[b].address for b in (kept, removed))
            code, out = cli("topics", "reassign", topic_name, "--partition", "0", "--replicas", f"{kept},{added}",
                            "--bootstrap", running)
            assert code == 0 and "reassigning" in out
            code, out = cli("topics", "describe", topic_name, "--bootstrap", running)
            assert f"partition 0 reassigning: adding [{added}], removing [{removed}]" in out
        finally:
            cluster.resume_broker(added)
        done = eventually(lambda: (m := partition_meta(cluster, topic_name)) and m["replicas"] == [kept, added]
                          and "adding_replicas" not in m and m, "the reassignment to finish")
        assert done["leader"] in (kept, added) and set(done["isr"]) == {kept, added}
        eventually(lambda: not (cluster.brokers[removed].data_dir / f"{topic_name}-0").exists(),
                   f"broker {removed} to delete its copy")
        sent_after_move = len(load.futures)
        eventually(lambda: len(load.futures) > sent_after_move + 50, "records produced after the move")

    acked = [future.get(0).offset for future in load.futures]    # raises if any record failed
    consumed = consume_values(cluster.bootstrap, topic_name, len(acked))
    assert [v for _, v in consumed] == [b"%d" % i for i in range(len(acked))]   # none lost or duplicated
    assert [offset for offset, _ in consumed] == acked
    for broker_id in (kept, added):
        assert disk_values(cluster, broker_id, topic_name, len(acked)) == [v for _, v in consumed]
