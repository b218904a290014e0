"""The broker side of a failing disk, in process: storage errors counted where the broker meets
them (produce at the leader, follower appends in the replica fetcher, the flush and retention
schedules), and a log that a disk failure took offline reported once and then left alone (no
traceback per tick, no fetching, no busy loop). Disk failures are injected into the os calls
the logs make, only for the files of the partition under test."""
from __future__ import annotations

import asyncio
import errno
import logging
import os
from pathlib import Path
from typing import Any, Callable

import pytest
from ingest_fakes import FakeInterBroker, MakePartition, answer_to, batch, idle_leader, run, until

from ember.cluster.records import PartitionState
from ember.errors import StorageError
from ember.ingest.log_manager import LogManager
from ember.ingest.partition import Partition
from ember.ingest.replica_fetcher import FetcherConfig, ReplicaFetcher
from ember.log import Log
from ember.metrics.broker_metrics import STORAGE_OPERATIONS, BrokerMetrics
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Response

ME, LEADER = 2, 1
LEADER_ADDRESS = ("127.0.0.1", 19000 + LEADER)
FETCHER_CONFIG = FetcherConfig(wait_max_ms=10, min_bytes=1, partition_max_bytes=1 << 20,
                               response_max_bytes=1 << 20, backoff_ms=10, socket_timeout_ms=1000)

def storage_errors(metrics: BrokerMetrics, operation: str) -> float | None:
    return metrics.registry.get_sample_value("ember_server_replicamanager_storageerrors_total",
                                             {"operation": operation})


def fail_for(monkeypatch: pytest.MonkeyPatch, name: str, directory: Path, code: int = errno.EIO,
             path_ends: str = "") -> list[int]:
    """``os.<name>(fd, ...)`` fails with ``code`` for files of ``directory`` (ending in
    ``path_ends``); returns a list that ``heal`` empties to make the disk work again."""
    real = getattr(os, name)
    broken = [1]

    def call(fd: int, *args: Any) -> Any:
        if broken:
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                path = ""
            if path.startswith(str(directory)) and path.endswith(path_ends):
                raise OSError(code, os.strerror(code))
        return real(fd, *args)

    monkeypatch.setattr(os, name, call)
    return broken


def take_offline(monkeypatch: pytest.MonkeyPatch, log: Log) -> None:
    """A failed fsync takes ``log`` offline (the disk then works again: the log stays offline)."""
    heal = fail_for(monkeypatch, "fsync", log.directory)
    with pytest.raises(StorageError):
        log.flush()
    heal.clear()
    assert log.offline


def records(caplog: pytest.LogCaptureFixture, logger: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger]


# -- metrics ----------------------------------------------------------------------------------


def test_every_storage_error_series_exists_from_zero(metrics: BrokerMetrics) -> None:
    """A counter that appears at 1 shows no increase() in Prometheus: each starts at 0."""
    assert [storage_errors(metrics, op) for op in STORAGE_OPERATIONS] == [0.0] * len(STORAGE_OPERATIONS)


def test_a_produce_append_failing_on_the_disk_counts_a_storage_error_and_takes_the_log_offline(
        make_partition: MakePartition, metrics: BrokerMetrics, monkeypatch: pytest.MonkeyPatch) -> None:
    """The log undid the write (its files are whole), but the broker takes it offline, as Kafka
    does (KIP-112): the controller then moves leadership to a replica whose disk works, instead
    of this leader answering KAFKA_STORAGE_ERROR for as long as its disk stays full."""
    partition = make_partition(broker_id=LEADER)
    partition.apply_state(PartitionState(LEADER, 0, [LEADER], 1, 0))

    async def scenario() -> None:
        heal = fail_for(monkeypatch, "pwritev", partition.log.directory, errno.ENOSPC)
        with pytest.raises(StorageError, match="No space left"):
            await partition.append(memoryview(batch(2)), 1)
        heal.clear()
        assert partition.log.offline and partition.log.log_end_offset == 0
        with pytest.raises(StorageError, match="offline"):   # until the log is reopened
            await partition.append(memoryview(batch(2)), 1)

    run(scenario())
    assert storage_errors(metrics, "produce") == 2
    assert storage_errors(metrics, "replication") == storage_errors(metrics, "flush") == 0
    reopened = Log.open(partition.log.directory, partition.config)   # what the offline-log recovery does
    try:
        assert reopened.log_end_offset == 0
    finally:
        reopened.close()


def test_a_log_closed_meanwhile_is_not_counted_as_a_disk_failure(make_partition: MakePartition,
                                                                  metrics: BrokerMetrics) -> None:
    """A partition deleted while a produce was on its way: StorageError (closed), not a disk error."""
    partition = make_partition(broker_id=LEADER)
    partition.apply_state(PartitionState(LEADER, 0, [LEADER], 1, 0))
    partition.log.close()
    with pytest.raises(StorageError, match="closed"):
        run(partition.append(memoryview(batch(1)), 1))
    assert storage_errors(metrics, "produce") == 0


