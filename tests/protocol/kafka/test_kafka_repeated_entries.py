"""A request that names one topic or partition many times gets one answer for it, as Kafka's
brokers give (Metadata's topics are a set, Fetch's partitions a map): one small frame must not make
the broker read a partition, or build an answer, ten thousand times (docs/protocol.md, "Hostile input")."""
from __future__ import annotations

import datetime
from typing import Callable

import pytest
from kafka_helpers import create_topic
from kafka_wire import KafkaWire
from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from ember.launcher.local import LocalCluster

pytestmark = pytest.mark.integration

REPEATS = 5000


def test_repeated_topics_and_partitions_are_answered_once(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(1)
    address = cluster.kafka_bootstrap.split(",")[0]
    create_topic(cluster.kafka_bootstrap, "repeated", partitions=2)
    with KafkaWire(address) as wire:
        metadata = wire.call(MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name="repeated"),) * REPEATS + (
                MetadataRequestTopic(topic_id=None, name="unknown-topic"),) * REPEATS,
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        assert [t.name for t in metadata.topics] == ["repeated", "unknown-topic"]
        fetch = wire.call(FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            topics=(FetchTopic(topic="repeated", partitions=(
                FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),
                FetchPartition(partition=1, fetch_offset=0, partition_max_bytes=1 << 20)) * REPEATS),
                    FetchTopic(topic="unknown-topic", partitions=(
                        FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1),) * REPEATS))))
        answered = [(t.topic, p.partition_index) for t in fetch.responses for p in t.partitions]
        assert answered == [("repeated", 0), ("repeated", 1), ("unknown-topic", 0)]


def test_repeated_groups_are_described_and_fetched_once(make_cluster: Callable[..., LocalCluster]) -> None:
    """A group's description carries every member's subscription and assignment: the Kafka fuzzer's
    75 KB DescribeGroups naming one group 7,500 times raised the broker's RSS by 220 MB."""
    from confluent_kafka import Consumer, TopicPartition
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
    from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics

    cluster = make_cluster(1)
    address = cluster.kafka_bootstrap.split(",")[0]
    create_topic(cluster.kafka_bootstrap, "repeated", partitions=2)
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "g-repeated", "log_level": 3})
    try:
        consumer.commit(offsets=[TopicPartition("repeated", 0, 5)], asynchronous=False)
    finally:
        consumer.close()
    with KafkaWire(address) as wire:
        described = wire.call(DescribeGroupsRequest(groups=("g-repeated", "g-unknown") * REPEATS,
                                                    include_authorized_operations=False))
        assert [g.group_id for g in described.groups] == ["g-repeated", "g-unknown"]
        first = OffsetFetchRequestGroup(group_id="g-repeated", topics=(
            OffsetFetchRequestTopics(name="repeated", partition_indexes=(0,)),))
        later = OffsetFetchRequestGroup(group_id="g-repeated", topics=None)
        fetched = wire.call(OffsetFetchRequest(groups=(first,) + (later,) * REPEATS, require_stable=False))
        assert [g.group_id for g in fetched.groups] == ["g-repeated"]
        assert [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
                for t in fetched.groups[0].topics] == [("repeated", [(0, 5)])]   # the first entry's topics
