"""ListOffsets responses (v1-v10) written with ``struct``, without building kio entities.

Spark's Kafka connector asks ListOffsets twice per poll of 500 records (the earliest and latest
offset of its partition, to detect data loss): 4,000 requests per million records read, the
Kafka listener's busiest request in a Spark batch read. Building the kio entity and encoding it
took about a third of such a request's CPU; the layout is small and fixed (ints, a topic name,
two arrays), so it is written directly here, and a property test checks every version
byte for byte against kio's encoding (``tests/protocol/kafka/test_list_offsets_response.py``).
"""
from __future__ import annotations

import functools
import io
import struct
from typing import Sequence

from kio.serial.writers import write_compact_array_length, write_compact_string, write_legacy_string

from ember.protocol.kafka.codec import EncodedResponse, response_class
from ember.wire.api_keys import ApiKey

_THROTTLE_FROM = 2      # throttle_time_ms
_LEADER_EPOCH_FROM = 4  # leader_epoch per partition
_FLEXIBLE_FROM = 6      # compact arrays and strings, tagged fields
_INT32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ihqq")   # partition_index, error_code, timestamp, offset
_NO_LEADER_EPOCH = _INT32.pack(-1)
_NO_TAGS = b"\x00"

#: (partition index, error code, timestamp, offset): one partition's answer
PartitionOffset = tuple[int, int, int, int]


def encode_list_offsets(api_version: int, topics: Sequence[tuple[str, Sequence[PartitionOffset]]]) -> EncodedResponse:
    """The response body of ListOffsets ``api_version`` (1-10) for ``topics``: (name, partitions).
    The same answer is asked again and again (Spark's connector, until new records arrive), so
    answers are kept (immutable) and encoded once."""
    return _encoded(api_version, tuple((name, tuple(partitions)) for name, partitions in topics))


@functools.lru_cache(maxsize=4096)
def _encoded(api_version: int, topics: tuple[tuple[str, tuple[PartitionOffset, ...]], ...]) -> EncodedResponse:
    """:func:`encode_list_offsets`: lengths and names go through kio's writers; the fixed-size
    fields are packed here."""
    flexible = api_version >= _FLEXIBLE_FROM
    epoch = _NO_LEADER_EPOCH if api_version >= _LEADER_EPOCH_FROM else b""
    partition_tail = epoch + _NO_TAGS if flexible else epoch
    out = io.BytesIO()
    if api_version >= _THROTTLE_FROM:
        out.write(_INT32.pack(0))
    _write_array_length(out, len(topics), flexible)
    codes: list[int] = []
    for name, partitions in topics:
        (write_compact_string if flexible else write_legacy_string)(out, name)
        _write_array_length(out, len(partitions), flexible)
        for partition in partitions:
            out.write(_PARTITION.pack(*partition))
            out.write(partition_tail)
            if partition[1]:
                codes.append(partition[1])
        if flexible:
            out.write(_NO_TAGS)
    if flexible:
        out.write(_NO_TAGS)
    header = response_class(ApiKey.LIST_OFFSETS, api_version).__header_schema__  # type: ignore[attr-defined]
    return EncodedResponse(header, out.getvalue(), tuple(codes))


def _write_array_length(out: io.BytesIO, count: int, flexible: bool) -> None:
    if flexible:
        write_compact_array_length(out, count)
    else:
        out.write(_INT32.pack(count))
