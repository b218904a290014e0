"""ember.record.kafka_v2: the native Kafka RecordBatch v2 <-> Arrow codec, against aiokafka's
(independent) Cython codec, by property tests of its round trip, and on hostile input."""
from __future__ import annotations

import struct
import time
import zlib

import cramjam
import pyarrow as pa
import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember.errors import CorruptRecord, InvalidRecord
from ember.record import kafka_v2
from ember.record.header import CRC_START, HEADER_SIZE, BatchHeader
from ember.record.schema import DECODED_SCHEMA, HEADERS_TYPE, RECORD_SCHEMA

CODECS = [0, 1, 2, 3, 4]
Row = tuple[int, int, "bytes | None", "bytes | None", "list[tuple[str, bytes | None]] | None"]


def build(records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]], codec: int = 0,
          base_offset: int = 0, log_append_time: int | None = None) -> bytes:
    """A v2 batch built by aiokafka; LogAppendTime patched in as a broker would (attributes, max timestamp, CRC)."""
    builder = DefaultRecordBatchBuilder(2, codec, 0, 7, 3, 11, 1 << 30)
    for delta, (ts, key, value, headers) in enumerate(records):
        builder.append(delta, ts, key, value, headers)
    raw = bytearray(builder.build())
    header = BatchHeader.parse(raw)._replace(base_offset=base_offset)
    if log_append_time is not None:
        header = header._replace(attributes=header.attributes | 0x08, max_timestamp=log_append_time)
    raw[:HEADER_SIZE] = header.pack()
    return reseal(raw)


def reseal(raw: bytearray | bytes) -> bytes:
    """Fix batch_length and CRC after tampering with the bytes."""
    raw = bytearray(raw)
    header = BatchHeader.parse(raw)._replace(batch_length=len(raw) - 12)
    raw[:HEADER_SIZE] = header.pack()
    crc = calc_crc32c(bytes(raw[CRC_START:]))
    raw[:HEADER_SIZE] = header._replace(crc=crc).pack()
    return bytes(raw)


def aiokafka_rows(raw: bytes) -> list[Row]:
    batch = DefaultRecordBatch(raw)
    assert batch.validate_crc()
    return [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers] or None) for r in batch]


def arrow_rows(batch: pa.RecordBatch) -> list[Row]:
    return [(d["offset"], d["timestamp"], d["key"], d["value"],
             None if d["headers"] is None else [(h["key"], h["value"]) for h in d["headers"]])
            for d in batch.to_pylist()]


def decode(raw: bytes, **kwargs: int) -> pa.RecordBatch:
    return kafka_v2.decode_records(BatchHeader.parse(raw), raw, **kwargs)


def records_table(rows: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"key": [r[1] for r in rows], "value": [r[2] for r in rows], "timestamp": [r[0] for r in rows],
         "headers": [[{"key": k, "value": v} for k, v in r[3]] or None for r in rows]}, schema=RECORD_SCHEMA)


SAMPLE = [(1_700_000_000_000 + i * 3 - (i % 4) * 5,
           None if i % 7 == 0 else b"k%d" % i,
           None if i % 5 == 0 else (b"" if i % 6 == 0 else bytes([i % 256]) * (i % 300)),
           [] if i % 3 == 0 else [("trace", b"abc"), ("ключ-é", None), ("", b"")][: 1 + i % 3])
          for i in range(300)]


# --- against aiokafka -------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_decode_matches_aiokafka(codec: int) -> None:
    raw = build(SAMPLE, codec, base_offset=1000)
    batch = decode(raw)
    assert batch.schema == DECODED_SCHEMA
    batch.validate(full=True)
    assert arrow_rows(batch) == aiokafka_rows(raw)
    kafka_v2.validate_records(BatchHeader.parse(raw), raw)


@pytest.mark.parametrize("codec", CODECS)
def test_decode_log_append_time(codec: int) -> None:
    raw = build(SAMPLE[:20], codec, log_append_time=1_800_000_000_123)
    rows = arrow_rows(decode(raw))
    assert [r[1] for r in rows] == [1_800_000_000_123] * 20
    assert rows == aiokafka_rows(raw)


def test_decode_no_headers_is_all_null() -> None:
    raw = build([(5, b"k", b"v", []), (6, None, None, [])])
    headers = decode(raw).column("headers")
    assert headers.null_count == 2 and headers.type == HEADERS_TYPE


def test_decode_raw_snappy_as_librdkafka_sends() -> None:
    raw = bytearray(build(SAMPLE, 0))
    body = bytes(cramjam.snappy.compress_raw(bytes(raw[HEADER_SIZE:])))
    header = BatchHeader.parse(raw)._replace(attributes=2)
    raw = reseal(header.pack() + body)
    assert arrow_rows(decode(raw)) == aiokafka_rows(raw)


