"""Kafka's consumer protocol structs (ConsumerProtocolSubscription, ConsumerProtocolAssignment):
what Kafka consumers carry in JoinGroup's protocol metadata and SyncGroup's assignments, opaque
bytes to the group protocol itself. The broker reads them to know a member's topics and partitions
(describe, lag, OffsetDelete) and writes them for ember's own members, whose subscriptions and
assignments are plain lists, so Kafka's tools describe ember's groups as they describe their own.
Each is an int16 schema version followed by the struct.
"""
from __future__ import annotations

import itertools
import struct
from typing import Any, Iterable

from kio.index import load_entity_schema
from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_assignment.v0.data import TopicPartition as AssignedTopic
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.serial import entity_reader
from kio.static.constants import EntityType
from kio.static.protocol import Entity

from ember.errors import InvalidRequest
from ember.protocol.kafka.codec import encode_entity
from ember.wire.types import TopicPartition

#: The protocol type of consumer groups (Kafka's ``ConsumerProtocol.PROTOCOL_TYPE``).
CONSUMER = "consumer"
SUBSCRIPTION, ASSIGNMENT = "consumer_protocol_subscription", "consumer_protocol_assignment"
NEWEST_KNOWN = 3
_SCHEMA_VERSION = struct.Struct(">h")


def read(name: str, data: bytes) -> Any:
    """A subscription or assignment (a newer version than known is read as the newest known, as
    Kafka does: later versions only append fields)."""
    (version,) = _SCHEMA_VERSION.unpack_from(data)
    cls = load_entity_schema(name, max(0, min(version, NEWEST_KNOWN)), EntityType.data)
    return entity_reader(cls)(data, _SCHEMA_VERSION.size)[0]


def _write(struct_v0: Entity) -> bytes:
    """Version 0 of a struct: what every consumer reads."""
    return _SCHEMA_VERSION.pack(0) + encode_entity(struct_v0)


def subscribed_topics(protocol_type: str, protocols: list[tuple[str, bytes]]) -> list[str]:
    """The topics a consumer subscribes to; [] when not a consumer's subscription."""
    if protocol_type != CONSUMER or not protocols:
        return []
    try:
        return sorted(read(SUBSCRIPTION, protocols[0][1]).topics)
    except Exception:
        return []


def assigned_partitions(protocol_type: str, data: bytes) -> list[TopicPartition]:
    """The partitions a group leader's assignment gives one consumer."""
    if protocol_type != CONSUMER or not data:
        return []
    try:
        assignment = read(ASSIGNMENT, data)
    except Exception as exc:
        raise InvalidRequest(f"the leader's assignment is not a consumer-protocol assignment: {exc}") from None
    return sorted(TopicPartition(t.topic, p) for t in assignment.assigned_partitions for p in t.partitions)


def subscription(topics: Iterable[str]) -> bytes:
    return _write(ConsumerProtocolSubscription(topics=tuple(topics), user_data=None))


def assignment(partitions: Iterable[TopicPartition]) -> bytes:
    by_topic = itertools.groupby(sorted(partitions), key=lambda tp: tp.topic)
    # ignore: kio's i32 is an int bounded at run time only (a phantom type), which an int does not narrow to
    return _write(ConsumerProtocolAssignment(assigned_partitions=tuple(
        AssignedTopic(topic=topic, partitions=tuple(tp.partition for tp in tps))   # type: ignore[misc]
        for topic, tps in by_topic),
        user_data=None))
