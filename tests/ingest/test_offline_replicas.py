"""A partition whose log a disk failure took offline, in process: the ReplicaManager reports this
broker's offline replicas to the controller (``/brokers/offline_replicas/<id>``, here a fake
writer) at once after the StorageError that took the log offline, or by its periodic check; it
clears a stale report at start-up, retries a failed write and writes again after a new ZooKeeper
session; and the broker is not ready while it has offline logs. Disk failures are injected into
the os calls of the logs of the partition under test only."""
from __future__ import annotations

import asyncio
import errno
import logging
import os
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from ingest_fakes import (
    FakeInterBroker,
    FakeIsrWriter,
    FakeMetadataCache,
    FakeOfflineReplicaWriter,
    batch,
    broker_info,
    run,
    until,
)

from ember.cluster.records import PartitionState
from ember.errors import StorageError
from ember.ingest import replica_manager as replica_manager_module
from ember.ingest.broker_config import BrokerConfig
from ember.ingest.log_manager import LogManager
from ember.ingest.replica_manager import ReplicaManager
from ember.server.health import check_readiness

TOPIC = "orders"
ME = 1
P0, P1 = (TOPIC, 0, f"id-{TOPIC}"), (TOPIC, 1, f"id-{TOPIC}")


def fail_fsync(monkeypatch: pytest.MonkeyPatch, directory: Path) -> list[int]:
    """``os.fsync`` fails with EIO for files under ``directory``; empty the list to heal the disk."""
    real = os.fsync
    broken = [1]

    def fsync(fd: int) -> None:
        if broken:
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                path = ""
            if path.startswith(str(directory)):
                raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return broken


def cluster(**config: str) -> FakeMetadataCache:
    cache = FakeMetadataCache()
    cache.put_topic(TOPIC, {0: [1, 2, 3], 1: [1, 2, 3]}, config=config,
                    states={i: PartitionState(ME, 0, [1, 2, 3], 1, 0) for i in (0, 1)})
    return cache


@asynccontextmanager
async def replica_manager(data_dir: Path, cache: FakeMetadataCache,
                          writer: FakeOfflineReplicaWriter) -> AsyncIterator[ReplicaManager]:
    logs = LogManager(data_dir, ME)
    replicas = ReplicaManager(ME, cache, logs, BrokerConfig.from_properties({}), FakeIsrWriter(cache, ME),
                              inter_broker=FakeInterBroker(), offline_writer=writer)
    try:
        await replicas.start()
        yield replicas
    finally:
        await replicas.close()
        logs.close()


def test_a_produce_that_takes_the_log_offline_is_reported_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    """flush.messages=1: the leader's append fsyncs, the fsync fails, the log goes offline; the
    report is written right after the StorageError, without waiting for the periodic check."""
    monkeypatch.setattr(replica_manager_module, "OFFLINE_CHECK_INTERVAL_S", 3600.0)
    writer = FakeOfflineReplicaWriter()

    async def scenario() -> None:
        async with replica_manager(tmp_path, cluster(**{"flush.messages": "1"}), writer) as replicas:
            await until(lambda: writer.writes == [[]], "the start-up write (clears a stale report)")
            partition = replicas.leader_partition(TOPIC, 0)
            fail_fsync(monkeypatch, partition.log.directory)
            with pytest.raises(StorageError):
                await partition.append(memoryview(batch(1)), 1)
            assert partition.log.offline
            await until(lambda: writer.last == [P0], "the offline replica reported", timeout_s=2.0)
            assert [(r.topic, r.partition, r.topic_id) for r in replicas.offline_replicas()] == [P0]
            # later StorageErrors of the same log write nothing new
            with pytest.raises(StorageError):
                await partition.append(memoryview(batch(1)), 1)
            await asyncio.sleep(0.05)
            assert writer.writes == [[], [P0]]

    run(scenario())


def test_a_log_gone_offline_elsewhere_is_found_by_the_periodic_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """A flush outside the request path (no hook) takes the log offline: the periodic check
    reports it; a write ZooKeeper refuses is retried; a new session writes the report again."""
    monkeypatch.setattr(replica_manager_module, "OFFLINE_CHECK_INTERVAL_S", 0.05)
    writer = FakeOfflineReplicaWriter()

    async def scenario() -> None:
        async with replica_manager(tmp_path, cluster(), writer) as replicas:
            await until(lambda: writer.writes == [[]], "the start-up write")
            partition = replicas.partitions[(TOPIC, 1)]
            await partition.append(memoryview(batch(2)), 1)
            heal = fail_fsync(monkeypatch, partition.log.directory)
            writer.failures = 2                 # ZooKeeper does not take the first two writes
            with pytest.raises(StorageError):
                await partition.run(partition.log.flush)
            heal.clear()
            await until(lambda: writer.last == [P1], "the offline replica reported after retries")
            assert writer.failures == 0 and replicas.partitions[(TOPIC, 0)].log.offline is False
            written = len(writer.writes)
            writer.new_session()
            await until(lambda: len(writer.writes) == written + 1, "the report written again on a new session")
            assert writer.last == [P1]

    run(scenario())
    lines = [r for r in caplog.records if r.name == "ember.ingest.replica_manager"]
    said = [r.getMessage() for r in lines if r.levelno >= logging.WARNING]
    assert len(said) == 2, said        # the ERROR once and one WARNING for both failed writes
    assert "its log is offline" in said[0] and "telling the controller" in said[0]
    assert "could not write" in said[1]


def test_a_broker_with_an_offline_log_is_not_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = FakeOfflineReplicaWriter()

    async def scenario() -> Any:
        cache = cluster()
        async with replica_manager(tmp_path, cache, writer) as replicas:
            me = broker_info(ME)
            assert check_readiness(me, "CONNECTED", cache, replicas.partitions).ready
            partition = replicas.partitions[(TOPIC, 1)]
            await partition.append(memoryview(batch(1)), 1)
            fail_fsync(monkeypatch, partition.log.directory)
            with pytest.raises(StorageError):
                await partition.run(partition.log.flush)
            readiness = check_readiness(me, "CONNECTED", cache, replicas.partitions)
            assert not readiness.ready
            assert readiness.reasons == ("logs offline after a disk failure (restart the broker on a working disk): "
                                         "orders-1",)

    run(scenario())