def test_decode_zstd_without_content_size() -> None:
    plain = build(SAMPLE, 0)
    compressor = cramjam.zstd.Compressor()     # streaming: no content size in the frame header
    compressor.compress(plain[HEADER_SIZE:])
    body = bytes(compressor.finish())
    assert body[4] & 0xC0 == 0 and not body[4] & 0x20, "frame declares its content size"
    raw = reseal(BatchHeader.parse(plain)._replace(attributes=4).pack() + body)
    assert arrow_rows(decode(raw)) == aiokafka_rows(raw)


@pytest.mark.parametrize("codec", CODECS)
def test_encode_read_by_aiokafka(codec: int) -> None:
    source = build(SAMPLE, 0, base_offset=42)
    header = BatchHeader.parse(source)
    encoded = kafka_v2.encode_batch(header, records_table(SAMPLE), codec)
    out = BatchHeader.parse(encoded)
    assert out.attributes & 7 == codec and out.size == len(encoded)
    assert (out.base_offset, out.producer_id, out.producer_epoch, out.base_sequence) == (42, 7, 3, 11)
    assert out.first_timestamp == SAMPLE[0][0] and out.max_timestamp == max(r[0] for r in SAMPLE)
    assert aiokafka_rows(encoded) == aiokafka_rows(source)     # aiokafka_rows checks the CRC too
    assert arrow_rows(decode(encoded)) == arrow_rows(decode(source))


def test_encode_log_append_time_keeps_header_timestamps() -> None:
    header = BatchHeader.parse(build(SAMPLE[:5], 0))._replace(attributes=0x08, first_timestamp=9, max_timestamp=99)
    encoded = kafka_v2.encode_batch(header, records_table(SAMPLE[:5]), 3)
    out = BatchHeader.parse(encoded)
    assert out.log_append_time and (out.first_timestamp, out.max_timestamp) == (9, 99)
    assert DefaultRecordBatch(encoded).validate_crc()
    assert [r[1] for r in arrow_rows(decode(encoded))] == [99] * 5


def test_encode_lz4_independent_blocks_no_checksum() -> None:
    big = [(i, None, bytes([i % 251]) * 1000, []) for i in range(300)]
    encoded = kafka_v2.encode_batch(BatchHeader.parse(build(big[:1])), records_table(big), 3)
    flg = encoded[HEADER_SIZE + 4]
    assert flg & 0x20 and not flg & 0x04      # B.Indep set, C.Checksum clear
    assert aiokafka_rows(encoded)[-1][3] == big[-1][2]


def test_encode_slices_and_string_columns() -> None:
    table = records_table(SAMPLE)
    sliced = table.slice(37, 101)
    header = BatchHeader.parse(build(SAMPLE[:1]))
    expected = [r[1:] for r in arrow_rows(decode(build(SAMPLE[37:138])))]
    assert [r[1:] for r in arrow_rows(decode(kafka_v2.encode_batch(header, sliced, 0)))] == expected
    # headers whose list and struct children are themselves offset
    headers = table.column("headers")
    rebuilt = pa.ListArray.from_arrays(pa.array(headers.offsets.to_pylist(), pa.int32()).slice(0),
                                       headers.values.slice(0), type=HEADERS_TYPE, mask=headers.is_null())
    shifted = pa.concat_arrays([pa.array([None], HEADERS_TYPE), rebuilt]).slice(1)
    strings = pa.RecordBatch.from_arrays([table.column("key").cast(pa.large_binary()), table.column("value"),
                                          table.column("timestamp"), shifted],
                                         names=["key", "value", "timestamp", "headers"])
    assert arrow_rows(decode(kafka_v2.encode_batch(header, strings, 0)))[5:] == arrow_rows(decode(build(SAMPLE)))[5:]


# --- property: encode -> decode is the identity ----------------------------------------------

_records = st.lists(
    st.tuples(st.integers(-(1 << 62), 1 << 62),
              st.none() | st.binary(max_size=40),
              st.none() | st.binary(max_size=300),
              st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=10)), max_size=3)),
    min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=_records, codec=st.sampled_from(CODECS), base_offset=st.integers(0, 1 << 40),
       start=st.integers(0, 3))
def test_round_trip(rows: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]], codec: int,
                    base_offset: int, start: int) -> None:
    table = records_table(rows)
    start = min(start, len(rows) - 1)
    table, rows = table.slice(start), rows[start:]
    header = BatchHeader(base_offset, 0, 5, 2, 0, 0, 0, 0, 0, -1, -1, -1, 0)
    encoded = kafka_v2.encode_batch(header, table, codec)
    decoded = decode(encoded)
    decoded.validate(full=True)
    assert decoded.column("offset").to_pylist() == list(range(base_offset, base_offset + len(rows)))
    for name in ("key", "value", "timestamp", "headers"):
        assert decoded.column(name).equals(table.column(name)), name
    assert aiokafka_rows(encoded) == arrow_rows(decoded)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=_records, codec=st.sampled_from(CODECS), base_offset=st.integers(0, 1 << 40), data=st.data())
