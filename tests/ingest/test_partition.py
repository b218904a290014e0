"""``Partition`` in process: one replica's leadership, follower progress, high watermark, acks=all
waits and follower appends, over a real ``Log`` in a temporary directory (no ZooKeeper, no other
broker: the test plays the controller and the followers)."""
from __future__ import annotations

import asyncio

import pytest
from ingest_fakes import MakePartition, batch, io_pool_busy, log_held_elsewhere, run

from ember.cluster.records import NO_LEADER, PartitionState
from ember.errors import (
    FencedLeaderEpoch,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeaderOrFollower,
    OffsetNotAvailable,
    OffsetOutOfRange,
    RequestTimedOut,
    StorageError,
    UnknownLeaderEpoch,
)
from ember.ingest.partition import (
    DELETE_TO_HIGH_WATERMARK,
    EARLIEST_TIMESTAMP,
    INLINE_WRITE_BYTES,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    LogOffsets,
    Partition,
)
from ember.record import iter_batches
from ember.record.batch import build_batch

CONSUMER = -1
LEADER, FOLLOWER_2, FOLLOWER_3 = 1, 2, 3

@pytest.fixture
def make_partition(make_partition: MakePartition) -> MakePartition:
    """conftest's partitions, led here by default: broker 1 of replicas 1-3."""
    def make(*, broker_id: int = LEADER, replicas: tuple[int, ...] = (1, 2, 3), min_insync: int = 1,
             removing: tuple[int, ...] = (), **props: str) -> Partition:
        return make_partition(broker_id=broker_id, replicas=replicas, removing=removing,
                              **{"min.insync.replicas": str(min_insync), **props})
    return make


def lead(partition: Partition, isr: list[int], epoch: int = 0, version: int = 0) -> None:
    """The controller makes ``partition``'s broker its leader."""
    partition.apply_state(PartitionState(partition.broker_id, epoch, isr, 1, version))


def follow(partition: Partition, leader: int, epoch: int = 0, isr: list[int] | None = None, version: int = 0) -> None:
    partition.apply_state(PartitionState(leader, epoch, isr or [leader, partition.broker_id], 1, version))


async def fetched_by(partition: Partition, replica: int, offset: int) -> None:
    """A follower fetch reached the leader from ``offset`` (what ``follower_fetched`` does first)."""
    partition.record_follower_position(replica, offset)
    await partition.advance_high_watermark()


async def append_records(partition: Partition, *counts: int, acks: int = 1) -> None:
    for count in counts:
        await partition.append(memoryview(batch(count)), acks)


def base_offsets(piece) -> list[int]:
    return [header.base_offset for header, _ in iter_batches(piece.read_bytes())] if piece is not None else []


# -- leadership --------------------------------------------------------------------------------

def test_a_follower_refuses_to_answer_as_leader(make_partition: MakePartition) -> None:
    """Requests meant for the leader (produce, DeleteRecords, leader checks) fail at a follower
    with NOT_LEADER_OR_FOLLOWER, so clients refresh metadata; nothing reaches its log."""
    async def scenario() -> None:
        partition = make_partition(broker_id=FOLLOWER_2)
        follow(partition, leader=LEADER)
        assert not partition.is_leader
        with pytest.raises(NotLeaderOrFollower, match="leader is 1"):
            partition.check_leader()
        with pytest.raises(NotLeaderOrFollower):
            await partition.append(memoryview(batch(1)), 1)
        with pytest.raises(NotLeaderOrFollower):
            await partition.delete_records(0)
        assert partition.log.log_end_offset == 0

    run(scenario())


def test_check_leader_compares_the_clients_leader_epoch(make_partition: MakePartition) -> None:
    """An older epoch is fenced (the client's metadata is stale), a newer one is unknown (this
    broker's is); none or -1 means "any"."""
    partition = make_partition()
    lead(partition, [LEADER], epoch=5)
    for current in (None, -1, 5):
        partition.check_leader(current)
    with pytest.raises(FencedLeaderEpoch):
        partition.check_leader(4)
    with pytest.raises(UnknownLeaderEpoch):
        partition.check_leader(6)


