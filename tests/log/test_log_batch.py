"""Batch format: header layout, CRC coverage, build/decode round trips."""
from __future__ import annotations

import struct
import zlib

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from log_helpers import values_batch

from ember import errors
from ember.record import batch as b
from ember.record import header as h
from ember.record.batch import slice_offsets
from ember.record.schema import DECODED_SCHEMA, HEADERS_TYPE


def test_header_is_61_bytes_and_round_trips():
    header = b.BatchHeader(7, 100, 3, 1, 0xDEADBEEF, 2, 4, 10, 20, 99, 5, 42, 5)
    packed = header.pack()
    assert len(packed) == b.HEADER_SIZE == 61
    assert b.BatchHeader.parse(packed) == header
    assert struct.unpack_from(">q", packed, 0)[0] == 7  # big-endian base offset first
    assert header.size == 112 and header.last_offset == 11


def test_build_from_python_records_and_decode():
    raw = b.build_batch([(b"k", b"v", 5, [("h", b"x")]), b.Record(None, b"w", 6)], base_offset=10)
    header, _ = next(b.iter_batches(raw))
    assert (header.record_count, header.last_offset_delta, header.first_timestamp,
            header.max_timestamp, header.magic) == (2, 1, 5, 6, 1)
    assert b.to_table(raw).to_pylist() == [
        {"offset": 10, "timestamp": 5, "key": b"k", "value": b"v", "headers": [{"key": "h", "value": b"x"}]},
        {"offset": 11, "timestamp": 6, "key": None, "value": b"w", "headers": None},
    ]


def test_build_from_arrow_fills_missing_columns_and_casts():
    table = pa.table({"value": pa.array(["a", "b", "c"], pa.string()),
                      "timestamp": pa.array([1, None, 3], pa.timestamp("ms"))})
    raw = b.build_batch(table)
    out = b.to_table(raw)
    assert out.schema == b.DECODED_SCHEMA
    assert out.column("value").to_pylist() == [b"a", b"b", b"c"]
    assert out.column("key").null_count == 3
    stamped = out.column("timestamp").to_pylist()
    assert stamped[0] == 1 and stamped[2] == 3 and stamped[1] > 1_600_000_000_000  # now


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_compression_round_trip_and_codec_bits(codec):
    values = [b"x" * 1000] * 50
    raw = values_batch(values, compression=codec)
    header, _ = next(b.iter_batches(raw))
    assert header.codec == b.CODECS[codec]
    if codec != "none":
        assert len(raw) < 50 * 1000 / 4
    assert b.to_table(raw).column("value").to_pylist() == values


def test_crc_excludes_base_offset_and_leader_epoch_but_covers_the_rest():
    raw = bytearray(values_batch([b"a", b"b"]))
    h.patch_base_offset(raw, 1234)
    h.patch_leader_epoch(raw, 9)
    header, _ = next(b.iter_batches(raw))
    assert (header.base_offset, header.partition_leader_epoch) == (1234, 9)
    assert header.crc == zlib.crc32(bytes(raw[b.CRC_START:]))
    for position in (b.CRC_START, 40, len(raw) - 1):
        damaged = bytearray(raw)
        damaged[position] ^= 0xFF
        with pytest.raises(errors.CorruptRecord, match="position 0"):
            list(b.iter_batches(damaged))


def test_iter_batches_names_the_position_of_the_bad_batch():
    first, second = values_batch([b"a"]), bytearray(values_batch([b"b"]))
    second[-1] ^= 1
    with pytest.raises(errors.CorruptRecord, match=f"CRC mismatch .* position {len(first)}"):
        list(b.iter_batches(first + second))
    with pytest.raises(errors.CorruptRecord, match=f"truncated batch.*position {len(first)}"):
        list(b.iter_batches(first + bytes(second[:-5])))
    with pytest.raises(errors.CorruptRecord, match="truncated batch header"):
        list(b.iter_batches(first + bytes(second[:10])))


def test_decode_concatenated_batches_offsets_follow_base_offsets():
    raw = values_batch([b"a", b"b"], base_offset=100) + values_batch([b"c"], base_offset=102)
    batches = list(b.decode_batches(raw))
    assert [rb.column("offset").to_pylist() for rb in batches] == [[100, 101], [102]]


