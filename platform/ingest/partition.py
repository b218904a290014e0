"""One partition replica hosted by this broker: its log and the leadership the controller gave it.

This is the hook point of replication: the leader epoch, replica list and ISR come from the
controller's partition state, :meth:`Partition.high_watermark_target` is the single rule for
the high watermark (today the leader's log end; the replication work makes it the smallest log
end over the ISR), and :meth:`record_follower_position` is where follower fetches report in.

Threading: the event loop never touches a disk. Every ``Log`` call runs on the broker's I/O
pool (:meth:`run`); ``Log`` is thread-safe and fsyncs without blocking appends. The only
broker-side critical section is advancing the high watermark (read log end, compare, set), which
must never move it backwards when appends finish out of order. Leadership state and
:attr:`changed` live on the event loop.
"""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from ember.cluster.records import PartitionState
from ember.errors import FencedLeaderEpoch, NotEnoughReplicas, NotLeaderOrFollower, UnknownLeaderEpoch
from ember.ingest.signals import Signal
from ember.log.config import LogConfig

if TYPE_CHECKING:
    from ember.log import AppendResult, FetchSlice, Log

T = TypeVar("T")

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
CONSUMER_REPLICA_ID = -1


class Partition:
    def __init__(self, topic: str, index: int, topic_id: str, log: "Log", config: LogConfig,
                 broker_id: int, io_pool: Executor) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.config = config
        self.broker_id = broker_id
        self.state = PartitionState(-1, -1, [], -1)
        self.replicas: list[int] = []
        #: Fired on the event loop whenever readers may see more: an append, a higher high
        #: watermark, or a leadership change (so parked fetches re-check who leads).
        self.changed = Signal()
        self._follower_end_offsets: dict[int, int] = {}
        self._hw_lock = threading.Lock()
        self._io_pool = io_pool

    def __repr__(self) -> str:
        return f"{self.topic}-{self.index}"

    # -- I/O -----------------------------------------------------------------------------------

    async def run(self, job: Callable[..., T], *args: Any) -> T:
        """Run a blocking ``Log`` job on the I/O pool."""
        return await asyncio.get_running_loop().run_in_executor(self._io_pool, job, *args)

    # -- leadership ----------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.broker_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    def apply_state(self, state: PartitionState, replicas: list[int]) -> None:
        """Take the controller's latest state for this partition (event loop)."""
        if self.state.leader != state.leader or self.state.leader_epoch != state.leader_epoch:
            self._follower_end_offsets.clear()
        self.state = state
        self.replicas = list(replicas)
        self.changed.fire()

    def check_leader(self, current_leader_epoch: int | None = None) -> None:
        """Raise unless this broker leads the partition at the epoch the client believes in."""
        if not self.is_leader:
            raise NotLeaderOrFollower(f"broker {self.broker_id} does not lead {self} "
                                      f"(leader is {self.state.leader})")
        if current_leader_epoch is None or current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpoch(f"{self}: leader epoch {current_leader_epoch} is older than "
                                    f"{self.leader_epoch}; refresh metadata")
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpoch(f"{self}: leader epoch {current_leader_epoch} is newer than "
                                     f"{self.leader_epoch} known here; retry")

    # -- replication hooks ---------------------------------------------------------------------

    def high_watermark_target(self) -> int:
        """The high watermark the leader may advance to. Without replication this is the
        leader's log end (for RF=1 that is exact); replication replaces it with the smallest
        log end offset over the ISR, fed by :meth:`record_follower_position`. I/O thread."""
        return self.log.log_end_offset

    def record_follower_position(self, replica_id: int, fetch_offset: int) -> None:
        """A follower fetched from ``fetch_offset``, so its log ends there."""
        self._follower_end_offsets[replica_id] = fetch_offset

    def is_replicated(self, end_offset: int) -> bool:
        """True when an acks=all write ending at ``end_offset`` is on every ISR member."""
        return self.log.high_watermark >= end_offset

    def _advance_high_watermark(self) -> None:
        with self._hw_lock:
            target = self.high_watermark_target()
            if target > self.log.high_watermark:
                self.log.update_high_watermark(target)

    # -- records -------------------------------------------------------------------------------

    async def append(self, raw: memoryview, required_acks: int) -> "AppendResult":
        """Append a producer's batch as leader. acks=all needs ``min.insync.replicas`` in-sync
        replicas before the write (Kafka's NOT_ENOUGH_REPLICAS)."""
        self.check_leader()
        if required_acks == -1 and len(self.state.isr) < self.config.min_insync_replicas:
            raise NotEnoughReplicas(f"{self}: {len(self.state.isr)} in-sync replica(s) {self.state.isr}, "
                                    f"min.insync.replicas is {self.config.min_insync_replicas}")
        result = await self.run(self._append, raw, self.leader_epoch)
        self.changed.fire()
        return result

    def _append(self, raw: memoryview, leader_epoch: int) -> "AppendResult":
        result = self.log.append_as_leader(raw, leader_epoch)
        self._advance_high_watermark()
        return result

    async def read(self, fetch_offset: int, max_bytes: int, min_one_batch: bool,
                   replica_id: int) -> tuple["FetchSlice | None", dict[str, int]]:
        """Batches from ``fetch_offset``: below the high watermark for consumers, up to the log
        end for followers. Returns the slice (None when nothing is readable yet) and offsets."""
        return await self.run(self._read, fetch_offset, max_bytes, min_one_batch, replica_id)

    def _read(self, fetch_offset: int, max_bytes: int, min_one_batch: bool,
              replica_id: int) -> tuple["FetchSlice | None", dict[str, int]]:
        log = self.log
        offsets = {"high_watermark": log.high_watermark, "log_start_offset": log.log_start_offset,
                   "log_end_offset": log.log_end_offset}
        limit = None if replica_id >= 0 else offsets["high_watermark"]
        piece = log.read(fetch_offset, max_bytes, max_offset=limit, min_one_batch=min_one_batch)
        return (piece if piece.size > 0 else None), offsets

    async def offset_for_timestamp(self, timestamp: int, replica_id: int) -> tuple[int, int]:
        """ListOffsets: (offset, timestamp) for earliest (-2), latest (-1) or a timestamp;
        (-1, -1) when no visible record has a timestamp at or after it."""
        return await self.run(self._offset, timestamp, replica_id)

    def _offset(self, timestamp: int, replica_id: int) -> tuple[int, int]:
        log = self.log
        visible_end = log.log_end_offset if replica_id >= 0 else log.high_watermark
        if timestamp == EARLIEST_TIMESTAMP:
            return log.log_start_offset, -1
        if timestamp == LATEST_TIMESTAMP:
            return visible_end, -1
        found = log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= visible_end:
            return -1, -1
        return found

    # -- maintenance ---------------------------------------------------------------------------

    def reconfigure(self, config: LogConfig) -> None:
        """Apply an altered topic config to the open log (I/O thread)."""
        self.log.update_config(config)
        self.config = config