def test_leadership_changes_wake_waiters(make_partition: MakePartition) -> None:
    """Parked fetches and acks=all waits listen on ``changed``: a new state must fire it."""
    async def scenario() -> None:
        partition = make_partition()
        waiter = partition.changed.future()
        lead(partition, [LEADER])
        assert waiter.done()

    run(scenario())


# -- high watermark ----------------------------------------------------------------------------

def test_high_watermark_is_the_smallest_log_end_offset_over_the_isr(make_partition: MakePartition) -> None:
    async def scenario() -> None:
        partition = make_partition()
        lead(partition, [1, 2, 3])
        await append_records(partition, 2, 3)                     # log end 5
        await fetched_by(partition, FOLLOWER_2, 5)
        await fetched_by(partition, FOLLOWER_3, 2)
        assert partition.high_watermark_target() == 2
        assert partition.log.high_watermark == 2
        await fetched_by(partition, FOLLOWER_3, 5)
        assert partition.log.high_watermark == 5

    run(scenario())


def test_a_follower_that_has_not_fetched_holds_the_high_watermark_back(make_partition: MakePartition) -> None:
    """A new leader knows nothing of its followers' logs: until an ISR member fetches, nothing
    more is committed, however far the leader's own log goes."""
    async def scenario() -> None:
        partition = make_partition()
        lead(partition, [1, 2, 3])
        await append_records(partition, 4)
        await fetched_by(partition, FOLLOWER_2, 4)
        assert partition.high_watermark_target() == -1
        assert partition.log.high_watermark == 0

    run(scenario())


def test_followers_outside_the_isr_do_not_hold_the_high_watermark_back(make_partition: MakePartition) -> None:
    async def scenario() -> None:
        partition = make_partition()
        lead(partition, [1, 2])                                   # 3 is out of sync
        await append_records(partition, 3)
        await fetched_by(partition, FOLLOWER_2, 3)
        assert partition.log.high_watermark == 3

    run(scenario())


def test_a_leader_alone_in_the_isr_commits_on_append(make_partition: MakePartition) -> None:
    async def scenario() -> None:
        partition = make_partition()
        lead(partition, [LEADER])
        await append_records(partition, 3)
        assert partition.log.high_watermark == partition.log.log_end_offset == 3

    run(scenario())


def test_the_high_watermark_never_moves_backwards(make_partition: MakePartition) -> None:
    """A follower may report a smaller log end later (it truncated); the committed offsets stay."""
    async def scenario() -> None:
        partition = make_partition(replicas=(1, 2))
        lead(partition, [1, 2])
        await append_records(partition, 3)
        await fetched_by(partition, FOLLOWER_2, 3)
        await fetched_by(partition, FOLLOWER_2, 1)
        assert partition.high_watermark_target() == 1
        assert partition.log.high_watermark == 3
        await append_records(partition, 1)                        # appends re-check the target too
        assert partition.log.high_watermark == 3

    run(scenario())


#: The threads of conftest's I/O pool.
IO_THREADS = 2


def test_the_high_watermark_moves_on_the_event_loop_while_the_io_pool_is_busy(make_partition: MakePartition) -> None:
    """The move is in memory: a follower's fetch commits the write at once, not after two thread
    hand-offs (each acks=all write and each consumer waits for it)."""
    async def scenario() -> None:
        partition = make_partition(replicas=(1, 2))
        lead(partition, [1, 2])
        await append_records(partition, 3)
        async with io_pool_busy(partition, IO_THREADS):
            await asyncio.wait_for(fetched_by(partition, FOLLOWER_2, 3), 1)
            assert partition.log.high_watermark == 3

    run(scenario())


def test_a_high_watermark_move_waits_on_the_io_pool_while_another_thread_holds_the_log(
        make_partition: MakePartition) -> None:
    """The event loop never blocks on the log's lock (an append or a roll may hold it through a
    write or an fsync): the move goes to the I/O pool and lands once the log is free."""
    async def scenario() -> None:
        partition = make_partition(replicas=(1, 2))
        lead(partition, [1, 2])
        await append_records(partition, 3)
        async with log_held_elsewhere(partition):
            move = asyncio.ensure_future(fetched_by(partition, FOLLOWER_2, 3))
            await asyncio.sleep(0.2)
            assert not move.done() and partition.log.high_watermark == 0
        await asyncio.wait_for(move, 5)
        assert partition.log.high_watermark == 3

    run(scenario())


