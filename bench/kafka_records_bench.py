"""Per-record cost of the Kafka <-> ember record conversion (ember.protocol.kafka.records), the work the
Kafka listener adds to Produce and Fetch, beside the bare aiokafka record codec it is built on.

For batches of N records of 100 B (key ~4 B, no headers / 2 headers) and codecs none and lz4:
  * kafka->ember   - to_ember_batch: decode the v2 batch, build the Arrow columns and the ember batch
  * ember->kafka   - to_kafka_batch: decode the Arrow payload, encode the v2 batch
  * decode only    - iterating aiokafka's DefaultRecordBatch (the floor of kafka->ember)
  * encode only    - aiokafka's DefaultRecordBatchBuilder from Python values (the floor of ember->kafka)

Each figure is the best of --rounds rounds of --repeats batches (on a shared machine many short
rounds find the quiet moments). Usage: kafka_records_bench.py [--records 1000] [--repeats 100] [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Callable

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from ember.protocol.kafka.records import to_ember_batch, to_kafka_batch

CODECS = {"none": 0, "lz4": 3}


def kafka_batch(count: int, codec: int, headers: bool) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, 0, 1, 0, 0, 1 << 30)
    extra = [("trace", b"abcdef"), ("n", b"1")] if headers else []
    for i in range(count):
        builder.append(i, 1_700_000_000_000 + i, b"k%d" % (i % 1000), os.urandom(100), extra)
    return bytes(builder.build())


def per_record_us(fn: Callable[[], object], count: int, repeats: int, rounds: int) -> float:
    """Best of ``rounds`` (the machine may be shared: the minimum is the cost, the rest is noise)."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / repeats / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n, repeats, rounds = args.records, args.repeats, args.rounds
    print(f"{n} records of 100 B per batch, µs per record (lower is better)")
    print(f"{'codec':<6} {'headers':<8} {'kafka->ember':>13} {'ember->kafka':>13} {'decode only':>12} {'encode only':>12}")
    for name, codec in CODECS.items():
        for headers in (False, True):
            kafka = kafka_batch(n, codec, headers)
            ember = to_ember_batch(kafka)
            records = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in DefaultRecordBatch(kafka)]

            def encode() -> bytes:
                builder = DefaultRecordBatchBuilder(2, 0, 0, 1, 0, 0, 1 << 30)
                for offset, timestamp, key, value, hdrs in records:
                    builder.append(offset, timestamp, key, value, hdrs)
                return bytes(builder.build())
            row = [per_record_us(lambda: to_ember_batch(kafka), n, repeats, rounds),
                   per_record_us(lambda: to_kafka_batch(ember, 12), n, repeats, rounds),
                   per_record_us(lambda: list(DefaultRecordBatch(kafka)), n, repeats, rounds),
                   per_record_us(encode, n, repeats, rounds)]
            print(f"{name:<6} {'2' if headers else '0':<8} " + " ".join(f"{v:>12.2f} " for v in row))


if __name__ == "__main__":
    main()
