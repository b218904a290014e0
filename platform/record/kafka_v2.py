"""Kafka RecordBatch v2 records <-> Arrow columns, one native call per batch (``ember.record._v2codec``).

* :func:`decode_records`: a whole v2 batch (header + records section, any Kafka codec) -> the columns of
  ``DECODED_SCHEMA``; :func:`validate_records` the same checks without building columns.
* :func:`encode_batch`: the columns of a ``RECORD_SCHEMA`` record batch -> a complete v2 batch, CRC-32C
  included.

The C side walks a records section twice without the GIL (validate and size, then fill buffers allocated
once at their exact sizes); the Arrow arrays are built over those buffers with ``pa.Array.from_buffers``,
so the Python work is constant per batch, never per record. Decoding is strict: structural damage is
:class:`~ember.errors.CorruptRecord`, offset deltas other than 0, 1, 2, ... are
:class:`~ember.errors.InvalidRecord` (a stored batch the log cleaner rewrote may skip offsets, ascending up
to its header's last offset delta: decoding gives each record its own offset), and no declared length is
believed beyond the bytes that are there (decompressed sizes are bounded from the frames' own structure and
capped at ``max_bytes`` before anything is allocated), so a hostile batch costs at most a small multiple of
its own size.

Codecs (attributes bits 0-2): gzip; snappy both xerial-framed (Java, kafka-python, aiokafka) and raw
(librdkafka); lz4 frames; zstd frames with or without a content size. Encoding writes lz4 frames with
independent blocks and no content checksum (Java refuses linked blocks), xerial-framed snappy (as Java
writes it), gzip and lz4 at level 1 (batches are re-encoded on fetch: speed first).
"""
from __future__ import annotations

import zlib
from typing import Optional

import cramjam
import pyarrow as pa

from ember.errors import CorruptRecord, InvalidRecord
from ember.record import _v2codec
from ember.record.crc import crc32c
from ember.record.header import (
    CODEC_MASK,
    CRC_START,
    HEADER_SIZE,
    KAFKA_MAGIC,
    LOG_APPEND_TIME_FLAG,
    LOG_OVERHEAD,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    Buffer,
)
from ember.record.schema import DECODED_SCHEMA, HEADERS_TYPE

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
DEFAULT_MAX_BYTES = 64 << 20          # decompressed records section cap (CorruptRecord beyond)
GZIP_LEVEL = LZ4_LEVEL = 1
XERIAL_HEADER = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
XERIAL_BLOCK = 32 << 10               # xerial's (and Java's) block size
_HEADER_ENTRY_FIELDS = list(HEADERS_TYPE.value_type)


# --- decoding ---------------------------------------------------------------------------------

def decode_records(header: BatchHeader, batch: Buffer, *, max_bytes: int = DEFAULT_MAX_BYTES) -> pa.RecordBatch:
    """The records of one v2 batch (``batch``: header + records section, ``header`` parsed from it and its
    CRC already checked) as columns of ``DECODED_SCHEMA``. Timestamps are the batch's max timestamp for
    every record under LogAppendTime. CorruptRecord / InvalidRecord when the records are not sound."""
    count = header.record_count
    with _section(header, batch, max_bytes, gaps=True) as section:
        try:
            (offsets, ts, key_valid, key_offsets, key_data, key_nulls, value_valid, value_offsets, value_data, value_nulls,
             list_valid, list_offsets, with_headers, hkey_offsets, hkey_data, hvalue_valid, hvalue_offsets,
             hvalue_data, hvalue_nulls, header_count) = _v2codec.decode(
                section, count, header.base_offset, header.first_timestamp, header.log_append_time, header.max_timestamp,
                max_offset_delta=header.last_offset_delta if header.has_gaps else -1)
        except _v2codec.CorruptError as exc:
            raise CorruptRecord(f"record batch at offset {header.base_offset}: {exc}") from None
        except _v2codec.InvalidError as exc:
            raise InvalidRecord(f"record batch at offset {header.base_offset}: {exc}") from None
    try:
        offset_column = pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(offsets)], null_count=0)
        timestamps = pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(ts)], null_count=0)
        keys = pa.Array.from_buffers(pa.binary(), count, [_maybe(key_valid), pa.py_buffer(key_offsets),
                                                          pa.py_buffer(key_data)], null_count=key_nulls)
        values = pa.Array.from_buffers(pa.binary(), count, [_maybe(value_valid), pa.py_buffer(value_offsets),
                                                            pa.py_buffer(value_data)], null_count=value_nulls)
        if with_headers == 0:
            headers = pa.nulls(count, HEADERS_TYPE)
        else:
            entry_keys = pa.Array.from_buffers(pa.string(), header_count,
                                               [None, pa.py_buffer(hkey_offsets), pa.py_buffer(hkey_data)], null_count=0)
            entry_values = pa.Array.from_buffers(pa.binary(), header_count,
                                                 [_maybe(hvalue_valid), pa.py_buffer(hvalue_offsets),
                                                  pa.py_buffer(hvalue_data)], null_count=hvalue_nulls)
            entries = pa.StructArray.from_arrays([entry_keys, entry_values], fields=_HEADER_ENTRY_FIELDS)
            headers = pa.Array.from_buffers(HEADERS_TYPE, count,
                                            [None if with_headers == count else pa.py_buffer(list_valid),
                                             pa.py_buffer(list_offsets)],
                                            null_count=count - with_headers, children=[entries])
        return pa.RecordBatch.from_arrays([offset_column, timestamps, keys, values, headers],
                                          schema=DECODED_SCHEMA)
    except (pa.ArrowException, ValueError, TypeError) as exc:   # not expected: the C side validated everything
        raise CorruptRecord(f"record batch at offset {header.base_offset}: {type(exc).__name__}: {exc}") from None