def test_a_joining_follower_counts_for_the_high_watermark(make_partition: MakePartition) -> None:
    """While its ISR addition is being written, a follower already holds the high watermark."""
    async def scenario() -> None:
        partition = make_partition(replicas=(1, 2))
        lead(partition, [LEADER])
        await append_records(partition, 2)                        # HW 2: leader alone
        partition.record_follower_position(FOLLOWER_2, 2)
        partition.joining_isr.add(FOLLOWER_2)
        await append_records(partition, 3)
        assert partition.log.high_watermark == 2
        await fetched_by(partition, FOLLOWER_2, 5)
        assert partition.log.high_watermark == 5

    run(scenario())


def test_a_follower_fetching_past_the_log_end_is_out_of_range(make_partition: MakePartition) -> None:
    """Such a follower must truncate first; its claim must not count for the high watermark."""
    async def scenario() -> None:
        partition = make_partition(replicas=(1, 2))
        lead(partition, [1, 2])
        await append_records(partition, 2)
        with pytest.raises(OffsetOutOfRange):
            partition.record_follower_position(FOLLOWER_2, 3)
        assert partition.high_watermark_target() == -1
        await partition.advance_high_watermark()
        assert partition.log.high_watermark == 0

    run(scenario())


def test_only_assigned_followers_may_report_their_position(make_partition: MakePartition) -> None:
    partition = make_partition(replicas=(1, 2))
    lead(partition, [1, 2])
    for stranger in (LEADER, 7):
        with pytest.raises(NotLeaderOrFollower):
            partition.record_follower_position(stranger, 0)


def test_a_new_term_forgets_follower_progress(make_partition: MakePartition) -> None:
    """Positions reported to an earlier term (or by a follower of another leader) do not count."""
    async def scenario() -> None:
        partition = make_partition(replicas=(1, 2))
        lead(partition, [1, 2], epoch=0)
        await append_records(partition, 2)
        partition.record_follower_position(FOLLOWER_2, 2)
        lead(partition, [1, 2], epoch=1, version=1)
        assert partition.high_watermark_target() == -1

    run(scenario())


# -- acks=all and min.insync.replicas ----------------------------------------------------------

def test_acks_all_is_refused_before_the_write_when_the_isr_is_below_min_insync(make_partition: MakePartition) -> None:
    async def scenario() -> None:
        partition = make_partition(min_insync=2)
        lead(partition, [LEADER])
        with pytest.raises(NotEnoughReplicas):
            await partition.append(memoryview(batch(1)), -1)
        assert partition.log.log_end_offset == 0
        result = await partition.append(memoryview(batch(1)), 1)   # acks=1 does not care
        assert (result.first_offset, partition.log.log_end_offset) == (0, 1)

    run(scenario())


def test_acks_all_waits_until_every_isr_member_has_the_write(make_partition: MakePartition) -> None:
    async def scenario() -> None:
        partition = make_partition(replicas=(1, 2), min_insync=2)
        lead(partition, [1, 2])
        result = await partition.append(memoryview(batch(3)), -1)
        loop = asyncio.get_running_loop()
        wait = asyncio.create_task(partition.wait_replicated(result.last_offset + 1, 0, loop.time() + 5))
        await asyncio.sleep(0.01)
        assert not wait.done()
        await fetched_by(partition, FOLLOWER_2, 2)               # not all of the write yet
        await asyncio.sleep(0.01)
        assert not wait.done()
        await fetched_by(partition, FOLLOWER_2, 3)
        await asyncio.wait_for(wait, 1)

    run(scenario())


def test_acks_all_fails_after_the_append_when_the_isr_shrinks_below_min_insync(make_partition: MakePartition) -> None:
    """The ISR shrank to the leader alone: the write is committed, but not on min.insync
    replicas (Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND)."""
    async def scenario() -> None:
        partition = make_partition(replicas=(1, 2), min_insync=2)
        lead(partition, [1, 2])
        result = await partition.append(memoryview(batch(1)), -1)
        loop = asyncio.get_running_loop()
        wait = asyncio.create_task(partition.wait_replicated(result.last_offset + 1, 0, loop.time() + 5))
        await asyncio.sleep(0)
        lead(partition, [LEADER], version=1)                      # same term, follower 2 dropped
        await partition.advance_high_watermark()
        assert partition.log.high_watermark == 1
        with pytest.raises(NotEnoughReplicasAfterAppend):
            await asyncio.wait_for(wait, 1)

    run(scenario())


