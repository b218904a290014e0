"""Kafka's admin APIs from clients nobody here wrote (confluent-kafka's AdminClient, kafka-python's
KafkaAdminClient for what librdkafka lacks), each result checked against ember's own view
(``ember.client.Admin``) and changes made through ember's client checked through Kafka's.

Shared-cluster tests change only their own topics; the election and reassignment test that needs
an offline partition and a stuck move runs its own cluster."""
from __future__ import annotations

import signal
from typing import Any

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaPythonTopicPartition
from kafka.admin import ConfigResource as KafkaConfigResource
from kafka.admin import ConfigResourceType
from kafka.errors import InvalidReplicationAssignmentError
from kafka_helpers import WAIT_S, admin, create_topic, produce

from ember.client import Admin
from ember.client import TopicPartition as EmberTopicPartition
from ember.client.admin import PartitionDescription
from ember.client.metadata import MetadataClient
from ember.errors import EmberError, InvalidPartitions
from waiting import eventually

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def bootstrap(shared_cluster) -> str:
    return shared_cluster.kafka_bootstrap


def result(future: Any) -> Any:
    return future.result(timeout=WAIT_S)


def kafka_error(future: Any) -> KafkaError:
    """The error a failed admin future carries."""
    with pytest.raises(KafkaException) as failed:
        result(future)
    return failed.value.args[0]



def controller_id(bootstrap: str) -> int:
    """The controller as ember's own Metadata names it."""
    metadata = MetadataClient(bootstrap)
    try:
        metadata.refresh([])
        return metadata.controller_id
    finally:
        metadata.close()


def topic_configs(client: Any, topic: str) -> dict[str, Any]:
    (future,) = client.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return result(future)


