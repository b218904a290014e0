"""Consumer-group administration and static membership through Kafka's protocol, against the one
group coordinator: Kafka's admin clients (confluent-kafka, kafka-python) list, describe, fetch and
delete the offsets of, and delete groups joined by Kafka consumers and by ember's own consumers;
``ember groups describe`` shows a Kafka consumers' group; a restarted static member
(``group.instance.id``) gets its partitions back without a rebalance and fences the consumer it
replaces."""
from __future__ import annotations

import argparse
import time

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from kafka_helpers import WAIT_S, admin, create_topic, produce, records

from ember.client import Admin as EmberAdmin
from ember.client import Consumer as EmberConsumer
from ember.client import OffsetAndMetadata
from ember.client import TopicPartition as EmberTopicPartition
from ember.commands.groups import describe_group

pytestmark = pytest.mark.integration


def poll_until(consumers: list, done, what: str) -> None:
    """Poll confluent-kafka and ember consumers until ``done()``; bounded."""
    deadline = time.monotonic() + 2 * WAIT_S
    while not done():
        assert time.monotonic() < deadline, f"{what} did not happen within {2 * WAIT_S}s"
        for consumer in consumers:
            if isinstance(consumer, EmberConsumer):
                consumer.poll(timeout_ms=100)
            else:
                consumer.poll(0.1)


def result(future):
    return future.result(timeout=WAIT_S)


def test_admin_clients_list_describe_and_delete_kafka_and_ember_groups(shared_cluster, topic_name, capsys):
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition as KafkaPythonTopicPartition

    bootstrap = shared_cluster.kafka_bootstrap
    create_topic(bootstrap, topic_name, partitions=2)
    produce(bootstrap, topic_name, records(20, partitions=2))
    kafka_group, ember_group = f"k-{topic_name}", f"e-{topic_name}"
    kafka_consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": kafka_group, "client.id": "rdkafka-member",
                               "auto.offset.reset": "earliest", "enable.auto.commit": False,
                               "partition.assignment.strategy": "range"})
    ember_consumer = EmberConsumer(topic_name, bootstrap_servers=shared_cluster.bootstrap, group_id=ember_group,
                                   client_id="ember-member", auto_offset_reset="earliest", enable_auto_commit=False)
    client = admin(bootstrap)
    python_admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        kafka_consumer.subscribe([topic_name])
        poll_until([kafka_consumer, ember_consumer],
                   lambda: len(kafka_consumer.assignment()) == 2 and len(ember_consumer.assignment()) == 2,
                   "both groups' assignment")
        kafka_consumer.commit(offsets=[TopicPartition(topic_name, 0, 10), TopicPartition(topic_name, 1, 4)],
                              asynchronous=False)
        ember_consumer.commit({EmberTopicPartition(topic_name, 0): OffsetAndMetadata(3, "")})

        stable = result(client.list_consumer_groups(states={ConsumerGroupState.STABLE},
                                                    types={ConsumerGroupType.CLASSIC}))
        assert {kafka_group, ember_group} <= {g.group_id for g in stable.valid}
        empty = result(client.list_consumer_groups(states={ConsumerGroupState.EMPTY}))
        assert not {kafka_group, ember_group} & {g.group_id for g in empty.valid}

        described = {g: result(f) for g, f in client.describe_consumer_groups([kafka_group, ember_group]).items()}
        for group, client_id in ((kafka_group, "rdkafka-member"), (ember_group, "ember-member")):
            (member,) = described[group].members
            assert described[group].state == ConsumerGroupState.STABLE and described[group].partition_assignor == "range"
            assert (member.client_id, member.host) == (client_id, "/127.0.0.1")
            assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1]
        listed = result(client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(kafka_group)])[kafka_group])
        assert sorted((tp.partition, tp.offset) for tp in listed.topic_partitions) == [(0, 10), (1, 4)]

        # ember groups describe shows the Kafka consumers' group: its member, committed offsets, lag
        describe_group(argparse.Namespace(group=kafka_group, bootstrap=shared_cluster.bootstrap))
        shown = capsys.readouterr().out
        assert "state Stable" in shown and "(rdkafka-member)" in shown
        rows = [line.split() for line in shown.splitlines() if line.split()[:1] == [topic_name]]
        assert sorted((int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows) == [(0, 10, 10, 0), (1, 4, 10, 6)]

        # while a member subscribes to the topic, neither its offsets nor the group can be deleted
        refused = python_admin.delete_group_offsets(kafka_group, [KafkaPythonTopicPartition(topic_name, 0)])
        assert [e.errno for e in refused.values()] == [KafkaError.GROUP_SUBSCRIBED_TO_TOPIC]
        with pytest.raises(KafkaException) as busy:
            result(client.delete_consumer_groups([kafka_group])[kafka_group])
        assert busy.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        kafka_consumer.close()      # leaves the group
        ember_consumer.close()
    deleted = python_admin.delete_group_offsets(kafka_group, [KafkaPythonTopicPartition(topic_name, 1)])
    assert [e.errno for e in deleted.values()] == [0]
    left = result(client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(kafka_group)])[kafka_group])
    assert [(tp.partition, tp.offset) for tp in left.topic_partitions if tp.offset >= 0] == [(0, 10)]
    for group in (kafka_group, ember_group):
        assert result(client.delete_consumer_groups([group])[group]) is None
    gone = result(client.describe_consumer_groups([kafka_group])[kafka_group])
    assert gone.state == ConsumerGroupState.DEAD and gone.members == []
    python_admin.close()


