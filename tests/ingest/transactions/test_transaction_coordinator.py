"""The transaction coordinator in process against a real ZooKeeper, with a fake marker writer:
InitProducerId and fencing, partitions and groups in a transaction, commit and abort (markers
first, then Complete*), the timeout abort, a second coordinator finishing what the first one
prepared, and the compare-and-set that refuses a stale coordinator."""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, Iterator

import pytest

from ember.cluster.producer_ids import ProducerIdAllocator
from ember.errors import (
    ConcurrentTransactions,
    InvalidProducerIdMapping,
    InvalidTransactionTimeout,
    InvalidTxnState,
    NotCoordinator,
    NotLeaderOrFollower,
    OperationNotAttempted,
    ProducerFenced,
    TransactionalIdNotFound,
    UnknownTopicOrPartition,
)
from ember.groups.store import GroupStore
from ember.ingest.transactions.coordinator import TransactionConfig, TransactionCoordinator
from ember.ingest.transactions.offsets import TransactionalOffsets
from ember.ingest.transactions.state import TxnState
from ember.ingest.transactions.store import TransactionConflict, TransactionStore
from ember.wire.types import TopicPartition
from ember.zk import zk_paths
from ember.zk.zk_session import ZkSession

_ids = itertools.count()


def txn_id() -> str:
    return f"app/tx-{next(_ids)}"     # a '/' in the id: it is URL-encoded as a znode name


class FakeCache:
    def __init__(self, brokers: tuple[int, ...] = (1,)) -> None:
        self.broker_ids = brokers

    def brokers(self) -> dict[int, Any]:
        return {b: SimpleNamespace(id=b, endpoint=lambda _l: ("127.0.0.1", 1)) for b in self.broker_ids}

    def topics(self) -> dict[str, Any]:
        return {"t": SimpleNamespace(partitions={p: [1] for p in range(4)})}


