"""The Kafka listener's side of the stored format: a Kafka client's batch is stored as it came and
served back byte for byte; ember's Arrow batches are served as v2 batches in the codec they were
produced with (zstd only to Fetch v10+); bad batches are refused with typed errors."""
from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from ember.errors import CorruptRecord, InvalidRecord
from ember.log import Log, LogConfig
from ember.protocol.kafka.records import fetched_batches, produced_batch, split_batches
from ember.record.batch import build_batch, stamp_log_append_time, to_table
from ember.record.header import CRC_START, HEADER_SIZE, LOG_OVERHEAD, BatchHeader

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


def stored(tmp_path, *batches: bytes, **config) -> bytes:
    """The bytes a leader's log holds after appending ``batches`` (offsets and epoch assigned)."""
    log = Log.open(tmp_path / "p-0", LogConfig(**config))
    try:
        for batch in batches:
            log.append_as_leader(batch, leader_epoch=3)
        piece = log.read(0, 1 << 30)
        return piece.read_bytes()
    finally:
        log.close()


@pytest.mark.parametrize("codec", CODECS)
def test_a_kafka_batch_is_stored_as_it_came_and_served_byte_for_byte(tmp_path, codec):
    produced = kafka_batch(CODECS[codec], producer=(9, 2, 17))
    following = kafka_batch(CODECS[codec], producer=(9, 2, 57))
    data = stored(tmp_path, bytes(produced_batch(produced)), bytes(produced_batch(following)))
    first = BatchHeader.parse(data)
    assert (first.magic, first.partition_leader_epoch, first.producer_id, first.base_sequence) == (2, 3, 9, 17)
    served = bytes(fetched_batches(data, 12))
    assert served == data
    second = served[first.size:]
    assert len(second) == len(following)
    assert records_of(second) == [(40 + i, ts, k, v, h) for i, ts, k, v, h in RECORDS]
    assert served[CRC_START:first.size] == produced[CRC_START:], "the producer's bytes, untouched"
    table = to_table(data)      # ember's readers get the same records as columns
    assert table.column("offset").to_pylist() == list(range(80))
    assert table.column("value").to_pylist() == [r[3] for r in RECORDS] * 2
    assert table.column("headers").to_pylist()[4] == [{"key": "a", "value": b"1"}, {"key": "b", "value": None}]


def test_a_kafka_zstd_batch_reaches_an_old_fetcher_as_lz4(tmp_path):
    data = stored(tmp_path, kafka_batch(CODECS["zstd"]))
    old = DefaultRecordBatch(bytes(fetched_batches(data, 9)))
    assert old.compression_type == CODECS["lz4"]
    assert [(r.offset, r.value) for r in old] == [(i, v) for i, _, _, v, _ in RECORDS]


def test_mixed_formats_are_served_in_order_each_kafka_run_as_stored(tmp_path):
    ember = build_batch([(b"k", b"ember", 5)] * 3, compression="lz4")
    kafka = kafka_batch()
    data = stored(tmp_path, kafka, ember, kafka)
    served = bytes(fetched_batches(data, 12))
    sizes = [BatchHeader.parse(data).size]
    assert served[:sizes[0]] == data[:sizes[0]]
    offsets = []
    pos = 0
    while pos < len(served):
        batch = DefaultRecordBatch(served[pos:pos + BatchHeader.parse(served, pos).size])
        assert batch.validate_crc()
        offsets += [r.offset for r in batch]
        pos += BatchHeader.parse(served, pos).size
    assert offsets == list(range(83))
    assert served[-sizes[0]:][CRC_START:] == kafka[CRC_START:]


def test_ember_client_batches_are_served_by_their_arrow_codec_zstd_only_to_new_fetchers():
    records = [(b"k", b"v" * 50, 5, [("h", b"x")])] * 10
    assert DefaultRecordBatch(bytes(fetched_batches(build_batch(records, compression="lz4"), 12))).compression_type == 3
    assert DefaultRecordBatch(bytes(fetched_batches(build_batch(records, compression="zstd"), 12))).compression_type == 4
    assert DefaultRecordBatch(bytes(fetched_batches(build_batch(records, compression="zstd"), 9))).compression_type == 3
    assert records_of(bytes(fetched_batches(build_batch(records), 12)))[0] == (0, 5, b"k", b"v" * 50, [("h", b"x")])


@pytest.mark.parametrize("codec", ["gzip", "snappy"])
def test_ember_client_gzip_and_snappy_batches_are_served_in_that_codec(codec):
    records = [(b"k", b"v" * 50, 5, [("h", b"x")])] * 10
    served = bytes(fetched_batches(build_batch(records, compression=codec), 4))
    assert DefaultRecordBatch(served).compression_type == CODECS[codec]
    assert records_of(served)[9] == (9, 5, b"k", b"v" * 50, [("h", b"x")])


def test_log_append_time_batches_are_served_with_kafkas_timestamp_type(tmp_path):
    ember = build_batch([(b"k", b"v", 5), (b"k", b"w", 6)])
    header, payload = bytearray(ember[:HEADER_SIZE]), ember[HEADER_SIZE:]
    stamp_log_append_time(header, payload, 1234)
    served = DefaultRecordBatch(bytes(fetched_batches(bytes(header) + payload, 12)))
    assert served.timestamp_type == 1 and served.max_timestamp == 1234
    assert [r.timestamp for r in served] == [1234, 1234]
    data = stored(tmp_path, kafka_batch(), message_timestamp_type="LogAppendTime")
    kafka = DefaultRecordBatch(bytes(fetched_batches(data, 12)))
    assert kafka.validate_crc() and kafka.timestamp_type == 1
    assert {r.timestamp for r in kafka} == {kafka.max_timestamp}
    assert set(to_table(data).column("timestamp").to_pylist()) == {kafka.max_timestamp}


def test_bad_kafka_batches_are_refused_before_anything_is_written(tmp_path):
    good = kafka_batch()
    log = Log.open(tmp_path / "p-0", LogConfig())
    try:
        with pytest.raises(CorruptRecord, match="CRC"):
            log.append_as_leader(good[:-1] + bytes([good[-1] ^ 1]), 0)
        with pytest.raises(CorruptRecord):
            log.append_as_leader(rewrite(good, b"not zstd at all", attributes=CODECS["zstd"]), 0)
        with pytest.raises(InvalidRecord, match="offset"):
            log.append_as_leader(kafka_batch(records=[RECORDS[0], (2, *RECORDS[1][1:]), (2, *RECORDS[2][1:])]), 0)
        with pytest.raises(CorruptRecord):
            log.append_as_leader(rewrite(good, good[HEADER_SIZE:-5]), 0)
        assert log.log_end_offset == 0
    finally:
        log.close()
    with pytest.raises(InvalidRecord, match="exactly one"):
        produced_batch(good + good)
    with pytest.raises(CorruptRecord, match="magic"):
        split_batches(good[:16] + b"\x01" + good[17:])
    with pytest.raises(CorruptRecord, match="claims"):
        split_batches(good[:-3])