def test_a_restarted_static_member_fences_the_old_one_and_keeps_the_generation(shared_cluster, topic_name):
    bootstrap = shared_cluster.kafka_bootstrap
    create_topic(bootstrap, topic_name, partitions=2)
    group = f"static-{topic_name}"
    config = {"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 30000,
              "heartbeat.interval.ms": 300, "partition.assignment.strategy": "range"}
    revoked: list[list[int]] = []
    first = Consumer({**config, "group.instance.id": "first"})
    other = Consumer({**config, "group.instance.id": "other"})
    replacement = None
    try:
        first.subscribe([topic_name])
        other.subscribe([topic_name], on_revoke=lambda _, parts: revoked.append([p.partition for p in parts]))
        poll_until([first, other], lambda: len(first.assignment()) == 1 and len(other.assignment()) == 1,
                   "the static members' assignment")
        # the development cluster has no initial rebalance delay: when `other` joined first, the
        # second join took a partition from it; only the restart below must not revoke anything
        revoked.clear()
        with EmberAdmin(shared_cluster.bootstrap) as ember_admin:
            before = ember_admin.describe_group(group)
        owned = first.assignment()

        replacement = Consumer({**config, "group.instance.id": "first"})   # same instance id: a restart
        replacement.subscribe([topic_name])
        poll_until([replacement, other], lambda: replacement.assignment() == owned, "the replacement's assignment")
        fenced: list[KafkaError] = []
        deadline = time.monotonic() + WAIT_S
        while not fenced:      # the replaced consumer's next heartbeat is refused
            assert time.monotonic() < deadline, "the replaced static member was not fenced"
            try:
                message = first.poll(0.2)
            except KafkaException as exc:
                fenced.append(exc.args[0])
                continue
            if message is not None and message.error() is not None and message.error().code() == KafkaError._FATAL:
                fenced.append(message.error())
        # librdkafka raises FENCED_INSTANCE_ID as a fatal error: "Static consumer fenced by other consumer ..."
        assert "static consumer fenced" in fenced[0].str().lower(), fenced[0]

        with EmberAdmin(shared_cluster.bootstrap) as ember_admin:
            after = ember_admin.describe_group(group)
        assert after.generation == before.generation and after.state == "Stable"
        assert {m.member_id for m in after.members} != {m.member_id for m in before.members}
        assert sorted(tp.partition for m in after.members for tp in m.assignment) == [0, 1]
        assert revoked == [] and len(other.assignment()) == 1      # the other member never rebalanced
        client = admin(bootstrap)      # referenced until the result is in
        described = result(client.describe_consumer_groups([group])[group])
        assert sorted(m.group_instance_id for m in described.members) == ["first", "other"]
    finally:
        for consumer in (first, other, replacement):
            if consumer is not None:
                consumer.close()


def test_deleting_an_unknown_group_answers_group_id_not_found(shared_cluster, topic_name):
    group = f"never-existed-{topic_name}"
    client = admin(shared_cluster.kafka_bootstrap)     # kept referenced while its future runs
    with pytest.raises(KafkaException) as unknown:
        result(client.delete_consumer_groups([group])[group])
    assert unknown.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
