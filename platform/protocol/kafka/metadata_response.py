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
import typing
from dataclasses import dataclass
from typing import Any, Callable

from kio.serial.writers import write_compact_array_length

from ember.cluster.metadata_cache import TopicMetadata
from ember.protocol.kafka.codec import EncodedResponse, build, encode_entity, error_codes, response_class
from ember.wire.api_keys import ApiKey

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
    hint = typing.get_type_hints(response_class(ApiKey.METADATA, api_version))["topics"]
    return typing.get_args(hint)[0]


def _array_length(flexible: bool, count: int) -> bytes:
    """An array's length as the version encodes it (a compact varint of count + 1, or an int32)."""
    if not flexible:
        return _INT32.pack(count)
    buffer = io.BytesIO()
    write_compact_array_length(buffer, count)
    return buffer.getvalue()


@functools.cache
def _bytes_after_topics(api_version: int) -> int:
    """How many bytes of a Metadata response follow its ``topics`` array (fixed-size fields and
    tagged fields), found by checking that kio's encoding of a response with one topic is its
    encoding with none with the topic spliced in: a schema where that fails is refused here,
    rather than answered wrongly."""
    cls = response_class(ApiKey.METADATA, api_version)
    flexible = bool(getattr(cls, "__flexible__", False))
    fields = {"brokers": [], "cluster_id": "c", "controller_id": 7, "cluster_authorized_operations": -7,
              "error_code": 0}
    topic = build(topic_class(api_version), {"error_code": 0, "name": "t", "topic_id": "7" * 32,
                                             "is_internal": True, "partitions": [],
                                             "topic_authorized_operations": -7})
    empty = encode_entity(build(cls, {**fields, "topics": []}))
    one = encode_entity(build(cls, {**fields, "topics": [topic]}))
    none_length, one_length, entry = _array_length(flexible, 0), _array_length(flexible, 1), encode_entity(topic)
    for after in range(len(empty) - len(none_length) + 1):
        at = len(empty) - after - len(none_length)
        if (empty[at:at + len(none_length)] == none_length
                and empty[:at] + one_length + entry + empty[at + len(none_length):] == one):
            return after
    raise RuntimeError(f"MetadataResponse v{api_version}: its topics array could not be located")


def assemble(api_version: int, fields: dict[str, Any], topics: list[EncodedTopic]) -> EncodedResponse:
    """The response of ``fields`` (every field but ``topics``) with the encoded ``topics``."""
    cls = response_class(ApiKey.METADATA, api_version)
    flexible = bool(getattr(cls, "__flexible__", False))
    rest = build(cls, {**fields, "topics": []})
    empty = encode_entity(rest)
    none_length = len(_array_length(flexible, 0))
    at = len(empty) - _bytes_after_topics(api_version) - none_length
    body = b"".join([empty[:at], _array_length(flexible, len(topics)), *(t.data for t in topics),
                     empty[at + none_length:]])
    codes = (*error_codes(rest), *(code for t in topics for code in t.error_codes))
    return EncodedResponse(cls.__header_schema__, body, codes)   # type: ignore[attr-defined]


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
            make: Callable[[], Any]) -> EncodedTopic:
        key = (meta.name, api_version)
        entry = self._entries.get(key)
        if entry is None or entry.meta is not meta or entry.live != live:
            entry = self._entries[key] = _Entry(meta, live, encode_topic(make()))
        return entry.topic

    def prune(self, topics: dict[str, TopicMetadata]) -> None:
        """Drop the entries of deleted or changed topics when the cache has outgrown its bound."""
        if len(self._entries) > 2 * self._pruned_at + 64:
            self._entries = {key: entry for key, entry in self._entries.items()
                             if topics.get(key[0]) is entry.meta}
            self._pruned_at = len(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