def test_round_trip_keeps_the_offsets_a_cleaning_left(
        rows: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]], codec: int,
        base_offset: int, data: st.DataObject) -> None:
    span = data.draw(st.integers(len(rows), len(rows) + 50))
    deltas = sorted(data.draw(st.sets(st.integers(0, span - 1), min_size=len(rows), max_size=len(rows))))
    header = BatchHeader(base_offset, 0, 5, 2, 0, 0, span - 1, 0, 0, 9, 1, 100, 0)
    table = records_table(rows)
    encoded = kafka_v2.encode_batch(header, table, codec, pa.array(deltas, pa.int32()))
    stored = BatchHeader.parse(encoded)
    assert (stored.record_count, stored.last_offset_delta, stored.has_gaps) == (len(rows), span - 1, len(rows) < span)
    assert (stored.producer_id, stored.producer_epoch, stored.base_sequence) == (9, 1, 100)
    decoded = decode(encoded)
    decoded.validate(full=True)
    assert decoded.column("offset").to_pylist() == [base_offset + d for d in deltas]
    for name in ("key", "value", "timestamp", "headers"):
        assert decoded.column(name).equals(table.column(name)), name
    assert aiokafka_rows(encoded) == arrow_rows(decoded)


def test_a_producer_batch_with_offset_gaps_is_refused() -> None:
    raw = gapped(record(simple()) + record(simple(2)), 2, 2)
    assert decode(raw).column("offset").to_pylist() == [0, 2]     # stored: readable
    with pytest.raises(InvalidRecord, match="offsets must run"):
        kafka_v2.validate_records(BatchHeader.parse(raw), raw)


def test_encode_refuses_offset_deltas_past_the_batch() -> None:
    header = BatchHeader(0, 0, 0, 2, 0, 0, 1, 0, 0, -1, -1, -1, 0)
    with pytest.raises(ValueError, match="past the batch's last offset delta"):
        kafka_v2.encode_batch(header, records_table(SAMPLE[:2]), 0, pa.array([0, 2], pa.int32()))
    with pytest.raises(ValueError, match="ascending"):
        kafka_v2.encode_batch(header, records_table(SAMPLE[:2]), 0, pa.array([1, 1], pa.int32()))


# --- hostile input ----------------------------------------------------------------------------

def zz(value: int) -> bytes:
    """A zigzag varint."""
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def record(body: bytes) -> bytes:
    return zz(len(body)) + body


def batch_of(section: bytes, count: int, codec: int = 0) -> bytes:
    header = BatchHeader(0, 0, 0, 2, 0, codec, count - 1, 0, 0, -1, -1, -1, count)
    return reseal(header.pack() + section)


def gapped(section: bytes, count: int, last_offset_delta: int) -> bytes:
    """A stored batch as the log cleaner leaves it: ``count`` records spanning ``last_offset_delta + 1`` offsets."""
    header = BatchHeader(0, 0, 0, 2, 0, 0, last_offset_delta, 0, 0, -1, -1, -1, count)
    return reseal(header.pack() + section)


def simple(delta: int = 0, key: bytes = b"k", value: bytes = b"v", headers: bytes = zz(0)) -> bytes:
    return b"\x00" + zz(0) + zz(delta) + zz(len(key)) + key + zz(len(value)) + value + headers