class FakeWriter:
    """Records every marker; ``failures`` partitions fail (NOT_LEADER) that many times first."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int, bool, list[tuple[str, int]]]] = []
        self.failures: dict[tuple[str, int], int] = {}
        self.gate: asyncio.Event | None = None

    async def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                            partitions: list[tuple[str, int]]) -> dict[tuple[str, int], Exception | None]:
        if self.gate is not None:
            await self.gate.wait()
        self.calls.append((producer_id, producer_epoch, coordinator_epoch, commit, list(partitions)))
        out: dict[tuple[str, int], Exception | None] = {}
        for p in partitions:
            if self.failures.get(p, 0) > 0:
                self.failures[p] -= 1
                out[p] = NotLeaderOrFollower("moved")
            else:
                out[p] = None
        return out

    def marked(self) -> set[tuple[str, int]]:
        return {p for call in self.calls for p in call[4]}


@pytest.fixture(scope="module")
def session(zookeeper: Any) -> Iterator[ZkSession]:
    zk = ZkSession(zookeeper.connect_string, 6000)
    zk.start()
    yield zk
    zk.close()


Make = Callable[..., TransactionCoordinator]


@pytest.fixture
def make(session: ZkSession) -> Make:
    def build(broker_id: int = 1, writer: FakeWriter | None = None, cache: FakeCache | None = None,
              clock: Callable[[], int] | None = None, **config: Any) -> TransactionCoordinator:
        options: dict[str, Any] = {"marker_backoff_s": 0.01, "completion_wait_s": 2.0, **config}
        return TransactionCoordinator(broker_id, cache or FakeCache(), TransactionStore(session),  # type: ignore[arg-type]
                                      ProducerIdAllocator(session, broker_id), writer or FakeWriter(),
                                      GroupStore(session), TransactionConfig(**options),
                                      **({"clock_ms": clock} if clock else {}))
    return build


def run(coro: Awaitable[Any]) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, 20)
    return asyncio.run(bounded())


def stored(session: ZkSession, transactional_id: str) -> Any:
    return TransactionStore(session).load(transactional_id)[0]


def test_init_gives_an_id_then_bumps_its_epoch(make: Make, session: ZkSession) -> None:
    async def scenario() -> None:
        coordinator, tid = make(), txn_id()
        pid, epoch = await coordinator.init_producer_id(tid, 60000)
        assert epoch == 0
        assert await coordinator.init_producer_id(tid, 60000) == (pid, 1)
        # KIP-360: the current producer may bump its own epoch; a retry of that bump gets the same answer
        assert await coordinator.init_producer_id(tid, 60000, pid, 1) == (pid, 2)
        assert await coordinator.init_producer_id(tid, 60000, pid, 1) == (pid, 2)
        with pytest.raises(ProducerFenced):
            await coordinator.init_producer_id(tid, 60000, pid, 0)
        with pytest.raises(InvalidTransactionTimeout):
            await coordinator.init_producer_id(tid, 900001)
        meta = stored(session, tid)
        assert (meta.producer_id, meta.producer_epoch, meta.state) == (pid, 2, TxnState.EMPTY)
        assert meta.coordinator == 1 and meta.coordinator_epoch == 1
    run(scenario())


def test_commit_writes_markers_to_every_partition_then_completes(make: Make, session: ZkSession) -> None:
    async def scenario() -> None:
        writer = FakeWriter()
        writer.failures[("t", 1)] = 2        # the leader moved twice: retried
        coordinator, tid = make(writer=writer), txn_id()
        pid, epoch = await coordinator.init_producer_id(tid, 60000)
        assert await coordinator.add_partitions_to_txn(tid, pid, epoch, [("t", 0)]) == {("t", 0): None}
        await coordinator.add_partitions_to_txn(tid, pid, epoch, [("t", 1), ("t", 0)])
        assert stored(session, tid).state == TxnState.ONGOING
        await coordinator.end_txn(tid, pid, epoch, commit=True)
        assert writer.marked() == {("t", 0), ("t", 1)}
        assert all(call[3] for call in writer.calls) and all(call[:2] == (pid, epoch) for call in writer.calls)
        meta = stored(session, tid)
        assert meta.state == TxnState.COMPLETE_COMMIT and not meta.partitions
        await coordinator.end_txn(tid, pid, epoch, commit=True)      # a retry: fine
        with pytest.raises(InvalidTxnState):
            await coordinator.end_txn(tid, pid, epoch, commit=False)
        await coordinator.close()
    run(scenario())


def test_abort_writes_abort_markers(make: Make, session: ZkSession) -> None:
    async def scenario() -> None:
        writer = FakeWriter()
        coordinator, tid = make(writer=writer), txn_id()
        pid, epoch = await coordinator.init_producer_id(tid, 60000)
        await coordinator.add_partitions_to_txn(tid, pid, epoch, [("t", 2)])
        await coordinator.end_txn(tid, pid, epoch, commit=False)
        assert [(c[3], c[4]) for c in writer.calls] == [(False, [("t", 2)])]
        assert stored(session, tid).state == TxnState.COMPLETE_ABORT
        with pytest.raises(InvalidTxnState):
            await coordinator.end_txn(tid, pid, epoch, commit=True)
        await coordinator.close()
    run(scenario())


def test_requests_of_other_producers_are_refused(make: Make) -> None:
    async def scenario() -> None:
        coordinator, tid = make(), txn_id()
        pid, epoch = await coordinator.init_producer_id(tid, 60000)
        with pytest.raises(InvalidProducerIdMapping):
            await coordinator.add_partitions_to_txn(tid, pid + 1000, epoch, [("t", 0)])
        with pytest.raises(InvalidProducerIdMapping):
            await coordinator.add_partitions_to_txn(txn_id(), pid, epoch, [("t", 0)])
        with pytest.raises(InvalidTxnState):
            await coordinator.end_txn(tid, pid, epoch, commit=True)           # nothing open
        refused = await coordinator.add_partitions_to_txn(tid, pid, epoch, [("t", 0), ("nope", 0)])
        assert isinstance(refused[("nope", 0)], UnknownTopicOrPartition)
        assert isinstance(refused[("t", 0)], OperationNotAttempted)
    run(scenario())


def test_a_new_instance_fences_the_old_and_aborts_its_open_transaction(make: Make, session: ZkSession) -> None:
    async def scenario() -> None:
        writer = FakeWriter()
        coordinator, tid = make(writer=writer), txn_id()
        pid, epoch = await coordinator.init_producer_id(tid, 60000)
        await coordinator.add_partitions_to_txn(tid, pid, epoch, [("t", 0), ("t", 3)])
        new_pid, new_epoch = await coordinator.init_producer_id(tid, 60000)
        assert new_pid == pid and new_epoch == epoch + 2      # one bump fences, one is the new instance's
        assert [(c[1], c[3], sorted(c[4])) for c in writer.calls] == [(epoch + 1, False, [("t", 0), ("t", 3)])]
        with pytest.raises(ProducerFenced):
            await coordinator.add_partitions_to_txn(tid, pid, epoch, [("t", 1)])
        with pytest.raises(ProducerFenced):
            await coordinator.end_txn(tid, pid, epoch, commit=True)
        with pytest.raises(ProducerFenced):         # nor may it bump its way back in (KIP-360)
            await coordinator.init_producer_id(tid, 60000, pid, epoch)
        assert stored(session, tid).state == TxnState.EMPTY
        await coordinator.close()
    run(scenario())


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(make: Make, session: ZkSession) -> None:
    async def scenario() -> None:
        now = [1_000_000]
        writer = FakeWriter()
        coordinator, tid = make(writer=writer, clock=lambda: now[0]), txn_id()
        pid, epoch = await coordinator.init_producer_id(tid, 5000)
        await coordinator.add_partitions_to_txn(tid, pid, epoch, [("t", 1)])
        await coordinator.tick(force=True)
        assert stored(session, tid).state == TxnState.ONGOING
        now[0] += 5001
        await coordinator.tick(force=True)
        await asyncio.wait_for(coordinator.entries[tid].completing, 5)   # type: ignore[arg-type]
        meta = stored(session, tid)
        assert meta.state == TxnState.COMPLETE_ABORT and meta.producer_epoch == epoch + 1
        assert writer.calls == [(pid, epoch + 1, meta.coordinator_epoch, False, [("t", 1)])]
        with pytest.raises(ProducerFenced):
            await coordinator.end_txn(tid, pid, epoch, commit=True)
        # KIP-360: the timed-out producer may recover by asking for its next epoch
        assert await coordinator.init_producer_id(tid, 5000, pid, epoch) == (pid, epoch + 1)
        await coordinator.close()
    run(scenario())


def test_unused_ids_expire(make: Make, session: ZkSession) -> None:
    async def scenario() -> None:
        now = [1_000_000]
        coordinator, tid = make(clock=lambda: now[0], id_expiration_ms=1000), txn_id()
        await coordinator.init_producer_id(tid, 5000)
        now[0] += 1001
        await coordinator.tick(force=True)
        assert stored(session, tid) is None
        result = await coordinator.describe([tid])
        assert isinstance(result[tid], TransactionalIdNotFound)
    run(scenario())


def test_a_new_coordinator_completes_a_prepared_commit(make: Make, session: ZkSession) -> None:
    """Broker 1 stores PrepareCommit and dies before any marker; broker 2, coordinator after the
    mapping changes, completes it with a higher coordinator epoch, and broker 1's stale writes fail."""
    async def scenario() -> None:
        stuck = FakeWriter()
        stuck.gate = asyncio.Event()          # never opened: broker 1 writes no marker
        cache = FakeCache((1,))
        first, tid = make(1, writer=stuck, cache=cache, completion_wait_s=0.1), txn_id()
        pid, epoch = await first.init_producer_id(tid, 60000)
        await first.add_partitions_to_txn(tid, pid, epoch, [("t", 0), ("t", 2)])
        await first.end_txn(tid, pid, epoch, commit=True)
        prepared = stored(session, tid)
        assert prepared.state == TxnState.PREPARE_COMMIT

        writer = FakeWriter()
        second = make(2, writer=writer, cache=FakeCache((2,)))
        await second.tick()                    # the mapping gives it every id: it loads and completes
        await asyncio.wait_for(second.entries[tid].completing, 5)   # type: ignore[arg-type]
        done = stored(session, tid)
        assert done.state == TxnState.COMPLETE_COMMIT and done.coordinator == 2
        assert writer.calls == [(pid, epoch, prepared.coordinator_epoch + 1, True, [("t", 0), ("t", 2)])]

        with pytest.raises(TransactionConflict):   # the first coordinator's view is stale
            TransactionStore(session).save(prepared.complete(1), first.entries[tid].version)
        # broker 1 wakes up (it still believes it coordinates the id): its markers go out with the
        # old coordinator epoch (the partitions refuse those), its write of the outcome is refused
        stale_task = first.entries[tid].completing
        stuck.gate.set()
        await asyncio.wait_for(stale_task, 5)   # type: ignore[arg-type]
        assert stuck.calls[0][2] == prepared.coordinator_epoch
        assert tid not in first.entries
        assert stored(session, tid) == done
        await first.close()
        await second.close()
    run(scenario())


