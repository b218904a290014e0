"""The broker's log cleaner (ember.ingest.log_cleaner): stopping interrupts a cleaning held by the
I/O throttle (a broker stops in bounded time), a log whose cleaning fails is set aside while
the others are cleaned, and the transaction markers it removes are counted."""
from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

import pyarrow as pa
import pytest

from ember.ingest.log_cleaner import IoThrottle, LogCleaner, Stopped
from ember.log import Log, LogConfig
from ember.record import build_batch
from ember.record.control import Marker
from ember.server.cleaner_metrics import LogCleanerCollector


@dataclass
class Replica:             # what the cleaner reads of a Partition
    topic: str
    index: int
    log: Log


def test_stopping_interrupts_a_cleaning_held_by_the_throttle() -> None:
    throttle = IoThrottle(bytes_per_second=1.0)
    outcome: list[BaseException] = []

    def clean() -> None:
        try:
            throttle(2 * IoThrottle.STEP)      # two MiB at one byte a second: held for weeks
        except BaseException as exc:         # noqa: BLE001 - the outcome is what is checked
            outcome.append(exc)
    cleaning = threading.Thread(target=clean)
    cleaning.start()
    cleaning.join(0.3)
    assert cleaning.is_alive()                # held
    throttle.stopping.set()
    cleaning.join(10)
    assert not cleaning.is_alive() and len(outcome) == 1 and isinstance(outcome[0], Stopped)


def test_a_stopped_throttle_refuses_the_next_batch_and_an_unlimited_one_never_waits() -> None:
    unlimited = IoThrottle(bytes_per_second=float("inf"))
    for _ in range(100):
        unlimited(IoThrottle.STEP)
    unlimited.stopping.set()
    with pytest.raises(Stopped):
        unlimited(1)


def test_a_log_whose_cleaning_fails_is_set_aside_and_the_others_are_cleaned(tmp_path) -> None:
    config = LogConfig.from_properties({"cleanup.policy": "compact", "segment.bytes": 1024,
                                        "min.cleanable.dirty.ratio": "0.01"})
    replicas = []
    for name in ("damaged", "fine"):
        log = Log.open(tmp_path / f"{name}-0", config)
        for round_ in range(6):
            log.append_as_leader(build_batch([(b"k%d" % k, b"v%d" % round_) for k in range(4)]), 0)
        log.update_high_watermark(log.log_end_offset)
        replicas.append(Replica(name, 0, log))
    first = replicas[0].log._segments[0].path
    with open(first, "r+b") as f:                # flip a payload byte: that batch's CRC fails
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))

    async def run() -> LogCleaner:
        cleaner = LogCleaner(lambda: replicas, threads=1, dedupe_buffer_bytes=1 << 20, backoff_ms=20,
                             io_max_bytes_per_second=float("inf"))
        cleaner.start()
        try:
            for _ in range(500):
                if cleaner.state.uncleanable == 1 and cleaner.state.cleanings >= 1:
                    break
                await asyncio.sleep(0.01)
        finally:
            await cleaner.stop()
        return cleaner
    cleaner = asyncio.run(run())
    try:
        assert cleaner.state.uncleanable == 1 and cleaner.state.dead_workers == 0
        assert replicas[0].log.first_dirty_offset == 0 and replicas[1].log.first_dirty_offset > 0
        assert cleaner.state.cleanings >= 1
    finally:
        for replica in replicas:
            replica.log.close()


def test_the_cleaner_counts_the_transaction_markers_it_removes(tmp_path) -> None:
    """A committed transaction whose record a later write superseded: the first cleaning stamps its
    marker (delete.retention.ms 0: the horizon is now), the next one removes it, and
    ``ember_log_logcleaner_removed_markers_total`` says so."""
    config = LogConfig.from_properties({"cleanup.policy": "compact", "segment.bytes": 400, "delete.retention.ms": "0",
                                        "min.cleanable.dirty.ratio": "0.01"})

    def txn(key: bytes, sequence: int) -> bytes:
        return build_batch(pa.table({"key": [key], "value": [b"v"]}), producer_id=7, producer_epoch=0,
                           base_sequence=sequence, transactional=True)

    log = Log.open(tmp_path / "t-0", config)
    log.append_as_leader(txn(b"k", 0), 0)
    log.append_marker(Marker(7, 0, True, 0), 0)
    log.append_as_leader(txn(b"other", 1), 0)         # the first marker is not the producer's last one
    log.append_marker(Marker(7, 0, True, 0), 0)
    log.append_as_leader(build_batch([(b"k", b"superseding")]), 0)

    async def run() -> LogCleaner:
        cleaner = LogCleaner(lambda: [Replica("t", 0, log)], threads=1, dedupe_buffer_bytes=1 << 20, backoff_ms=20,
                             io_max_bytes_per_second=float("inf"))
        cleaner.start()
        try:
            for _ in range(200):
                if cleaner.state.markers_removed:
                    break
                log.append_as_leader(build_batch([(b"filler", b"f" * 60)]), 0)   # dirty again: cleaned again
                log.update_high_watermark(log.log_end_offset)
                await asyncio.sleep(0.02)
        finally:
            await cleaner.stop()
        return cleaner
    try:
        cleaner = asyncio.run(asyncio.wait_for(run(), 30))
        assert cleaner.state.markers_removed == 1
        counted = {m.name: m.samples[0].value for m in LogCleanerCollector(cleaner).collect()}
        assert counted["ember_log_logcleaner_removed_markers"] == 1
    finally:
        log.close()
