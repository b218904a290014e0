"""Bringing back, without a restart, the logs a disk failure took offline.

A log goes offline when a failed fsync or undo leaves its files unlike its in-memory state
(docs/log.md, "Failures"); the replica manager reports it to the controller, which moves the
partition's leadership away and drops this replica from the ISR. Every
``log.offline.retry.interval.ms`` this task looks at each offline log and has it reopened once
both of these hold:

* **the controller has acted on the report** (:func:`controller_moved_away`): another broker
  leads and this replica is out of the ISR, or nobody leads because this replica was the last in
  the ISR (the partition waits for it, as for a restarting broker). Recovery may shorten the log
  (a torn tail); reopened as an out-of-sync follower, the replica gets back what it lacks from
  the leader (truncating by leader epoch first) before it counts for the high watermark again,
  so no acknowledged record is lost. While the controller has not acted (ZooKeeper
  unreachable, no controller) the log stays offline.
* **the disk works** (:func:`ember.log.disk.probe`): a page-sized file can be written, fsynced
  and deleted in the log's directory, and the file system has room for at least one batch of
  the topic (``max.message.bytes``): the first thing a reopened replica does is append what it
  fetches, and a disk without room for that is still full. (Indexes are not preallocated, so
  they need no more.)

The probe runs on the log I/O pool, one log at a time, never more than once per round; the
reopening itself is :meth:`ReplicaManager.reopen_offline`'s. Each offline log is logged once
when first seen (and the first probe or reopen failure once), and once when it is back online,
not on every round.
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable

from ember.cluster.records import NO_LEADER, PartitionState
from ember.errors import StorageError
from ember.log import disk

if TYPE_CHECKING:
    from ember.ingest.partition import Partition
    from ember.log import Log

log = logging.getLogger(__name__)

Key = tuple[str, int]


def controller_moved_away(state: PartitionState | None, broker_id: int) -> bool:
    """True once the partition's state shows the controller acted on this broker's offline
    report: another leader and this replica out of the ISR, or no leader at all (this replica
    may be the last ISR member the partition waits for). Unknown state: not yet."""
    if state is None or state.leader == broker_id:
        return False
    return state.leader == NO_LEADER or broker_id not in state.isr


def probe_free_bytes(partition: "Partition", min_free_bytes: int = 0) -> int:
    """Free space a working disk must have for this partition: one batch of its topic, beyond
    what the log directory keeps free (``log.dir.min.free.bytes``)."""
    return max(partition.config.max_message_bytes, disk.PROBE_BYTES) + max(min_free_bytes, 0)


class OfflineLogRecovery:
    """Retries this broker's offline logs every ``interval_ms`` (an event-loop task)."""

    def __init__(self, broker_id: int, interval_ms: int, partitions: Callable[[], Iterable["Partition"]],
                 state_of: Callable[["Partition"], PartitionState | None],
                 reopen: Callable[["Partition"], Awaitable["Partition | None"]], io_pool: Executor,
                 min_free_bytes: int = 0) -> None:
        self.broker_id = broker_id
        self.interval_s = interval_ms / 1000
        self._partitions = partitions
        self._state_of = state_of
        self._reopen = reopen
        self._io_pool = io_pool
        self.min_free_bytes = min_free_bytes
        self._task: asyncio.Task[None] | None = None
        # per partition, the offline log already announced, and the one whose first failure was logged
        self._announced: dict[Key, "Log"] = {}
        self._failure_said: dict[Key, "Log"] = {}

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="offline-log-recovery")

    async def close(self) -> None:
        """Stop retrying; a reopening in progress finishes first (its log is then the manager's)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.retry()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("retrying offline logs failed; trying again in %g s", self.interval_s)

    async def retry(self) -> None:
        """One round: reopen each offline log whose controller moved away and whose disk works."""
        offline = [p for p in list(self._partitions()) if p.log.offline]
        self._forget(offline)
        for partition in offline:
            key = (partition.topic, partition.index)
            old = partition.log
            if self._announced.get(key) is not old:
                self._announced[key] = old
                log.info("%s: retrying its offline log every %g s: it is reopened once the controller has moved "
                         "leadership away from this replica and its disk passes a probe (at least %d bytes free, a file "
                         "written, fsynced and deleted in %s)", partition, self.interval_s,
                         probe_free_bytes(partition, self.min_free_bytes), old.directory)
            if not controller_moved_away(self._state_of(partition), self.broker_id):
                continue
            failure = await asyncio.get_running_loop().run_in_executor(
                self._io_pool, disk.probe, old.directory, probe_free_bytes(partition, self.min_free_bytes))
            if failure is not None:
                self._say_failure(key, old, f"{partition}: its disk does not work yet ({failure}); retrying")
                continue
            try:
                reopened = await self._reopen(partition)
            except StorageError as exc:
                self._say_failure(key, old, f"{partition}: reopening its log failed ({exc}); retrying")
                continue
            if reopened is None:
                continue    # deleted, moved away or reopened meanwhile
            back = reopened.log
            if back.log_end_offset < old.log_end_offset:
                log.warning("%s: recovery kept its log up to offset %d of %d (the rest was not intact on disk); "
                            "the replica fetches it again from the leader", reopened, back.log_end_offset,
                            old.log_end_offset)
            log.info("%s: its disk works again: reopened its log (log end %d); back online with leader %d, ISR %s",
                     reopened, back.log_end_offset, reopened.state.leader, reopened.state.isr)

    def _say_failure(self, key: Key, old: "Log", message: str) -> None:
        if self._failure_said.get(key) is not old:
            self._failure_said[key] = old
            log.info(message)

    def _forget(self, offline: list["Partition"]) -> None:
        """Drop what was said about logs that are no longer offline here (reopened or deleted)."""
        current = {(p.topic, p.index): p.log for p in offline}
        self._announced = {k: v for k, v in self._announced.items() if current.get(k) is v}
        self._failure_said = {k: v for k, v in self._failure_said.items() if current.get(k) is v}