def test_transactional_offsets_reach_the_group_only_when_the_transaction_commits(
        make: Make, session: ZkSession) -> None:
    async def scenario() -> None:
        from ember.groups.coordinator import GroupCoordinator
        cache = FakeCache()
        groups = GroupCoordinator(1, cache, GroupStore(session), 0)   # type: ignore[arg-type]
        offsets = TransactionalOffsets(TransactionStore(session), groups)
        coordinator = make(cache=cache)
        group = f"g-{next(_ids)}"
        tp = TopicPartition("t", 0)
        for commit in (False, True):
            tid = txn_id()
            pid, epoch = await coordinator.init_producer_id(tid, 60000)
            with pytest.raises(InvalidTxnState):       # AddOffsetsToTxn comes first
                await offsets.commit(tid, group, pid, epoch, "", -1, {tp: (5, "m")})
            await coordinator.add_offsets_to_txn(tid, pid, epoch, group)
            await offsets.commit(tid, group, pid, epoch, "", -1, {tp: (10 if commit else 5, "m")})
            with pytest.raises(ProducerFenced):
                await offsets.commit(tid, group, pid, epoch - 1, "", -1, {tp: (7, "m")})
            assert await groups.fetch(group, [tp]) == {}
            assert await groups.unstable(group) == {tp}       # OffsetFetch with require_stable: retry
            await coordinator.end_txn(tid, pid, epoch, commit=commit)
            assert await groups.unstable(group) == set()
            assert TransactionStore(session).pending_offsets(tid, [group]) == {}
        committed = await groups.fetch(group, [tp])
        assert committed[tp].offset == 10 and committed[tp].metadata == "m"
        await coordinator.close()
        await groups.close()
    run(scenario())


