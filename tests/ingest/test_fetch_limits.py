"""What one fetch may read (``ember.ingest.fetch``, docs/operations.md "Memory bound"): at most
``min(request max_bytes, broker fetch.max.bytes)`` over all its partitions and each partition's own
``max_bytes``, but always the first batch of the first partition that has one, as Kafka does. Both
listeners fetch through ``fetch_at_leaders``; the Kafka listener converts what it read in memory,
so a request asking for 2 GiB must not make the broker read 2 GiB."""
from __future__ import annotations

from pathlib import Path

from ingest_fakes import FakeInterBroker, FakeIsrWriter, FakeMetadataCache, batch, run

from ember.cluster.records import PartitionState
from ember.ingest.broker_config import BROKER_CONFIGS, BrokerConfig
from ember.ingest.fetch import FetchTarget, fetch_at_leaders
from ember.ingest.log_manager import LogManager
from ember.ingest.partition import CONSUMER_REPLICA_ID
from ember.ingest.produce import ProduceEntry, append_at_leaders
from ember.ingest.replica_manager import ReplicaManager

ME = 1
TOPIC = "t"
INT32_MAX = 2 ** 31 - 1
BATCHES = 40


async def _filled(data_dir: Path, config: dict[str, str]) -> tuple[ReplicaManager, LogManager, int]:
    """A started manager leading TOPIC-0 and TOPIC-1, each holding BATCHES batches; their size."""
    cache = FakeMetadataCache()
    cache.put_topic(TOPIC, {0: [ME], 1: [ME]}, states={i: PartitionState(ME, 0, [ME], 1, 0) for i in (0, 1)})
    logs = LogManager(data_dir, ME)
    replicas = ReplicaManager(ME, cache, logs, BrokerConfig.from_properties(config), FakeIsrWriter(cache, ME),
                              inter_broker=FakeInterBroker())
    await replicas.start()
    raw = batch(20)
    entries = [ProduceEntry(TOPIC, index, memoryview(raw)) for index in (0, 1) for _ in range(BATCHES)]
    outcomes = await append_at_leaders(replicas, entries, 1, 5.0)
    assert not [o for o in outcomes if isinstance(o, Exception)]
    return replicas, logs, len(raw)


def _fetch(data_dir: Path, config: dict[str, str], max_bytes: int, partition_max_bytes: int) -> tuple[list[int], int]:
    """Sizes read per partition by one consumer fetch of both partitions from offset 0; a batch's size."""
    async def scenario() -> tuple[list[int], int]:
        replicas, logs, batch_size = await _filled(data_dir, config)
        try:
            targets = [FetchTarget(TOPIC, index, 0, partition_max_bytes) for index in (0, 1)]
            results = await fetch_at_leaders(replicas, targets, CONSUMER_REPLICA_ID, 1, max_bytes, 0.0)
            assert not [r.error for r in results if r.error is not None]
            return [r.size for r in results], batch_size
        finally:
            await replicas.close()
            logs.close()

    return run(scenario())


def test_the_brokers_fetch_max_bytes_is_kafkas() -> None:
    assert BROKER_CONFIGS["fetch.max.bytes"].default == 57671680 == BrokerConfig.from_properties().fetch_max_bytes


def test_a_fetch_asking_for_2_gib_reads_at_most_the_brokers_fetch_max_bytes(tmp_path: Path) -> None:
    """Before the broker's cap, both partitions were read whole (2 x BATCHES batches)."""
    sizes, batch_size = _fetch(tmp_path, {"fetch.max.bytes": "4096"}, INT32_MAX, INT32_MAX)
    assert 0 < sum(sizes) <= 4096
    assert sizes[0] == 4096 // batch_size * batch_size and sizes[1] == 0    # whole batches, first partition first


def test_the_requests_max_bytes_and_each_partitions_bound_the_read(tmp_path: Path) -> None:
    sizes, batch_size = _fetch(tmp_path, {}, 5 * batch(20).__len__(), 3 * batch(20).__len__())
    assert sizes == [3 * batch_size, 2 * batch_size]


def test_the_first_batch_comes_back_even_above_every_limit(tmp_path: Path) -> None:
    """A batch larger than the limits must not stall its consumer: one batch of the first partition;
    max_bytes 0 or negative (a hostile request) reads nothing more."""
    for max_bytes, partition_max_bytes in ((0, 0), (-1, -1), (1, INT32_MAX), (INT32_MAX, -5)):
        sizes, batch_size = _fetch(tmp_path / f"{max_bytes}_{partition_max_bytes}", {"fetch.max.bytes": "1024"},
                                   max_bytes, partition_max_bytes)
        assert sizes == [batch_size, 0], (max_bytes, partition_max_bytes)