def validate_records(header: BatchHeader, batch: Buffer, *, max_bytes: int = DEFAULT_MAX_BYTES) -> int:
    """The checks of :func:`decode_records` without building columns (no copy of keys and values), for a
    producer's batch: its offset deltas must run 0..count-1 (only the log cleaner writes gaps). Returns
    how many of its records have no key (a compacted topic refuses those)."""
    with _section(header, batch, max_bytes) as section:
        try:
            keyless: int = _v2codec.decode(section, header.record_count, header.base_offset, header.first_timestamp,
                                           header.log_append_time, header.max_timestamp, build=False)
            return keyless
        except _v2codec.CorruptError as exc:
            raise CorruptRecord(f"record batch at offset {header.base_offset}: {exc}") from None
        except _v2codec.InvalidError as exc:
            raise InvalidRecord(f"record batch at offset {header.base_offset}: {exc}") from None


def _maybe(buf: Optional[bytes]) -> Optional[pa.Buffer]:
    return None if buf is None else pa.py_buffer(buf)


def _section(header: BatchHeader, batch: Buffer, max_bytes: int, *, gaps: bool = False) -> memoryview:
    """The (decompressed) records section of a whole v2 batch (``gaps``: a stored batch, whose offsets
    may skip some after a log cleaning)."""
    view = memoryview(batch)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    if header.magic != KAFKA_MAGIC:
        raise CorruptRecord(f"record batch magic {header.magic}, not Kafka's RecordBatch v2 (magic 2)")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or len(view) < header.size:
        raise CorruptRecord(f"record batch at offset {header.base_offset} claims {header.size} bytes, "
                            f"{len(view)} are there")
    spans = header.last_offset_delta >= header.record_count - 1 if gaps else \
        header.last_offset_delta == header.record_count - 1
    if header.record_count < 0 or (header.record_count > 0 and not spans):
        raise InvalidRecord(f"record batch of {header.record_count} records with last offset delta "
                            f"{header.last_offset_delta}; offsets must run 0..count-1")
    codec = header.attributes & CODEC_MASK
    body = view[HEADER_SIZE:header.size]      # bytes after the batch (the next batch, padding) are not its
    if codec == NONE:
        return body
    try:
        return memoryview(_decompress(codec, body, max_bytes))
    except CorruptRecord as exc:
        raise CorruptRecord(f"record batch at offset {header.base_offset}: {exc}") from None
    except (cramjam.DecompressionError, zlib.error, ValueError, TypeError, OverflowError, MemoryError) as exc:
        raise CorruptRecord(f"record batch at offset {header.base_offset} cannot be decompressed "
                            f"(codec {codec}): {type(exc).__name__}: {exc}") from None