def test_verify_answers_for_partitions_of_the_ongoing_transaction(make: Make) -> None:
    async def scenario() -> None:
        coordinator, tid = make(), txn_id()
        pid, epoch = await coordinator.init_producer_id(tid, 60000)
        await coordinator.add_partitions_to_txn(tid, pid, epoch, [("t", 0)])
        result = await coordinator.verify_partitions(tid, pid, epoch, [("t", 0), ("t", 1)])
        assert result[("t", 0)] is None and isinstance(result[("t", 1)], InvalidTxnState)
        fenced = await coordinator.verify_partitions(tid, pid, epoch + 1, [("t", 0)])
        assert isinstance(fenced[("t", 0)], ProducerFenced)
    run(scenario())


def test_describe_and_list(make: Make) -> None:
    async def scenario() -> None:
        coordinator, tid = make(), txn_id()
        pid, epoch = await coordinator.init_producer_id(tid, 60000)
        await coordinator.add_partitions_to_txn(tid, pid, epoch, [("t", 3)])
        described = (await coordinator.describe([tid]))[tid]
        assert not isinstance(described, Exception) and described.partitions == {("t", 3)}
        found, unknown = coordinator.list_transactions(["Ongoing", "Bogus"], [pid])
        assert [m.transactional_id for m in found] == [tid] and unknown == ["Bogus"]
        assert coordinator.list_transactions(["Empty"], [pid])[0] == []
        elsewhere = make(2, cache=FakeCache((1, 2, 3)))
        if not elsewhere.owns(tid):
            assert isinstance((await elsewhere.describe([tid]))[tid], NotCoordinator)
    run(scenario())


