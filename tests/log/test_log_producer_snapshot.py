"""A clean close saves producer state and the transaction index; the next open loads them instead
of reading every batch, and never trusts a snapshot that may not match the log."""
from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_log_cleaner import clean, fill
from test_log_transactions import marker, txn_batch

from ember.log import LogConfig, cleaner, producer_snapshot
from ember.log.log import Log
from ember.log.producer_snapshot import SNAPSHOT, ProducerSnapshot
from ember.log.txn_index import AbortedTxn


def state(log: Log) -> tuple:
    """Everything producer state and the transaction index answer (duplicates: the cached batches)."""
    producers, ongoing = log._producers.entries()
    return (sorted(log.active_producers()), dict(ongoing), dict(producers), log.open_transactions(),
            log.aborted_transactions(0, 1 << 40), log.last_stable_offset, log.high_watermark)


def transactional_log(log: Log) -> Log:
    log.append_as_leader(txn_batch(1, 0, 0, transactional=False), 0)   # 0-1: plain idempotent
    log.append_as_leader(txn_batch(7, 0, 0), 0)                         # 2-3: aborted below
    log.append_as_leader(txn_batch(8, 2, 0), 0)                         # 4-5: committed below
    log.append_marker(marker(7, commit=False), 0)                        # 6
    log.update_high_watermark(log.log_end_offset)
    log.append_marker(marker(8, commit=True, epoch=2, coordinator_epoch=3), 0)   # 7: not replicated yet
    log.append_as_leader(txn_batch(9, 0, 0), 0)                         # 8-9: still open
    return log


def test_a_clean_close_reopens_from_the_snapshot_without_reading_a_batch(open_log, log_dir, monkeypatch):
    log = transactional_log(open_log())
    before = state(log)
    log.close()
    assert (log_dir / SNAPSHOT).exists()

    def no_scan(self: Log):
        raise AssertionError("read the batch headers despite a snapshot")
    monkeypatch.setattr(Log, "_iter_headers", no_scan)
    again = open_log()
    assert state(again) == before
    assert again.open_transactions() == {9: 8} and again.aborted_transactions(0, 10) == [AbortedTxn(7, 2)]
    assert again.last_stable_offset == 4     # producer 8's marker (7) is not below the high watermark
    assert not (log_dir / SNAPSHOT).exists(), "a snapshot must not outlive the open that read it"
    with pytest.raises(Exception, match="sequence"):
        again.append_as_leader(txn_batch(1, 0, 5, transactional=False), 0)   # the sequences came back too


def test_a_crash_after_reopening_rebuilds_from_the_segments(open_log, log_dir, tmp_path):
    log = transactional_log(open_log())
    log.close()
    again = open_log()
    again.append_marker(marker(9, commit=False), 0)       # changes the state the snapshot held
    again.flush()
    crashed = tmp_path / "crashed"
    shutil.copytree(log_dir, crashed)                      # the files as a crash would leave them
    expected = state(again)
    recovered = Log.open(crashed)
    try:
        assert state(recovered)[:6] == expected[:6]
        assert recovered.aborted_transactions(0, 20) == [AbortedTxn(7, 2), AbortedTxn(9, 8)]
    finally:
        recovered.close()


def test_a_snapshot_at_another_offset_or_torn_is_not_used(open_log, log_dir):
    log = transactional_log(open_log())
    expected = state(log)
    end = log.log_end_offset
    log.close()
    producer_snapshot.write(log_dir, ProducerSnapshot(end + 5, log.latest_epoch, {}, {}, []))   # not this log's end
    elsewhere = open_log()
    assert state(elsewhere)[:6] == expected[:6]
    elsewhere.close()
    (log_dir / SNAPSHOT).write_text("0\n1\n0 1 2 3")                          # torn
    assert state(open_log())[:6] == expected[:6]


_steps = st.lists(st.tuples(st.sampled_from(["data", "plain", "commit", "abort", "replicate", "bump"]),
                            st.integers(min_value=1, max_value=3)), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps)
def test_the_snapshot_holds_what_a_rebuild_from_the_segments_finds(open_log, log_dir, tmp_path_factory, steps):
    log = open_log(segment_bytes=300)
    log.truncate_fully_and_start_at(0)
    sequences: dict[int, int] = {}
    epochs: dict[int, int] = {}
    for action, pid in steps:
        epoch = epochs.get(pid, 0)
        if action in ("data", "plain"):
            seq = sequences.get(pid, 0)
            try:
                log.append_as_leader(txn_batch(pid, epoch, seq, transactional=action == "data"), 0)
                sequences[pid] = seq + 2
            except Exception:       # a batch the state refuses (a newer epoch while a transaction is open)
                pass
        elif action == "replicate":
            log.update_high_watermark(log.log_end_offset)
        elif action == "bump":     # transaction version 2: the marker ends the transaction at the next epoch
            log.append_marker(marker(pid, commit=True, epoch=epoch + 1), 0)
            epochs[pid], sequences[pid] = epoch + 1, 0
        else:
            log.append_marker(marker(pid, commit=action == "commit", epoch=epoch), 0)
    log.close()
    rebuilt_dir = tmp_path_factory.mktemp("rebuilt") / "topic-0"
    shutil.copytree(log_dir, rebuilt_dir)
    (rebuilt_dir / SNAPSHOT).unlink(missing_ok=True)     # none when nothing was written
    rebuilt = Log.open(rebuilt_dir)
    try:
        loaded = open_log(segment_bytes=300)
        assert state(loaded) == state(rebuilt)
        loaded.close()
    finally:
        rebuilt.close()


def test_a_cleaning_finished_on_open_discards_the_snapshot(log_dir, clock, monkeypatch):
    """A committed cleaning whose swap the open finishes changed the segments after the snapshot
    was taken: the state is rebuilt from them."""
    config = LogConfig.from_properties({"segment.bytes": 2048, "cleanup.policy": "compact"})
    log = Log.open(log_dir, config, now_ms=clock)
    fill(log, rounds=10, keys=10)
    log.flush()
    replaces = os.replace

    def crash_after_the_commit(src, dst, *a, **kw):
        if cleaner.SWAP_SUFFIX in str(src):
            raise RuntimeError("crash")
        return replaces(src, dst, *a, **kw)
    monkeypatch.setattr(os, "replace", crash_after_the_commit)
    with pytest.raises(RuntimeError):
        clean(log)
    monkeypatch.undo()
    log.close()
    assert (log_dir / SNAPSHOT).exists()
    rebuilds = []
    rebuild = Log._rebuild_from_headers
    monkeypatch.setattr(Log, "_rebuild_from_headers", lambda self, **kw: (rebuilds.append(1), rebuild(self, **kw)))
    reopened = Log.open(log_dir, config, now_ms=clock)
    try:
        assert rebuilds and not (log_dir / SNAPSHOT).exists()
    finally:
        reopened.close()
