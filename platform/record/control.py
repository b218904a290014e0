"""Transaction markers: the control batches a partition leader writes to end a transaction.

A control batch is a Kafka v2 batch (magic 2) with attributes bits 4 (transactional) and 5
(control), the transaction's producer id and epoch, no sequence, and one record whose key says
commit or abort (Kafka's ``EndTransactionMarker``: key = version int16 0, type int16 0 abort /
1 commit; value = version int16 0, coordinator epoch int32). It is written in this format whatever
the data batches' format (docs/log.md), so Kafka consumers get it as stored and every reader can
tell it by its header.

The log cleaner stamps a marker it may remove later with a *delete horizon* (Kafka's KIP-534:
attributes bit 6, the base timestamp then holds the horizon): :func:`with_delete_horizon`,
:func:`delete_horizon`.
"""
from __future__ import annotations

import struct
from typing import Iterable, NamedTuple, Optional

import pyarrow as pa

from ember import errors
from ember.record import kafka_v2
from ember.record.crc import crc32c
from ember.record.header import (
    CODEC_MASK,
    CONTROL_FLAG,
    CRC_START,
    HEADER_SIZE,
    KAFKA_MAGIC,
    LOG_OVERHEAD,
    NO_SEQUENCE,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    Buffer,
)
from ember.record.schema import RECORD_SCHEMA

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
_ATTRIBUTES = struct.Struct(">h")
#: Kafka v2 attributes bit 6 (KIP-534): the batch's base timestamp is its delete horizon
DELETE_HORIZON_FLAG = 0x40


class Marker(NamedTuple):
    """What a control batch says: which producer's transaction ended, and how."""
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


def is_control(header: BatchHeader) -> bool:
    return header.magic == KAFKA_MAGIC and bool(header.attributes & CONTROL_FLAG)


def is_transactional(header: BatchHeader) -> bool:
    return bool(header.attributes & TRANSACTIONAL_FLAG)


def marker_batch(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                 timestamp_ms: int) -> bytes:
    """A control batch ending ``producer_id``'s transaction (base offset 0: the leader assigns it)."""
    record = pa.record_batch([pa.array([_KEY.pack(0, COMMIT if commit else ABORT)], pa.binary()),
                              pa.array([_VALUE.pack(0, coordinator_epoch)], pa.binary()),
                              pa.array([timestamp_ms], pa.int64()),
                              pa.array([None], RECORD_SCHEMA.field("headers").type)], schema=RECORD_SCHEMA)
    header = BatchHeader(base_offset=0, batch_length=0, partition_leader_epoch=0, magic=KAFKA_MAGIC, crc=0,
                         attributes=0, last_offset_delta=0, first_timestamp=timestamp_ms,
                         max_timestamp=timestamp_ms, producer_id=producer_id, producer_epoch=producer_epoch,
                         base_sequence=NO_SEQUENCE, record_count=1)
    batch = bytearray(kafka_v2.encode_batch(header, record, kafka_v2.NONE))
    _ATTRIBUTES.pack_into(batch, CRC_START, TRANSACTIONAL_FLAG | CONTROL_FLAG)
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


def read_marker(header: BatchHeader, batch: Buffer) -> Marker:
    """The marker a control batch holds; CorruptRecord if it holds none. A log opening reads every
    marker it holds, so the one uncompressed record of a marker is read straight from its bytes
    (a tenth of the time of decoding it into columns); anything else is decoded in full."""
    fields = _marker_fields(header, memoryview(batch))
    if fields is None:
        records = kafka_v2.decode_records(header, batch)
        keys = records.column("key")
        fields = (records.num_rows, keys[0].as_py() if records.num_rows else None,
                  records.column("value")[0].as_py() if records.num_rows else None)
    count, key, value = fields
    if count != 1 or key is None or len(key) != _KEY.size:
        raise errors.CorruptRecord(f"control batch at offset {header.base_offset} holds no transaction marker")
    version, kind = _KEY.unpack(key)
    if version != 0 or kind not in (ABORT, COMMIT):
        raise errors.CorruptRecord(f"control batch at offset {header.base_offset}: unknown control record "
                                   f"version {version} type {kind}")
    value = value or b""
    coordinator_epoch = _VALUE.unpack_from(value)[1] if len(value) >= _VALUE.size else -1
    return Marker(header.producer_id, header.producer_epoch, kind == COMMIT, coordinator_epoch)