def test_ids_are_znodes_under_transactions(session: ZkSession, make: Make) -> None:
    tid = txn_id()
    run(make().init_producer_id(tid, 1000))
    assert session.client.exists(zk_paths.transaction(tid)) is not None
    assert tid in TransactionStore(session).ids()


def test_an_exhausted_epoch_gets_a_new_producer_id(make: Make, session: ZkSession) -> None:
    async def scenario() -> None:
        from ember.ingest.transactions.state import MAX_PRODUCER_EPOCH
        store, tid = TransactionStore(session), txn_id()
        pid, _ = await make().init_producer_id(tid, 60000)
        meta, version = store.load(tid)
        store.save(dataclasses.replace(meta, producer_epoch=MAX_PRODUCER_EPOCH), version)
        new_pid, epoch = await make().init_producer_id(tid, 60000)       # a new coordinator instance reads it
        assert new_pid != pid and epoch == 0
        assert (stored(session, tid).last_producer_id, stored(session, tid).producer_id) == (pid, new_pid)
    run(scenario())


def test_transaction_version_2_ends_each_transaction_at_the_next_epoch(make: Make, session: ZkSession) -> None:
    """EndTxn v5: the decision and its markers carry the bumped epoch, which the producer goes on
    with; a retried EndTxn gets the same answer; an abort with nothing added ends the same way;
    the next transaction's partitions wait (CONCURRENT_TRANSACTIONS) until the markers are written."""
    async def scenario() -> None:
        writer = FakeWriter()
        coordinator, tid = make(writer=writer), txn_id()
        pid, epoch = await coordinator.init_producer_id(tid, 60000)
        await coordinator.add_partitions_to_txn(tid, pid, epoch, [("t", 0)], on_behalf=True)
        writer.gate = asyncio.Event()         # the markers hang: the EndTxn answers once its wait runs out
        coordinator.config = dataclasses.replace(coordinator.config, completion_wait_s=0.2)
        assert await coordinator.end_txn(tid, pid, epoch, commit=True, bump_epoch=True) == (pid, epoch + 1)
        assert stored(session, tid).state == TxnState.PREPARE_COMMIT
        with pytest.raises(ConcurrentTransactions):          # the next transaction, too early
            await coordinator.add_partitions_to_txn(tid, pid, epoch + 1, [("t", 1)], on_behalf=True)
        with pytest.raises(ConcurrentTransactions):          # the retried EndTxn, while completing
            await coordinator.end_txn(tid, pid, epoch, commit=True, bump_epoch=True)
        writer.gate.set()
        for _ in range(100):
            if stored(session, tid).state == TxnState.COMPLETE_COMMIT:
                break
            await asyncio.sleep(0.05)
        assert [c[:2] for c in writer.calls] == [(pid, epoch + 1)]        # the marker at the new epoch
        assert await coordinator.end_txn(tid, pid, epoch, commit=True, bump_epoch=True) == (pid, epoch + 1)
        with pytest.raises(ProducerFenced):
            await coordinator.end_txn(tid, pid, epoch, commit=False, bump_epoch=True)
        await coordinator.add_partitions_to_txn(tid, pid, epoch + 1, [("t", 1)], on_behalf=True)
        assert stored(session, tid).partitions == {("t", 1)}
        assert await coordinator.end_txn(tid, pid, epoch + 1, commit=False, bump_epoch=True) == (pid, epoch + 2)
        # nothing added (every write of the transaction failed): the abort still moves the epoch on
        assert await coordinator.end_txn(tid, pid, epoch + 2, commit=False, bump_epoch=True) == (pid, epoch + 3)
        assert stored(session, tid).state == TxnState.COMPLETE_ABORT
        await coordinator.close()
    run(scenario())


