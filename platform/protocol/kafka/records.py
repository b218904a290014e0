"""Kafka RecordBatch v2 (magic 2) <-> ember batches (61-byte v2-like header + Arrow IPC payload).

A Kafka client's batch becomes one ember batch with the same records, producer id, epoch and base
sequence, so the log assigns offsets and deduplicates idempotent retries exactly as for ember's
own producer, and ember's readers (Spark, consumer, direct reads) get columns with no per-record
work at read time. A stored ember batch is served to Kafka clients as one v2 batch with the same
offsets, timestamps (CreateTime, or the batch's LogAppendTime) and producer fields.

Per-record work uses aiokafka's Cython RecordBatch codec (``aiokafka.record``, Apache-2.0): the
fastest maintained one measured (docs/protocol.md has the figures). Codecs:

* decoding: none, gzip, snappy (xerial-framed as Java/kafka-python/aiokafka send it, and raw as
  librdkafka does), lz4 frames, zstd frames without a content size;
* storing: the Arrow payload keeps the producer's choice as closely as Arrow's IPC codecs allow
  (none -> none, lz4 and snappy -> lz4, zstd and gzip -> zstd), and the batch header remembers the
  Kafka codec itself (batches from ember's producer with gzip or snappy too);
* serving: in the Kafka codec the batch arrived with (as Kafka serves what producers wrote, so a
  client reads back what it can write); other batches from ember's clients by their Arrow codec, lz4 as
  Kafka lz4 and zstd as zstd. lz4 frames have independent blocks (Java refuses linked ones),
  snappy is xerial-framed (as Java writes it), zstd goes to Fetch v10+ only (lz4 before).
"""
from __future__ import annotations

from array import array

import cramjam
import pyarrow as pa
from aiokafka.codec import snappy_encode
from aiokafka.errors import CorruptRecordException, UnsupportedCodecError
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from ember.errors import CorruptRecord, InvalidRecord
from ember.record.batch import build_batch, decode_payload
from ember.record.header import CRC_START, HEADER_SIZE, LOG_APPEND_TIME_FLAG, LOG_OVERHEAD, BatchHeader, Buffer
from ember.record.schema import RECORD_SCHEMA

KAFKA_MAGIC = 2
_CODEC_MASK = 0x07
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
#: Kafka codec number -> its name (``build_batch`` stores each as ember.record.batch.COMPRESSION_TYPES says)
_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
#: Kafka codec an ember payload codec (batch attributes bits 0-2) is served as
_SERVED_AS = {0: NONE, 1: LZ4, 2: ZSTD}
ZSTD_MIN_FETCH_VERSION = 10   # Kafka's: older fetchers cannot take zstd
GZIP_LEVEL = LZ4_LEVEL = 1    # every fetch re-compresses: favour speed (lz4's default is ~15x slower)
_NO_LIMIT = (1 << 31) - 1
_HEADERS = RECORD_SCHEMA.field("headers").type
_NO_HEADERS: list[tuple[str, bytes | None]] = []   # shared, never mutated: aiokafka only reads it


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


def to_ember_batch(kafka_batch: Buffer) -> bytes:
    """One Kafka v2 batch as one ember batch; CorruptRecord / InvalidRecord when it cannot be."""
    header = BatchHeader.parse(kafka_batch)
    if header.attributes & (_TRANSACTIONAL | _CONTROL):
        raise InvalidRecord("transactional and control batches are not supported (ember has no transactions); "
                            "produce without transactional.id")
    codec = header.attributes & _CODEC_MASK
    if codec not in _NAMES:
        raise CorruptRecord(f"unknown compression codec {codec} in record batch attributes")
    if header.record_count <= 0 or header.last_offset_delta != header.record_count - 1:
        raise InvalidRecord(f"record batch of {header.record_count} records with last offset delta "
                            f"{header.last_offset_delta}; offsets must run 0..count-1")
    batch = DefaultRecordBatch(bytes(kafka_batch))
    if not batch.validate_crc():
        raise CorruptRecord("record batch CRC-32C does not match its contents")
    try:
        records = list(batch)
    except (CorruptRecordException, UnsupportedCodecError, cramjam.DecompressionError, UnicodeDecodeError,
            EOFError, OSError, ValueError, IndexError) as exc:
        raise CorruptRecord(f"record batch cannot be decoded: {type(exc).__name__}: {exc}") from None
    if len(records) != header.record_count:
        raise CorruptRecord(f"record batch holds {len(records)} records, its header says {header.record_count}")
    if [r.offset for r in records] != list(range(header.base_offset, header.base_offset + len(records))):
        raise InvalidRecord("record offset deltas must run 0, 1, 2, ... without gaps")
    # one pass per column: list comprehensions over the decoded records beat one loop appending to four
    keys = [r.key for r in records]
    values = [r.value for r in records]
    timestamps = [r.timestamp for r in records]
    headers = [r.headers for r in records]
    count = len(keys)
    table = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
                      "timestamp": pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(array("q", timestamps))]),
                      "headers": _headers_column(headers)})
    return build_batch(table, compression=_NAMES[codec], producer_id=header.producer_id,
                       producer_epoch=header.producer_epoch, base_sequence=header.base_sequence,
                       kafka_codec=codec)


