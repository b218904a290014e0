"""Where the Kafka listener builds a Fetch's record entries (``handlers_records._fetch_partitions``):
a few kilobytes at the end of a log on the event loop (a consumer at the end of a log gets them
without two I/O-pool hand-offs), more than INLINE_CONVERT_BYTES or data older than the log's last
fsync on the I/O pool, which reads the segment files."""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ember.cluster.records import PartitionState
from ember.ingest.fetch import FetchResult, FetchTarget
from ember.ingest.partition import CONSUMER_REPLICA_ID, Partition
from ember.log import Log
from ember.log.config import LogConfig
from ember.protocol.kafka.handlers_records import INLINE_CONVERT_BYTES, _fetch_partitions
from ember.record.batch import build_batch

THREADS = 2
FETCH_VERSION = 12
WAIT_S = 0.3


def _partition(directory: Path, pool: ThreadPoolExecutor) -> Partition:
    config = LogConfig.from_properties({})
    partition = Partition("t", 0, "topic-id", Log.open(directory, config), config, 1, pool)
    partition.apply_state(PartitionState(1, 0, [1], 1, 0))
    return partition


async def _read(partition: Partition, offset: int) -> FetchResult:
    """The batch at ``offset`` alone, as a consumer's fetch reads it."""
    piece, offsets = await partition.run(partition.read_blocking, offset, 1, True, CONSUMER_REPLICA_ID)
    return FetchResult(FetchTarget("t", 0, offset, 1 << 20), slice=piece, leader=partition, offsets=offsets)


def test_a_small_fetch_at_the_log_end_is_built_while_the_io_pool_is_busy_and_others_wait_for_it(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        with ThreadPoolExecutor(THREADS) as pool:
            partition = _partition(tmp_path / "t-0", pool)
            try:
                await partition.append(memoryview(build_batch([(b"k", b"v", 1_000)])), 1)
                await partition.run(partition.log.flush)                       # offset 0 is fsynced
                await partition.append(memoryview(build_batch([(b"k", bytes(INLINE_CONVERT_BYTES), 1_000)])), 1)
                await partition.append(memoryview(build_batch([(b"k", b"v", 1_000)] * 10)), 1)
                small_old, large, small_at_end = [await _read(partition, offset) for offset in (0, 1, 2)]
                release = threading.Event()
                busy = asyncio.gather(*[partition.run(release.wait, 10) for _ in range(THREADS)])
                try:
                    built = asyncio.ensure_future(_fetch_partitions([small_at_end], FETCH_VERSION))
                    waiting = [asyncio.ensure_future(_fetch_partitions([r], FETCH_VERSION)) for r in (small_old, large)]
                    await asyncio.wait([built, *waiting], timeout=WAIT_S)
                    assert built.done() and [w.done() for w in waiting] == [False, False]
                finally:
                    release.set()
                    await busy
                [entry], [old], [big] = built.result(), *[await asyncio.wait_for(w, 5) for w in waiting]
                assert entry["error_code"] == old["error_code"] == big["error_code"] == 0
                assert entry["high_watermark"] == 12 and len(entry["records"]) > 10
                assert len(big["records"]) > INLINE_CONVERT_BYTES
            finally:
                partition.log.close()

    asyncio.run(asyncio.wait_for(scenario(), 20))
