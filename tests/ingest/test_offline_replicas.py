"""A partition whose log a disk failure took offline, in process: the ReplicaManager reports this
broker's offline replicas to the controller (``/brokers/offline_replicas/<id>``, here a fake
writer) at once after the StorageError that took the log offline, or by its periodic check; it
clears a stale report at start-up, retries a failed write and writes again after a new ZooKeeper
session; the broker is not ready while it has offline logs; and once the controller has moved
away and the disk works again, the log is reopened without a restart. Disk failures are injected into
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
    LeaderHandler,
    answer_to,
    batch,
    broker_info,
    run,
    until,
)

from ember.cluster.records import PartitionState
from ember.errors import StorageError
from ember.ingest import replica_manager as replica_manager_module
from ember.ingest.broker_config import BrokerConfig
from ember.ingest.listeners import EMBER_LISTENER
from ember.ingest.log_manager import LogManager
from ember.ingest.offline_log_recovery import controller_moved_away
from ember.ingest.replica_manager import ReplicaManager
from ember.log import Log, LogConfig
from ember.server.health import check_readiness
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Response

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
async def replica_manager(data_dir: Path, cache: FakeMetadataCache, writer: FakeOfflineReplicaWriter,
                          inter_broker: FakeInterBroker | None = None,
                          **broker: str) -> AsyncIterator[ReplicaManager]:
    """``broker``: broker properties, with '_' for '.'."""
    logs = LogManager(data_dir, ME)
    replicas = ReplicaManager(ME, cache, logs, BrokerConfig.from_properties({k.replace("_", "."): v
                                                                             for k, v in broker.items()}),
                              FakeIsrWriter(cache, ME), inter_broker=inter_broker or FakeInterBroker(),
                              offline_writer=writer)
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
            assert readiness.reasons == ("logs offline after a disk failure (reopened once the disk works again): "
                                         "orders-1",)

    run(scenario())


def leader_holding(end_offset: int) -> LeaderHandler:
    """Broker 2 leading with a log that agrees with this replica's up to ``end_offset`` and has
    nothing more: its epochs end there, and every fetch brings nothing."""
    async def handle(api_key: ApiKey, body: dict[str, Any]) -> Response:
        if api_key == ApiKey.FETCH:
            await asyncio.sleep(0.01)
            return Response(0, {"partitions": [answer_to(p, high_watermark=end_offset, log_start_offset=0,
                                                         log_end_offset=end_offset, size=0)
                                               for p in body["partitions"]]})
        if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            return Response(0, {"partitions": [answer_to(p, leader_epoch=p["leader_epoch"], end_offset=end_offset)
                                               for p in body["partitions"]]})
        raise AssertionError(f"unexpected request {api_key!r}")
    return handle


def recovery_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ember.ingest.offline_log_recovery"]


@pytest.mark.parametrize(("state", "moved"), [
    (None, False),                                        # no state known yet
    (PartitionState(ME, 3, [1, 2, 3], 1, 7), False),      # still leads: the report is not acted on yet
    (PartitionState(2, 4, [1, 2, 3], 1, 8), False),       # follows, but still counts as in sync
    (PartitionState(2, 4, [2, 3], 1, 8), True),           # moved away and out of the ISR
    (PartitionState(-1, 3, [1], 1, 8), True),             # the last ISR member: the partition waits for it
    (PartitionState(-1, 3, [2], 1, 8), True),
])
def test_an_offline_log_is_retried_only_once_the_controller_acted_on_the_report(state: PartitionState | None,
                                                                               moved: bool) -> None:
    assert controller_moved_away(state, ME) is moved


def test_an_offline_log_comes_back_without_a_restart_once_its_disk_works(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The controller moved leadership away while the disk still fails its probe: the log stays
    offline (said once); once the disk works the log is reopened from disk with every
    acknowledged record, the replica follows the new leader from its log end, the report
    empties and the broker is ready again, all without a restart and with one line per step."""
    caplog.set_level(logging.INFO)
    writer = FakeOfflineReplicaWriter()
    inter_broker = FakeInterBroker(leader_holding(3))

    async def scenario() -> None:
        cache = cluster()
        async with replica_manager(tmp_path, cache, writer, inter_broker, log_offline_retry_interval_ms="100") \
                as replicas:
            await until(lambda: writer.writes == [[]], "the start-up write")
            old = replicas.partitions[(TOPIC, 1)]
            for _ in range(3):
                await old.append(memoryview(batch(1)), 1)
            acked = old.log.read(0, 1 << 20).read_bytes()
            heal = fail_fsync(monkeypatch, old.log.directory)
            with pytest.raises(StorageError):
                await old.run(old.log.flush)
            await until(lambda: writer.last == [P1], "the offline replica reported")
            cache.next_state(TOPIC, 1, leader=2, isr=[2, 3])     # the controller acts on the report
            await asyncio.sleep(0.5)                             # ~5 rounds: the probe's fsync still fails
            assert replicas.partitions[(TOPIC, 1)] is old and old.log.offline and writer.last == [P1]
            heal.clear()
            back = await until(lambda: (p := replicas.partitions[(TOPIC, 1)]) is not old and p, "the log reopened")
            assert not back.log.offline and back.state.leader == 2 and not back.is_leader
            assert back.log.log_end_offset == 3 and back.log.read(0, 1 << 20).read_bytes() == acked
            await until(lambda: writer.last == [], "the report cleared")
            leader = broker_info(2).endpoint(EMBER_LISTENER)
            fetched = await until(lambda: inter_broker.fetched(leader, TOPIC, 1), "a fetch from the new leader")
            assert fetched[0]["fetch_offset"] == 3 and fetched[0]["current_leader_epoch"] == back.leader_epoch
            assert check_readiness(broker_info(ME), "CONNECTED", cache, replicas.partitions).ready
            assert not any(p.log.offline for p in replicas.partitions.values())
            assert not list(old.log.directory.glob("disk-probe*"))

    run(scenario())
    said = recovery_lines(caplog)
    assert len(said) == 3, said
    assert "retrying its offline log every 0.1 s" in said[0]
    assert "its disk does not work yet" in said[1] and "Input/output error" in said[1]
    assert "reopened its log (log end 3); back online with leader 2" in said[2]