def dynamic(configs: dict[str, Any]) -> dict[str, str]:
    """The configs set on the topic (Kafka's DYNAMIC_TOPIC_CONFIG source)."""
    return {name: entry.value for name, entry in configs.items()
            if ConfigSource(entry.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG}


def test_topic_configs_altered_by_either_client_read_the_same_in_both(shared_cluster, bootstrap, topic_name):
    create_topic(bootstrap, topic_name)
    client = admin(bootstrap)
    before = topic_configs(client, topic_name)
    assert before["retention.ms"].value == "604800000" and dynamic(before) == {}
    assert ConfigSource(before["retention.ms"].source) == ConfigSource.DEFAULT_CONFIG
    assert not before["retention.ms"].is_read_only
    # Kafka's incremental alter: set one, and the ember view shows it as the topic's only override.
    resource = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("flush.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    result(client.incremental_alter_configs([resource])[resource])
    # Each broker applies a change when its ZooKeeper watch fires: the other client's broker may lag.
    with Admin(shared_cluster.bootstrap) as ember:
        eventually(lambda: ember.describe_topic(topic_name).config == {"retention.ms": "60000"}, "ember's view")
        ember.alter_configs(topic_name, {"max.message.bytes": "2000000"})
    overrides = {"retention.ms": "60000", "max.message.bytes": "2000000"}
    after = eventually(lambda: (found := topic_configs(client, topic_name)) and dynamic(found) == overrides and found,
                       "Kafka's view")
    assert ConfigSource(after["segment.bytes"].source) == ConfigSource.DEFAULT_CONFIG

    bad = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    assert kafka_error(client.incremental_alter_configs([bad])[bad]).code() == KafkaError.INVALID_CONFIG
    unknown = ConfigResource(ResourceType.TOPIC, topic_name + "-missing", incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    assert kafka_error(client.incremental_alter_configs([unknown])[unknown]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    (missing,) = client.describe_configs([ConfigResource(ResourceType.TOPIC, topic_name + "-missing")]).values()
    assert kafka_error(missing).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert topic_configs(client, topic_name)["retention.ms"].value == "60000"    # refusals changed nothing

    # Legacy AlterConfigs replaces a topic's overrides: kafka-python sends the ones to keep along.
    legacy = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        legacy.alter_configs([KafkaConfigResource(ConfigResourceType.TOPIC, topic_name, {"retention.ms": "120000"})],
                             incremental=False)
    finally:
        legacy.close()
    eventually(lambda: dynamic(topic_configs(client, topic_name)) == {**overrides, "retention.ms": "120000"},
               "the legacy alter applied")


def test_cleanup_policy_is_a_list_config_kafka_clients_create_append_and_subtract(shared_cluster, bootstrap,
                                                                                  topic_name):
    create_topic(bootstrap, topic_name, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.2"})
    client = admin(bootstrap)
    configs = topic_configs(client, topic_name)
    assert (configs["cleanup.policy"].value, configs["min.cleanable.dirty.ratio"].value) == ("compact", "0.2")
    assert configs["delete.retention.ms"].value == "86400000"

    def change(operation: AlterConfigOpType, name: str, value: str) -> Any:
        resource = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
            ConfigEntry(name, value, incremental_operation=operation)])
        return client.incremental_alter_configs([resource])[resource]

    result(change(AlterConfigOpType.APPEND, "cleanup.policy", "delete"))
    eventually(lambda: topic_configs(client, topic_name)["cleanup.policy"].value == "compact,delete", "appended")
    result(change(AlterConfigOpType.SUBTRACT, "cleanup.policy", "compact"))
    eventually(lambda: topic_configs(client, topic_name)["cleanup.policy"].value == "delete", "subtracted")
    refused = kafka_error(change(AlterConfigOpType.APPEND, "retention.ms", "1"))
    assert refused.code() == KafkaError.INVALID_CONFIG and "not a list config" in refused.str()
    emptied = kafka_error(change(AlterConfigOpType.SUBTRACT, "cleanup.policy", "delete"))
    assert emptied.code() == KafkaError.INVALID_CONFIG and "cleanup.policy" in emptied.str()


def test_broker_configs_are_described_read_only_and_setting_one_is_refused(shared_cluster, bootstrap):
    client = admin(bootstrap)
    broker = ConfigResource(ResourceType.BROKER, str(min(shared_cluster.brokers)))
    configs = result(client.describe_configs([broker])[broker])
    assert configs["num.partitions"].value == "1" and configs["num.partitions"].is_read_only
    assert ConfigSource(configs["num.partitions"].source) == ConfigSource.DEFAULT_CONFIG
    assert configs["min.insync.replicas"].value == "1"
    setting = ConfigResource(ResourceType.BROKER, broker.name, incremental_configs=[
        ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)])
    refused = kafka_error(client.incremental_alter_configs([setting])[setting])
    assert refused.code() == KafkaError.INVALID_REQUEST and "static" in refused.str()


def test_partitions_added_through_either_client_are_led_and_take_records(shared_cluster, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=2, replication_factor=2)
    client = admin(bootstrap)
    result(client.create_partitions([NewPartitions(topic_name, 4)], operation_timeout=WAIT_S)[topic_name])
    with Admin(shared_cluster.bootstrap) as ember:
        partitions = eventually(lambda: (found := ember.describe_topic(topic_name).partitions) and len(found) == 4
                                and all(p.leader >= 0 for p in found) and found, "4 partitions with leaders")
        assert all(len(p.replicas) == 2 and p.leader in p.replicas for p in partitions)
        eventually(lambda: len(client.list_topics(topic_name, timeout=WAIT_S).topics[topic_name].partitions) == 4,
                   "Kafka's metadata showing 4 partitions")
        assert produce(bootstrap, topic_name, [(3, b"k", b"new partition", [], 1_700_000_000_000)]) == [(3, 0)]
        ember.create_partitions(topic_name, 5, assignments=[[2, 3]])
        with pytest.raises(InvalidPartitions, match="has 5 partitions"):
            ember.create_partitions(topic_name, 5)
    metadata = eventually(lambda: (found := client.list_topics(topic_name, timeout=WAIT_S).topics[topic_name].partitions)
                          and len(found) == 5 and found, "Kafka's metadata showing 5 partitions")
    assert metadata[4].replicas == [2, 3]
    shrinking = client.create_partitions([NewPartitions(topic_name, 3)])[topic_name]
    assert kafka_error(shrinking).code() == KafkaError.INVALID_PARTITIONS


def test_deleted_records_stay_deleted_when_a_follower_takes_over(shared_cluster, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, replication_factor=3)
    produce(bootstrap, topic_name, [(0, None, b"v%d" % i, [], 1_700_000_000_000) for i in range(10)], acks="all")
    client = admin(bootstrap)
    (deleted,) = client.delete_records([TopicPartition(topic_name, 0, 4)], operation_timeout=WAIT_S).values()
    assert result(deleted).low_watermark == 4
    (too_far,) = client.delete_records([TopicPartition(topic_name, 0, 11)]).values()
    assert kafka_error(too_far).code() == KafkaError.OFFSET_OUT_OF_RANGE
    # An acks=all record after the delete: every follower has fetched since, and with it the log start.
    produce(bootstrap, topic_name, [(0, None, b"v10", [], 1_700_000_000_000)], acks="all")
    with Admin(shared_cluster.bootstrap) as ember:
        (partition,) = ember.describe_topic(topic_name).partitions
        assert (partition.log_start_offset, partition.high_watermark) == (4, 11)
        # A follower becomes the preferred replica (once the controller shows the new order), and
        # Kafka's ElectLeaders hands it leadership.
        follower = next(b for b in partition.replicas if b != partition.leader)
        order = (follower, partition.leader, *(b for b in partition.replicas if b not in (follower, partition.leader)))
        ember.reassign_partitions({EmberTopicPartition(topic_name, 0): list(order)})
        eventually(lambda: ember.describe_topic(topic_name).partitions[0].replicas == order, "the new replica order")
        (elected,) = result(client.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic_name, 0)])).values()
        assert elected is None
        eventually(lambda: (p := ember.describe_topic(topic_name).partitions[0]).leader == follower
                   and (p.log_start_offset, p.high_watermark) == (4, 11), "the follower leading from offset 4")
        assert ember.delete_records({EmberTopicPartition(topic_name, 0): -1}) == {EmberTopicPartition(topic_name, 0): 11}
    fresh = admin(bootstrap)     # librdkafka's ListOffsets does not follow a moved leader by itself
    earliest = result(fresh.list_offsets({TopicPartition(topic_name, 0): OffsetSpec.earliest()})
                      [TopicPartition(topic_name, 0)])
    assert earliest.offset == 11
    (again,) = result(fresh.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic_name, 0)])).values()
    assert again.code() == KafkaError.ELECTION_NOT_NEEDED