def test_acks_all_times_out_when_a_follower_never_catches_up(make_partition: MakePartition) -> None:
    async def scenario() -> None:
        partition = make_partition(replicas=(1, 2))
        lead(partition, [1, 2])
        result = await partition.append(memoryview(batch(1)), -1)
        loop = asyncio.get_running_loop()
        with pytest.raises(RequestTimedOut):
            await partition.wait_replicated(result.last_offset + 1, 0, loop.time() + 0.05)

    run(scenario())


def test_acks_all_wait_ends_when_leadership_moves(make_partition: MakePartition) -> None:
    async def scenario() -> None:
        partition = make_partition(replicas=(1, 2))
        lead(partition, [1, 2])
        result = await partition.append(memoryview(batch(1)), -1)
        loop = asyncio.get_running_loop()
        wait = asyncio.create_task(partition.wait_replicated(result.last_offset + 1, 0, loop.time() + 5))
        await asyncio.sleep(0)
        follow(partition, leader=FOLLOWER_2, epoch=1, version=1)
        with pytest.raises(NotLeaderOrFollower):
            await asyncio.wait_for(wait, 1)

    run(scenario())



def test_acks_all_wait_fails_with_a_storage_error_once_the_log_goes_offline(make_partition: MakePartition) -> None:
    """A leader whose disk failed answers KAFKA_STORAGE_ERROR at once (as Kafka completes its
    delayed produces), not after the request timeout or whenever the controller moves leadership:
    replies go out in request order, so every reply behind this one waited too."""
    async def scenario() -> None:
        partition = make_partition(replicas=(1, 2))
        lead(partition, [1, 2])
        result = await partition.append(memoryview(batch(1)), -1)
        loop = asyncio.get_running_loop()
        wait = asyncio.create_task(partition.wait_replicated(result.last_offset + 1, 0, loop.time() + 30))
        await asyncio.sleep(0.01)
        assert not wait.done()
        partition.write_failed("produce", StorageError("no space left on device"))   # a later append
        with pytest.raises(StorageError, match="went offline"):
            await asyncio.wait_for(wait, 1)

    run(scenario())

# -- reading -----------------------------------------------------------------------------------

def test_consumers_read_below_the_high_watermark_and_followers_to_the_log_end(make_partition: MakePartition) -> None:
    async def scenario() -> None:
        partition = make_partition(replicas=(1, 2))
        lead(partition, [1, 2])
        await append_records(partition, 2, 2)                     # batches at 0 and 2
        await fetched_by(partition, FOLLOWER_2, 2)
        assert partition.caught_up(0, CONSUMER) is None                        # something to read
        piece, offsets = partition.read_blocking(0, 1 << 20, True, CONSUMER)
        assert base_offsets(piece) == [0]
        assert offsets == LogOffsets(high_watermark=2, log_start_offset=0, log_end_offset=4, last_stable_offset=2)
        assert partition.caught_up(2, CONSUMER) == offsets                     # caught up: answered without I/O
        assert partition.caught_up(2, FOLLOWER_2) is None
        piece, _ = partition.read_blocking(0, 1 << 20, True, FOLLOWER_2)
        assert base_offsets(piece) == [0, 2]

    run(scenario())


