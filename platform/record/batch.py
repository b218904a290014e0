"""ember's record batches (magic 1): the shared 61-byte header (``ember.record.header``) and an Arrow
IPC payload, so readers get columns without per-record Python work; and decoding either stored
format to columns (a Kafka batch, magic 2, through ``ember.record.kafka_v2``).

The CRC (zlib's CRC-32 here, CRC-32C for Kafka's) starts at ``attributes``: a broker patches
``base_offset`` and ``partition_leader_epoch`` without recomputing it. docs/log.md ("Batch
format") has the header table and why the log stores both formats.
"""
from __future__ import annotations

import time
from typing import Any, Iterable, Iterator, NamedTuple, Optional, Sequence, Union

import pyarrow as pa
import pyarrow.compute as pc

from ember import errors
from ember.record import kafka_v2
from ember.record.crc import batch_crc, crc32
from ember.record.header import (
    ARROW_CODECS,
    CODEC_MASK,
    CODECS,
    COMPRESSION_TYPES,
    CRC_START,
    HEADER_SIZE,
    KAFKA_CODEC_SHIFT,
    LOG_APPEND_TIME_FLAG,
    LOG_OVERHEAD,
    MAGIC,
    NO_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    Buffer,
)
from ember.record.schema import DECODED_SCHEMA, HEADERS_TYPE, RECORD_SCHEMA, record_offsets


def check_batch(buf: Buffer, pos: int = 0, *, verify_crc: bool = True,
                origin: int = 0) -> BatchHeader:
    """Validate the batch starting at ``pos`` of ``buf`` and return its header.

    Raises ``CorruptRecord`` naming the position (``origin`` is buf's own position in its file or
    stream, so the message points at the real byte).
    """
    where = origin + pos
    if len(buf) - pos < HEADER_SIZE:
        raise errors.CorruptRecord(
            f"truncated batch header at position {where} ({len(buf) - pos} bytes)")
    header = BatchHeader.parse(buf, pos)
    reason = header.problem()
    if reason is None and pos + header.size > len(buf):
        reason = f"truncated batch: needs {header.size} bytes, {len(buf) - pos} left"
    if reason is None and verify_crc:
        with memoryview(buf) as view:
            crc = batch_crc(header.magic, view[pos + CRC_START:pos + header.size])
        if crc != header.crc:
            reason = f"CRC mismatch (stored {header.crc:#010x}, computed {crc:#010x})"
    if reason is not None:
        raise errors.CorruptRecord(f"{reason} at position {where}")
    return header