def test_cluster_and_topic_partitions_described_by_kafka_clients_match_embers_metadata(shared_cluster, bootstrap,
                                                                                     topic_name):
    create_topic(bootstrap, topic_name, partitions=5, replication_factor=2)
    metadata = MetadataClient(shared_cluster.bootstrap)
    try:
        metadata.refresh([])
        brokers = sorted(metadata.brokers)
    finally:
        metadata.close()
    controller = controller_id(shared_cluster.bootstrap)
    confluent = admin(bootstrap)
    cluster = result(confluent.describe_cluster())
    assert sorted(node.id for node in cluster.nodes) == brokers == sorted(shared_cluster.brokers)
    assert cluster.controller.id == controller
    assert cluster.cluster_id == confluent.list_topics(timeout=WAIT_S).cluster_id

    # DescribeTopicPartitions pages through partitions with a cursor, as Kafka does.
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        pages, cursor = [], None
        for _ in range(5):
            page = client.describe_topic_partitions([topic_name], response_partition_limit=2, cursor=cursor)
            pages.append([p["partition_index"] for t in page["topics"] for p in t["partitions"]])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        unknown = client.describe_topic_partitions([topic_name + "-missing"])["topics"]
    finally:
        client.close()
    assert pages == [[0, 1], [2, 3], [4]]
    assert [(t["name"], t["error_code"]) for t in unknown] == [(topic_name + "-missing", 3)]
    with Admin(shared_cluster.bootstrap) as ember:
        described = ember.describe_topic(topic_name).partitions
    final = result(confluent.describe_topics(TopicCollection([topic_name]))[topic_name])
    assert [(p.id, p.leader.id, [r.id for r in p.replicas]) for p in final.partitions] == \
        [(p.partition, p.leader, list(p.replicas)) for p in described]


def described(ember: Admin, topic: str) -> tuple[PartitionDescription, ...] | None:
    """ember's view of the topic's partitions; None while brokers stop, pause or move (ask again)."""
    try:
        return ember.describe_topic(topic).partitions
    except EmberError:
        return None