# -- the flush and retention schedules --------------------------------------------------------


def test_the_schedules_report_an_offline_log_once_and_skip_it(
        make_partition: MakePartition, metrics: BrokerMetrics, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The flush that fails takes the log offline: counted once, one ERROR line with the reason
    and no traceback; later rounds of flush and retention skip it (no line, no count) and keep
    serving the other partition."""
    failing, healthy = make_partition(**{"flush.ms": "0"}), make_partition(**{"flush.ms": "0"})
    for partition in (failing, healthy):
        partition.log.append_as_follower(batch(3, base_offset=0, partition_leader_epoch=0))
    fail_for(monkeypatch, "fsync", failing.log.directory)
    manager = LogManager(tmp_path / "data", ME)

    retained: list[Partition] = []

    async def retention(partition: Partition) -> None:
        retained.append(partition)
        await partition.run(partition.log.apply_retention)

    async def scenario() -> None:
        manager.start_schedules(lambda: [failing, healthy], retention_interval_ms=60_000, flush_interval_ms=5,
                                metrics=metrics)
        try:
            await until(lambda: failing.log.offline and healthy.log.recovery_point == 3, "the first flush")
            await asyncio.sleep(0.1)    # about 20 rounds of the flush schedule
            healthy.log.append_as_follower(batch(2, base_offset=3, partition_leader_epoch=0))
            await until(lambda: healthy.log.recovery_point == 5, "the healthy partition flushed again")
            for _ in range(3):          # rounds of the retention schedule
                await manager.run_scheduled([failing, healthy], "retention", retention)
        finally:
            await manager.stop_schedules()

    with caplog.at_level(logging.INFO, logger="ember.ingest.log_manager"):
        run(scenario())
    manager.close()
    lines = records(caplog, "ember.ingest.log_manager")
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].levelno == logging.ERROR and lines[0].exc_info is None
    message = lines[0].getMessage()
    assert "t-0" in message and "offline" in message and str(failing.log.directory) in message
    assert storage_errors(metrics, "flush") == 1
    assert storage_errors(metrics, "retention") == 0 and retained == [healthy] * 3


def test_a_storage_error_that_leaves_the_log_online_is_logged_when_it_starts_and_when_it_stops(
        make_partition: MakePartition, metrics: BrokerMetrics, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A full disk refusing a checkpoint (the log stays online, the next flush retries): every
    failed round is counted, but logged only when it starts failing and when it works again."""
    partition = make_partition(**{"flush.ms": "0"})
    partition.log.append_as_follower(batch(3, base_offset=0, partition_leader_epoch=0))
    partition.log.update_high_watermark(3)   # not checkpointed yet: each round's flush tries again
    heal = fail_for(monkeypatch, "write", partition.log.directory, errno.ENOSPC, path_ends=".tmp")
    manager = LogManager(tmp_path / "data", ME)

    async def scenario() -> None:
        manager.start_schedules(lambda: [partition], retention_interval_ms=60_000, flush_interval_ms=5,
                                metrics=metrics)
        try:
            await until(lambda: (storage_errors(metrics, "flush") or 0) >= 3, "three failed flushes")
            assert not partition.log.offline
            heal.clear()
            await until(lambda: any("works again" in r.getMessage() for r in caplog.records), "a good flush")
        finally:
            await manager.stop_schedules()

    with caplog.at_level(logging.INFO, logger="ember.ingest.log_manager"):
        run(scenario())
    manager.close()
    lines = [(r.levelno, r.exc_info) for r in records(caplog, "ember.ingest.log_manager")]
    assert lines == [(logging.WARNING, None), (logging.INFO, None)]


# -- the replica fetcher ----------------------------------------------------------------------


def following(partition: Partition) -> Partition:
    partition.apply_state(PartitionState(LEADER, 0, [LEADER, ME], 1, 0))
    return partition


def leader_with_records(topic: str, index: int, count: int = 2) -> Callable[..., Any]:
    """A leader whose ``topic``-``index`` holds ``count`` records of epoch 0; others are empty."""
    async def handle(api_key: ApiKey, body: dict[str, Any]) -> Response:
        if api_key != ApiKey.FETCH:
            return await idle_leader(api_key, body)
        items, payload = [], b""
        for p in body["partitions"]:
            data = b""
            if (p["topic"], p["partition"]) == (topic, index) and p["fetch_offset"] < count:
                data = batch(count - p["fetch_offset"], base_offset=p["fetch_offset"], partition_leader_epoch=0)
            end = count if (p["topic"], p["partition"]) == (topic, index) else 0
            items.append(answer_to(p, high_watermark=end, log_start_offset=0, log_end_offset=end, size=len(data)))
            payload += data
        if not payload:
            await asyncio.sleep(0.01)
        return Response(0, {"partitions": items}, memoryview(payload))

    return handle


def test_the_replica_fetcher_never_fetches_a_partition_whose_log_is_offline(
        make_partition: MakePartition, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    offline, healthy = following(make_partition()), following(make_partition())
    take_offline(monkeypatch, offline.log)
    inter_broker = FakeInterBroker()

    async def scenario() -> None:
        fetcher = ReplicaFetcher(ME, LEADER, lambda _: LEADER_ADDRESS, FETCHER_CONFIG, inter_broker)
        try:
            fetcher.follow(offline)
            fetcher.follow(healthy)
            await until(lambda: len(inter_broker.fetched(LEADER_ADDRESS, "t", 1)) >= 10, "fetches of t-1")
        finally:
            await fetcher.close()

    with caplog.at_level(logging.INFO, logger="ember.ingest.replica_fetcher"):
        run(scenario())
    assert inter_broker.fetched(LEADER_ADDRESS, "t", 0) == []
    lines = [r for r in records(caplog, "ember.ingest.replica_fetcher") if "t-0" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.ERROR and "offline" in lines[0].getMessage()


def test_a_replica_fetcher_left_with_only_offline_logs_waits_instead_of_spinning(
        make_partition: MakePartition, monkeypatch: pytest.MonkeyPatch) -> None:
    partition = following(make_partition())
    take_offline(monkeypatch, partition.log)
    inter_broker = FakeInterBroker()

    async def scenario() -> None:
        fetcher = ReplicaFetcher(ME, LEADER, lambda _: LEADER_ADDRESS, FETCHER_CONFIG, inter_broker)
        try:
            fetcher.follow(partition)
            await asyncio.sleep(0.2)   # 20 back-offs
            assert not fetcher._task.done()
        finally:
            await fetcher.close()

    run(scenario())
    assert inter_broker.requests == [] and inter_broker.clients == []


def test_a_follower_append_that_takes_the_log_offline_is_counted_and_the_partition_no_longer_fetched(
        make_partition: MakePartition, metrics: BrokerMetrics, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """flush.messages=1: the follower append fsyncs, the fsync fails, the log goes offline."""
    failing, healthy = following(make_partition(**{"flush.messages": "1"})), following(make_partition())
    fail_for(monkeypatch, "fsync", failing.log.directory)
    inter_broker = FakeInterBroker(leader_with_records("t", 0))

    async def scenario() -> None:
        fetcher = ReplicaFetcher(ME, LEADER, lambda _: LEADER_ADDRESS, FETCHER_CONFIG, inter_broker)
        try:
            fetcher.follow(failing)
            fetcher.follow(healthy)
            await until(lambda: failing.log.offline, "the failed append")
            fetched = len(inter_broker.fetched(LEADER_ADDRESS, "t", 0))
            before = len(inter_broker.fetched(LEADER_ADDRESS, "t", 1))
            await until(lambda: len(inter_broker.fetched(LEADER_ADDRESS, "t", 1)) >= before + 10, "fetches of t-1")
            assert len(inter_broker.fetched(LEADER_ADDRESS, "t", 0)) == fetched
        finally:
            await fetcher.close()

    with caplog.at_level(logging.INFO, logger="ember.ingest.replica_fetcher"):
        run(scenario())
    assert storage_errors(metrics, "replication") == 1
    lines = [r for r in records(caplog, "ember.ingest.replica_fetcher") if "t-0" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.ERROR and lines[0].exc_info is None
    assert "offline" in lines[0].getMessage() and str(failing.log.directory) in lines[0].getMessage()


def test_a_follower_append_refused_by_a_full_disk_takes_the_log_offline_at_once(
        make_partition: MakePartition, metrics: BrokerMetrics, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """ENOSPC: the append is undone and the log taken offline, so the controller drops this
    replica from the ISR at once (acks=all producers would otherwise wait replica.lag.time.max.ms
    for a follower that cannot write); counted and logged once, and no longer fetched."""
    partition = following(make_partition())
    fail_for(monkeypatch, "pwritev", partition.log.directory, errno.ENOSPC)
    inter_broker = FakeInterBroker(leader_with_records("t", 0))

    async def scenario() -> None:
        fetcher = ReplicaFetcher(ME, LEADER, lambda _: LEADER_ADDRESS, FETCHER_CONFIG, inter_broker)
        try:
            fetcher.follow(partition)
            await until(lambda: partition.log.offline, "the log offline")
            fetches = len(inter_broker.fetched(LEADER_ADDRESS, "t", 0))
            await asyncio.sleep(0.2)    # about 20 back-offs of the fetcher
            assert len(inter_broker.fetched(LEADER_ADDRESS, "t", 0)) == fetches
        finally:
            await fetcher.close()

    with caplog.at_level(logging.INFO, logger="ember.ingest.replica_fetcher"):
        run(scenario())
    assert partition.log.log_end_offset == 0 and storage_errors(metrics, "replication") == 1
    lines = [(r.levelno, r.exc_info) for r in records(caplog, "ember.ingest.replica_fetcher")
             if "t-0" in r.getMessage()]
    assert lines == [(logging.ERROR, None)]
