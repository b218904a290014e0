"""Reads at a log's end run on the event loop (``ember.ingest.fetch._read_at_log_ends``): a
follower or consumer at the end of a log reads what was written since the last fsync, in the page
cache, without two I/O-pool hand-offs; older data, many partitions, or a log another thread holds
are read on the I/O pool as before."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from ingest_fakes import FakeMetadataCache, batch, io_pool_busy, log_held_elsewhere, replica_manager, run

from ember.cluster.records import PartitionState
from ember.ingest.fetch import INLINE_READS, FetchResult, FetchTarget, fetch_at_leaders
from ember.ingest.log_manager import IO_THREADS
from ember.ingest.partition import CONSUMER_REPLICA_ID
from ember.ingest.produce import ProduceEntry, append_at_leaders
from ember.ingest.replica_manager import ReplicaManager

ME = 1
TOPIC = "t"
PARTITIONS = INLINE_READS + 2   # partition 0 and INLINE_READS + 1 more
WAIT_S = 0.3


@asynccontextmanager
async def leader(data_dir: Path) -> AsyncIterator[ReplicaManager]:
    """A started manager leading PARTITIONS partitions of TOPIC, each holding one batch."""
    cache = FakeMetadataCache()
    cache.put_topic(TOPIC, {i: [ME] for i in range(PARTITIONS)},
                    states={i: PartitionState(ME, 0, [ME], 1, 0) for i in range(PARTITIONS)})
    async with replica_manager(data_dir, cache, ME) as replicas:
        await produce(replicas, range(PARTITIONS))
        yield replicas


async def produce(replicas: ReplicaManager, partitions: range) -> None:
    outcomes = await append_at_leaders(replicas, [ProduceEntry(TOPIC, i, memoryview(batch(5))) for i in partitions],
                                       1, 5.0)
    assert not [o for o in outcomes if isinstance(o, Exception)]


async def read(replicas: ReplicaManager, offset: int, partitions: range) -> asyncio.Future[list[FetchResult]]:
    """A consumer's fetch of ``partitions`` from ``offset``, started; given WAIT_S to finish."""
    targets = [FetchTarget(TOPIC, i, offset, 1 << 20) for i in partitions]
    fetch = asyncio.ensure_future(fetch_at_leaders(replicas, targets, CONSUMER_REPLICA_ID, 1, 1 << 20, 0.0))
    await asyncio.wait([fetch], timeout=WAIT_S)
    return fetch


def test_a_read_at_the_log_end_is_answered_while_the_io_pool_is_busy(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with leader(tmp_path) as replicas:
            async with io_pool_busy(replicas.leader_partition(TOPIC, 0), IO_THREADS):
                fetch = await read(replicas, 0, range(INLINE_READS))
                assert fetch.done(), "a read of unflushed data at the log end waited for the I/O pool"
                assert [r.size > 0 and r.error is None for r in fetch.result()] == [True] * INLINE_READS

    run(scenario())


def test_reads_of_fsynced_data_of_many_partitions_or_of_a_held_log_wait_for_the_io_pool(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with leader(tmp_path) as replicas:
            first = replicas.leader_partition(TOPIC, 0)
            first.log.flush()
            await produce(replicas, range(1))                 # offsets 5-9 are past the fsync
            async with io_pool_busy(first, IO_THREADS), log_held_elsewhere(first):
                waiting = [await read(replicas, 0, range(1)),                  # fsynced
                           await read(replicas, 0, range(1, PARTITIONS)),      # too many for the event loop
                           await read(replicas, 5, range(1))]                  # unflushed, but its log is held
                assert not [f for f in waiting if f.done()]
            for fetch in waiting:
                assert all(r.size > 0 and r.error is None for r in await asyncio.wait_for(fetch, 5))

    run(scenario())
