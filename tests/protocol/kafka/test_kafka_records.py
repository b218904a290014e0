"""Kafka RecordBatch v2 <-> ember batches, record by record, for every codec and the quirks of real
clients' batches (raw snappy from librdkafka, zstd frames without a content size)."""
from __future__ import annotations

import cramjam
import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from ember.errors import CorruptRecord, InvalidRecord
from ember.protocol.kafka.records import split_batches, to_ember_batch, to_kafka_batch
from ember.record.batch import build_batch, check_batch, stamp_log_append_time, to_table
from ember.record.header import CRC_START, HEADER_SIZE, LOG_OVERHEAD, BatchHeader, patch_base_offset

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
RECORDS = [(i, 1_700_000_000_000 + 7 * i, None if i == 1 else f"k{i}".encode(),
            None if i == 2 else (b"" if i == 3 else f"v{i}".encode() * 30),
            [("a", b"1"), ("b", None)] if i % 4 == 0 else []) for i in range(40)]


def kafka_batch(codec: int = 0, records=RECORDS, producer=(-1, -1, -1)) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, 0, *producer, 1 << 30)
    for record in records:
        builder.append(*record)
    return bytes(builder.build())


def rewrite(batch: bytes, body: bytes, **fields) -> bytes:
    """``batch`` with a new records section and header fields, CRC-32C recomputed."""
    header = BatchHeader.parse(batch)._replace(batch_length=HEADER_SIZE - LOG_OVERHEAD + len(body), crc=0, **fields)
    packed = header.pack()
    return header._replace(crc=calc_crc32c(packed[CRC_START:] + body)).pack() + body


def records_of(kafka: bytes) -> list[tuple]:
    batch = DefaultRecordBatch(kafka)
    assert batch.validate_crc()
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_batch_survives_the_ember_log_and_comes_back_in_its_codec(codec):
    ember = bytearray(to_ember_batch(kafka_batch(CODECS[codec], producer=(9, 2, 17))))
    check_batch(ember)
    table = to_table(ember)
    assert table.column("key").to_pylist() == [r[2] for r in RECORDS]
    assert table.column("value").to_pylist() == [r[3] for r in RECORDS]
    assert table.column("timestamp").to_pylist() == [r[1] for r in RECORDS]
    header = BatchHeader.parse(ember)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 2, 17)
    patch_base_offset(ember, 1000)
    served = to_kafka_batch(bytes(ember), fetch_version=12)
    assert DefaultRecordBatch(served).compression_type == CODECS[codec]
    assert records_of(served) == [(1000 + i, ts, k, v, h) for i, ts, k, v, h in RECORDS]


def test_raw_snappy_from_librdkafka_and_zstd_without_content_size_are_read():
    plain = kafka_batch()
    for codec, body in ((CODECS["snappy"], cramjam.snappy.compress_raw(plain[HEADER_SIZE:])),
                        (CODECS["zstd"], _streamed_zstd(plain[HEADER_SIZE:]))):
        ember = to_ember_batch(rewrite(plain, bytes(body), attributes=codec))
        assert to_table(ember).column("value").to_pylist() == [r[3] for r in RECORDS]


def _streamed_zstd(data: bytes) -> bytes:
    compressor = cramjam.zstd.Compressor()
    compressor.compress(data)
    frame = bytes(compressor.finish())
    assert frame[4] & 0xC0 == 0, "a streamed frame carries no content size"
    return frame


def test_ember_client_batches_are_served_by_their_arrow_codec_zstd_only_to_new_fetchers():
    records = [(b"k", b"v" * 50, 5, [("h", b"x")])] * 10
    assert DefaultRecordBatch(to_kafka_batch(build_batch(records, compression="lz4"), 12)).compression_type == 3
    assert DefaultRecordBatch(to_kafka_batch(build_batch(records, compression="zstd"), 12)).compression_type == 4
    assert DefaultRecordBatch(to_kafka_batch(build_batch(records, compression="zstd"), 9)).compression_type == 3
    assert records_of(to_kafka_batch(build_batch(records), 12))[0] == (0, 5, b"k", b"v" * 50, [("h", b"x")])


@pytest.mark.parametrize("codec", ["gzip", "snappy"])
def test_ember_client_gzip_and_snappy_batches_are_served_in_that_codec(codec):
    records = [(b"k", b"v" * 50, 5, [("h", b"x")])] * 10
    served = to_kafka_batch(build_batch(records, compression=codec), 4)
    assert DefaultRecordBatch(served).compression_type == CODECS[codec]
    assert records_of(served)[9] == (9, 5, b"k", b"v" * 50, [("h", b"x")])


def test_log_append_time_batches_are_served_with_kafkas_timestamp_type():
    ember = build_batch([(b"k", b"v", 5), (b"k", b"w", 6)])
    header, payload = bytearray(ember[:HEADER_SIZE]), ember[HEADER_SIZE:]
    stamp_log_append_time(header, payload, 1234)
    served = DefaultRecordBatch(to_kafka_batch(bytes(header) + payload, 12))
    assert served.timestamp_type == 1 and served.max_timestamp == 1234
    assert [r.timestamp for r in served] == [1234, 1234]


def test_bad_batches_are_refused_with_typed_errors():
    good = kafka_batch()
    with pytest.raises(CorruptRecord, match="CRC"):
        to_ember_batch(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(CorruptRecord, match="cannot be decoded"):
        to_ember_batch(rewrite(good, b"not zstd at all", attributes=CODECS["zstd"]))
    with pytest.raises(InvalidRecord, match="transactional"):
        to_ember_batch(rewrite(good, good[HEADER_SIZE:], attributes=0x10))
    with pytest.raises(InvalidRecord, match="offset"):
        to_ember_batch(kafka_batch(records=[RECORDS[0], (5, *RECORDS[1][1:])]))
    with pytest.raises(CorruptRecord, match="magic"):
        split_batches(good[:16] + b"\x01" + good[17:])
    with pytest.raises(CorruptRecord, match="claims"):
        split_batches(good[:-3])
