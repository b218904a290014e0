"""Metadata responses assembled from each topic's encoded entry, cached until the topic changes.

A topic of 1,000 partitions costs about 25 ms of the event loop to build and encode, and Kafka
clients ask for it again on every leader move and every ``metadata.max.age.ms``; at 10,000
partitions one answer would hold the loop for a quarter of a second. The metadata cache replaces a
topic's :class:`TopicMetadata` whenever its record or a partition state changes, so an entry is
keyed on that object, the live brokers it was shown with and the response version: a request for
unchanged topics is then a join of cached bytes. Authorization and topic lookup stay per request;
only the entry's bytes are shared (they hold nothing principal-specific).
"""
from __future__ import annotations

import functools
import io
import struct
from dataclasses import dataclass
from typing import Any, Callable, Collection, Sequence

from kio.serial.writers import write_compact_array_length

from ember.cluster.metadata_cache import TopicMetadata
from ember.ingest.metadata_view import PartitionView
from ember.protocol.kafka.codec import (
    EncodedResponse,
    build,
    encode_entity,
    error_codes,
    nested_class,
    response_class,
)
from ember.wire.api_keys import ApiKey
from ember.wire.reply import OK, error_fields

_INT32 = struct.Struct(">i")


@dataclass(frozen=True)
class EncodedTopic:
    data: bytes
    error_codes: tuple[int, ...]


def encode_topic(entity: Any) -> EncodedTopic:
    return EncodedTopic(encode_entity(entity), tuple(error_codes(entity)))


@functools.cache
def topic_class(api_version: int) -> type:
    """The class of one entry of a Metadata response's ``topics`` array."""
    return nested_class(response_class(ApiKey.METADATA, api_version), "topics")


def _array_length(flexible: bool, count: int) -> bytes:
    """An array's length as the version encodes it (a compact varint of count + 1, or an int32)."""
    if not flexible:
        return _INT32.pack(count)
    buffer = io.BytesIO()
    write_compact_array_length(buffer, count)
    return buffer.getvalue()


def _bytes_after_array(flexible: bool, empty: bytes, one: bytes, item: bytes) -> int | None:
    """How many bytes of ``empty`` (an entity encoded with an empty array) follow that array,
    found by checking that ``one`` (the entity with the array holding ``item``) is ``empty`` with
    the item spliced in; None when no position fits."""
    none_length, one_length = _array_length(flexible, 0), _array_length(flexible, 1)
    for after in range(len(empty) - len(none_length) + 1):
        at = len(empty) - after - len(none_length)
        if (empty[at:at + len(none_length)] == none_length
                and empty[:at] + one_length + item + empty[at + len(none_length):] == one):
            return after
    return None


def _splice(flexible: bool, empty: bytes, after: int, items: list[bytes] | tuple[bytes, ...], count: int) -> bytes:
    """``empty`` (encoded with an empty array followed by ``after`` bytes) with ``count`` encoded
    items (joined in ``items``) in that array."""
    at = len(empty) - after - len(_array_length(flexible, 0))
    return b"".join([empty[:at], _array_length(flexible, count), *items, empty[len(empty) - after:]])


@functools.cache
def _bytes_after_topics(api_version: int) -> int:
    """How many bytes of a Metadata response follow its ``topics`` array (fixed-size fields and
    tagged fields), checked against kio's own encoding: a schema where the splice fails is
    refused here, rather than answered wrongly."""
    cls = response_class(ApiKey.METADATA, api_version)
    fields = {"brokers": [], "cluster_id": "c", "controller_id": 7, "cluster_authorized_operations": -7,
              "error_code": 0}
    topic = build(topic_class(api_version), {"error_code": 0, "name": "t", "topic_id": "7" * 32,
                                             "is_internal": True, "partitions": [],
                                             "topic_authorized_operations": -7})
    after = _bytes_after_array(_flexible(cls), encode_entity(build(cls, {**fields, "topics": []})),
                               encode_entity(build(cls, {**fields, "topics": [topic]})), encode_entity(topic))
    if after is None:
        raise RuntimeError(f"MetadataResponse v{api_version}: its topics array could not be located")
    return after


def _flexible(cls: type) -> bool:
    return bool(getattr(cls, "__flexible__", False))


def assemble(api_version: int, fields: dict[str, Any], topics: list[EncodedTopic]) -> EncodedResponse:
    """The response of ``fields`` (every field but ``topics``) with the encoded ``topics``."""
    cls = response_class(ApiKey.METADATA, api_version)
    rest = build(cls, {**fields, "topics": []})
    body = _splice(_flexible(cls), encode_entity(rest), _bytes_after_topics(api_version),
                   [t.data for t in topics], len(topics))
    codes = (*error_codes(rest), *(code for t in topics for code in t.error_codes))
    return EncodedResponse(cls.__header_schema__, body, codes)   # type: ignore[attr-defined]


def partition_values(view: PartitionView, live: Collection[int]) -> dict[str, Any]:
    """A partition's Metadata (and DescribeTopicPartitions) entry as field values."""
    return {**(error_fields(view.error) if view.error else OK), "partition_index": view.index,
            "leader_id": view.leader, "leader_epoch": view.leader_epoch, "replica_nodes": view.replicas,
            "isr_nodes": view.isr, "offline_replicas": [r for r in view.replicas if r not in live],
            "eligible_leader_replicas": [], "last_known_elr": []}