def _decompress(codec: int, data: memoryview, max_bytes: int) -> memoryview | bytes:
    """Decompress without believing any size beyond what the frames' structure allows, capped at max_bytes."""
    if codec == GZIP:
        return _gunzip(data, max_bytes)
    if codec == SNAPPY:
        if len(data) > len(XERIAL_HEADER) and data[:len(XERIAL_HEADER)] == XERIAL_HEADER:
            return _unxerial(data, max_bytes)
        size = _capped(cramjam.snappy.decompress_raw_len(data), max_bytes)
        out = bytearray(size)
        written = cramjam.snappy.decompress_raw_into(data, out)
        return memoryview(out)[:written]
    if codec in (LZ4, ZSTD):
        bound = _capped(_v2codec.frame_bound(codec, data, max_bytes), max_bytes)
        out = bytearray(bound)
        module = cramjam.lz4 if codec == LZ4 else cramjam.zstd
        written = module.decompress_into(data, out)
        return memoryview(out)[:written]
    raise CorruptRecord(f"unknown compression codec {codec} in record batch attributes")


def _capped(size: int, max_bytes: int) -> int:
    if size < 0:
        raise CorruptRecord("malformed compression framing")
    if size > max_bytes:
        raise CorruptRecord(f"records decompress to over {max_bytes} bytes")
    return size


def _gunzip(data: memoryview, max_bytes: int) -> bytes:
    """gzip members (Java writes one), output capped at max_bytes + 1 by zlib itself."""
    parts: list[bytes] = []
    total = 0
    rest: Buffer = data
    while True:
        inflater = zlib.decompressobj(wbits=31)
        part = inflater.decompress(rest, max_bytes + 1 - total)
        total += len(part)
        if total > max_bytes:
            raise CorruptRecord(f"records decompress to over {max_bytes} bytes")
        parts.append(part)
        if not inflater.eof:
            raise CorruptRecord("truncated gzip stream")
        rest = inflater.unused_data
        if not rest:
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _unxerial(data: memoryview, max_bytes: int) -> memoryview:
    """xerial's framing: a 16-byte header, then (big-endian int32 size, raw snappy block) pairs."""
    size = _capped(_v2codec.frame_bound(SNAPPY, data, max_bytes), max_bytes)
    out = bytearray(size)
    target = memoryview(out)
    pos, written = len(XERIAL_HEADER), 0
    while pos < len(data):      # one step per block (32 KiB), not per record; framing checked by frame_bound
        block = int.from_bytes(data[pos:pos + 4], "big")
        chunk = data[pos + 4:pos + 4 + block]
        length = cramjam.snappy.decompress_raw_len(chunk)
        written += cramjam.snappy.decompress_raw_into(chunk, target[written:written + length])
        pos += 4 + block
    return target[:written]


# --- encoding ---------------------------------------------------------------------------------

def encode_batch(header: BatchHeader, records: pa.RecordBatch, codec: int,
                 offset_deltas: Optional[pa.Array] = None) -> bytes:
    """A complete v2 batch of ``records`` (columns key, value, timestamp, headers as in RECORD_SCHEMA; slices
    and nulls fine) compressed with Kafka ``codec`` (0-4). base_offset, partition_leader_epoch and the
    producer fields come from ``header``; under LogAppendTime (its bit 3) its first and max timestamps too,
    else the first record's timestamp and the largest. ``offset_deltas`` (int32, ascending; the log
    cleaner's survivors) keeps records at their offsets, and the batch keeps ``header``'s last offset delta;
    without them record ``i`` is at ``base_offset + i``."""
    if codec not in (NONE, GZIP, SNAPPY, LZ4, ZSTD):
        raise ValueError(f"unknown Kafka compression codec {codec}")
    count = records.num_rows
    if count == 0:
        if offset_deltas is None:
            raise ValueError("a producer's Kafka record batch holds at least one record")
        return empty_batch(header)
    timestamps = _whole(records.column("timestamp"))
    if timestamps.type != pa.int64():
        timestamps = timestamps.cast(pa.int64())
    if timestamps.null_count:
        raise ValueError("record timestamps cannot be null")
    key = _binary(records.column("key"))
    value = _binary(records.column("value"))
    names = records.schema.names
    headers_arg = _headers_arg(records.column("headers")) if "headers" in names else None
    log_append_time = header.log_append_time
    attributes = codec | (LOG_APPEND_TIME_FLAG if log_append_time else 0) | (header.attributes & TRANSACTIONAL_FLAG)
    base_timestamp = header.first_timestamp if log_append_time else None
    kafka = BatchHeader(base_offset=header.base_offset, batch_length=0,
                        partition_leader_epoch=header.partition_leader_epoch, magic=KAFKA_MAGIC, crc=0,
                        attributes=attributes,
                        last_offset_delta=count - 1 if offset_deltas is None else header.last_offset_delta,
                        first_timestamp=header.first_timestamp if log_append_time else 0,
                        max_timestamp=header.max_timestamp if log_append_time else 0,
                        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
                        base_sequence=header.base_sequence, record_count=count)
    ts_arg = (timestamps.buffers()[1], timestamps.offset)
    deltas_arg = None
    if offset_deltas is not None:
        deltas = _whole(offset_deltas).cast(pa.int32())
        if len(deltas) != count or deltas.null_count:
            raise ValueError(f"{len(deltas)} offset deltas (nulls: {deltas.null_count}) for {count} records")
        if count and deltas[count - 1].as_py() > header.last_offset_delta:
            raise ValueError(f"offset delta {deltas[count - 1].as_py()} past the batch's last offset delta "
                             f"{header.last_offset_delta}")
        deltas_arg = (deltas.buffers()[1], deltas.offset)
    if codec == NONE:
        batch, _, _ = _v2codec.encode(count, ts_arg, key, value, headers_arg, base_timestamp, kafka.pack(), crc32c,
                                      deltas_arg)
        return batch
    section, first, largest = _v2codec.encode(count, ts_arg, key, value, headers_arg, base_timestamp, None, None,
                                              deltas_arg)
    body = _compress(codec, section)
    if not log_append_time:
        kafka = kafka._replace(first_timestamp=first, max_timestamp=largest)
    kafka = kafka._replace(batch_length=HEADER_SIZE - LOG_OVERHEAD + len(body))
    packed = kafka.pack()
    crc = crc32c(body, crc32c(packed[CRC_START:]))
    return kafka._replace(crc=crc).pack() + body