def test_an_offline_log_stays_offline_until_the_controller_moved_away_and_then_can_lead_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk works at once, but while the partition state still names this replica leader
    (the controller has not acted) the log is not reopened. As the last ISR member of a
    partition the controller left leaderless it is reopened (a failing reopen is said once and
    retried), and leads again when elected."""
    caplog.set_level(logging.INFO)
    writer = FakeOfflineReplicaWriter()

    async def scenario() -> None:
        cache = cluster()
        async with replica_manager(tmp_path, cache, writer, log_offline_retry_interval_ms="100") as replicas:
            old = replicas.partitions[(TOPIC, 1)]
            await old.append(memoryview(batch(2)), 1)
            fail_fsync(monkeypatch, old.log.directory)
            with pytest.raises(StorageError):
                await old.run(old.log.flush)
            monkeypatch.undo()                                   # the disk works again at once
            await until(lambda: writer.last == [P1], "the offline replica reported")
            await asyncio.sleep(0.5)
            assert replicas.partitions[(TOPIC, 1)] is old and old.log.offline
            real_open = Log.open.__func__
            attempts: list[Path] = []

            def flaky_open(cls: type[Log], directory: Path, config: LogConfig | None = None, **kw: Any) -> Log:
                attempts.append(directory)
                if len(attempts) <= 2:
                    raise StorageError(f"cannot open log {directory}: [Errno 5] Input/output error")
                return real_open(cls, directory, config, **kw)

            monkeypatch.setattr(Log, "open", classmethod(flaky_open))
            cache.next_state(TOPIC, 1, leader=-1, isr=[ME])      # the last ISR member: leaderless, waits for it
            back = await until(lambda: (p := replicas.partitions[(TOPIC, 1)]) is not old and p, "the log reopened")
            assert not back.log.offline and back.state.leader == -1 and back.log.log_end_offset == 2
            assert attempts == [old.log.directory] * 3          # the same directory each time
            await until(lambda: writer.last == [], "the report cleared")
            cache.next_state(TOPIC, 1, leader=ME)                # the controller elects it
            replicas.notify(TOPIC)
            await until(lambda: back.is_leader, "leading again")
            result = await back.append(memoryview(batch(1)), 1)
            assert result.first_offset == 2

    run(scenario())
    said = recovery_lines(caplog)
    assert len(said) == 3, said
    assert "reopening its log failed (cannot open log" in said[1] and "back online with leader -1" in said[2]