def to_kafka_batch(ember_batch: Buffer, fetch_version: int) -> bytes:
    """One stored ember batch as one Kafka v2 batch (offsets, epoch and producer fields kept)."""
    header = BatchHeader.parse(ember_batch)
    records = decode_payload(header, ember_batch)
    timestamps = records.column("timestamp").to_pylist()
    keys = records.column("key").to_pylist()
    values = records.column("value").to_pylist()
    headers = _header_lists(records.column("headers"))
    builder = DefaultRecordBatchBuilder(KAFKA_MAGIC, NONE, 0, header.producer_id, header.producer_epoch,
                                        header.base_sequence, _NO_LIMIT)
    append = builder.append
    for delta in range(len(keys)):
        append(delta, timestamps[delta], keys[delta], values[delta], headers[delta])
    built = builder.build()
    codec = header.kafka_codec or _SERVED_AS.get(header.codec, NONE)
    if codec == ZSTD and fetch_version < ZSTD_MIN_FETCH_VERSION:
        codec = LZ4
    body = bytes(built[HEADER_SIZE:])
    if codec != NONE:
        body = _compress(codec, body)
    kafka = BatchHeader.parse(built)
    attributes = kafka.attributes | codec
    max_timestamp = kafka.max_timestamp
    if header.log_append_time:
        attributes |= LOG_APPEND_TIME_FLAG
        max_timestamp = header.max_timestamp
    kafka = kafka._replace(base_offset=header.base_offset, batch_length=HEADER_SIZE - LOG_OVERHEAD + len(body),
                           partition_leader_epoch=header.partition_leader_epoch, attributes=attributes,
                           max_timestamp=max_timestamp, crc=0)
    packed = kafka.pack()
    crc = calc_crc32c(packed[CRC_START:] + body)
    return kafka._replace(crc=crc).pack() + body


def _headers_column(headers: list[list[tuple[str, bytes | None]] | None]) -> pa.Array:
    """Records' headers as one list<struct<key, value>> column (null where a record has none),
    built from flat key and value arrays: nested Python lists convert ~5x slower."""
    if not any(headers):
        return pa.nulls(len(headers), _HEADERS)
    offsets, keys, values, missing = [0], [], [], []
    for pairs in headers:
        for key, value in pairs or ():
            keys.append(key)
            values.append(value)
        offsets.append(len(keys))
        missing.append(not pairs)
    entries = pa.StructArray.from_arrays([pa.array(keys, pa.string()), pa.array(values, pa.binary())],
                                         fields=list(_HEADERS.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), entries, type=_HEADERS, mask=pa.array(missing))


def _header_lists(column: pa.Array) -> list[list[tuple[str, bytes | None]]]:
    """The inverse of :func:`_headers_column`, as the lists aiokafka's encoder takes."""
    if column.null_count == len(column):
        return [_NO_HEADERS] * len(column)
    offsets = column.offsets.to_pylist()
    pairs = list(zip(column.values.field("key").to_pylist(), column.values.field("value").to_pylist()))
    valid = column.is_valid().to_pylist()   # a null entry may still span child values (Arrow allows it)
    return [pairs[start:end] if ok and end > start else _NO_HEADERS
            for start, end, ok in zip(offsets, offsets[1:], valid)]


def _compress(codec: int, data: bytes) -> bytes:
    if codec == LZ4:
        compressor = cramjam.lz4.Compressor(level=LZ4_LEVEL, content_checksum=False, block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data, level=GZIP_LEVEL))
    if codec == SNAPPY:
        return snappy_encode(data, xerial_compatible=True)
    return bytes(cramjam.zstd.compress(data))
