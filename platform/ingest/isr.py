"""In-sync replica set management on the leader: who is caught up, and writing ISR changes.

A follower is *caught up* while its fetches reach the leader's log end (Kafka's rule, which also
counts a follower that keeps reaching where the log ended at its previous fetch, so a steady
stream of appends does not make it look behind). The leader drops a follower that has not been
caught up for ``replica.lag.time.max.ms`` and re-adds it once its log end reaches the high
watermark and the start of the current leader epoch.

ISR changes go to the partition state znode by compare-and-set (creating it, for a partition
still in its initial state: :mod:`ember.cluster.partition_state_store`), re-reading on a
conflict. The leader applies a change locally only once ZooKeeper holds it (so its ISR is never
smaller than the one the controller elects from); a follower being added already counts for
the high watermark while the write is in flight. A write that finds a newer leader epoch is not
made: the caller applies the state it found, so a stale leader stops leading.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable

from kazoo.exceptions import KazooException, NoNodeError

from ember.cluster.partition_state_store import (
    LOST_RACE,
    TopicRecords,
    add_compare_and_set,
    read_state,
    written_version,
)
from ember.cluster.records import PartitionState
from ember.zk import zk_paths
from ember.zk.zk_session import ZkSession, multi_failure

if TYPE_CHECKING:
    from ember.ingest.partition import Partition
    from ember.metrics.broker_metrics import BrokerMetrics

log = logging.getLogger(__name__)

IsrChange = Callable[[list[int]], list[int]]
ApplyState = Callable[["Partition", PartitionState], Awaitable[object]]


def now_ms() -> float:
    """Monotonic milliseconds: lag is measured on a clock that wall-clock jumps cannot move."""
    return time.monotonic() * 1000


@dataclass
class FollowerProgress:
    """What the leader knows of one follower: its log end and when it was last caught up."""
    last_caught_up_ms: float
    end_offset: int = -1   # unknown until the follower fetches from this leader
    _last_fetch_ms: float = field(default=0.0, repr=False)
    _leader_end_at_last_fetch: int = field(default=-1, repr=False)

    def fetched(self, fetch_offset: int, leader_end_offset: int, at_ms: float) -> None:
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_ms = at_ms
        elif fetch_offset >= self._leader_end_at_last_fetch >= 0:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self._last_fetch_ms)
        self.end_offset = fetch_offset
        self._last_fetch_ms, self._leader_end_at_last_fetch = at_ms, leader_end_offset

    def lagging(self, at_ms: float, lag_max_ms: int) -> bool:
        return at_ms - self.last_caught_up_ms > lag_max_ms


class IsrWriter:
    """Compare-and-set writes of a partition's ISR by its leader (blocking: call from a thread)."""

    def __init__(self, session: ZkSession, broker_id: int) -> None:
        self.session = session
        self.broker_id = broker_id
        self._topic_records = TopicRecords()

    def update(self, topic: str, index: int, topic_id: str, leader_epoch: int,
               change: IsrChange) -> PartitionState | None:
        """Apply ``change`` to the ISR in ZooKeeper while this broker leads at ``leader_epoch``.
        Only registered brokers are added: the controller drops a dead broker from ISRs once, when
        it dies, so re-adding one (a deregistered broker still fetching on its way down) would
        hold the high watermark back until the lag check removes it again.

        Returns the state now stored (the new one, or the newer one that stopped the write), or
        None if the topic (``topic_id``) is gone.
        """
        client = self.session.client
        while True:
            stored = read_state(client, topic, index, topic_id, self._topic_records)
            if stored is None:
                return None
            current = stored.state
            if current.leader != self.broker_id or current.leader_epoch != leader_epoch:
                return current
            isr = [b for b in change(current.isr)
                   if b in current.isr or client.exists(zk_paths.broker(b)) is not None]
            if isr == current.isr:
                return current
            target = PartitionState(current.leader, current.leader_epoch, isr, current.controller_epoch)
            tx = client.transaction()
            add_compare_and_set(tx, topic, index, stored, target)
            failure = multi_failure(tx.commit())
            if isinstance(failure, LOST_RACE):
                continue
            if isinstance(failure, NoNodeError):
                return None   # topic deleted between the read and the write
            if failure is not None:
                raise failure
            return replace(target, version=written_version(stored))


class IsrManager:
    """Shrinks ISRs on a schedule and expands them when followers catch up, one write per
    partition at a time. Runs on the event loop; ZooKeeper writes run on a thread."""

    def __init__(self, writer: IsrWriter, lag_max_ms: int, partitions: Callable[[], Iterable["Partition"]],
                 apply_state: ApplyState, metrics: "BrokerMetrics | None" = None) -> None:
        self.writer = writer
        self.metrics = metrics
        self.lag_max_ms = lag_max_ms
        self._partitions = partitions
        self._apply_state = apply_state
        self._writing: set["Partition"] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._scan: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._scan = asyncio.create_task(self._shrink_periodically(), name="isr-shrink")

    async def close(self) -> None:
        tasks = [t for t in (self._scan, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def maybe_expand(self, partition: "Partition", replica_id: int) -> None:
        """Add ``replica_id`` to the ISR if it qualifies (called after each follower fetch)."""
        if partition in self._writing or not partition.may_join_isr(replica_id):
            return
        partition.joining_isr.add(replica_id)
        log.info("%s: follower %d caught up; adding it to the ISR", partition, replica_id)
        self._write(partition, lambda isr: isr if replica_id in isr else isr + [replica_id])

    def shrink(self, at_ms: float) -> None:
        """Drop followers that have not been caught up for ``replica.lag.time.max.ms``."""
        for partition in list(self._partitions()):
            if partition in self._writing or not partition.is_leader:
                continue
            out = partition.out_of_sync_replicas(at_ms, self.lag_max_ms)
            if out:
                log.warning("%s: followers %s not caught up for %d ms; removing them from the ISR",
                            partition, out, self.lag_max_ms)
                self._write(partition, functools.partial(_without, out))

    async def _shrink_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.lag_max_ms / 2 / 1000)
            self.shrink(now_ms())

    def _write(self, partition: "Partition", change: IsrChange) -> None:
        self._writing.add(partition)
        task = asyncio.create_task(self._run_write(partition, change), name=f"isr-{partition}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_write(self, partition: "Partition", change: IsrChange) -> None:
        try:
            before = partition.state.isr
            state = await asyncio.to_thread(self.writer.update, partition.topic, partition.index,
                                            partition.topic_id, partition.leader_epoch, change)
            if state is not None:
                if state.leader_epoch != partition.leader_epoch or state.leader != partition.broker_id:
                    log.warning("%s: leader epoch moved to %d (leader %d); no longer leading", partition,
                                state.leader_epoch, state.leader)
                elif self.metrics is not None:
                    self.metrics.isr_changed(len(before), len(state.isr))
                await self._apply_state(partition, state)
        except KazooException as exc:
            log.warning("%s: ISR change not written (%s); retrying later", partition, exc)
        finally:
            partition.joining_isr.clear()
            self._writing.discard(partition)


def _without(removed: Iterable[int], isr: list[int]) -> list[int]:
    """``isr`` less the ``removed`` followers (an ISR change, run when the write happens)."""
    gone = set(removed)
    return [broker for broker in isr if broker not in gone]