def test_a_new_leader_hides_its_high_watermark_until_it_reaches_the_epoch_start(
        make_partition: MakePartition) -> None:
    """Every offset an earlier leader exposed is below the new leader's log end when it takes
    over; until its own high watermark gets there, consumers get a retriable error instead of a
    high watermark that went backwards."""
    async def scenario() -> None:
        partition = make_partition(broker_id=FOLLOWER_2, replicas=(1, 2))
        follow(partition, leader=LEADER, epoch=0)
        await partition.append_as_follower(memoryview(batch(3, partition_leader_epoch=0)), 0, 1)
        assert (partition.log.log_end_offset, partition.log.high_watermark) == (3, 1)
        lead(partition, [2, 1], epoch=1, version=1)
        assert partition.epoch_start_offset == 3
        with pytest.raises(OffsetNotAvailable):
            partition.caught_up(1, CONSUMER)
        with pytest.raises(OffsetNotAvailable):
            await partition.offset_for_timestamp(LATEST_TIMESTAMP, CONSUMER)
        assert partition.caught_up(1, LEADER) is None                  # followers still fetch
        piece, _ = partition.read_blocking(1, 1 << 20, True, LEADER)
        assert base_offsets(piece) == [0]
        await fetched_by(partition, LEADER, 3)
        assert await partition.offset_for_timestamp(LATEST_TIMESTAMP, CONSUMER) == (3, -1)

    run(scenario())


def test_list_offsets_answers_the_special_timestamps(make_partition: MakePartition) -> None:
    async def scenario() -> None:
        partition = make_partition(replicas=(1, 2))
        lead(partition, [1, 2])
        await partition.append(memoryview(batch(2, timestamp=1_000)), 1)    # offsets 0-1, ts 1000-1001
        await partition.append(memoryview(batch(2, timestamp=5_000)), 1)    # offsets 2-3, ts 5000-5001
        await fetched_by(partition, FOLLOWER_2, 2)
        answer = partition.offset_for_timestamp
        assert await answer(EARLIEST_TIMESTAMP, CONSUMER) == (0, -1)
        assert await answer(LATEST_TIMESTAMP, CONSUMER) == (2, -1)          # the high watermark
        assert await answer(LATEST_TIMESTAMP, FOLLOWER_2) == (4, -1)        # the log end
        assert await answer(LATEST_TIERED_TIMESTAMP, CONSUMER) == (-1, -1)
        assert await answer(1_001, CONSUMER) == (1, 1_001)
        assert await answer(5_000, CONSUMER) == (-1, -1)                    # not committed yet
        assert await answer(5_000, FOLLOWER_2) == (2, 5_000)
        assert await answer(MAX_TIMESTAMP, CONSUMER) == (-1, -1)            # the newest is above the HW
        await fetched_by(partition, FOLLOWER_2, 4)
        assert await answer(MAX_TIMESTAMP, CONSUMER) == (3, 5_001)

    run(scenario())


def test_earliest_and_latest_are_answered_while_the_io_pool_is_busy(make_partition: MakePartition) -> None:
    """Spark's Kafka connector asks for both after every poll: they come from memory, never wait
    behind the partition's disk work (a timestamp lookup does)."""
    async def scenario() -> None:
        partition = make_partition(replicas=(1,))
        lead(partition, [1])
        await append_records(partition, 3)
        answer = partition.offset_for_timestamp
        async with io_pool_busy(partition, IO_THREADS):
            assert await asyncio.wait_for(answer(EARLIEST_TIMESTAMP, CONSUMER), 1) == (0, -1)
            assert await asyncio.wait_for(answer(LATEST_TIMESTAMP, CONSUMER), 1) == (3, -1)
            lookup = asyncio.ensure_future(answer(1, CONSUMER))
            await asyncio.sleep(0.2)
            assert not lookup.done(), "a timestamp lookup reads the log on the I/O pool"
        assert (await lookup)[0] == 0

    run(scenario())


def test_end_offset_for_epoch_answers_where_each_epoch_ended(make_partition: MakePartition) -> None:
    async def scenario() -> None:
        partition = make_partition()
        lead(partition, [LEADER], epoch=1)
        await append_records(partition, 2)                        # epoch 1: 0-1
        lead(partition, [LEADER], epoch=3, version=1)
        await append_records(partition, 3)                        # epoch 3: 2-4
        assert await partition.end_offset_for_epoch(3) == (3, 5)
        assert await partition.end_offset_for_epoch(2) == (1, 2)
        assert await partition.end_offset_for_epoch(1) == (1, 2)
        assert await partition.end_offset_for_epoch(0) == (0, 0)  # below the first epoch: its start
        assert await partition.end_offset_for_epoch(9) == (-1, 5)  # unknown here: the whole log

    run(scenario())