def test_kafka_clients_list_and_cancel_a_stuck_move_and_elect_an_unclean_leader(make_cluster, topic_name):
    """Broker 2 is paused (registered, silent): a move onto it stays in progress, and it falls out
    of the ISR of the partition it follows. Once that partition's leader stops, only an unclean
    election (asked for by a Kafka client) gives it a leader again."""
    cluster = make_cluster(brokers=3, config={"zookeeper.session.timeout.ms": "30000", "replica.lag.time.max.ms": "2000",
                                              "replica.fetch.backoff.ms": "200"})
    bootstrap = cluster.kafka_bootstrap
    client = admin(bootstrap)
    unclean, moving = f"{topic_name}-u", f"{topic_name}-m"
    created = client.create_topics([NewTopic(unclean, 1, replica_assignment=[[1, 2]]),
                                    NewTopic(moving, 2, replica_assignment=[[1, 3], [3, 1]])], operation_timeout=WAIT_S)
    for future in created.values():
        result(future)
    ember = Admin(cluster.bootstrap, request_timeout_ms=5000)    # a request to the paused broker fails fast
    # kafka-python connects to brokers 1 and 3 before the pause, so it never picks the silent one
    kafka_python = KafkaAdminClient(bootstrap_servers=[cluster.brokers[b].kafka_address for b in (1, 3)])
    try:
        eventually(lambda: (found := described(ember, unclean)) and found[0].isr == (1, 2), "both replicas in sync")
        if controller_id(cluster.bootstrap) == 2:
            cluster.restart_broker(2)      # the controller resigns: it must answer while broker 2 is paused
        assert kafka_python.list_partition_reassignments() == {}
        cluster.pause_broker(2)
        try:
            produce(bootstrap, unclean, [(0, None, b"after the pause", [], 1_700_000_000_000)], acks="1")
            eventually(lambda: (found := described(ember, unclean)) and found[0].isr == (1,), "broker 2 out of the ISR")

            # A move onto the paused broker: one started by kafka-python, one by ember; both listed.
            started = kafka_python.alter_partition_reassignments({KafkaPythonTopicPartition(moving, 0): [1, 3, 2],
                                                                  KafkaPythonTopicPartition(moving, 1): [3, 9]})
            assert started[KafkaPythonTopicPartition(moving, 0)] is None
            assert started[KafkaPythonTopicPartition(moving, 1)] is InvalidReplicationAssignmentError
            ember.reassign_partitions({EmberTopicPartition(moving, 1): [3, 1, 2]})
            eventually(lambda: {tp.partition: (r["replicas"], r["adding_replicas"], r["removing_replicas"])
                                for tp, r in kafka_python.list_partition_reassignments().items()}
                       == {0: ([1, 3, 2], [2], []), 1: ([3, 1, 2], [2], [])}, "both moves listed")
            eventually(lambda: [(p.replicas, p.adding_replicas) for p in described(ember, moving) or ()] ==
                       [((1, 3, 2), (2,)), ((3, 1, 2), (2,))], "both moves in ember's view")
            cancelled = kafka_python.alter_partition_reassignments({KafkaPythonTopicPartition(moving, 0): None,
                                                                    KafkaPythonTopicPartition(moving, 1): None})
            assert set(cancelled.values()) == {None}
            eventually(lambda: [p.replicas for p in described(ember, moving) or ()] == [(1, 3), (3, 1)],
                       "the moves cancelled")
            eventually(lambda: kafka_python.list_partition_reassignments() == {}, "no move listed")

            # The leader of the partition only it had in sync stops: that partition is offline.
            cluster.kill_broker(1, signal.SIGTERM)
        finally:
            cluster.resume_broker(2)
        eventually(lambda: (found := described(ember, unclean)) and found[0].leader == -1
                   and "is offline: no in-sync replica is alive" in found[0].error, "the partition offline")
        # librdkafka keeps the controller it learnt (broker 1 may have been it) until its next
        # metadata refresh (topic.metadata.refresh.interval.ms): a client started now finds the new one
        client = admin(bootstrap)
        (preferred,) = result(client.elect_leaders(ElectionType.PREFERRED, [TopicPartition(unclean, 0)])).values()
        assert preferred.code() == KafkaError.PREFERRED_LEADER_NOT_AVAILABLE
        (elected,) = result(client.elect_leaders(ElectionType.UNCLEAN, [TopicPartition(unclean, 0)])).values()
        assert elected is None
        eventually(lambda: (found := described(ember, unclean)) and (found[0].leader, found[0].isr) == (2, (2,)),
                   "broker 2 leading after the unclean election")
        (again,) = result(client.elect_leaders(ElectionType.UNCLEAN, [TopicPartition(unclean, 0)])).values()
        assert again.code() == KafkaError.ELECTION_NOT_NEEDED
    finally:
        kafka_python.close()
        ember.close()
