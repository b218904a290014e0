"""A replica fetcher's fetch session as its partitions come and go (``ember.ingest.replica_fetcher``
with a stand-in leader): after the first full fetch it names only partitions that moved, so a
partition it stops fetching must still leave the leader's session, and a partition whose append
was cut short by its client going away must still wake the sessions that watch it."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest
from ingest_fakes import FakeInterBroker, MakePartition, answer_to, idle_leader, run, until
from test_storage_errors import FETCHER_CONFIG, LEADER, LEADER_ADDRESS, ME, following, take_offline

from ember.cluster.records import PartitionState
from ember.ingest.partition import INLINE_WRITE_BYTES
from ember.ingest.replica_fetcher import ReplicaFetcher
from ember.record.batch import build_batch
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Response

SESSION_ID = 7


class SessionLeader:
    """Answers fetches with session SESSION_ID and nothing new; the first fetch is held until
    ``release`` is set (a fetch in flight)."""

    def __init__(self) -> None:
        self.fetches: list[dict[str, Any]] = []
        self.release = asyncio.Event()

    async def __call__(self, api_key: ApiKey, body: dict[str, Any]) -> Response:
        if api_key != ApiKey.FETCH:
            return await idle_leader(api_key, body)
        self.fetches.append(body)
        if len(self.fetches) == 1:
            await self.release.wait()
        else:
            await asyncio.sleep(0.01)
        return Response(0, {"session_id": SESSION_ID, "partitions": [
            answer_to(p, high_watermark=0, log_start_offset=0, log_end_offset=0, size=0) for p in body["partitions"]]})


def named(body: dict[str, Any]) -> list[int]:
    return [p["partition"] for p in body["partitions"]]


def forgotten(body: dict[str, Any]) -> list[int]:
    return [p["partition"] for p in body["forgotten"]]


def test_a_partition_dropped_while_the_full_fetch_names_it_leaves_the_session(make_partition: MakePartition) -> None:
    """Dropped while the session's first fetch was out: the leader's session would have kept it
    for good (and, no longer led there, answered an error at once on every fetch)."""
    kept, dropped = following(make_partition()), following(make_partition())

    async def scenario() -> None:
        leader = SessionLeader()
        fetcher = ReplicaFetcher(ME, LEADER, lambda _: LEADER_ADDRESS, FETCHER_CONFIG, FakeInterBroker(leader))
        try:
            fetcher.follow(kept)
            fetcher.follow(dropped)
            await until(lambda: leader.fetches, "the first fetch")
            assert named(leader.fetches[0]) == [0, 1]
            fetcher.unfollow(dropped)
            leader.release.set()
            await until(lambda: len(leader.fetches) >= 3, "two more fetches")
        finally:
            await fetcher.close()
        after = leader.fetches[1]
        # either a new full fetch without it, or an incremental one that forgets it
        assert (after["session_epoch"] == 0 and named(after) == [0]) or forgotten(after) == [1]
        assert all(1 not in named(body) for body in leader.fetches[1:])

    run(scenario())


def test_a_log_taken_offline_outside_replication_leaves_the_session(
        make_partition: MakePartition, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed flush takes an idle follower's log offline: told so (``recheck``, from the
    replica manager's offline check), the fetcher drops it from the leader's session."""
    healthy, failing = following(make_partition()), following(make_partition())

    async def scenario() -> None:
        leader = SessionLeader()
        leader.release.set()
        fetcher = ReplicaFetcher(ME, LEADER, lambda _: LEADER_ADDRESS, FETCHER_CONFIG, FakeInterBroker(leader))
        try:
            fetcher.follow(healthy)
            fetcher.follow(failing)
            await until(lambda: len(leader.fetches) >= 2, "an incremental fetch")
            take_offline(monkeypatch, failing.log)
            fetcher.recheck(failing)
            seen = len(leader.fetches)
            await until(lambda: any(1 in forgotten(body) for body in leader.fetches[seen:]), "the offline log forgotten")
        finally:
            await fetcher.close()

    run(scenario())


def test_an_append_whose_client_went_away_still_wakes_the_partitions_watchers(make_partition: MakePartition) -> None:
    """The write lands although its caller was cancelled: fetch sessions look only at partitions
    that fired, so without the fire its records stayed unread until the next append. (A batch
    over INLINE_WRITE_BYTES: a smaller one is appended on the event loop, with no await.)"""
    partition = make_partition(broker_id=LEADER)
    partition.apply_state(PartitionState(LEADER, 0, [LEADER], 1, 0))

    async def scenario() -> None:
        slow = partition._append

        def slow_append(*args: Any, **kwargs: Any) -> Any:
            import time
            time.sleep(0.3)
            return slow(*args, **kwargs)

        partition._append = slow_append   # type: ignore[method-assign]
        large = build_batch([(b"k", bytes(INLINE_WRITE_BYTES), 1_000), (b"k", b"v", 1_000)])
        appending = asyncio.create_task(partition.append(memoryview(large), 1))
        await asyncio.sleep(0.1)
        woken = partition.changed.future()
        appending.cancel()
        await asyncio.gather(appending, return_exceptions=True)
        assert partition.log.log_end_offset == 2 and woken.done()

    run(scenario())
