"""Metadata responses assembled from cached per-topic bytes: byte for byte what kio encodes for the
whole response, in every version, and each topic's entry rebuilt exactly when what it shows changed."""
from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader

from ember.cluster.metadata_cache import TopicMetadata
from ember.cluster.records import BrokerInfo, PartitionState, TopicRecord
from ember.errors import ErrorCode, LeaderNotAvailable, TopicAuthorizationFailed
from ember.ingest.metadata_view import MetadataView, PartitionView
from ember.protocol.kafka.codec import KafkaRequest, build, encode_response, request_class, response_class
from ember.protocol.kafka.handlers_cluster import ClusterHandlers
from ember.protocol.kafka.metadata_response import (
    EncodedTopic,
    PartitionTemplates,
    TopicEntryCache,
    assemble,
    encode_topic,
    partition_values,
    topic_class,
)
from ember.wire.api_keys import ApiKey

VERSIONS = range(0, 14)
FIELDS = {"error_code": 0, "brokers": [{"node_id": 1, "broker_id": 1, "host": "127.0.0.1", "port": 9092,
                                        "rack": None}],
          "cluster_id": "cluster", "controller_id": 1, "cluster_authorized_operations": -(1 << 31)}


def topic_values(name: str, partitions: int, error_code: int = 0) -> dict:
    return {"error_code": error_code, "name": name, "topic_id": uuid.uuid4(), "is_internal": False,
            "topic_authorized_operations": -(1 << 31),
            "partitions": [{"error_code": ErrorCode.LEADER_NOT_AVAILABLE if i % 3 == 2 else 0, "partition_index": i,
                            "leader_id": -1 if i % 3 == 2 else 1, "leader_epoch": i, "replica_nodes": [1, 2, 3],
                            "isr_nodes": [1, 2], "offline_replicas": [3]} for i in range(partitions)]}


def kio_frame(version: int, topics: list[dict]) -> bytes:
    return encode_response(5, build(response_class(ApiKey.METADATA, version), {**FIELDS, "topics": topics}))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("sizes", [[], [0], [1], [3, 0, 200]], ids=["no-topic", "empty", "one", "three"])
def test_an_assembled_response_is_what_kio_encodes_for_the_whole(version, sizes):
    topics = [topic_values(f"t{i}", n, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if n == 0 else 0)
              for i, n in enumerate(sizes)]
    entries = [encode_topic(build(topic_class(version), t)) for t in topics]
    assembled = assemble(version, FIELDS, entries)
    assert encode_response(5, assembled) == kio_frame(version, topics)


@settings(max_examples=40, deadline=None)
@given(version=st.sampled_from(VERSIONS), sizes=st.lists(st.integers(0, 40), max_size=6))
def test_error_codes_of_an_assembled_response_are_those_of_its_entries(version, sizes):
    topics = [topic_values(f"t{i}", n) for i, n in enumerate(sizes)]
    assembled = assemble(version, FIELDS, [encode_topic(build(topic_class(version), t)) for t in topics])
    expected = sorted(p["error_code"] for t in topics for p in t["partitions"] if p["error_code"])
    assert sorted(assembled.error_codes) == expected



TOPIC_FIELDS = {"error_code": 0, "name": "t", "topic_id": uuid.UUID(int=7), "is_internal": False,
                "topic_authorized_operations": -(1 << 31)}
views_strategy = st.lists(st.builds(
    lambda index, replicas, leader, epoch, isr: PartitionView(
        index, leader, epoch, replicas, isr, LeaderNotAvailable("no leader") if leader < 0 else None),
    index=st.integers(0, 2**31 - 1), replicas=st.lists(st.integers(1, 5), min_size=1, max_size=4, unique=True),
    leader=st.sampled_from([-1, 1, 2, 3]), epoch=st.integers(-1, 2**31 - 1),
    isr=st.lists(st.integers(1, 5), max_size=4, unique=True)), max_size=30)