def test_a_new_leader_with_nothing_written_in_its_epoch_tells_where_a_newer_epoch_of_a_follower_began(
        make_partition: MakePartition) -> None:
    """A follower that wrote offset 10 in epoch 4 under a former leader asks this leader (epoch 5,
    whose log ends at 11 with offset 10 from epoch 3) where epoch 4 ended: at 11 after epoch 3,
    so the follower truncates below its offset 10 (never (-1, 11), which would let it keep a
    record this leader does not have: diverged replicas)."""
    async def scenario() -> None:
        partition = make_partition()
        follow(partition, FOLLOWER_2, epoch=3)
        await partition.append_as_follower(memoryview(batch(10, partition_leader_epoch=0)), 3, 0)
        await partition.append_as_follower(memoryview(batch(1, base_offset=10, partition_leader_epoch=3)), 3, 0)
        lead(partition, [LEADER], epoch=5, version=1)
        assert await partition.end_offset_for_epoch(4) == (3, 11)
        assert await partition.end_offset_for_epoch(5) == (3, 11)
        assert await partition.end_offset_for_epoch(6) == (-1, 11)   # newer than this leader: unknown
        assert await partition.end_offset_for_epoch(3) == (3, 11)

    run(scenario())


def test_delete_records_moves_the_log_start_at_most_to_the_high_watermark(make_partition: MakePartition) -> None:
    async def scenario() -> None:
        partition = make_partition(replicas=(1, 2))
        lead(partition, [1, 2])
        await append_records(partition, 2, 2, 2)
        await fetched_by(partition, FOLLOWER_2, 4)
        with pytest.raises(OffsetOutOfRange):
            await partition.delete_records(5)                     # above the high watermark
        with pytest.raises(OffsetOutOfRange):
            await partition.delete_records(-2)
        assert partition.log.log_start_offset == 0
        assert await partition.delete_records(DELETE_TO_HIGH_WATERMARK) == 4
        assert partition.log.log_start_offset == 4

    run(scenario())


# -- ISR membership ----------------------------------------------------------------------------

def test_a_follower_may_join_the_isr_once_it_reaches_the_high_watermark_and_the_epoch_start(
        make_partition: MakePartition) -> None:
    async def scenario() -> None:
        partition = make_partition(replicas=(1, 2, 3))
        await partition.run(partition.log.append_as_leader, memoryview(batch(4)), 0)   # data of an earlier term
        lead(partition, [1, 2], epoch=1)                          # epoch starts at 4, HW still 0
        assert (partition.epoch_start_offset, partition.log.high_watermark) == (4, 0)
        await fetched_by(partition, FOLLOWER_3, 2)
        assert not partition.may_join_isr(FOLLOWER_3)             # above the HW, below the epoch start
        await fetched_by(partition, FOLLOWER_2, 4)
        await append_records(partition, 2)                        # log end 6
        await fetched_by(partition, FOLLOWER_2, 6)                # HW 6
        await fetched_by(partition, FOLLOWER_3, 5)
        assert not partition.may_join_isr(FOLLOWER_3)             # past the epoch start, below the HW
        await fetched_by(partition, FOLLOWER_3, 6)
        assert partition.may_join_isr(FOLLOWER_3)
        assert not partition.may_join_isr(FOLLOWER_2)             # already in the ISR

    run(scenario())


def test_a_replica_being_removed_never_rejoins_the_isr(make_partition: MakePartition) -> None:
    async def scenario() -> None:
        partition = make_partition(replicas=(1, 2, 3), removing=(3,))
        lead(partition, [1, 2])
        await fetched_by(partition, FOLLOWER_3, 0)
        assert not partition.may_join_isr(FOLLOWER_3)

    run(scenario())


