"""The broker's log cleaner (Kafka's LogCleaner and LogCleanerManager): ``log.cleaner.threads``
workers, each taking the dirtiest compacted log that is due (``min.cleanable.dirty.ratio``, or a
dirty record older than ``max.compaction.lag.ms``) and cleaning it (``ember.log.cleaner``) on a
thread of its own, so cleaning never waits behind, nor delays, the I/O pool's appends and reads.
Each replica cleans its own log, when it is due there: replicas need not clean in step, since a
cleaning never changes what any offset holds, only which superseded records are still there.

The key maps of all workers together stay within ``log.cleaner.dedupe.buffer.size``; their reads
and writes within ``log.cleaner.io.max.bytes.per.second``. Stopping interrupts a cleaning at its
next batch (its partial output is dropped; the log keeps its old segments), so a broker stops in
bounded time whatever the size of the log being cleaned.
"""
from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Optional

from ember.errors import StorageError
from ember.log import cleaner

if TYPE_CHECKING:
    from ember.ingest.partition import Partition

log = logging.getLogger(__name__)


class Stopped(Exception):
    """The cleaner is stopping: the cleaning in progress gives up (nothing of it is installed)."""


class IoThrottle:
    """Holds the cleaners' reads and writes together under ``bytes_per_second`` (in steps of 1 MiB),
    and interrupts a cleaning once the cleaner stops."""

    STEP = 1 << 20

    def __init__(self, bytes_per_second: float) -> None:
        self.rate = bytes_per_second
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._owed = 0
        self._since = time.monotonic()

    def __call__(self, size: int) -> None:
        if self.stopping.is_set():
            raise Stopped()
        if math.isinf(self.rate):
            return
        with self._lock:
            self._owed += size
            if self._owed < self.STEP:
                return
            due = self._since + self._owed / self.rate
            self._owed, self._since = 0, max(due, time.monotonic())
        wait = due - time.monotonic()
        if wait > 0 and self.stopping.wait(wait):
            raise Stopped()


@dataclass
class CleanerState:
    """What the metrics show: the last cleaning's figures and the dirtiest log seen."""
    last_run: float = 0.0            # time.monotonic() of the last cleaning's end (0: none yet)
    last_recopy_percent: float = 0.0
    max_clean_time_s: float = 0.0
    max_dirty_percent: float = 0.0
    bytes_read: int = 0
    bytes_written: int = 0
    cleanings: int = 0
    markers_removed: int = 0
    dead_workers: int = 0
    uncleanable: int = 0


class LogCleaner:
    def __init__(self, partitions: Callable[[], Iterable["Partition"]], *, threads: int, dedupe_buffer_bytes: int,
                 backoff_ms: int, io_max_bytes_per_second: float) -> None:
        self._partitions = partitions
        self._threads = threads
        self._buffer_per_thread = max(dedupe_buffer_bytes // threads, 1)
        self._backoff_s = backoff_ms / 1000
        self.throttle = IoThrottle(io_max_bytes_per_second)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="log-cleaner")
        self._busy: set[tuple[str, int]] = set()
        #: logs whose cleaning failed on something other than the disk (Kafka's uncleanable
        #: partitions, KIP-346): skipped until the partition's log is reopened
        self._uncleanable: dict[tuple[str, int], object] = {}
        self._workers: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self.state = CleanerState()

    def start(self) -> None:
        self._workers = [asyncio.create_task(self._work(), name=f"log-cleaner-{i}") for i in range(self._threads)]

    def wake(self) -> None:
        """Look for due logs now (a test, or a topic turned compact), not after the backoff."""
        self._wake.set()

    async def stop(self) -> None:
        """Interrupt the cleanings in progress and wait for the workers (bounded: one batch each)."""
        self.throttle.stopping.set()
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        await asyncio.to_thread(self._pool.shutdown, wait=True)
        self._workers = []

    async def _work(self) -> None:
        try:
            while True:
                chosen = self._choose()
                if chosen is None:
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), self._backoff_s)
                    except asyncio.TimeoutError:
                        pass
                    continue
                key = (chosen.topic, chosen.index)
                self._busy.add(key)
                try:
                    await self._clean(chosen)
                finally:
                    self._busy.discard(key)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.state.dead_workers += 1     # Kafka's DeadThreadCount: an alert rule watches it
            log.exception("a log cleaner worker died")
            raise

    def _choose(self) -> Optional["Partition"]:
        """The dirtiest compacted log that is due and not being cleaned by another worker."""
        now = time.time() * 1000
        best, best_ratio, max_ratio = None, -1.0, 0.0
        for partition in self._partitions():
            log_ = partition.log
            key = (partition.topic, partition.index)
            if key in self._busy or not log_.config.compact or log_.closed or self._uncleanable.get(key) is log_:
                continue
            cleanable = log_.cleanable()
            if cleanable is None:
                continue
            max_ratio = max(max_ratio, cleanable.dirty_ratio)
            config = log_.config
            if cleanable.due(config.min_cleanable_dirty_ratio, config.max_compaction_lag_ms, int(now)) and \
                    cleanable.dirty_ratio > best_ratio:
                best, best_ratio = partition, cleanable.dirty_ratio
        self.state.max_dirty_percent = 100 * max_ratio
        self.state.uncleanable = len(self._uncleanable)
        return best

    async def _clean(self, partition: "Partition") -> None:
        loop = asyncio.get_running_loop()
        try:
            stats = await loop.run_in_executor(self._pool, self._clean_blocking, partition)
        except Stopped:
            return
        except StorageError as exc:
            if not partition.log.closed:
                log.warning("cleaning %s failed: %s (retried once it is due again)", partition, exc)
            return
        except Exception:
            if partition.log.closed:
                return            # deleted or moved away under the cleaning
            # a damaged batch, a bug: this log is left alone until it is reopened, the others go on
            self._uncleanable[(partition.topic, partition.index)] = partition.log
            log.exception("cleaning %s failed; it is not cleaned again until its log is reopened "
                          "(ember_log_logcleanermanager_uncleanable_partitions_count)", partition)
            return
        if stats is None:
            return
        state = self.state
        state.last_run = time.monotonic()
        state.cleanings += 1
        state.bytes_read += stats.bytes_read
        state.bytes_written += stats.bytes_written
        state.markers_removed += stats.markers_removed
        state.last_recopy_percent = stats.recopy_percent
        state.max_clean_time_s = max(state.max_clean_time_s, stats.seconds)
        log.info("cleaned %s: %d segments, offsets [%d, %d), %d of %d records kept (%.1f%% of the bytes), %d keys, "
                 "%.2f s", partition, stats.segments, stats.first_dirty, stats.end, stats.records_kept,
                 stats.records_read, stats.recopy_percent, stats.keys, stats.seconds)

    def _clean_blocking(self, partition: "Partition") -> Optional[cleaner.CleanStats]:
        return cleaner.clean(partition.log, dedupe_buffer_bytes=self._buffer_per_thread, throttle=self.throttle)

