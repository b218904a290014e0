"""Partition log throughput: append and read, beside a raw sequential write of the same bytes.

For 100 B and 1 KiB records in batches of 1k and 16k records it reports
  * build   - build_batch() from an Arrow table (client-side cost, not part of append)
  * append  - Log.append_as_leader for every batch + a final flush() (fsync), records/s and MB/s
  * raw     - os.write of the very same bytes to a file in the same directory + fsync
  * ratio   - append / raw
  * fetch   - Log.read + FetchSlice.read_bytes (what a broker serves), from page cache
  * arrow   - read_offset_range decoding to Arrow (what Spark executors do), CRC-checked

Usage: log_bench.py [--total-mb 64] [--dir /path/on/the/disk/to/test]
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from ember.log import Log, LogConfig, read_offset_range
from ember.record import build_batch, iter_batches

MB = 1024 * 1024
FETCH_BYTES = 4 * MB
REPEATS = 3


def make_table(record_size: int, records: int) -> pa.Table:
    blob = os.urandom(record_size * records)
    values = [blob[i * record_size:(i + 1) * record_size] for i in range(records)]
    return pa.table({"key": pa.array([b"k%d" % (i % 1000) for i in range(records)], pa.binary()),
                     "value": pa.array(values, pa.binary()),
                     "timestamp": pa.array([1_700_000_000_000 + i for i in range(records)], pa.int64())})


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def raw_write(path: Path, batches: list[bytes]) -> float:
    def write() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for data in batches:
                os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    return timed(write)


def bench_one(root: Path, record_size: int, batch_records: int, total_bytes: int) -> dict:
    table = make_table(record_size, batch_records)
    count = max(2, total_bytes // (record_size * batch_records))
    batches: list[bytes] = []
    build_s = timed(lambda: batches.extend(build_batch(table) for _ in range(count)))
    nbytes = sum(map(len, batches))
    records = count * batch_records

    config = LogConfig.from_properties({"segment.bytes": 256 * MB, "max.message.bytes": 64 * MB})
    append_s = raw_s = float("inf")
    log: Log | None = None
    for _ in range(REPEATS):  # interleaved, best of each: page-cache writeback is noisy
        if log is not None:
            log.delete()
        directory = root / f"log-{record_size}-{batch_records}"
        log = Log.open(directory, config)

        def append_all() -> None:
            for raw in batches:
                log.append_as_leader(raw, 0)
            log.flush()
        append_s = min(append_s, timed(append_all))
        raw_s = min(raw_s, raw_write(root / "raw.bin", batches))
        (root / "raw.bin").unlink()
    end = log.log_end_offset
    log.update_high_watermark(end)

    def fetch_all() -> None:
        offset = 0
        while offset < end:
            fetched = log.read(offset, FETCH_BYTES, max_offset=end)
            data = fetched.read_bytes()
            offset = _next_offset(data)
    fetch_s = timed(fetch_all)
    arrow_s = timed(lambda: sum(b.num_rows for b in read_offset_range(directory, 0, end)))
    arrow_nocrc_s = timed(lambda: sum(b.num_rows for b in read_offset_range(directory, 0, end,
                                                                            verify_crc=False)))
    log.delete()
    return dict(record_size=record_size, batch_records=batch_records, mb=nbytes / MB, records=records,
                build=nbytes / build_s, append=nbytes / append_s, append_rps=records / append_s,
                raw=nbytes / raw_s, fetch=nbytes / fetch_s, arrow=nbytes / arrow_s,
                arrow_rps=records / arrow_s, arrow_nocrc=nbytes / arrow_nocrc_s)


def _next_offset(fetched: bytes) -> int:
    """The offset after the last batch of a fetched slice (header fields only)."""
    last = None
    for header, _ in iter_batches(fetched, verify_crc=False):
        last = header
    return last.last_offset + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total-mb", type=int, default=64, help="bytes appended per case (default 64)")
    parser.add_argument("--dir", type=Path, default=None, help="directory on the disk to test (default: a temp dir)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="log-bench-", dir=args.dir))
    try:
        print(f"ember.log benchmark: {args.total_mb} MB per case in {root}\n")
        head = (f"{'record':>7} {'batch':>6} {'MB':>5} | {'build MB/s':>10} | {'append rec/s':>12} "
                f"{'MB/s':>6} {'raw MB/s':>8} {'ratio':>6} | {'fetch GB/s':>10} {'arrow GB/s':>10} "
                f"{'rec/s':>11} {'no-crc GB/s':>11}")
        print(head)
        print("-" * len(head))
        for record_size in (100, 1024):
            for batch_records in (1000, 16384):
                r = bench_one(root, record_size, batch_records, args.total_mb * MB)
                print(f"{r['record_size']:>6}B {r['batch_records']:>6} {r['mb']:>5.0f} | "
                      f"{r['build'] / MB:>10.0f} | {r['append_rps']:>12,.0f} {r['append'] / MB:>6.0f} "
                      f"{r['raw'] / MB:>8.0f} {r['append'] / r['raw']:>6.0%} | "
                      f"{r['fetch'] / 1e9:>10.2f} {r['arrow'] / 1e9:>10.2f} {r['arrow_rps']:>11,.0f} "
                      f"{r['arrow_nocrc'] / 1e9:>11.2f}")
        print("\nratio = append / raw write+fsync of the same bytes; reads are from page cache.")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