def kio_topic_entry(version: int, views: list[PartitionView], live: frozenset[int]) -> EncodedTopic:
    return encode_topic(build(topic_class(version), {**TOPIC_FIELDS,
                                                     "partitions": [partition_values(v, live) for v in views]}))


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from(VERSIONS), views=views_strategy,
       live=st.frozensets(st.integers(1, 5), max_size=5), limit=st.sampled_from([1, 4096]))
def test_a_topic_entry_from_partition_templates_is_what_kio_encodes(version, views, live, limit):
    templates = PartitionTemplates(limit)
    for _ in range(2):       # the second time from the templates the first one made
        entry = templates.topic_entry(version, TOPIC_FIELDS, views, live)
        expected = kio_topic_entry(version, views, live)
        assert entry.data == expected.data
        assert sorted(entry.error_codes) == sorted(expected.error_codes)


def test_a_new_topic_is_encoded_once_per_replica_order_not_per_partition():
    live = frozenset({1, 2, 3})
    views = [PartitionView(i, 1 + i % 3, 0, [1 + (i + k) % 3 for k in range(3)], [1 + (i + k) % 3 for k in range(3)])
             for i in range(1000)]
    templates = PartitionTemplates()
    assert templates.topic_entry(12, TOPIC_FIELDS, views, live) == kio_topic_entry(12, views, live)
    assert len(templates) == 3


def test_partition_templates_are_bounded():
    templates = PartitionTemplates(limit=10)
    live = frozenset({1})
    for epoch in range(100):
        views = [PartitionView(0, 1, epoch, [1], [1])]
        assert templates.topic_entry(9, TOPIC_FIELDS, views, live) == kio_topic_entry(9, views, live)
    assert len(templates) <= 11

def meta(name: str = "t", leader: int = 1) -> TopicMetadata:
    record = TopicRecord("ab" * 16, {0: [1, 2, 3], 1: [2, 3, 1]}, {})
    return TopicMetadata(name, record, {0: PartitionState(leader, 1, [1, 2, 3], 1)})


class Builds:
    """Counts the entries built (the work the cache saves)."""

    def __init__(self, version: int = 12) -> None:
        self.count = 0
        self.version = version

    def __call__(self) -> EncodedTopic:
        self.count += 1
        return encode_topic(build(topic_class(self.version), topic_values("t", 2)))


def test_an_unchanged_topic_is_encoded_once():
    cache, builds, topic = TopicEntryCache(), Builds(), meta()
    first = cache.get(12, topic, frozenset({1, 2, 3}), builds)
    again = cache.get(12, topic, frozenset({1, 2, 3}), builds)
    assert builds.count == 1 and again is first


@pytest.mark.parametrize("change", ["new-metadata", "broker-left", "other-version"])
def test_a_topic_entry_is_rebuilt_when_what_it_shows_changes(change):
    cache, builds, topic = TopicEntryCache(), Builds(), meta()
    cache.get(12, topic, frozenset({1, 2, 3}), builds)
    if change == "new-metadata":     # the metadata cache replaces the object on every state change
        cache.get(12, meta(leader=2), frozenset({1, 2, 3}), builds)
    elif change == "broker-left":
        cache.get(12, topic, frozenset({1, 2}), builds)
    else:
        cache.get(13, topic, frozenset({1, 2, 3}), Builds(13))
        cache.get(12, topic, frozenset({1, 2, 3}), builds)
    assert builds.count == (1 if change == "other-version" else 2)


def test_entries_of_deleted_topics_are_dropped_once_the_cache_outgrows_its_bound():
    cache, builds = TopicEntryCache(), Builds()
    kept = meta("kept")
    for i in range(200):
        cache.get(12, meta(f"gone-{i}"), frozenset({1}), builds)
    cache.get(12, kept, frozenset({1}), builds)
    cache.prune({"kept": kept})
    assert len(cache) == 1
    cache.get(12, kept, frozenset({1}), builds)
    assert builds.count == 201



