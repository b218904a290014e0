"""Small value types of the public client API (kafka-python names and field order)."""
from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """Where an acknowledged record landed. ``offset`` is -1 for acks=0 (no answer)."""
    topic: str
    partition: int
    offset: int
    timestamp: int


class BatchMetadata(NamedTuple):
    """Where one batch of a ``Producer.send_batch`` call landed: offsets base_offset.. +count-1."""
    topic: str
    partition: int
    base_offset: int
    record_count: int


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: object
    value: object
    headers: list[tuple[str, bytes]]


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class OffsetAndMetadata(NamedTuple):
    """A committed position: the next offset to read, plus an application string."""
    offset: int
    metadata: str = ""