def test_transaction_version_2_moves_a_producer_past_its_last_epoch_to_a_new_id(make: Make,
                                                                                session: ZkSession) -> None:
    async def scenario() -> None:
        from ember.ingest.transactions.state import MAX_PRODUCER_EPOCH
        writer = FakeWriter()
        store, tid = TransactionStore(session), txn_id()
        pid, _ = await make().init_producer_id(tid, 60000)
        meta, version = store.load(tid)
        store.save(dataclasses.replace(meta, producer_epoch=MAX_PRODUCER_EPOCH - 1), version)
        coordinator = make(writer=writer)
        await coordinator.add_partitions_to_txn(tid, pid, MAX_PRODUCER_EPOCH - 1, [("t", 0)])
        new_pid, epoch = await coordinator.end_txn(tid, pid, MAX_PRODUCER_EPOCH - 1, commit=True, bump_epoch=True)
        assert new_pid != pid and epoch == 0
        assert [c[:2] for c in writer.calls] == [(pid, MAX_PRODUCER_EPOCH)]    # the old id's last marker
        meta = stored(session, tid)
        assert (meta.producer_id, meta.producer_epoch, meta.state) == (new_pid, 0, TxnState.COMPLETE_COMMIT)
        # the retry of that EndTxn gets the new id too
        assert await coordinator.end_txn(tid, pid, MAX_PRODUCER_EPOCH - 1, commit=True, bump_epoch=True) == (new_pid, 0)
        await coordinator.add_partitions_to_txn(tid, new_pid, 0, [("t", 1)], on_behalf=True)
        await coordinator.close()
    run(scenario())


def test_a_coordinator_whose_id_another_coordinator_wrote_answers_from_the_stored_state(make: Make,
                                                                                      session: ZkSession) -> None:
    """Brokers coming and going move an id between coordinators, each holding it for a moment. One
    that loaded the id when its last transaction had committed must not take the next
    transaction's EndTxn (begun at another coordinator) for a retry of that commit: it reads the
    stored state, so the markers are written (a commit answered without them was a lost write)."""
    async def scenario() -> None:
        tid = txn_id()
        first = make(1, cache=FakeCache((1,)))
        pid, epoch = await first.init_producer_id(tid, 60000)
        await first.add_partitions_to_txn(tid, pid, epoch, [("t", 0)])
        await first.end_txn(tid, pid, epoch, commit=True)                    # transaction 1 committed
        writer = FakeWriter()
        stale = make(2, cache=FakeCache((2,)), writer=writer)
        assert (await stale.describe([tid]))[tid].state == TxnState.COMPLETE_COMMIT   # loaded now
        await first.add_partitions_to_txn(tid, pid, epoch, [("t", 1)])      # transaction 2, elsewhere
        await stale.end_txn(tid, pid, epoch, commit=True)
        assert writer.marked() == {("t", 1)}                                  # its marker was written
        assert stored(session, tid).state == TxnState.COMPLETE_COMMIT
        assert await stale.verify_partitions(tid, pid, epoch, [("t", 1)]) != {("t", 1): None}
        await first.close()
        await stale.close()
    run(scenario())
