"""Kafka RecordBatch v2 on ember's log: the Kafka listener's side of the stored format (docs/log.md).

A Kafka client's batch is stored as its producer sent it (magic 2): the leader patches its base
offset and leader epoch, which Kafka's CRC-32C does not cover, and checks the CRC and every record
before writing (``ember.log``); a Kafka consumer reading it is served the stored bytes, as Kafka
serves them. ember's readers (Spark, ``poll_batches``, direct reads) decode it to Arrow columns
in one native pass per batch (``ember.record.kafka_v2``).

Batches from ember's own clients (magic 1, Arrow) reach Kafka consumers as v2 batches built in one
native pass per batch, in the Kafka codec they were produced with (batches with gzip or snappy
remember it), else by their Arrow codec: lz4 as lz4, zstd as zstd. zstd goes to Fetch v10+ only
(Kafka's rule), lz4 to older fetchers, stored Kafka batches included.
"""
from __future__ import annotations

import pyarrow.compute as pc

from ember.errors import CorruptRecord, InvalidRecord
from ember.record.batch import iter_batches, stored_columns
from ember.record.header import (
    HEADER_SIZE,
    KAFKA_MAGIC,
    LOG_OVERHEAD,
    BatchHeader,
    Buffer,
)
from ember.record.kafka_v2 import decode_records, encode_batch

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
#: Kafka codec an ember payload codec (batch attributes bits 0-2) is served as
_SERVED_AS = {0: NONE, 1: LZ4, 2: ZSTD}
ZSTD_MIN_FETCH_VERSION = 10   # Kafka's: older fetchers cannot take zstd


def split_batches(records: Buffer) -> list[memoryview]:
    """The v2 batches concatenated in a Produce request's records field (whole batches only)."""
    view = memoryview(records)
    batches, pos = [], 0
    while pos < len(view):
        if len(view) - pos < HEADER_SIZE:
            raise CorruptRecord(f"truncated record batch header at byte {pos} ({len(view) - pos} bytes)")
        header = BatchHeader.parse(view, pos)
        if header.magic != KAFKA_MAGIC:
            raise CorruptRecord(f"record batch magic {header.magic} at byte {pos}: Kafka clients must send "
                                f"RecordBatch v2 (magic 2, Produce v3+)")
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > len(view):
            raise CorruptRecord(f"record batch at byte {pos} claims {header.batch_length} bytes, "
                                f"{len(view) - pos - LOG_OVERHEAD} are there")
        batches.append(view[pos:pos + header.size])
        pos += header.size
    return batches


def produced_batch(records: Buffer | None) -> memoryview:
    """A partition's records field in a Produce request: exactly one v2 batch, as Kafka requires.
    Its CRC and records are checked where it is appended (``Log.append_as_leader``, which also
    refuses control batches from producers), whether it is transactional by the Produce path
    (``ember.ingest.produce``)."""
    batches = split_batches(records or b"")
    if len(batches) != 1:
        raise InvalidRecord(f"a Produce request must carry exactly one record batch per partition, not {len(batches)}")
    return batches[0]


def fetched_batches(data: Buffer, fetch_version: int) -> Buffer:
    """Stored batches (whole, as a log read returns them) as Kafka v2 batches: stored Kafka batches
    as they are, ember's built from their columns. ``data`` itself when nothing needs building."""
    view = memoryview(data)
    parts: list[Buffer] = []
    start = end = 0            # the run of stored Kafka batches that goes out as it is
    for header, raw in iter_batches(view, verify_crc=False):
        codec = _served_codec(header, fetch_version)
        if header.is_kafka and codec == header.codec:
            end += header.size
            continue
        if end > start:
            parts.append(view[start:end])
        columns = decode_records(header, raw) if header.is_kafka else stored_columns(header, raw)
        # a cleaned batch keeps its records' offsets (only stored Kafka batches have gaps)
        deltas = pc.subtract(columns.column("offset"), header.base_offset) if header.has_gaps else None
        parts.append(encode_batch(header, columns, codec, deltas))
        start = end = end + header.size
    if not parts:
        return view[start:end]
    if end > start:
        parts.append(view[start:end])
    return b"".join(parts)


def _served_codec(header: BatchHeader, fetch_version: int) -> int:
    if header.is_kafka:
        codec = header.codec
    else:
        codec = header.kafka_codec or _SERVED_AS.get(header.codec, NONE)
    return LZ4 if codec == ZSTD and fetch_version < ZSTD_MIN_FETCH_VERSION else codec
