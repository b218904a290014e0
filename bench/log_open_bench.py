"""Opening a transactional partition log after a clean close: from the producer-state snapshot
(``ember.log.producer_snapshot``) beside a rebuild from every batch header (the snapshot removed),
interleaved, median and spread of the repeats.

The log is what the transactional fault run leaves a partition with: ``--transactions`` of
``--producers`` transactional producers, each a batch of a few records and its marker (one in four
aborted).

Usage: log_open_bench.py [--transactions 50000] [--producers 10] [--repeats 5]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from ember.log import Log
from ember.log.producer_snapshot import SNAPSHOT
from ember.record import kafka_v2
from ember.record.control import Marker
from ember.record.header import KAFKA_MAGIC, TRANSACTIONAL_FLAG, BatchHeader
from ember.record.schema import HEADERS_TYPE, RECORD_SCHEMA


def transactional_batch(pid: int, epoch: int, seq: int, records: int) -> bytes:
    """A Kafka producer's transactional batch of ``records`` small records."""
    values = pa.array([b"v%d" % (seq + i) for i in range(records)], pa.binary())
    columns = pa.RecordBatch.from_arrays([values, values, pa.array([1_000] * records, pa.int64()),
                                          pa.nulls(records, HEADERS_TYPE)], schema=RECORD_SCHEMA)
    header = BatchHeader(0, 0, -1, KAFKA_MAGIC, 0, TRANSACTIONAL_FLAG, 0, 0, 0, pid, epoch, seq, 0)
    return kafka_v2.encode_batch(header, columns, kafka_v2.NONE)


def fill(directory: Path, transactions: int, producers: int) -> Log:
    log = Log.open(directory)
    sequences = [0] * producers
    for n in range(transactions):
        pid = n % producers
        log.append_as_leader(transactional_batch(pid, 0, sequences[pid], 4), 0)
        sequences[pid] += 4
        log.append_marker(Marker(pid, 0, commit=n % 4 != 0, coordinator_epoch=0), 0)
        if n % 1000 == 0:
            log.update_high_watermark(log.log_end_offset)
    log.update_high_watermark(log.log_end_offset)
    return log


def open_seconds(directory: Path, snapshot: bool) -> float:
    if not snapshot:
        (directory / SNAPSHOT).unlink(missing_ok=True)
    started = time.perf_counter()
    log = Log.open(directory)
    seconds = time.perf_counter() - started
    log.close()           # writes the snapshot again for the next repeat
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transactions", type=int, default=50_000)
    parser.add_argument("--producers", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="log-open-"))
    try:
        directory = root / "t-0"
        started = time.perf_counter()
        fill(directory, args.transactions, args.producers).close()
        print(f"{args.transactions:,} transactions ({2 * args.transactions:,} batches) written in "
              f"{time.perf_counter() - started:.1f} s")
        samples: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.repeats):
            for snapshot in (True, False):
                samples[snapshot].append(open_seconds(directory, snapshot))
        for snapshot, label in ((True, "from the snapshot"), (False, "rebuilt from headers")):
            values = samples[snapshot]
            print(f"open {label:22s} median {statistics.median(values) * 1000:8.1f} ms  "
                  f"(min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f}, {len(values)} runs)")
        print(f"ratio (rebuild / snapshot, medians): "
              f"{statistics.median(samples[False]) / statistics.median(samples[True]):.1f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