@functools.cache
def partition_class(api_version: int) -> type:
    """The class of one entry of a Metadata topic entry's ``partitions`` array."""
    return nested_class(topic_class(api_version), "partitions")


#: A partition entry's values for the layout checks below (every field set, none at a default).
_SAMPLE_PARTITION: dict[str, Any] = {
    **OK, "partition_index": 3, "leader_id": 1, "leader_epoch": 2, "replica_nodes": [1, 2], "isr_nodes": [1],
    "offline_replicas": [2], "eligible_leader_replicas": [], "last_known_elr": []}


@functools.cache
def _index_at(api_version: int) -> int:
    """Where ``partition_index`` (an int32) sits in an encoded partition entry, checked against
    kio's encoding of two entries that differ only there."""
    probe = _INT32.pack(0x7E5A3C1B)
    zero = encode_entity(build(partition_class(api_version), {**_SAMPLE_PARTITION, "partition_index": 0}))
    other = encode_entity(build(partition_class(api_version), {**_SAMPLE_PARTITION, "partition_index": 0x7E5A3C1B}))
    at = other.find(probe)
    if at < 0 or len(zero) != len(other) or zero[:at] + probe + zero[at + 4:] != other:
        raise RuntimeError(f"MetadataResponse v{api_version}: partition_index could not be located")
    return at


@functools.cache
def _bytes_after_partitions(api_version: int) -> int:
    """How many bytes of an encoded topic entry follow its ``partitions`` array, checked as
    :func:`_bytes_after_topics` is."""
    cls = topic_class(api_version)
    fields = {"error_code": 0, "name": "t", "topic_id": "7" * 32, "is_internal": True,
              "topic_authorized_operations": -7}
    partition = build(partition_class(api_version), _SAMPLE_PARTITION)
    after = _bytes_after_array(_flexible(cls), encode_entity(build(cls, {**fields, "partitions": []})),
                               encode_entity(build(cls, {**fields, "partitions": [partition]})),
                               encode_entity(partition))
    if after is None:
        raise RuntimeError(f"MetadataResponse v{api_version}: a topic's partitions array could not be located")
    return after


class PartitionTemplates:
    """Topic entries whose partitions are encoded once per distinct shape (error, leader, epoch,
    replicas, ISR, offline replicas), each partition being its shape's bytes with its own index
    put in: a new topic of 1,000 partitions, all led by their first replica, has as many shapes
    as replica orders (3 on 3 brokers), and kio encodes those instead of 1,000 entries (about 28
    ms of the event loop, while every broker opens the topic's logs). Bounded: the templates are
    dropped when a new one would make more than ``limit``."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._templates: dict[tuple[Any, ...], tuple[bytes, bytes, int]] = {}

    def topic_entry(self, api_version: int, fields: dict[str, Any], views: Sequence[PartitionView],
                    live: Collection[int]) -> EncodedTopic:
        """The encoded topic entry of ``fields`` (all but ``partitions``) with ``views``."""
        cls = topic_class(api_version)
        at = _index_at(api_version)
        templates = self._templates
        pack = _INT32.pack
        parts: list[bytes] = []
        codes: list[int] = []
        for view in views:
            offline = tuple(r for r in view.replicas if r not in live)
            key = (api_version, type(view.error), view.leader, view.leader_epoch, tuple(view.replicas),
                   tuple(view.isr), offline)
            template = templates.get(key)
            if template is None:
                if len(templates) >= self.limit:
                    templates.clear()
                values = {**partition_values(view, live), "partition_index": 0}
                encoded = encode_entity(build(partition_class(api_version), values))
                template = templates[key] = (encoded[:at], encoded[at + 4:], values["error_code"])
            parts += (template[0], pack(view.index), template[1])
            if template[2]:
                codes.append(template[2])
        topic = build(cls, {**fields, "partitions": []})
        data = _splice(_flexible(cls), encode_entity(topic), _bytes_after_partitions(api_version), parts, len(views))
        return EncodedTopic(data, (*error_codes(topic), *codes))

    def __len__(self) -> int:
        return len(self._templates)


@dataclass
class _Entry:
    meta: TopicMetadata
    live: frozenset[int]
    topic: EncodedTopic


class TopicEntryCache:
    """Each topic's encoded Metadata entry per response version, valid while the topic's metadata
    object and the live brokers are those it was built from. Bounded: once the cache has doubled
    since it was last pruned, entries whose topic is gone or has changed since are dropped (an
    amortized pass, never one per request)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, int], _Entry] = {}
        self._pruned_at = 0

    def get(self, api_version: int, meta: TopicMetadata, live: frozenset[int],
            make: Callable[[], EncodedTopic]) -> EncodedTopic:
        key = (meta.name, api_version)
        entry = self._entries.get(key)
        if entry is None or entry.meta is not meta or entry.live != live:
            entry = self._entries[key] = _Entry(meta, live, make())
        return entry.topic

    def prune(self, topics: dict[str, TopicMetadata]) -> None:
        """Drop the entries of deleted or changed topics when the cache has outgrown its bound."""
        if len(self._entries) > 2 * self._pruned_at + 64:
            self._entries = {key: entry for key, entry in self._entries.items()
                             if topics.get(key[0]) is entry.meta}
            self._pruned_at = len(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
