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