def test_out_of_sync_replicas_are_isr_followers_not_caught_up_within_the_lag(
        make_partition: MakePartition, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lag clock starts when this broker becomes leader; a follower fetching up to the log
    end stays in sync, one that never fetches drops out after ``replica.lag.time.max.ms``."""
    clock = [1_000_000.0]
    monkeypatch.setattr("ember.ingest.partition.now_ms", lambda: clock[0])

    async def scenario() -> None:
        partition = make_partition()
        lead(partition, [1, 2, 3])
        await append_records(partition, 2)
        clock[0] += 800
        partition.record_follower_position(FOLLOWER_2, 2)         # caught up at +800
        assert partition.out_of_sync_replicas(clock[0] + 500, lag_max_ms=1_000) == [FOLLOWER_3]
        assert partition.out_of_sync_replicas(clock[0] + 100, lag_max_ms=1_000) == []
        assert partition.out_of_sync_replicas(clock[0] + 1_001, lag_max_ms=1_000) == [FOLLOWER_2, FOLLOWER_3]

    run(scenario())


# -- where appends run ------------------------------------------------------------------------

def test_small_appends_land_while_the_io_pool_is_busy(make_partition: MakePartition) -> None:
    """A leader's and a follower's append into the page cache run on the event loop, not behind
    two thread hand-offs of the I/O pool."""
    async def scenario() -> None:
        leader, follower = make_partition(), make_partition(broker_id=FOLLOWER_2)
        lead(leader, [LEADER])
        follow(follower, leader=LEADER)
        async with io_pool_busy(leader, IO_THREADS):
            await asyncio.wait_for(append_records(leader, 3), 1)
            await asyncio.wait_for(follower.append_as_follower(memoryview(batch(3, partition_leader_epoch=0)), 0, 3), 1)
            assert (leader.log.high_watermark, follower.log.high_watermark) == (3, 3)

    run(scenario())


def test_appends_that_fsync_are_large_or_delete_segments_wait_for_the_io_pool(make_partition: MakePartition) -> None:
    """A roll fsyncs the sealed segment, a large batch takes long to copy, a follower's new log start
    deletes files under the log's flush lock: none of them may block the event loop."""
    async def scenario() -> None:
        rolling = make_partition(replicas=(1,), **{"segment.bytes": str(len(batch(3)) + 1)})
        large = make_partition(replicas=(1,))
        follower = make_partition(broker_id=FOLLOWER_2)
        lead(rolling, [LEADER])
        lead(large, [LEADER])
        follow(follower, leader=LEADER)
        await append_records(rolling, 3)
        await follower.append_as_follower(memoryview(batch(3, partition_leader_epoch=0)), 0, 3)
        async with io_pool_busy(rolling, IO_THREADS):
            waiting = [asyncio.ensure_future(append_records(rolling, 3)),
                       asyncio.ensure_future(large.append(memoryview(build_batch([(b"k", bytes(INLINE_WRITE_BYTES),
                                                                                   1_000)])), 1)),
                       asyncio.ensure_future(follower.append_as_follower(memoryview(b""), 0, 3, 2))]
            await asyncio.sleep(0.2)
            assert [f.done() for f in waiting] == [False] * 3
        await asyncio.wait_for(asyncio.gather(*waiting), 5)
        assert (rolling.log.log_end_offset, rolling.log.segment_stats[0]) == (6, 2)
        assert large.log.log_end_offset == 1 and follower.log.log_start_offset == 2

    run(scenario())


# -- follower ----------------------------------------------------------------------------------

def test_a_follower_appends_the_leaders_batches_and_follows_its_high_watermark(make_partition: MakePartition) -> None:
    async def scenario() -> None:
        partition = make_partition(broker_id=FOLLOWER_2)
        follow(partition, leader=LEADER, epoch=4)
        await partition.append_as_follower(memoryview(batch(3, partition_leader_epoch=4)), 4, 2)
        assert (partition.log.log_end_offset, partition.log.high_watermark) == (3, 2)
        assert partition.log.latest_epoch == 4
        # The leader's high watermark may be past what this replica has: it never exceeds the log end.
        await partition.append_as_follower(memoryview(batch(2, base_offset=3, partition_leader_epoch=4)), 4, 9)
        assert (partition.log.log_end_offset, partition.log.high_watermark) == (5, 5)

    run(scenario())


def test_a_follower_follows_the_leaders_log_start_up_to_its_own_high_watermark(
        make_partition: MakePartition) -> None:
    """DeleteRecords at the leader reaches followers with their next fetch."""
    async def scenario() -> None:
        partition = make_partition(broker_id=FOLLOWER_2)
        follow(partition, leader=LEADER)
        await partition.append_as_follower(memoryview(batch(2, partition_leader_epoch=0)), 0, 0)
        await partition.append_as_follower(memoryview(batch(2, base_offset=2, partition_leader_epoch=0)), 0, 1)
        await partition.append_as_follower(memoryview(b""), 0, 1, leader_log_start=3)
        assert partition.log.log_start_offset == 1                # no further than its HW (1)
        await partition.append_as_follower(memoryview(b""), 0, 4, leader_log_start=3)
        assert partition.log.log_start_offset == 3

    run(scenario())


def test_a_follower_refuses_what_a_former_leader_sent(make_partition: MakePartition) -> None:
    """Batches fetched at an earlier epoch must not land after the partition moved on."""
    async def scenario() -> None:
        partition = make_partition(broker_id=FOLLOWER_2)
        follow(partition, leader=LEADER, epoch=3)
        with pytest.raises(NotLeaderOrFollower):
            await partition.append_as_follower(memoryview(batch(1, partition_leader_epoch=2)), 2, 1)
        with pytest.raises(NotLeaderOrFollower):
            await partition.truncate(0, 2)
        assert partition.log.log_end_offset == 0

    run(scenario())


def test_a_leader_or_leaderless_partition_refuses_follower_writes(make_partition: MakePartition) -> None:
    async def scenario() -> None:
        partition = make_partition()
        lead(partition, [LEADER], epoch=2)
        with pytest.raises(NotLeaderOrFollower):
            await partition.append_as_follower(memoryview(batch(1, partition_leader_epoch=2)), 2, 1)
        partition.apply_state(PartitionState(NO_LEADER, 3, [LEADER], 1, 1))
        with pytest.raises(NotLeaderOrFollower):
            await partition.append_as_follower(memoryview(batch(1, partition_leader_epoch=3)), 3, 1)
        assert partition.log.log_end_offset == 0

    run(scenario())


def test_truncation_drops_the_diverged_tail_or_restarts_the_log(make_partition: MakePartition) -> None:
    async def scenario() -> None:
        partition = make_partition(broker_id=FOLLOWER_2)
        follow(partition, leader=LEADER, epoch=1)
        await partition.append_as_follower(memoryview(batch(2, partition_leader_epoch=0)), 1, 2)
        await partition.append_as_follower(memoryview(batch(2, base_offset=2, partition_leader_epoch=1)), 1, 2)
        await partition.truncate(2, 1)
        assert (partition.log.log_end_offset, partition.log.latest_epoch) == (2, 0)
        await partition.truncate(10, 1, fully=True)               # fell below the leader's log start
        assert (partition.log.log_start_offset, partition.log.log_end_offset) == (10, 10)

    run(scenario())


def test_a_transactional_batch_needs_its_transaction_still_open_or_a_guard_no_marker_voided(make_partition):
    """A batch appended without verification because its producer's transaction was open here
    (``OPEN_HERE``) is refused once a marker ended that transaction while the request waited, and
    a verified batch once a marker voided its guard; the guard of a new transaction holds."""
    from ember.errors import InvalidTxnState
    from ember.ingest.txn_verification import OPEN_HERE
    from ember.record.control import Marker

    async def scenario() -> None:
        partition = make_partition()
        lead(partition, [LEADER])

        def txn(sequence: int, epoch: int = 0) -> memoryview:
            return memoryview(batch(2, producer_id=7, producer_epoch=epoch, base_sequence=sequence,
                                    transactional=True))

        guard = partition.verification_guard(7)
        await partition.append(txn(0), 1, guard)
        await partition.append(txn(2), 1, OPEN_HERE)              # the transaction is open here
        stale = partition.verification_guard(7)
        await partition.write_marker(Marker(7, 0, False, 0))
        with pytest.raises(InvalidTxnState):                       # it ended while the request waited
            await partition.append(txn(4), 1, OPEN_HERE)
        with pytest.raises(InvalidTxnState):                       # the marker voided the guard
            await partition.append(txn(4), 1, stale)
        await partition.append(txn(4), 1, partition.verification_guard(7))
        assert partition.log.open_transactions() == {7: 5}

    run(scenario())