class Cluster:
    """What ClusterHandlers reads of the broker core: brokers, topics and the controller, which
    the test changes as the watches would (a new TopicMetadata object per change)."""

    def __init__(self) -> None:
        self.live = {b: BrokerInfo(b, "127.0.0.1", 9000 + b, (("KAFKA", "127.0.0.1", 9000 + b),)) for b in (1, 2, 3)}
        self.metas = {"t": TopicMetadata("t", TopicRecord("cd" * 16, {0: [1, 2, 3], 1: [2, 3, 1]}, {}),
                                         {0: PartitionState(1, 0, [1, 2, 3], 1), 1: PartitionState(2, 0, [2, 3], 1)})}

    def brokers(self) -> dict[int, BrokerInfo]:
        return dict(self.live)

    def topics(self) -> dict[str, TopicMetadata]:
        return dict(self.metas)

    def topic(self, name: str) -> TopicMetadata | None:
        return self.metas.get(name)

    def controller_id(self) -> int:
        return 1

    def move_leader(self, index: int, leader: int) -> None:
        meta = self.metas["t"]
        old = meta.states[index]
        self.metas["t"] = TopicMetadata("t", meta.record, {**meta.states, index: replace(old, leader=leader,
                                                                                        leader_epoch=old.leader_epoch + 1)})


def handlers(cluster: Cluster, denied: tuple[str, ...] = ()) -> ClusterHandlers:
    access = SimpleNamespace(check_topic=lambda operation, topic: _deny(topic, denied),
                             visible_topics=lambda names: [n for n in names if n not in denied])
    view = MetadataView(cluster, None, lambda meta, index: "no leader", access)   # type: ignore[arg-type]
    core = SimpleNamespace(cache=cluster, view=view, cluster_id="c")
    return ClusterHandlers(core, "KAFKA")   # type: ignore[arg-type]


def _deny(topic: str, denied: tuple[str, ...]) -> None:
    if topic in denied:
        raise TopicAuthorizationFailed(f"not allowed to describe {topic}")


def ask(handler: ClusterHandlers, version: int = 12) -> Any:
    request = build(request_class(ApiKey.METADATA, version), {"topics": None, "allow_auto_topic_creation": False,
                                                               "include_topic_authorized_operations": False})
    frame = encode_response(1, asyncio.run(handler.metadata(KafkaRequest(ApiKey.METADATA, version, 1, "c", request,
                                                                          memoryview(b"")))))
    cls = response_class(ApiKey.METADATA, version)
    return entity_reader(cls)(memoryview(frame)[8:], 1 if cls.__flexible__ else 0)[0]


@pytest.mark.parametrize("change", ["leader-moved", "broker-left", "topic-recreated", "nothing"])
def test_a_cached_metadata_answer_is_what_a_fresh_handler_answers_after_a_change(change):
    cluster = Cluster()
    cached = handlers(cluster)
    before = ask(cached)
    if change == "leader-moved":
        cluster.move_leader(0, 2)
    elif change == "broker-left":
        del cluster.live[2]
    elif change == "topic-recreated":
        cluster.metas["t"] = TopicMetadata("t", TopicRecord("ef" * 16, {0: [3, 1, 2]}, {}), {})
    after = ask(cached)
    assert after == ask(handlers(cluster))
    assert (after == before) == (change == "nothing")


def test_a_principal_that_may_not_describe_a_topic_is_not_shown_its_cached_entry():
    cluster = Cluster()
    shared = handlers(cluster)
    assert [t.name for t in ask(shared).topics] == ["t"]
    shared.core.view.access = SimpleNamespace(check_topic=lambda operation, topic: _deny(topic, ("t",)),
                                              visible_topics=lambda names: [])
    assert ask(shared).topics == ()
