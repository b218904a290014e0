"""The broker's data directory: who owns it, which partition directories it holds, and the
background schedules (retention, flush) over the open logs.

A partition lives in ``<data>/<topic>-<partition>/`` (Kafka's naming) with a
``partition.metadata`` file naming its topic, partition and topic id, so a directory left over
from a deleted (or deleted and re-created) topic is recognised and removed. ``meta.properties``
binds the directory to one broker id and cluster id; an exclusive ``flock`` keeps two broker
processes out of one directory.
"""
from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable

from ember.errors import EmberError, StorageError
from ember.log.config import LogConfig
from ember.log.data_dir import read_meta, write_meta

if TYPE_CHECKING:
    from ember.ingest.partition import Partition
    from ember.log import Log
    from ember.metrics.broker_metrics import BrokerMetrics

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
PARTITION_METADATA = "partition.metadata"
IO_THREADS = 4


class DataDirUnusable(EmberError):
    """The broker cannot use its data directory."""
    hint = "give each broker its own --data directory"


@dataclass(frozen=True)
class LocalPartition:
    topic: str
    index: int
    topic_id: str
    path: Path


class LogManager:
    def __init__(self, data_dir: Path, broker_id: int) -> None:
        self.data_dir = data_dir
        self.broker_id = broker_id
        #: Every blocking log operation runs here (see ``Partition.run``).
        self.io_pool = ThreadPoolExecutor(IO_THREADS, thread_name_prefix="log-io")
        self._lock_fd: int | None = None
        self._schedules: list[asyncio.Task[None]] = []
        #: Offline logs already reported (by partition), and (schedule, topic, partition) failing.
        self._offline_noted: dict[tuple[str, int], "Log"] = {}
        self._failing: set[tuple[str, str, int]] = set()

    # -- ownership -----------------------------------------------------------------------------

    def lock(self) -> None:
        """Take the directory's exclusive lock for the life of this process."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirUnusable(f"{self.data_dir} is in use by another broker process") from None
        self._lock_fd = fd

    def claim(self, cluster_id: str) -> None:
        """Bind the directory to this broker and cluster, or refuse a directory of another."""
        meta = read_meta(self.data_dir)
        if meta is not None:
            if meta.get("broker.id") != str(self.broker_id):
                raise DataDirUnusable(f"{self.data_dir} belongs to broker {meta.get('broker.id')}, "
                                      f"not {self.broker_id}")
            if meta.get("cluster.id") != cluster_id:
                raise DataDirUnusable(
                    f"{self.data_dir} belongs to cluster {meta.get('cluster.id')} but ZooKeeper "
                    f"holds cluster {cluster_id}; point --zookeeper at the right ensemble")
            return
        write_meta(self.data_dir, self.broker_id, cluster_id)

    def close(self) -> None:
        self.io_pool.shutdown(wait=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- partition directories (blocking: call on the I/O pool) --------------------------------

    def partition_dir(self, topic: str, index: int) -> Path:
        return self.data_dir / f"{topic}-{index}"

    def local_partitions(self) -> list[LocalPartition]:
        found = []
        for meta in sorted(self.data_dir.glob(f"*/{PARTITION_METADATA}")):
            try:
                doc = json.loads(meta.read_text())
                found.append(LocalPartition(doc["topic"], int(doc["partition"]), doc["topic_id"], meta.parent))
            except (OSError, ValueError, KeyError):
                log.warning("ignoring %s: unreadable partition metadata", meta.parent)
        return found

    def open_log(self, topic: str, index: int, topic_id: str, config: LogConfig) -> "Log":
        """Open (recovering if needed) or create the partition's log."""
        from ember.log import Log
        directory = self.partition_dir(topic, index)
        directory.mkdir(parents=True, exist_ok=True)
        meta = directory / PARTITION_METADATA
        if not meta.exists():
            tmp = meta.with_suffix(".tmp")
            tmp.write_text(json.dumps({"topic": topic, "partition": index, "topic_id": topic_id}))
            tmp.replace(meta)
        return Log.open(directory, config)

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
            await p.run(p.log.apply_retention)

        def timed_flush(log_: "Log") -> None:
            started = time.perf_counter()
            if log_.flush_if_due() and metrics is not None:
                metrics.log_flush_time.observe(time.perf_counter() - started)

        async def flush(p: "Partition") -> None:
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
