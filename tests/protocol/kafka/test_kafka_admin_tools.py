"""Kafka's own administration tools (Kafka 4.2's jars, run from a plain classpath as the
``kafka-*.sh`` scripts would) against ember's Kafka listeners, each result checked with ember's
own client: ``kafka-configs``, ``kafka-topics --alter --partitions`` and ``--describe``,
``kafka-delete-records``, ``kafka-reassign-partitions --execute``/``--verify`` and
``kafka-leader-election``. Each test groups several checks: every tool run starts a JVM."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from kafka_helpers import create_topic, produce, run_tool

from ember.client import Admin
from waiting import eventually

pytestmark = pytest.mark.integration

TOOLS = "org.apache.kafka.tools"
CONFIGS = "kafka.admin.ConfigCommand"      # kafka-configs.sh: still in Kafka's core jar


@pytest.fixture(scope="module")
def bootstrap(shared_cluster) -> str:
    return shared_cluster.kafka_bootstrap



def test_configs_partitions_and_deleted_records_set_by_kafka_tools_show_in_ember(shared_cluster, bootstrap,
                                                                                 topic_name, tmp_path: Path):
    create_topic(bootstrap, topic_name, partitions=2, replication_factor=2)
    produce(bootstrap, topic_name, [(0, None, b"v%d" % i, [], 1_700_000_000_000) for i in range(6)], acks="all")
    altered = run_tool(CONFIGS, "--bootstrap-server", bootstrap, "--alter", "--entity-type", "topics", "--entity-name",
                       topic_name, "--add-config", "retention.ms=60000,max.message.bytes=2000000")
    assert f"Completed updating config for topic {topic_name}." in altered.stdout
    run_tool(f"{TOOLS}.TopicCommand", "--bootstrap-server", bootstrap, "--alter", "--topic", topic_name,
             "--partitions", "3")
    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic_name, "partition": 0, "offset": 4}]}))
    deleted = run_tool(f"{TOOLS}.DeleteRecordsCommand", "--bootstrap-server", bootstrap, "--offset-json-file", str(plan))
    assert f"partition: {topic_name}-0\tlow_watermark: 4" in deleted.stdout

    with Admin(shared_cluster.bootstrap) as ember:
        described = eventually(lambda: (d := ember.describe_topic(topic_name)) and len(d.partitions) == 3
                               and d.config == {"retention.ms": "60000", "max.message.bytes": "2000000"} and d,
                               "ember's view of the tools' changes")
        assert described.partitions[0].log_start_offset == 4 and described.partitions[2].leader >= 0
        ember.alter_configs(topic_name, delete=["max.message.bytes"])
        eventually(lambda: ember.describe_topic(topic_name).config == {"retention.ms": "60000"}, "the reset config")

    # kafka-topics --describe reads DescribeTopicPartitions and the topic's configs (DescribeConfigs).
    topic = run_tool(f"{TOOLS}.TopicCommand", "--bootstrap-server", bootstrap, "--describe", "--topic", topic_name).stdout
    assert "PartitionCount: 3" in topic and "ReplicationFactor: 2" in topic and "Configs: retention.ms=60000" in topic
    configs = run_tool(CONFIGS, "--bootstrap-server", bootstrap, "--describe", "--entity-type", "topics",
                       "--entity-name", topic_name).stdout
    assert "retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000, " \
           "DEFAULT_CONFIG:log.retention.hours=168}" in configs and "max.message.bytes" not in configs

    # Refusals carry Kafka's errors, which the tools name.
    shrink = run_tool(f"{TOOLS}.TopicCommand", "--bootstrap-server", bootstrap, "--alter", "--topic", topic_name,
                      "--partitions", "2", exit_code=1)
    assert "InvalidPartitionsException" in shrink.stdout + shrink.stderr
    bad = run_tool(CONFIGS, "--bootstrap-server", bootstrap, "--alter", "--entity-type", "topics", "--entity-name",
                   topic_name, "--add-config", "retention.ms=soon", exit_code=1)
    assert "InvalidConfigurationException: invalid value 'soon' for retention.ms" in bad.stdout + bad.stderr


def test_reassignment_and_leader_election_by_kafka_tools_move_what_ember_shows(shared_cluster, bootstrap, topic_name,
                                                                               tmp_path: Path):
    create_topic(bootstrap, topic_name, partitions=2, replication_factor=2)
    with Admin(shared_cluster.bootstrap) as ember:
        before = {p.partition: p.replicas for p in ember.describe_topic(topic_name).partitions}
    brokers = sorted(shared_cluster.brokers)
    # Partition 0 moves to the broker it lacks plus its second replica (which becomes preferred);
    # partition 1 gains a third replica.
    spare = next(b for b in brokers if b not in before[0])
    target = {0: [before[0][1], spare], 1: [*before[1], next(b for b in brokers if b not in before[1])]}
    plan = tmp_path / "reassign.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic_name, "partition": p, "replicas": replicas} for p, replicas in target.items()]}))
    reassign = f"{TOOLS}.reassign.ReassignPartitionsCommand"
    started = run_tool(reassign, "--bootstrap-server", bootstrap, "--reassignment-json-file", str(plan), "--execute")
    assert f"Successfully started partition reassignments for {topic_name}-0,{topic_name}-1" in started.stdout
    with Admin(shared_cluster.bootstrap) as ember:
        done = eventually(lambda: (parts := ember.describe_topic(topic_name).partitions)
                          and {p.partition: list(p.replicas) for p in parts} == target
                          and not any(p.adding_replicas for p in parts) and parts, "the moves done")
        assert [sorted(p.isr) for p in done] == [sorted(target[0]), sorted(target[1])]
    verified = run_tool(reassign, "--bootstrap-server", bootstrap, "--reassignment-json-file", str(plan), "--verify")
    assert f"Reassignment of partition {topic_name}-0 is completed." in verified.stdout
    assert f"Reassignment of partition {topic_name}-1 is completed." in verified.stdout

    # kafka-leader-election hands partition 0 to its preferred replica (or finds it leading already).
    elected = run_tool(f"{TOOLS}.LeaderElectionCommand", "--bootstrap-server", bootstrap, "--election-type",
                       "preferred", "--topic", topic_name, "--partition", "0")
    assert f"for partitions {topic_name}-0" in elected.stdout
    with Admin(shared_cluster.bootstrap) as ember:
        eventually(lambda: ember.describe_topic(topic_name).partitions[0].leader == target[0][0],
                   "the preferred replica leading")
