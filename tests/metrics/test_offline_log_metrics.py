"""The scrape-time gauges of logs a disk failure took offline (``ember.server.state``), read
from the collector over stand-ins for the broker's parts and real logs, one taken offline by a
failed fsync."""
from __future__ import annotations

import errno
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest

from ember.cluster.records import BrokerInfo, OfflineReplica, PartitionState
from ember.errors import StorageError
from ember.ingest.fetch_session import FetchSessionCache
from ember.ingest.log_dirs import LogDirs
from ember.ingest.partition import Partition
from ember.log import Log, LogConfig
from ember.metrics.broker_metrics import BrokerMetrics
from ember.record import build_batch
from ember.server.state import BrokerStateCollector

ME = BrokerInfo(1, "127.0.0.1", 9092)


class Cache:
    def brokers(self) -> dict[int, BrokerInfo]:
        return {ME.id: ME}

    def topics(self) -> dict[str, Any]:
        return {}

    def controller(self) -> None:
        return None


@pytest.fixture
def partitions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Partition]]:
    """Three partitions of topic t led by this broker; t-1's log went offline (a failed fsync)."""
    pool = ThreadPoolExecutor(1)
    config = LogConfig()
    found = []
    for index in range(3):
        log = Log.open(tmp_path / f"t-{index}", config)
        log.append_as_leader(build_batch([(b"k", b"v", 1_000)]), 0)
        partition = Partition("t", index, "id", log, config, ME.id, pool)
        partition.assign([1], [])
        partition.apply_state(PartitionState(ME.id, 0, [ME.id], 1, 0))
        found.append(partition)

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(StorageError):
        found[1].log.flush()
    monkeypatch.undo()   # the disk works again; the log stays offline until reopened
    assert found[1].log.offline
    yield found
    for partition in found:
        partition.log.close()
    pool.shutdown()


def scrape(partitions: list[Partition], tmp_path: Path, log_dirs: LogDirs | None = None,
           in_offline_dirs: frozenset[OfflineReplica] = frozenset()) -> BrokerMetrics:
    broker = SimpleNamespace(
        registration=SimpleNamespace(info=ME), session=SimpleNamespace(client=SimpleNamespace(state="CONNECTED")),
        cache=Cache(), controller=SimpleNamespace(active=False), logs=SimpleNamespace(dirs=log_dirs or LogDirs([tmp_path])),
        replicas=SimpleNamespace(partitions={(p.topic, p.index): p for p in partitions},
                                 in_offline_dirs=lambda: in_offline_dirs, fetch_sessions=FetchSessionCache(10)),
        listener_servers=lambda: [])
    metrics = BrokerMetrics()
    metrics.register(BrokerStateCollector(broker))  # type: ignore[arg-type]
    return metrics


def test_offline_logs_are_counted_and_named_per_partition(partitions: list[Partition], tmp_path: Path) -> None:
    registry = scrape(partitions, tmp_path).registry
    assert registry.get_sample_value("ember_log_logmanager_offlinelogs") == 1
    assert [registry.get_sample_value("ember_log_log_offline", {"topic": "t", "partition": str(i)})
            for i in range(3)] == [0, 1, 0]
    # an offline log still reports its size and offsets (read without touching the disk)
    assert registry.get_sample_value("ember_log_log_logendoffset", {"topic": "t", "partition": "1"}) == 1


def test_no_offline_log_reads_zero(partitions: list[Partition], tmp_path: Path) -> None:
    registry = scrape([partitions[0], partitions[2]], tmp_path).registry
    assert registry.get_sample_value("ember_log_logmanager_offlinelogs") == 0


def test_each_log_directory_has_its_free_space_and_an_offline_flag(partitions: list[Partition], tmp_path: Path) -> None:
    """Several log.dirs: free space per online directory, the failed one flagged and counted, and
    the replicas it held (never opened) counted as offline logs."""
    good, failed = tmp_path / "good", tmp_path / "failed"
    failed.write_text("not a directory")
    dirs = LogDirs([good, failed])
    dirs.lock()
    try:
        registry = scrape(partitions, tmp_path, dirs, frozenset({OfflineReplica("u", 4, "id-u")})).registry
    finally:
        dirs.unlock()
    assert registry.get_sample_value("ember_log_logmanager_offlinelogdirectorycount") == 1
    assert registry.get_sample_value("ember_log_logmanager_logdirectoryoffline", {"log_directory": str(failed)}) == 1
    assert registry.get_sample_value("ember_log_logmanager_logdirectoryoffline", {"log_directory": str(good)}) == 0
    assert (registry.get_sample_value("ember_log_logdir_free_bytes", {"log_directory": str(good)}) or 0) > 0
    assert registry.get_sample_value("ember_log_logdir_free_bytes", {"log_directory": str(failed)}) is None
    assert registry.get_sample_value("ember_log_log_offline", {"topic": "u", "partition": "4"}) == 1
    assert registry.get_sample_value("ember_log_logmanager_offlinelogs") == 2   # t-1 and u-4
