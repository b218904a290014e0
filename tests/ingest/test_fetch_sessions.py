"""Fetch sessions (KIP-227, ``ember.ingest.fetch_session``): the cache's slots and eviction rules,
and a session's fetches at the leader: a full fetch answers every partition, an incremental one
only those with news; a forgotten partition is never answered; a wrong epoch or an unknown session
makes the fetcher start over; a session's data equals what sessionless fetches return."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ingest_fakes import FakeInterBroker, FakeIsrWriter, FakeMetadataCache, batch, run

from ember.cluster.records import PartitionState
from ember.errors import FetchSessionIdNotFound, InvalidFetchSessionEpoch
from ember.ingest.broker_config import BrokerConfig
from ember.ingest.fetch import FetchTarget, fetch
from ember.ingest.fetch_session import EVICTION_MS, FetchSession, FetchSessionCache, SessionPartition
from ember.ingest.log_manager import LogManager
from ember.ingest.partition import CONSUMER_REPLICA_ID
from ember.ingest.produce import ProduceEntry, append_at_leaders
from ember.ingest.replica_manager import ReplicaManager
from ember.record.batch import iter_batches
from ember.wire.fetch_session import INT32_MAX, next_epoch

ME = 1
TOPIC = "t"
PARTITIONS = 4
MAX = 1 << 20


# -- the cache -------------------------------------------------------------------------------------

def _open(cache: FetchSessionCache, privileged: bool, size: int, now_ms: float) -> FetchSession | None:
    """A new session holding ``size`` partitions (its first fetch would add them), or None."""
    session = cache.create(privileged, size, now_ms)
    if session is not None:
        session.partitions = {(TOPIC, i): SessionPartition(TOPIC, i, 0, MAX, None) for i in range(size)}
    return session


def test_epochs_run_from_one_and_wrap_past_int32_max() -> None:
    assert next_epoch(0) == 1 and next_epoch(7) == 8 and next_epoch(INT32_MAX) == 1


def test_a_session_expects_each_epoch_once_in_order() -> None:
    cache = FetchSessionCache(slots=2)
    session = _open(cache, False, 3, now_ms=0)
    assert session is not None and session.id > 0
    assert cache.get(session.id, 1, now_ms=1) is session
    with pytest.raises(InvalidFetchSessionEpoch):
        cache.get(session.id, 1, now_ms=2)          # sent twice
    with pytest.raises(InvalidFetchSessionEpoch):
        cache.get(session.id, 3, now_ms=2)          # one lost
    assert cache.get(session.id, 2, now_ms=3) is session
    cache.remove(session.id)
    with pytest.raises(FetchSessionIdNotFound):
        cache.get(session.id, 3, now_ms=4)


def test_no_slots_means_no_sessions() -> None:
    assert FetchSessionCache(slots=0).create(True, 10, now_ms=0) is None


def test_a_full_cache_gives_a_client_no_slot_while_the_others_are_in_use() -> None:
    cache = FetchSessionCache(slots=2)
    assert _open(cache, False, 5, now_ms=0) and _open(cache, False, 5, now_ms=0)
    assert _open(cache, False, 50, now_ms=1000) is None          # young sessions: not evictable by a client
    assert len(cache) == 2 and cache.evictions == 0


def test_a_session_idle_past_the_eviction_time_gives_up_its_slot() -> None:
    cache = FetchSessionCache(slots=2)
    old = _open(cache, False, 5, now_ms=0)
    used = _open(cache, False, 5, now_ms=0)
    assert old is not None and used is not None
    cache.get(used.id, 1, now_ms=EVICTION_MS)                     # used: stays
    new = _open(cache, False, 1, now_ms=EVICTION_MS + 1)
    assert new is not None and cache.evictions == 1
    with pytest.raises(FetchSessionIdNotFound):
        cache.get(old.id, 1, now_ms=EVICTION_MS + 2)
    assert cache.get(used.id, 2, now_ms=EVICTION_MS + 2) is used


def test_a_followers_session_takes_the_slot_of_the_smallest_client_session() -> None:
    cache = FetchSessionCache(slots=2)
    big = _open(cache, False, 100, now_ms=0)
    small = _open(cache, False, 3, now_ms=0)
    assert big is not None and small is not None
    follower = _open(cache, True, 1, now_ms=10)
    assert follower is not None and follower.privileged
    with pytest.raises(FetchSessionIdNotFound):
        cache.get(small.id, 1, now_ms=11)
    assert cache.get(big.id, 1, now_ms=11) is big
    # two followers' sessions: a third follower finds nothing it outranks
    assert _open(cache, True, 1, now_ms=12) is not None           # takes the client's
    assert _open(cache, True, 1_000, now_ms=13) is None


def test_an_old_session_may_go_to_a_larger_client_session_but_not_a_smaller_one() -> None:
    cache = FetchSessionCache(slots=1)
    session = _open(cache, False, 10, now_ms=0)
    assert session is not None
    cache.get(session.id, 1, now_ms=EVICTION_MS)                  # in use, but created long ago
    assert _open(cache, False, 5, now_ms=EVICTION_MS + 1) is None
    assert _open(cache, False, 10, now_ms=EVICTION_MS + 1) is None   # a tie keeps the old one, as Kafka
    assert _open(cache, False, 11, now_ms=EVICTION_MS + 1) is not None


# -- fetches of a session at the leader --------------------------------------------------------------

async def _leader(data_dir: Path, slots: int = 10) -> tuple[ReplicaManager, LogManager]:
    cache = FakeMetadataCache()
    cache.put_topic(TOPIC, {i: [ME] for i in range(PARTITIONS)},
                    states={i: PartitionState(ME, 0, [ME], 1, 0) for i in range(PARTITIONS)})
    logs = LogManager(data_dir, ME)
    config = BrokerConfig.from_properties({"max.incremental.fetch.session.cache.slots": str(slots)})
    replicas = ReplicaManager(ME, cache, logs, config, FakeIsrWriter(cache, ME), inter_broker=FakeInterBroker())
    await replicas.start()
    return replicas, logs


async def _append(replicas: ReplicaManager, index: int, count: int = 1) -> None:
    outcomes = await append_at_leaders(replicas, [ProduceEntry(TOPIC, index, memoryview(batch(count)))], 1, 5.0)
    assert not [o for o in outcomes if isinstance(o, Exception)]


def _targets(positions: dict[int, int]) -> list[FetchTarget]:
    return [FetchTarget(TOPIC, index, offset, MAX) for index, offset in positions.items()]


def test_an_incremental_fetch_answers_only_the_partitions_with_news(tmp_path: Path) -> None:
    async def scenario() -> None:
        replicas, logs = await _leader(tmp_path)
        try:
            await _append(replicas, 0, 3)
            positions = dict.fromkeys(range(PARTITIONS), 0)
            results, session_id = await fetch(replicas, _targets(positions), CONSUMER_REPLICA_ID, 1, MAX, 0.0,
                                              epoch=0)
            assert session_id > 0
            assert [r.target.partition for r in results] == [0, 1, 2, 3]     # full: every partition
            assert [r.size > 0 for r in results] == [True, False, False, False]
            positions[0] = 3
            # epoch 1 names the moved partition; nothing else is new: an empty answer
            results, _ = await fetch(replicas, _targets({0: 3}), CONSUMER_REPLICA_ID, 1, MAX, 0.0,
                                     session_id, 1)
            assert results == []
            await _append(replicas, 2, 2)
            results, _ = await fetch(replicas, [], CONSUMER_REPLICA_ID, 1, MAX, 0.0, session_id, 2)
            assert [(r.target.partition, r.target.offset, r.offsets.high_watermark) for r in results] == [(2, 0, 2)]
            assert results[0].size > 0
            # forgotten: partition 1's new data is not answered; the others still are
            await _append(replicas, 1)
            await _append(replicas, 3)
            results, _ = await fetch(replicas, _targets({2: 2}), CONSUMER_REPLICA_ID, 1, MAX, 0.0, session_id, 3,
                                     forgotten=[(TOPIC, 1)])
            assert [r.target.partition for r in results] == [3]
            with pytest.raises(InvalidFetchSessionEpoch):
                await fetch(replicas, [], CONSUMER_REPLICA_ID, 1, MAX, 0.0, session_id, 3)
            # a sessionless fetch that names the session closes it
            await fetch(replicas, _targets({0: 0}), CONSUMER_REPLICA_ID, 1, MAX, 0.0, session_id, -1)
            with pytest.raises(FetchSessionIdNotFound):
                await fetch(replicas, [], CONSUMER_REPLICA_ID, 1, MAX, 0.0, session_id, 4)
        finally:
            await replicas.close()
            logs.close()

    run(scenario())


def test_a_sessions_long_poll_wakes_on_an_append_to_any_of_its_partitions(tmp_path: Path) -> None:
    async def scenario() -> None:
        replicas, logs = await _leader(tmp_path)
        try:
            positions = dict.fromkeys(range(PARTITIONS), 0)
            _, session_id = await fetch(replicas, _targets(positions), CONSUMER_REPLICA_ID, 1, MAX, 0.0, epoch=0)
            loop = asyncio.get_running_loop()
            started = loop.time()
            waiting = asyncio.create_task(fetch(replicas, [], CONSUMER_REPLICA_ID, 1, MAX, 20.0, session_id, 1))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            await _append(replicas, 3)
            results, _ = await asyncio.wait_for(waiting, 10)
            assert [r.target.partition for r in results] == [3] and loop.time() - started < 15
        finally:
            await replicas.close()
            logs.close()

    run(scenario())


def test_an_incremental_fetch_looks_only_at_partitions_that_changed(tmp_path: Path, monkeypatch) -> None:
    """At thousands of partitions a scan of the whole session per pass cost more than the data
    (a third of an idle broker's CPU at 10,000): only partitions whose ``changed`` fired, or that
    still had news, are looked at."""
    from ember.ingest import fetch as fetch_module

    looked_at: list[int] = []
    has_news = fetch_module._has_news
    monkeypatch.setattr(fetch_module, "_has_news", lambda e, r, c: looked_at.append(e.index) or has_news(e, r, c))

    async def scenario() -> None:
        replicas, logs = await _leader(tmp_path)
        try:
            _, session_id = await fetch(replicas, _targets(dict.fromkeys(range(PARTITIONS), 0)), CONSUMER_REPLICA_ID,
                                        1, MAX, 0.0, epoch=0)
            looked_at.clear()
            await _append(replicas, 2, 2)
            results, _ = await fetch(replicas, [], CONSUMER_REPLICA_ID, 1, MAX, 0.0, session_id, 1)
            assert [r.target.partition for r in results] == [2]
            assert set(looked_at) == {2}
        finally:
            await replicas.close()
            logs.close()

    run(scenario())


def test_a_moved_log_start_is_news_for_the_session(tmp_path: Path) -> None:
    """DeleteRecords (and retention) move the log start without an append: the session still
    tells the fetcher, who must not ask for offsets that are gone."""
    async def scenario() -> None:
        replicas, logs = await _leader(tmp_path)
        try:
            await _append(replicas, 1, 5)
            _, session_id = await fetch(replicas, _targets(dict.fromkeys(range(PARTITIONS), 0)), CONSUMER_REPLICA_ID,
                                        1, MAX, 0.0, epoch=0)
            results, _ = await fetch(replicas, _targets({1: 5}), CONSUMER_REPLICA_ID, 1, MAX, 0.0, session_id, 1)
            assert results == []
            assert await replicas.partitions[(TOPIC, 1)].delete_records(3) == 3
            results, _ = await fetch(replicas, [], CONSUMER_REPLICA_ID, 1, MAX, 0.0, session_id, 2)
            assert [(r.target.partition, r.offsets.log_start_offset) for r in results] == [(1, 3)]
        finally:
            await replicas.close()
            logs.close()

    run(scenario())


def test_a_session_fetch_of_nothing_is_answered_at_once(tmp_path: Path) -> None:
    """librdkafka opens a session with a fetch of no partitions before it knows its positions;
    Kafka answers it at once, and so must ember (it waited fetch.wait.max.ms, half a second
    before a new group's first records)."""
    async def scenario() -> None:
        replicas, logs = await _leader(tmp_path)
        try:
            results, session_id = await asyncio.wait_for(
                fetch(replicas, [], CONSUMER_REPLICA_ID, 1, MAX, 30.0, epoch=0), 10)
            assert results == [] and session_id > 0
        finally:
            await replicas.close()
            logs.close()

    run(scenario())


def test_without_a_free_slot_the_fetch_runs_sessionless(tmp_path: Path) -> None:
    async def scenario() -> None:
        replicas, logs = await _leader(tmp_path, slots=0)
        try:
            results, session_id = await fetch(replicas, _targets({0: 0, 1: 0}), CONSUMER_REPLICA_ID, 1, MAX, 0.0,
                                              epoch=0)
            assert session_id == 0 and [r.target.partition for r in results] == [0, 1]
        finally:
            await replicas.close()
            logs.close()

    run(scenario())


class _SessionReader:
    """A consumer of one session: names only the partitions its last answer moved."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas
        self.seen: dict[int, list[int]] = {i: [] for i in range(PARTITIONS)}
        self.moved: dict[int, int] = {}
        self.session_id, self.epoch = 0, 0

    async def fetch(self) -> None:
        positions = {i: (offsets[-1] + 1 if offsets else 0) for i, offsets in self.seen.items()}
        named = positions if self.epoch == 0 else self.moved
        results, session_id = await fetch(self.replicas, _targets(named), CONSUMER_REPLICA_ID, 1, MAX, 0.0,
                                          self.session_id, self.epoch)
        assert session_id > 0
        self.session_id, self.epoch, self.moved = session_id, self.epoch + 1, {}
        for result in results:
            if result.slice is not None:
                for header, _ in iter_batches(result.slice.read_bytes()):
                    self.seen[result.target.partition] += list(range(header.base_offset, header.last_offset + 1))
        for index, offsets in self.seen.items():
            if offsets and offsets[-1] + 1 != positions[index]:
                self.moved[index] = offsets[-1] + 1


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, PARTITIONS - 1), st.integers(1, 4)), min_size=1, max_size=12),
       st.integers(1, 3))
def test_a_session_reads_every_record_once_in_order(
        tmp_path_factory: pytest.TempPathFactory, appends: list[tuple[int, int]], every: int) -> None:
    """Appends interleaved with incremental fetches (one every ``every`` appends), each naming only
    the partitions its previous answer moved: every offset is read exactly once, in order."""
    data_dir = tmp_path_factory.mktemp("session")

    async def scenario() -> None:
        replicas, logs = await _leader(data_dir)
        try:
            reader = _SessionReader(replicas)
            await reader.fetch()
            for step, (index, count) in enumerate(appends):
                await _append(replicas, index, count)
                if step % every == 0:
                    await reader.fetch()
            for _ in range(PARTITIONS + 1):      # drain: each fetch brings at least one partition's rest
                await reader.fetch()
            expected = {i: sum(c for p, c in appends if p == i) for i in range(PARTITIONS)}
            assert {i: len(v) for i, v in reader.seen.items()} == expected
            assert all(v == list(range(len(v))) for v in reader.seen.values())
        finally:
            await replicas.close()
            logs.close()

    run(scenario())
