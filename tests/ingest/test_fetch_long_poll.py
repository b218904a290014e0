"""A sessionless fetch's long poll (``ember.ingest.fetch.fetch_at_leaders``: librdkafka never opens
fetch sessions) reads every partition once, then only the partitions that changed: a consumer of
1,000 partitions re-read 333 of them per broker for every append before. A long poll ends when its
client sends its next request on the connection, which would otherwise wait behind it."""
from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from ingest_fakes import FakeInterBroker, FakeIsrWriter, FakeMetadataCache, batch, run

from ember.cluster.records import PartitionState
from ember.ingest.broker_config import BrokerConfig
from ember.ingest.fetch import FetchTarget, fetch, fetch_at_leaders
from ember.ingest.log_manager import LogManager
from ember.ingest.partition import CONSUMER_REPLICA_ID, Partition
from ember.ingest.produce import ProduceEntry, append_at_leaders
from ember.ingest.replica_manager import ReplicaManager
from ember.net.pipelining import ArrivalReader
from ember.wire.fetch_session import FINAL_EPOCH, INITIAL_EPOCH

ME = 1
TOPIC = "t"
PARTITIONS = 50


async def _leading(data_dir: Path) -> tuple[ReplicaManager, LogManager]:
    cache = FakeMetadataCache()
    cache.put_topic(TOPIC, {i: [ME] for i in range(PARTITIONS)},
                    states={i: PartitionState(ME, 0, [ME], 1, 0) for i in range(PARTITIONS)})
    logs = LogManager(data_dir, ME)
    replicas = ReplicaManager(ME, cache, logs, BrokerConfig.from_properties({}), FakeIsrWriter(cache, ME),
                              inter_broker=FakeInterBroker())
    await replicas.start()
    return replicas, logs


@pytest.mark.parametrize("session", [False, True])
def test_a_long_poll_ends_when_its_client_sends_the_next_request(tmp_path: Path, session: bool) -> None:
    """librdkafka pipelines ListOffsets behind its first Fetch: they waited out its 500 ms poll."""
    async def scenario() -> tuple[bool, bool]:
        replicas, logs = await _leading(tmp_path)
        reader = ArrivalReader()
        reader.serve_here()
        try:
            targets = [FetchTarget(TOPIC, i, 0, 1 << 20) for i in range(PARTITIONS)]
            polling = asyncio.ensure_future(fetch(replicas, targets, CONSUMER_REPLICA_ID, 1, 1 << 20, 60.0,
                                                  epoch=INITIAL_EPOCH if session else FINAL_EPOCH))
            await asyncio.sleep(0.2)
            waiting = not polling.done()
            reader.feed_data(b"\x00\x00")      # the first bytes of the next request
            results, _ = await asyncio.wait_for(polling, 10)
            return waiting, all(r.size == 0 and r.error is None for r in results)
        finally:
            await replicas.close()
            logs.close()

    assert run(scenario()) == (True, True)


def test_a_long_poll_rereads_only_the_partition_that_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: Counter[int] = Counter()
    original = Partition.caught_up          # every read of a partition starts with it

    def counted(self: Partition, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        reads[self.index] += 1
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Partition, "caught_up", counted)

    async def scenario() -> list[int]:
        replicas, logs = await _leading(tmp_path)
        try:
            targets = [FetchTarget(TOPIC, i, 0, 1 << 20) for i in range(PARTITIONS)]
            polling = asyncio.ensure_future(fetch_at_leaders(replicas, targets, CONSUMER_REPLICA_ID, 1, 1 << 20, 10.0))
            for _ in range(200):
                if len(reads) == PARTITIONS:
                    break
                await asyncio.sleep(0.01)
            assert set(reads.values()) == {1} and not polling.done()
            for index in (7, 7, 31):        # three appends to two partitions, then the answer
                await append_at_leaders(replicas, [ProduceEntry(TOPIC, index, memoryview(batch(3)))], 1, 5.0)
            results = await asyncio.wait_for(polling, 10)
            assert [r.error for r in results if r.error is not None] == []
            return [r.size for r in results]
        finally:
            await replicas.close()
            logs.close()

    sizes = run(scenario())
    assert sizes[7] > 0 and all(size == 0 for i, size in enumerate(sizes) if i not in (7, 31))
    assert {i for i, n in reads.items() if n > 1} <= {7, 31}     # no other partition was read again


def test_a_fetch_reads_all_its_partitions_in_one_io_pool_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer starting on many partitions: one thread round trip per fetch, not one per partition
    (each in turn, as before), with every partition's records there and the byte limits shared."""
    jobs: list[str] = []
    original = Partition.run

    async def counted(self: Partition, job, *args):  # type: ignore[no-untyped-def]
        jobs.append(getattr(job, "__name__", repr(job)))
        return await original(self, job, *args)

    async def scenario() -> list[int]:
        replicas, logs = await _leading(tmp_path)
        try:
            for index in range(PARTITIONS):
                await append_at_leaders(replicas, [ProduceEntry(TOPIC, index, memoryview(batch(3)))], 1, 5.0)
            monkeypatch.setattr(Partition, "run", counted)
            targets = [FetchTarget(TOPIC, i, 0, 1 << 20) for i in range(PARTITIONS)]
            results = await fetch_at_leaders(replicas, targets, CONSUMER_REPLICA_ID, 1, 1 << 20, 1.0)
            assert [r.error for r in results if r.error is not None] == []
            return [r.size for r in results]
        finally:
            monkeypatch.undo()
            await replicas.close()
            logs.close()

    sizes = run(scenario())
    assert all(size > 0 for size in sizes) and len(set(sizes)) == 1
    assert jobs == ["_read_in_order"]