def test_log_append_time_stamp_overrides_record_timestamps():
    raw = bytearray(values_batch([b"a", b"b"], timestamp=5))
    head = bytearray(raw[:b.HEADER_SIZE])
    b.stamp_log_append_time(head, raw[b.HEADER_SIZE:], 777)
    stamped = bytes(head) + bytes(raw[b.HEADER_SIZE:])
    header, _ = next(b.iter_batches(stamped))  # CRC still valid
    assert header.log_append_time and header.max_timestamp == 777
    assert b.to_table(stamped).column("timestamp").to_pylist() == [777, 777]


def test_empty_batch_and_unknown_columns_are_refused():
    with pytest.raises(ValueError):
        b.build_batch([])
    with pytest.raises(ValueError, match="unknown record columns"):
        b.build_batch(pa.table({"value": [b"a"], "extra": [1]}))
    with pytest.raises(ValueError, match="compression"):
        b.build_batch([(b"k", b"v")], compression="brotli")


@pytest.mark.parametrize("kafka_name, stored, kafka_codec", [("gzip", 2, 1), ("snappy", 1, 2)])
def test_gzip_and_snappy_are_stored_in_an_arrow_codec_and_remembered(kafka_name, stored, kafka_codec):
    """Arrow IPC compresses with lz4 and zstd only: gzip is stored as zstd, snappy as lz4, and the
    header keeps the Kafka codec the producer chose."""
    raw = b.build_batch([(b"k", b"v" * 100)], compression=kafka_name)
    header = b.check_batch(raw)
    assert (header.codec, header.kafka_codec) == (stored, kafka_codec)
    assert b.to_table(raw).column("value").to_pylist() == [b"v" * 100]


def test_header_sanity_checks():
    raw = bytearray(values_batch([b"a"]))
    struct.pack_into(">i", raw, 57, 0)  # record_count (not CRC-checked when crc is skipped)
    with pytest.raises(errors.CorruptRecord, match="record count"):
        list(b.iter_batches(raw, verify_crc=False))
    raw = bytearray(values_batch([b"a"]))
    raw[16] = 3  # magic: 1 is ember's, 2 Kafka's
    with pytest.raises(errors.CorruptRecord, match="magic 3"):
        list(b.iter_batches(raw))
    raw[16] = 2  # Kafka's magic, but the CRC is ember's CRC-32, not CRC-32C
    with pytest.raises(errors.CorruptRecord, match="CRC"):
        list(b.iter_batches(raw))


def test_valid_crc_over_a_garbage_payload_is_a_typed_error_on_read(tmp_path):
    """The CRC proves the bytes are the producer's, not that they are a record batch: a log
    accepts such a batch (the broker never decodes payloads), but every reader gets CorruptRecord."""
    from ember.log import Log

    raw = bytearray(values_batch([b"a", b"b"]))
    raw[b.HEADER_SIZE:] = b"\xff" * (len(raw) - b.HEADER_SIZE)
    struct.pack_into(">I", raw, 17, zlib.crc32(bytes(raw[b.CRC_START:])))
    log = Log.open(tmp_path / "t-0")
    log.append_as_leader(bytes(raw), leader_epoch=0)
    with pytest.raises(errors.CorruptRecord, match="not a valid ember record batch"):
        b.to_table(log.read(0, 1 << 20).read_bytes())
    log.close()


@settings(max_examples=80, deadline=None)
@given(offsets=st.lists(st.integers(0, 200), min_size=1, max_size=60, unique=True).map(sorted),
       start=st.integers(-5, 210), length=st.none() | st.integers(0, 220))
def test_slice_offsets_keeps_the_offsets_in_range_also_across_gaps(offsets: list[int], start: int,
                                                                    length: int | None) -> None:
    n = len(offsets)
    decoded = pa.RecordBatch.from_arrays(
        [pa.array(offsets, pa.int64()), pa.array([0] * n, pa.int64()), pa.array([b"k"] * n, pa.binary()),
         pa.array([b"v%d" % o for o in offsets], pa.binary()), pa.nulls(n, HEADERS_TYPE)], schema=DECODED_SCHEMA)
    end = None if length is None else start + length
    kept = slice_offsets(decoded, start, end)
    assert kept.column("offset").to_pylist() == [o for o in offsets if o >= start and (end is None or o < end)]
