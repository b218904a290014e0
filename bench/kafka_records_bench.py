"""Kafka RecordBatch v2 <-> Arrow columns: the old per-record path (aiokafka's Cython codec, one Python step
per record, as ember.protocol.kafka.records did before ember.record.kafka_v2) against the native codec
(ember.record.kafka_v2, one C call per batch).

For batches of N records of 100 B values (key ~4 B, no headers / 2 headers) and codecs none and lz4:
  * decode - a v2 batch -> the Arrow columns (old: iterate aiokafka's DefaultRecordBatch and build the
             columns as the old to_ember_batch did, without its Arrow IPC step; new: decode_records)
  * encode - Arrow columns -> a v2 batch (old: to_pylist + DefaultRecordBatchBuilder + compress + re-header,
             as the old to_kafka_batch did after decoding its payload; new: encode_batch)

The four contenders run interleaved, one after the other in every round, so a noisy neighbour on a shared
machine hits them alike; each figure is the median over --rounds rounds of --repeats batches, with the
spread (min-max of the rounds) beside it, as million records per second (higher is better).
Usage: kafka_records_bench.py [--records 2000] [--repeats 20] [--rounds 9]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from array import array
from typing import Callable

import cramjam
import pyarrow as pa
from aiokafka.codec import snappy_encode
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from ember.record import kafka_v2
from ember.record.header import CRC_START, HEADER_SIZE, LOG_OVERHEAD, BatchHeader
from ember.record.schema import HEADERS_TYPE, RECORD_SCHEMA

CODECS = {"none": 0, "lz4": 3}
_NO_HEADERS: list[tuple[str, bytes | None]] = []


def kafka_batch(count: int, codec: int, headers: bool) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, 0, 1, 0, 0, 1 << 30)
    extra = [("trace", b"abcdef"), ("n", b"1")] if headers else []
    for i in range(count):
        builder.append(i, 1_700_000_000_000 + i, b"k%d" % (i % 1000), os.urandom(100), extra)
    return bytes(builder.build())


# --- the old per-record path (ember.protocol.kafka.records before the native codec) ------------

def old_decode(kafka: bytes) -> pa.Table:
    records = list(DefaultRecordBatch(kafka))
    keys = [r.key for r in records]
    values = [r.value for r in records]
    timestamps = [r.timestamp for r in records]
    headers = [r.headers for r in records]
    count = len(keys)
    return pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
                     "timestamp": pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(array("q", timestamps))]),
                     "headers": _old_headers_column(headers)})


def _old_headers_column(headers: list[list[tuple[str, bytes | None]]]) -> pa.Array:
    if not any(headers):
        return pa.nulls(len(headers), HEADERS_TYPE)
    offsets, keys, values, missing = [0], [], [], []
    for pairs in headers:
        for key, value in pairs or ():
            keys.append(key)
            values.append(value)
        offsets.append(len(keys))
        missing.append(not pairs)
    entries = pa.StructArray.from_arrays([pa.array(keys, pa.string()), pa.array(values, pa.binary())],
                                         fields=list(HEADERS_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), entries, type=HEADERS_TYPE, mask=pa.array(missing))


def old_encode(header: BatchHeader, records: pa.RecordBatch, codec: int) -> bytes:
    timestamps = records.column("timestamp").to_pylist()
    keys = records.column("key").to_pylist()
    values = records.column("value").to_pylist()
    column = records.column("headers")
    if column.null_count == len(column):
        headers = [_NO_HEADERS] * len(column)
    else:
        offsets = column.offsets.to_pylist()
        pairs = list(zip(column.values.field("key").to_pylist(), column.values.field("value").to_pylist()))
        valid = column.is_valid().to_pylist()
        headers = [pairs[a:b] if ok and b > a else _NO_HEADERS for a, b, ok in zip(offsets, offsets[1:], valid)]
    builder = DefaultRecordBatchBuilder(2, 0, 0, header.producer_id, header.producer_epoch, header.base_sequence,
                                        (1 << 31) - 1)
    append = builder.append
    for delta in range(len(keys)):
        append(delta, timestamps[delta], keys[delta], values[delta], headers[delta])
    built = builder.build()
    body = bytes(built[HEADER_SIZE:])
    if codec == 3:
        compressor = cramjam.lz4.Compressor(level=1, content_checksum=False, block_linked=False)
        compressor.compress(body)
        body = bytes(compressor.finish())
    elif codec == 2:
        body = snappy_encode(body, xerial_compatible=True)
    kafka = BatchHeader.parse(built)
    kafka = kafka._replace(base_offset=header.base_offset, batch_length=HEADER_SIZE - LOG_OVERHEAD + len(body),
                           attributes=kafka.attributes | codec, crc=0)
    crc = calc_crc32c(kafka.pack()[CRC_START:] + body)
    return kafka._replace(crc=crc).pack() + body


# --- measuring ---------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    n, repeats, rounds = args.records, args.repeats, args.rounds
    print(f"{n} records of 100 B per batch; M records/s, median of {rounds} interleaved rounds of {repeats} "
          f"batches [min-max] (higher is better)")
    print(f"{'codec':<6} {'hdrs':<5} {'decode old':>20} {'decode new':>20} {'x':>5} "
          f"{'encode old':>20} {'encode new':>20} {'x':>5}")
    for name, codec in CODECS.items():
        for with_headers in (False, True):
            kafka = kafka_batch(n, codec, with_headers)
            header = BatchHeader.parse(kafka)
            records = kafka_v2.decode_records(header, kafka)
            columns = records.select(RECORD_SCHEMA.names)
            assert old_decode(kafka).column("value").equals(pa.chunked_array([records.column("value")]))
            contenders: list[Callable[[], object]] = [
                lambda: old_decode(kafka),
                lambda: kafka_v2.decode_records(header, kafka),
                lambda: old_encode(header, columns, codec),
                lambda: kafka_v2.encode_batch(header, columns, codec)]
            samples: list[list[float]] = [[] for _ in contenders]
            for fn in contenders:
                fn()
            for _ in range(rounds):
                for fn, runs in zip(contenders, samples):
                    start = time.perf_counter()
                    for _ in range(repeats):
                        fn()
                    runs.append(n * repeats / (time.perf_counter() - start) / 1e6)
            medians = [statistics.median(s) for s in samples]
            cells = [f"{m:6.2f} [{min(s):5.2f}-{max(s):5.2f}]" for m, s in zip(medians, samples)]
            print(f"{name:<6} {'2' if with_headers else '0':<5} {cells[0]:>20} {cells[1]:>20} "
                  f"{medians[1] / medians[0]:4.0f}x {cells[2]:>20} {cells[3]:>20} {medians[3] / medians[2]:4.0f}x")


if __name__ == "__main__":
    main()