def iter_batches(buf: Buffer, *, verify_crc: bool = True) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Walk concatenated raw batches, validating length and CRC of each."""
    view = memoryview(buf)
    pos = 0
    while pos < len(view):
        header = check_batch(view, pos, verify_crc=verify_crc)
        yield header, view[pos:pos + header.size]
        pos += header.size


def stamp_log_append_time(header: bytearray, payload: Buffer, timestamp_ms: int) -> None:
    """Turn a header into LogAppendTime at ``timestamp_ms`` and recompute its CRC.

    Readers then report ``timestamp_ms`` for every record of the batch; the payload is untouched.
    """
    fields = BatchHeader.parse(header)
    fields = fields._replace(attributes=fields.attributes | LOG_APPEND_TIME_FLAG,
                             first_timestamp=timestamp_ms, max_timestamp=timestamp_ms)
    packed = fields.pack()
    crc = batch_crc(fields.magic, payload, batch_crc(fields.magic, packed[CRC_START:]))
    header[:] = fields._replace(crc=crc).pack()


# --- building ---------------------------------------------------------------------------------

class Record(NamedTuple):
    """One record given as Python values (the slow, convenient input of ``build_batch``)."""
    key: Optional[bytes]
    value: Optional[bytes]
    timestamp: Optional[int] = None
    headers: Optional[Sequence[tuple[str, Optional[bytes]]]] = None


RecordsLike = Union[pa.Table, pa.RecordBatch, Iterable[Union[Record, tuple[Any, ...]]]]


def build_batch(records: RecordsLike, *, compression: str = "none", producer_id: int = NO_PRODUCER_ID,
                producer_epoch: int = NO_EPOCH, base_sequence: int = NO_SEQUENCE,
                partition_leader_epoch: int = NO_EPOCH, base_offset: int = 0, transactional: bool = False) -> bytes:
    """Encode records into one raw batch (header + Arrow IPC payload).

    ``records`` is an Arrow table/record batch with any of the columns key, value, timestamp,
    headers (missing ones are null, a missing or null timestamp is now), or Python records
    ``(key, value[, timestamp_ms[, headers]])``. ``compression`` is one of Kafka's codec names
    (:data:`COMPRESSION_TYPES`); gzip and snappy, which Arrow cannot store, are remembered in the
    header for Kafka consumers. ``transactional`` sets :data:`TRANSACTIONAL_FLAG` (a transactional
    producer's batch: read_committed readers hold it back until its transaction's marker).
    """
    if compression not in COMPRESSION_TYPES:
        raise ValueError(f"compression must be one of {sorted(COMPRESSION_TYPES)}, not {compression!r}")
    batch = _to_record_batch(records)
    if batch.num_rows == 0:
        raise ValueError("a batch needs at least one record")
    stored, kafka_codec = COMPRESSION_TYPES[compression]
    codec = CODECS[stored]
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=ARROW_CODECS[codec])
    with pa.ipc.new_stream(sink, RECORD_SCHEMA, options=options) as writer:
        writer.write_batch(batch)
    payload = sink.getvalue()
    timestamps = batch.column("timestamp")
    header = BatchHeader(
        base_offset=base_offset, batch_length=HEADER_SIZE - LOG_OVERHEAD + payload.size,
        partition_leader_epoch=partition_leader_epoch, magic=MAGIC, crc=0,
        attributes=codec | (kafka_codec & CODEC_MASK) << KAFKA_CODEC_SHIFT | (TRANSACTIONAL_FLAG if transactional else 0),
        last_offset_delta=batch.num_rows - 1, first_timestamp=timestamps[0].as_py(),
        max_timestamp=pc.max(timestamps).as_py(), producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, record_count=batch.num_rows)
    crc = crc32(payload, crc32(header.pack()[CRC_START:]))
    return b"".join((header._replace(crc=crc).pack(), payload))


def _to_record_batch(records: RecordsLike) -> pa.RecordBatch:
    if isinstance(records, pa.RecordBatch):
        records = pa.Table.from_batches([records])
    if not isinstance(records, pa.Table):
        records = _table_from_python(records)
    unknown = set(records.column_names) - set(RECORD_SCHEMA.names)
    if unknown:
        raise ValueError(f"unknown record columns {sorted(unknown)}; expected {RECORD_SCHEMA.names}")
    n = records.num_rows
    columns = []
    for field in RECORD_SCHEMA:
        if field.name in records.column_names:
            column = records.column(field.name)
            if field.name == "timestamp" and pa.types.is_timestamp(column.type):
                column = pc.cast(column, pa.timestamp("ms"), safe=False).cast(pa.int64())
            column = column.cast(field.type)
        else:
            column = pa.nulls(n, field.type)
        if field.name == "timestamp" and column.null_count:
            column = column.fill_null(int(time.time() * 1000))
        columns.append(column)
    table = pa.Table.from_arrays(columns, schema=RECORD_SCHEMA).combine_chunks()
    batches = table.to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=RECORD_SCHEMA)


def _table_from_python(records: Iterable[Union[Record, tuple[Any, ...]]]) -> pa.Table:
    rows = [Record(*r) for r in records]
    headers = [None if r.headers is None else [{"key": k, "value": v} for k, v in r.headers]
               for r in rows]
    return pa.table({
        "key": pa.array([r.key for r in rows], pa.binary()),
        "value": pa.array([r.value for r in rows], pa.binary()),
        "timestamp": pa.array([r.timestamp for r in rows], pa.int64()),
        "headers": pa.array(headers, HEADERS_TYPE),
    })


# --- decoding ---------------------------------------------------------------------------------

def decode_payload(header: BatchHeader, batch: Buffer) -> pa.RecordBatch:
    """Columns of one raw batch (``batch`` = header + payload), offsets derived from the header;
    a Kafka batch (magic 2) is decoded in one native pass."""
    if header.is_kafka:
        return kafka_v2.decode_records(header, batch)
    records = stored_columns(header, batch)
    n = records.num_rows
    timestamps = records.column("timestamp")
    if header.log_append_time:
        timestamps = pa.repeat(pa.scalar(header.max_timestamp, pa.int64()), n)
    return pa.RecordBatch.from_arrays(
        [record_offsets(header.base_offset, n), timestamps, records.column("key"), records.column("value"),
         records.column("headers")], schema=DECODED_SCHEMA)


def slice_offsets(decoded: pa.RecordBatch, start: int, end: Optional[int] = None) -> pa.RecordBatch:
    """Rows of a decoded batch (``DECODED_SCHEMA``) with ``start <= offset < end`` (no end: to the
    last). Offsets ascend within a batch; where the log cleaner left gaps the bounds are found by a
    vectorized count, else by arithmetic."""
    n = decoded.num_rows
    if n == 0:
        return decoded
    offsets = decoded.column("offset")
    first, last = offsets[0].as_py(), offsets[n - 1].as_py()
    stop = last + 1 if end is None else end
    if last - first + 1 == n:
        lo = min(n, max(0, start - first))
        hi = max(lo, min(n, stop - first))
    else:
        lo = pc.sum(pc.less(offsets, start)).as_py() if start > first else 0
        hi = max(lo, pc.sum(pc.less(offsets, stop)).as_py() if stop <= last else n)
    return decoded if (lo, hi) == (0, n) else decoded.slice(lo, hi - lo)


def stored_columns(header: BatchHeader, batch: Buffer) -> pa.RecordBatch:
    """The Arrow payload of one of ember's batches as stored (``RECORD_SCHEMA``: no offsets, the
    records' own timestamps), for work that needs neither, such as building a Kafka batch from it."""
    payload = pa.py_buffer(batch)[HEADER_SIZE:header.size]
    try:
        records = pa.ipc.open_stream(payload).read_next_batch()
    except (pa.ArrowException, OSError, KeyError, TypeError, ValueError) as exc:  # in-memory: OSError is pyarrow's
        # The CRC only proves the bytes are the producer's; they may still not be a valid record
        # batch (a buggy or hostile producer). Readers get a typed error, never a pyarrow one.
        raise errors.CorruptRecord(
            f"batch at offset {header.base_offset} has a payload that is not a valid ember record batch: "
            f"{type(exc).__name__}: {exc}") from None
    if records.num_rows != header.record_count or not records.schema.equals(RECORD_SCHEMA):
        raise errors.CorruptRecord(
            f"batch at offset {header.base_offset} holds {records.num_rows} records of columns "
            f"{records.schema.names}, its header says {header.record_count} of {RECORD_SCHEMA.names}")
    return records


def decode_batches(raw: Buffer, *, verify_crc: bool = True) -> Iterator[pa.RecordBatch]:
    """Decode concatenated raw batches into Arrow record batches (columns of DECODED_SCHEMA)."""
    for header, batch in iter_batches(raw, verify_crc=verify_crc):
        yield decode_payload(header, batch)


def to_table(raw: Buffer, *, verify_crc: bool = True) -> pa.Table:
    """All records of concatenated raw batches as one table."""
    return pa.Table.from_batches(list(decode_batches(raw, verify_crc=verify_crc)),
                                 schema=DECODED_SCHEMA)