def empty_batch(header: BatchHeader) -> bytes:
    """A v2 batch with no records spanning ``header``'s offsets (base offset .. last offset delta), with its
    timestamps, epoch and producer fields: what the log cleaner leaves where a batch must stay (a segment's
    end offset, an idempotent producer's last sequence), as Kafka's cleaner does."""
    empty = header._replace(batch_length=HEADER_SIZE - LOG_OVERHEAD, magic=KAFKA_MAGIC, crc=0,
                            attributes=header.attributes & (LOG_APPEND_TIME_FLAG | TRANSACTIONAL_FLAG), record_count=0)
    packed = empty.pack()
    return empty._replace(crc=crc32c(packed[CRC_START:])).pack()


_Column = tuple[Optional[pa.Buffer], Optional[pa.Buffer], Optional[pa.Buffer], int]


def _whole(array: pa.Array) -> pa.Array:
    return array.combine_chunks() if type(array) is pa.ChunkedArray else array   # a Table's column


def _binary(array: pa.Array) -> _Column:
    """(validity, offsets, data, offset) of a binary array (string / large_binary cast to binary)."""
    array = _whole(array)
    if array.type != pa.binary():
        array = array.cast(pa.binary())
    validity, offsets, data = array.buffers()
    return (validity if array.null_count else None, offsets, data, array.offset)


def _headers_arg(column: pa.Array) -> Optional[tuple[_Column, _Column, _Column]]:
    column = _whole(column)
    if column.null_count == len(column):
        return None
    if column.type != HEADERS_TYPE:
        column = column.cast(HEADERS_TYPE)
    validity, offsets = column.buffers()[:2]
    entries = column.values            # the whole child: list offsets index it from its start
    if entries.null_count:
        raise ValueError("null header entries (Kafka headers always have a key)")
    keys = entries.field("key")        # field(): adjusted for the struct's own offset
    if keys.null_count:
        raise ValueError("null header keys (Kafka header keys are never null)")
    return ((validity if column.null_count else None, offsets, None, column.offset),
            _binary(keys), _binary(entries.field("value")))


def _compress(codec: int, data: bytes) -> bytes:
    if codec == LZ4:
        compressor = cramjam.lz4.Compressor(level=LZ4_LEVEL, content_checksum=False, block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data, level=GZIP_LEVEL))
    if codec == SNAPPY:
        view = memoryview(data)
        parts = [XERIAL_HEADER]
        for start in range(0, len(view), XERIAL_BLOCK):   # one step per 32 KiB block
            block = bytes(cramjam.snappy.compress_raw(view[start:start + XERIAL_BLOCK]))
            parts.append(len(block).to_bytes(4, "big"))
            parts.append(block)
        return b"".join(parts)
    return bytes(cramjam.zstd.compress(data))
