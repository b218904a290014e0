"""The broker's log directories in use: partition logs opened in them, the background schedules
(retention, flush) over the open logs, and the I/O pool every log call runs on.

Which directories there are, who owns them, and where a partition lives or goes, is
``ember.ingest.log_dirs``. A partition's directory holds a ``partition.metadata`` file naming
its topic, partition and topic id, so a directory left over from a deleted (or deleted and
re-created) topic is recognised and removed.
"""
from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable, Sequence

from ember.errors import StorageError
from ember.ingest.log_dirs import PARTITION_METADATA, LocalPartition, LogDirs
from ember.log.config import LogConfig

if TYPE_CHECKING:
    from ember.cluster.records import OfflineReplica
    from ember.ingest.partition import Partition
    from ember.log import Log
    from ember.metrics.broker_metrics import BrokerMetrics

log = logging.getLogger(__name__)

IO_THREADS = 4


class LogManager:
    def __init__(self, log_dirs: Path | Sequence[Path], broker_id: int) -> None:
        """``log_dirs``: the broker's log directory, or several (``log.dirs``)."""
        self.dirs = LogDirs([log_dirs] if isinstance(log_dirs, Path) else log_dirs)
        self.broker_id = broker_id
        #: Every blocking log operation runs here (see ``Partition.run``).
        self.io_pool = ThreadPoolExecutor(IO_THREADS, thread_name_prefix="log-io")
        self._schedules: list[asyncio.Task[None]] = []
        #: Offline logs already reported (by partition), and (schedule, topic, partition) failing.
        self._offline_noted: dict[tuple[str, int], "Log"] = {}
        self._failing: set[tuple[str, str, int]] = set()

    # -- ownership -----------------------------------------------------------------------------

    def lock(self) -> None:
        """Lock every log directory for the life of this process (see ``LogDirs.lock``)."""
        self.dirs.lock()

    def claim(self, cluster_id: str) -> None:
        """Bind every log directory to this broker and cluster, or refuse one of another."""
        self.dirs.claim(self.broker_id, cluster_id)

    def close(self) -> None:
        self.io_pool.shutdown(wait=True)
        self.dirs.unlock()

    # -- partition directories (blocking: call on the I/O pool) --------------------------------

    def local_partitions(self) -> list[LocalPartition]:
        return self.dirs.local_partitions()

    def deleted_directories(self) -> list[Path]:
        return self.dirs.deleted_directories()

    def missing_replicas(self, assigned: Iterable["OfflineReplica"]) -> frozenset["OfflineReplica"]:
        """The ``assigned`` replicas no online log directory holds while a directory is offline:
        their logs are taken to be on it (Kafka's rule for a replica that is not new), so they
        are reported offline rather than created empty elsewhere. Empty when all are online."""
        offline = self.dirs.offline()
        if not offline:
            return frozenset()
        held = {(p.topic, p.index, p.topic_id) for p in self.local_partitions()}
        missing = frozenset(r for r in assigned if (r.topic, r.partition, r.topic_id) not in held)
        if missing:
            log.error("%d replica(s) assigned here are in no online log directory while %s is offline; reporting "
                      "them offline so the controller moves their leadership away: %s", len(missing),
                      ", ".join(str(d.path) for d in offline),
                      ", ".join(f"{r.topic}-{r.partition}" for r in sorted(missing)))
        return missing

    def open_log(self, topic: str, index: int, topic_id: str, config: LogConfig) -> "Log":
        """Open (recovering if needed) or create the partition's log."""
        from ember.log import Log
        directory = self.dirs.partition_dir(topic, index)
        try:
            directory.mkdir(parents=True)
            new = True
        except FileExistsError:
            new = False
        meta = directory / PARTITION_METADATA
        if new or not meta.exists():
            tmp = meta.with_suffix(".tmp")
            tmp.write_text(json.dumps({"topic": topic, "partition": index, "topic_id": topic_id}))
            tmp.replace(meta)
        return Log.create(directory, config) if new else Log.open(directory, config)

    @staticmethod
    def delete_directory(path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    # -- schedules -----------------------------------------------------------------------------

    def start_schedules(self, partitions: Callable[[], Iterable["Partition"]],
                        retention_interval_ms: int, flush_interval_ms: int,
                        metrics: "BrokerMetrics | None" = None) -> None:
        """Retention every ``log.retention.check.interval.ms``, the flush check every
        ``log.flush.scheduler.interval.ms``; each log's job runs on the I/O pool. Flushes that
        happen are timed into ``metrics``; storage errors are counted by each partition's stats."""

        async def retention(p: "Partition") -> None:
            start = p.log.log_start_offset
            await p.run(p.log.apply_retention)
            if p.log.log_start_offset != start:
                p.changed.fire()    # fetch sessions tell their fetchers of the new log start

        def timed_flush(log_: "Log") -> None:
            started = time.perf_counter()
            if log_.flush_if_due() and metrics is not None:
                metrics.log_flush_time.observe(time.perf_counter() - started)

        async def flush(p: "Partition") -> None:
            if p.log.flush_check_has_work():
                await p.run(timed_flush, p.log)

        self._schedules = [
            asyncio.create_task(self._every(retention_interval_ms, partitions, "retention", retention),
                                name="retention"),
            asyncio.create_task(self._every(flush_interval_ms, partitions, "flush", flush), name="flush"),
        ]

    async def stop_schedules(self) -> None:
        for task in self._schedules:
            task.cancel()
        await asyncio.gather(*self._schedules, return_exceptions=True)
        self._schedules = []

    async def _every(self, interval_ms: int, partitions: Callable[[], Iterable["Partition"]], name: str,
                     job: Callable[["Partition"], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            await self.run_scheduled(list(partitions()), name, job)

    async def run_scheduled(self, partitions: list["Partition"], name: str,
                            job: Callable[["Partition"], Awaitable[None]]) -> None:
        """One round of a schedule (``name``: its ``operation`` in the storage-error counter).

        A log that a disk failure took offline is reported once (with the reason) and skipped
        until its partition is reopened; a StorageError that leaves the log online (a checkpoint
        the full disk refused) is logged when it starts and when it stops, not on every round."""
        self._forget_gone(partitions)
        for partition in partitions:
            if self._skip_offline(partition):
                continue
            key = (name, partition.topic, partition.index)
            try:
                await job(partition)
            except StorageError as exc:
                if partition.log.closed and not partition.log.offline:
                    continue    # deleted meanwhile (topic deleted or partition moved away)
                partition.count_storage_error(name)
                if self._skip_offline(partition):
                    continue
                if key not in self._failing:
                    self._failing.add(key)
                    log.warning("%s of %s failed: %s (retried every round; logged again when it works)",
                                name, partition, exc)
            except Exception:
                if partition.log.closed:
                    continue    # deleted meanwhile (topic deleted or partition moved away)
                log.exception("%s of %s failed", name, partition)
            else:
                if key in self._failing:
                    self._failing.discard(key)
                    log.info("%s of %s works again", name, partition)

    def _skip_offline(self, partition: "Partition") -> bool:
        """True if ``partition``'s log is offline; says so once per log."""
        log_ = partition.log
        if not log_.offline:
            return False
        key = (partition.topic, partition.index)
        if self._offline_noted.get(key) is not log_:
            self._offline_noted[key] = log_
            log.error("%s: its log is offline after a disk failure (%s); flush and retention skip it until the "
                      "partition is reopened (docs/operations.md, \"A full disk\")", partition, log_.offline_reason)
        return True

    def _forget_gone(self, partitions: list["Partition"]) -> None:
        """Drop what was noted about partitions no longer here (or reopened with a new log)."""
        current = {(p.topic, p.index): p.log for p in partitions}
        self._offline_noted = {k: v for k, v in self._offline_noted.items() if current.get(k) is v}
        self._failing = {k for k in self._failing if k[1:] in current}
