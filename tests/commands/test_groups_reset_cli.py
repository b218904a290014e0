"""``ember groups reset-offsets`` with kafka-consumer-groups' scenarios: --shift-by, --to-current,
--by-duration (ISO-8601), --all-groups, --group, --topic T:P; offsets clamped to the log; a group with
running consumers is refused by --execute with Kafka's meaning (inactive groups only)."""
from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from ember.client import Admin, Consumer, Producer, TopicPartition
from ember.commands.groups import _duration_ms
from ember.launcher.local import LocalCluster

pytestmark = pytest.mark.integration


def ember(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ember.cli", "groups", "reset-offsets", *args,
                           "--bootstrap", cluster.bootstrap], capture_output=True, text=True, timeout=60)


def committed(cluster: LocalCluster, group: str) -> dict[int, int | None]:
    with Admin(cluster.bootstrap) as admin:
        return {p.partition.partition: p.committed for p in admin.describe_group(group).partitions}


@pytest.mark.parametrize("text, ms", [("PT30M", 1_800_000), ("P1DT2H", 93_600_000), ("PT1.5S", 1500),
                                      ("-PT6H", -21_600_000), ("pt10s", 10_000), ("PT-1M", -60_000)])
def test_durations_parse_as_javas_duration(text: str, ms: int) -> None:
    assert _duration_ms(text) == ms


@pytest.mark.parametrize("text", ["P", "PT", "1H", "P1W", "PT1H30"])
def test_malformed_durations_are_refused(text: str) -> None:
    with pytest.raises(SystemExit, match="ISO-8601 duration"):
        _duration_ms(text)


def test_kafkas_reset_scenarios(shared_cluster: LocalCluster, topic_name: str) -> None:
    groups = [f"g-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    with Admin(shared_cluster.bootstrap) as admin:
        admin.create_topic(topic_name, partitions=2)
        with Producer(shared_cluster.bootstrap) as producer:
            for i in range(20):
                producer.send(topic_name, b"v%d" % i, partition=i % 2)
        for group in groups:
            admin.commit_offsets(group, {TopicPartition(topic_name, 0): 5, TopicPartition(topic_name, 1): 8})

    dry = ember(shared_cluster, "--group", groups[0], "--topic", topic_name, "--shift-by", "-3")
    assert dry.returncode == 0 and "dry run" in dry.stdout, dry
    assert committed(shared_cluster, groups[0]) == {0: 5, 1: 8}
    shifted = ember(shared_cluster, groups[0], "--topic", f"{topic_name}:1", "--shift-by", "100", "--execute")
    assert shifted.returncode == 0, shifted
    assert committed(shared_cluster, groups[0]) == {0: 5, 1: 10}            # clamped to the log end
    back = ember(shared_cluster, groups[0], "--all-topics", "--shift-by", "-7", "--execute")
    assert back.returncode == 0, back
    assert committed(shared_cluster, groups[0]) == {0: 0, 1: 3}             # clamped to the log start
    current = ember(shared_cluster, groups[0], "--to-current", "--execute")
    assert current.returncode == 0 and committed(shared_cluster, groups[0]) == {0: 0, 1: 3}, current
    recent = ember(shared_cluster, groups[0], "--by-duration", "PT1H", "--execute")   # every record is newer
    assert recent.returncode == 0 and committed(shared_cluster, groups[0]) == {0: 0, 1: 0}, recent

    every = ember(shared_cluster, "--all-groups", "--topic", topic_name, "--to-latest", "--execute")
    assert every.returncode == 0, every
    assert all(f"reset 2 partition(s) of group {g}" in every.stdout for g in groups)
    assert committed(shared_cluster, groups[1]) == {0: 10, 1: 10}

    consumer = Consumer(topic_name, bootstrap_servers=shared_cluster.bootstrap, group_id=groups[1])
    try:
        consumer.poll(timeout_ms=5000)    # joined: the group is Stable with one member
        refused = ember(shared_cluster, groups[1], "--to-earliest", "--execute")
        assert refused.returncode == 1, refused
        assert (f"offsets of group {groups[1]!r} can only be reset while it is inactive, but its state is Stable "
                f"with 1 active member(s)") in refused.stderr
        preview = ember(shared_cluster, groups[1], "--to-earliest")
        assert preview.returncode == 0 and "--execute is refused until then" in preview.stderr, preview
    finally:
        consumer.close(autocommit=False)
    assert committed(shared_cluster, groups[1]) == {0: 10, 1: 10}