def _marker_fields(header: BatchHeader, batch: memoryview) -> Optional[tuple[int, Optional[bytes], Optional[bytes]]]:
    """(1, key, value) of an uncompressed batch of one record with no headers, read from its bytes
    (Kafka's record: length, attributes, timestamp and offset deltas, key, value, header count, as
    varints); None for any other batch, or one whose record does not parse (decoded in full then)."""
    if header.record_count != 1 or header.attributes & CODEC_MASK:
        return None
    try:
        position = HEADER_SIZE
        length, position = _read_varint(batch, position)
        end = position + length
        if end != header.size or end > len(batch):
            return None
        position += 1                                                  # record attributes
        _, position = _read_varint(batch, position)                    # timestamp delta
        _, position = _read_varint(batch, position)                    # offset delta
        key, position = _read_bytes(batch, position, end)
        value, position = _read_bytes(batch, position, end)
        headers, position = _read_varint(batch, position)
    except IndexError:
        return None
    return (1, key, value) if headers == 0 and position == end else None


def _read_varint(data: memoryview, position: int) -> tuple[int, int]:
    """A zigzag varint at ``position`` and the position after it (IndexError past the end)."""
    shift = result = 0
    while shift < 64:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7
    raise IndexError("varint longer than 10 bytes")


def _read_bytes(data: memoryview, position: int, end: int) -> tuple[Optional[bytes], int]:
    length, position = _read_varint(data, position)
    if length < 0:
        return None, position
    if position + length > end:
        raise IndexError("field runs past the record")
    return bytes(data[position:position + length]), position + length


def delete_horizon(header: BatchHeader) -> Optional[int]:
    """The time (ms) after which the log cleaner may remove this batch, if one was stamped in it."""
    return header.first_timestamp if header.attributes & DELETE_HORIZON_FLAG else None


def with_delete_horizon(header: BatchHeader, batch: Buffer, horizon_ms: int) -> bytes:
    """The control batch ``batch`` stamped with a delete horizon, as Kafka's cleaner stamps one
    (KIP-534): attributes bit 6 set and the base timestamp set to ``horizon_ms``; the record keeps
    its timestamp (its delta now counts from the horizon), key and value, the batch its offsets,
    epochs and producer fields. Written uncompressed (a marker is one small record)."""
    records = kafka_v2.decode_records(header, batch)
    if records.num_rows != 1:
        raise errors.CorruptRecord(f"control batch at offset {header.base_offset} holds {records.num_rows} records")
    timestamp = records.column("timestamp")[0].as_py()
    body = (b"\x00" + _varint(timestamp - horizon_ms) + _varint(records.column("offset")[0].as_py() - header.base_offset)
            + _field(records.column("key")[0].as_py()) + _field(records.column("value")[0].as_py()) + _varint(0))
    record = _varint(len(body)) + body
    stamped = header._replace(batch_length=HEADER_SIZE - LOG_OVERHEAD + len(record), crc=0,
                              attributes=(header.attributes & ~CODEC_MASK) | DELETE_HORIZON_FLAG,
                              first_timestamp=horizon_ms, record_count=1)
    out = bytearray(stamped.pack() + record)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def _varint(value: int) -> bytes:
    """A zigzag varint (Kafka's record fields; int64 range)."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(value: Optional[bytes]) -> bytes:
    return _varint(-1) if value is None else _varint(len(value)) + value


class AbortedFilter:
    """A read_committed reader's filter over one partition's batches, in offset order: Kafka's
    consumer algorithm, per batch (never per record). ``aborted`` lists (producer id, first offset)
    of the aborted transactions overlapping what is read (a read_committed Fetch returns them, and
    the direct segment reader asks for them); a producer's transactional batches are dropped from
    its aborted transaction's first offset until its ABORT marker. Markers are never kept."""

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        self._pending = sorted(aborted, key=lambda txn: txn[1], reverse=True)   # pop() takes the first
        self._aborting: set[int] = set()

    def keep(self, header: BatchHeader, batch: Buffer) -> bool:
        while self._pending and self._pending[-1][1] <= header.last_offset:
            self._aborting.add(self._pending.pop()[0])
        if is_control(header):
            if header.producer_id in self._aborting and not read_marker(header, batch).commit:
                self._aborting.discard(header.producer_id)
            return False
        return not (is_transactional(header) and header.producer_id in self._aborting)