def hostile_cases() -> list[tuple[str, bytes, type[Exception]]]:
    good = record(simple())
    cases = [
        ("truncated record", batch_of(good[:-1], 1), CorruptRecord),
        ("truncated varint", batch_of(b"\x80", 1), CorruptRecord),
        ("varint too long", batch_of(b"\xff" * 6, 1), CorruptRecord),
        ("record length past end", batch_of(zz(1000) + simple(), 1), CorruptRecord),
        ("huge record length", batch_of(zz(2**31 - 1) + simple(), 1), CorruptRecord),
        ("negative record length", batch_of(zz(-5) + simple(), 1), CorruptRecord),
        ("record longer than its fields", batch_of(record(simple() + b"x"), 1), CorruptRecord),
        ("huge key length", batch_of(record(b"\x00" + zz(0) + zz(0) + zz(2**31 - 1) + b"k"), 1), CorruptRecord),
        ("key length -2", batch_of(record(b"\x00" + zz(0) + zz(0) + zz(-2) + zz(-1) + zz(0)), 1), CorruptRecord),
        ("huge value length", batch_of(record(b"\x00" + zz(0) + zz(0) + zz(-1) + zz(2**30)), 1), CorruptRecord),
        ("huge header count", batch_of(record(simple(headers=zz(2**31 - 1))), 1), CorruptRecord),
        ("negative header count", batch_of(record(simple(headers=zz(-1))), 1), CorruptRecord),
        ("null header key", batch_of(record(simple(headers=zz(1) + zz(-1) + zz(-1))), 1), CorruptRecord),
        ("bad UTF-8 header key", batch_of(record(simple(headers=zz(1) + zz(2) + b"\xc3\x28" + zz(-1))), 1),
         CorruptRecord),
        ("surrogate header key", batch_of(record(simple(headers=zz(1) + zz(3) + b"\xed\xa0\x80" + zz(-1))), 1),
         CorruptRecord),
        ("header value past end", batch_of(record(simple(headers=zz(1) + zz(1) + b"a" + zz(99))), 1), CorruptRecord),
        ("trailing bytes", batch_of(good + b"\x00", 1), CorruptRecord),
        ("fewer records than the header", batch_of(good, 2), CorruptRecord),
        ("more records than the header", batch_of(good + record(simple(1)), 1), CorruptRecord),
        ("offset delta gap", batch_of(good + record(simple(2)), 2), InvalidRecord),
        ("offset delta repeated", batch_of(good + record(simple(0)), 2), InvalidRecord),
        ("gap past the last offset delta", gapped(good + record(simple(4)), 2, 3), InvalidRecord),
        ("gap deltas descending", gapped(record(simple(2)) + record(simple(1)), 2, 3), InvalidRecord),
        ("gap delta repeated", gapped(record(simple(1)) + record(simple(1)), 2, 3), InvalidRecord),
        ("last offset delta below the count", gapped(good + record(simple(1)), 2, 0), InvalidRecord),
    ]
    for codec in (1, 2, 3, 4):
        cases.append((f"garbage codec {codec}", batch_of(b"\x01\x02garbage" * 3, 1, codec), CorruptRecord))
    cases.append(("unknown codec", batch_of(good, 1, 6), CorruptRecord))
    return cases


@pytest.mark.parametrize("name,raw,error", hostile_cases(), ids=[c[0] for c in hostile_cases()])
def test_hostile(name: str, raw: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        decode(raw)
    with pytest.raises(error):
        kafka_v2.validate_records(BatchHeader.parse(raw), raw)


def test_batch_shorter_than_its_header_says() -> None:
    raw = build(SAMPLE[:3])
    with pytest.raises(CorruptRecord):
        kafka_v2.decode_records(BatchHeader.parse(raw), raw[:-1])


def bomb(codec: int, size: int) -> bytes:
    data = b"\x00" * size
    if codec == 1:
        return zlib.compress(data, 9, wbits=31)
    if codec == 2:
        return kafka_v2._compress(2, data)
    if codec == 3:
        return kafka_v2._compress(3, data)
    compressor = cramjam.zstd.Compressor()        # no content size: the bound comes from the blocks
    compressor.compress(data)
    return bytes(compressor.finish())


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompression_capped(codec: int) -> None:
    raw = batch_of(bomb(codec, 3 << 20), 1, codec)
    start = time.perf_counter()
    with pytest.raises(CorruptRecord, match="over"):
        decode(raw, max_bytes=1 << 20)
    assert time.perf_counter() - start < 2


def test_zstd_declared_content_size_over_cap_refused_before_decompressing() -> None:
    frame = bytearray(cramjam.zstd.compress(b"x" * 100_000))
    assert frame[4] & 0xE0 == 0xA0    # single segment, 4-byte content size right after the descriptor
    frame[5:9] = struct.pack("<I", 3 << 30)
    with pytest.raises(CorruptRecord, match="over"):
        decode(batch_of(bytes(frame), 1, 4))


def test_hostile_is_fast() -> None:
    """A 1 MB batch of garbage is refused in well under a second, whatever its lengths claim."""
    raw = batch_of(b"\x00" + zz(0) * 10 + b"\xfe\xff\xff\xff\x07" * 200_000, 1)
    start = time.perf_counter()
    with pytest.raises(CorruptRecord):
        decode(raw)
    assert time.perf_counter() - start < 0.5


def test_encode_rejects_null_header_keys() -> None:
    entries = pa.StructArray.from_arrays([pa.array([None], pa.string()), pa.array([b"v"])], names=["key", "value"])
    headers = pa.ListArray.from_arrays(pa.array([0, 1], pa.int32()), entries)
    records = pa.RecordBatch.from_arrays([pa.array([b"k"]), pa.array([b"v"]), pa.array([1], pa.int64()), headers],
                                         names=["key", "value", "timestamp", "headers"])
    with pytest.raises(ValueError):
        kafka_v2.encode_batch(BatchHeader.parse(build(SAMPLE[:1])), records, 0)
