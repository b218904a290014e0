"""The log cleaner on one log: each key's latest record kept at its offset, tombstones, lags, the
high watermark, the key map's memory bound, both batch formats, reopening and crashes mid-clean."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_helpers import FakeClock, kafka_batch, table_batch

from ember.log import Log, LogConfig, cleaner, read_offset_range
from ember.record.batch import decode_payload, iter_batches

HOUR = 3600 * 1000
BIG = 1 << 30
Record = tuple[int, Optional[bytes], Optional[bytes]]   # offset, key, value


def write(log: Log, pairs: list[tuple[bytes, Optional[bytes]]], *, kafka: bool = False, timestamp: int = 1_000) -> None:
    table = pa.table({"key": pa.array([k for k, _ in pairs], pa.binary()),
                      "value": pa.array([v for _, v in pairs], pa.binary())})
    log.append_as_leader(kafka_batch(table, timestamp=timestamp) if kafka else table_batch(table, timestamp=timestamp), 0)


def records(log: Log) -> list[Record]:
    """Every record from the log start, through Log.read as the broker serves them."""
    out: list[Record] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read_bytes()
        for header, raw in iter_batches(data):
            columns = decode_payload(header, raw)
            out += [(o, k, v) for o, k, v in zip(columns.column("offset").to_pylist(), columns.column("key").to_pylist(),
                                                   columns.column("value").to_pylist()) if o >= offset]
            offset = header.last_offset + 1
    return out


def latest(written: list[Record]) -> dict[bytes, Record]:
    found: dict[bytes, Record] = {}
    for record in written:
        if record[1] is not None:
            found[record[1]] = record
    return found


def fill(log: Log, rounds: int, keys: int, *, kafka_every: int = 0, timestamp: int = 1_000) -> list[Record]:
    """``rounds`` batches of ``keys`` keys each, every value naming its round; sealed and committed."""
    written: list[Record] = []
    for r in range(rounds):
        pairs = [(b"k%d" % k, b"v%d-%d" % (k, r)) for k in range(keys)]
        start = log.log_end_offset
        write(log, pairs, kafka=bool(kafka_every) and r % kafka_every == 0, timestamp=timestamp)
        written += [(start + i, k, v) for i, (k, v) in enumerate(pairs)]
    log.update_high_watermark(log.log_end_offset)
    return written


def clean(log: Log, **kw) -> Optional[cleaner.CleanStats]:
    return cleaner.clean(log, dedupe_buffer_bytes=kw.pop("budget", BIG), **kw)


@pytest.mark.parametrize("kafka_every", [0, 1, 2], ids=["ember batches", "Kafka batches", "both"])
def test_a_cleaning_keeps_each_keys_latest_record_at_its_offset(open_log, kafka_every):
    log = open_log(segment_bytes=1024, cleanup_policy="compact")
    written = fill(log, rounds=12, keys=20, kafka_every=kafka_every)
    assert len(log._segments) > 3
    active = log._segments[-1].base_offset
    stats = clean(log)
    assert stats is not None and stats.segments >= 1 and stats.records_kept < stats.records_read
    after = records(log)
    assert [o for o, _, _ in after] == sorted(o for o, _, _ in after)
    assert set(after) <= set(written)                                  # nothing made up, offsets unchanged
    assert set(latest(written).values()) <= set(after)                 # every key's final value is there
    cleaned = [r for r in after if r[0] < active]
    assert len(cleaned) < len([r for r in written if r[0] < active]) / 2
    assert [r for r in after if r[0] >= active] == [r for r in written if r[0] >= active]   # active untouched
    assert log.first_dirty_offset == active
    assert log.log_end_offset == written[-1][0] + 1


def test_superseded_records_go_and_gaps_are_read_by_every_reader(open_log, log_dir):
    log = open_log(segment_bytes=4096, cleanup_policy="compact")
    written = fill(log, rounds=12, keys=20, kafka_every=2)
    end = log.log_end_offset
    write(log, [(b"tail", b"x")])             # rolls nothing: the active segment stays as it is
    clean(log)
    after = records(log)
    sealed_end = log._segments[-1].base_offset
    for key, record in latest(written).items():
        assert not [r for r in after if r[1] == key and r[0] < record[0] and record[0] < sealed_end], key
    log.flush()
    direct = pa.Table.from_batches(list(read_offset_range(log_dir, 0, end)))
    assert direct.column("offset").to_pylist() == [o for o, _, _ in after if o < end]
    middle = after[len(after) // 2][0]
    assert records_from(log, middle - 1)[0][0] >= middle - 1


def records_from(log: Log, offset: int) -> list[Record]:
    data = log.read(offset, 1 << 20).read_bytes()
    out = []
    for header, raw in iter_batches(data):
        columns = decode_payload(header, raw)
        out += [r for r in zip(columns.column("offset").to_pylist(), columns.column("key").to_pylist(),
                               columns.column("value").to_pylist()) if r[0] >= offset]
    return out


def test_a_delete_keeps_its_tombstone_for_delete_retention_ms(open_log, clock):
    log = open_log(segment_bytes=1024, cleanup_policy="compact", delete_retention_ms=HOUR)
    fill(log, rounds=3, keys=5)
    write(log, [(b"k1", None)])
    fill(log, rounds=6, keys=1)                # key k0 only: rolls segments past the tombstone
    tombstone = [r for r in records(log) if r[1] == b"k1"][-1]
    assert tombstone[2] is None
    clean(log)
    assert [r for r in records(log) if r[1] == b"k1"] == [tombstone]       # older k1 records gone, delete kept
    clock.now += HOUR - 1
    fill(log, rounds=2, keys=1)
    clean(log)
    assert [r for r in records(log) if r[1] == b"k1"] == [tombstone]
    clock.now += 2
    fill(log, rounds=2, keys=1)
    clean(log)
    assert [r for r in records(log) if r[1] == b"k1"] == []


def test_cleaning_stops_at_the_high_watermark_and_min_compaction_lag(open_log, clock):
    log = open_log(segment_bytes=1024, cleanup_policy="compact")
    fill(log, rounds=8, keys=5, timestamp=clock.now)
    log.update_high_watermark(log._segments[1].next_offset)
    clean(log)
    assert log.first_dirty_offset == log._segments[1].next_offset
    log.update_high_watermark(log.log_end_offset)
    log.update_config(log.config.overridden({"min.compaction.lag.ms": HOUR}))
    assert log.cleanable() is None or log.cleanable().first_dirty >= log.cleanable().end
    clock.now += HOUR + 1
    assert log.cleanable() is not None and log.cleanable().first_dirty < log.cleanable().end


def test_only_compacted_logs_are_cleanable(open_log):
    log = open_log(segment_bytes=1024)
    fill(log, rounds=8, keys=5)
    assert log.cleanable() is None and clean(log) is None


def test_a_small_key_map_cleans_in_passes_to_the_same_result(open_log, tmp_path, clock):
    log = open_log(segment_bytes=2048, cleanup_policy="compact")
    written = fill(log, rounds=16, keys=30)
    ends = []
    while (stats := clean(log, budget=1)) is not None:
        ends.append(stats.end)
        assert len(ends) < 100
    assert len(ends) > 2 and ends == sorted(ends)
    assert set(latest(written).values()) <= set(records(log))


def test_records_without_a_key_written_before_compaction_are_dropped(open_log):
    log = open_log(segment_bytes=1024)
    write(log, [(b"a", b"1"), (None, b"keyless")])
    fill(log, rounds=6, keys=3)
    log.update_config(log.config.overridden({"cleanup.policy": "compact"}))
    clean(log)
    assert all(k is not None for _, k, _ in records(log))


def test_every_segment_still_ends_where_the_next_begins_and_producers_keep_their_last_batch(open_log):
    log = open_log(segment_bytes=1024, cleanup_policy="compact")
    fill(log, rounds=6, keys=3)
    table = pa.table({"key": [b"k0"], "value": [b"from a producer"]})
    log.append_as_leader(kafka_batch(table, producer_id=7, producer_epoch=0, base_sequence=0), 0)
    fill(log, rounds=6, keys=3)
    ends = [s.next_offset for s in log._segments[:-1]]
    clean(log)
    assert [s.next_offset for s in log._segments[:len(ends)]] == ends
    for segment, following in zip(log._segments, log._segments[1:]):
        assert segment.next_offset == following.base_offset
    assert b"from a producer" not in [v for _, _, v in records(log)]
    log.close()
    reopened = Log.open(log.directory, log.config)
    try:
        retry = kafka_batch(table, producer_id=7, producer_epoch=0, base_sequence=0)
        assert reopened.append_as_leader(retry, 0).duplicate        # the producer's state survived the cleaning
    finally:
        reopened.close()


def test_cleaned_segments_are_merged_up_to_segment_bytes(open_log):
    log = open_log(segment_bytes=2048, cleanup_policy="compact", delete_retention_ms=0)   # no tombstone clock
    written = fill(log, rounds=120, keys=8, kafka_every=1)
    clean(log)
    cleaned_once = len(log._segments)
    written += fill(log, rounds=12, keys=8, kafka_every=1)     # dirt past a roll: the next cleaning runs
    assert len(log._segments) > cleaned_once
    clean(log)
    assert len(log._segments) <= cleaned_once / 2
    assert all(s.size <= 2048 for s in log._segments[:-1])
    for segment, following in zip(log._segments, log._segments[1:]):
        assert segment.next_offset == following.base_offset
    assert set(latest(written).values()) <= set(records(log)) and set(records(log)) <= set(written)


def test_a_cleaned_log_reopens_as_cleaned(open_log, log_dir):
    log = open_log(segment_bytes=2048, cleanup_policy="compact")
    fill(log, rounds=10, keys=10)
    clean(log)
    before, first_dirty = records(log), log.first_dirty_offset
    log.close()
    reopened = open_log(segment_bytes=2048, cleanup_policy="compact")
    assert records(reopened) == before and reopened.first_dirty_offset == first_dirty
    assert not [p for p in log_dir.iterdir() if p.is_dir()]


def test_a_reader_holding_a_slice_of_the_old_segment_reads_the_old_bytes(open_log):
    log = open_log(segment_bytes=2048, cleanup_policy="compact", file_delete_delay_ms=HOUR)
    fill(log, rounds=10, keys=10)
    held = log.read(0, 1 << 20)
    expected = held.read_bytes()
    clean(log)
    assert held.read_bytes() == expected
    assert log.read(0, 1 << 20).read_bytes() != expected


def test_replicas_cleaning_at_different_times_serve_the_same_records_above_what_each_cleaned(tmp_path, clock):
    config = LogConfig.from_properties({"segment.bytes": 1024, "cleanup.policy": "compact"})
    replicas = [Log.open(tmp_path / name / "t-0", config, now_ms=clock) for name in ("a", "b")]
    try:
        written = []
        for step in range(3):
            for replica in replicas:              # a follower copies the leader's batches as they are
                part = fill(replica, rounds=4, keys=5, kafka_every=2)
            written += part
            clean(replicas[step % 2])             # each cleans on its own schedule
        above = max(r.first_dirty_offset for r in replicas)
        assert above > 0
        reads = [[r for r in records(replica) if r[0] >= above] for replica in replicas]
        assert reads[0] == reads[1]
        for replica in replicas:
            assert set(latest(written).values()) <= set(records(replica))
    finally:
        for replica in replicas:
            replica.close()


# --- crashes ------------------------------------------------------------------------------------

class Crash(Exception):
    pass


CRASH_POINTS = ["before the commit", "after the commit", "old files renamed", "half the files moved",
                "before the checkpoint"]


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_crash_anywhere_in_a_cleaning_reopens_to_old_or_cleaned_segments(log_dir, clock, monkeypatch, point):
    config = LogConfig.from_properties({"segment.bytes": 2048, "cleanup.policy": "compact"})
    log = Log.open(log_dir, config, now_ms=clock)
    written = fill(log, rounds=10, keys=10)
    log.flush()
    old = records(log)
    renames, replaces = os.rename, os.replace
    moved = []

    def rename(src, dst, *a, **kw):
        if point == "before the commit" and str(src).endswith(cleaner.CLEANING_SUFFIX):
            raise Crash
        if point == "old files renamed" and str(dst).endswith(".deleted") and moved == []:
            moved.append(dst)
        return renames(src, dst, *a, **kw)

    def replace(src, dst, *a, **kw):
        if point == "after the commit" and cleaner.SWAP_SUFFIX in str(src):
            raise Crash
        if point == "old files renamed" and moved:
            raise Crash
        if point == "half the files moved" and cleaner.SWAP_SUFFIX in str(src) and str(src).endswith(".timeindex"):
            raise Crash
        return replaces(src, dst, *a, **kw)

    def set_first_dirty(offset):
        if point == "before the checkpoint":
            raise Crash
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(log, "set_first_dirty", set_first_dirty)
    with pytest.raises(Crash):
        clean(log)
    monkeypatch.undo()
    for segment in log._segments:          # the crashed process's files, closed without a flush
        segment.close()
    reopened = Log.open(log_dir, config, now_ms=clock)
    try:
        after = records(reopened)
        assert set(after) <= set(old) and set(latest(written).values()) <= set(after)
        assert not [p for p in log_dir.iterdir() if p.is_dir()]
        assert clean(reopened) is not None
        assert set(latest(written).values()) <= set(records(reopened))
    finally:
        reopened.close()


# --- property: any writes and cleans keep each key's final value, in order, at its offset ------

_ops = st.lists(st.one_of(
    st.tuples(st.just("write"), st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]),
                                                   st.none() | st.binary(min_size=1, max_size=30)),
                                         min_size=1, max_size=12), st.booleans()),
    st.tuples(st.just("clean"), st.integers(1, 4096), st.booleans())), min_size=1, max_size=30)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(ops=_ops)
def test_any_writes_and_cleans_keep_every_keys_final_value_in_order_at_its_offset(tmp_path_factory, ops):
    directory: Path = tmp_path_factory.mktemp("prop") / "t-0"
    clock = FakeClock()
    log = Log.open(directory, LogConfig.from_properties({"segment.bytes": 600, "cleanup.policy": "compact",
                                                         "delete.retention.ms": 0}), now_ms=clock)
    written: list[Record] = []
    try:
        for op in ops:
            if op[0] == "write":
                start = log.log_end_offset
                write(log, op[1], kafka=op[2])
                written += [(start + i, k, v) for i, (k, v) in enumerate(op[1])]
                log.update_high_watermark(log.log_end_offset)
            else:
                clock.now += 1
                clean(log, budget=op[1])
            after = records(log)
            assert [r[0] for r in after] == sorted(r[0] for r in after)
            assert set(after) <= set(written)
            for key, record in latest(written).items():
                if record[2] is not None:
                    assert record in after, (key, record)
                assert not [r for r in after if r[1] == key and r[0] > record[0]]
    finally:
        log.close()


def test_a_consumer_read_starts_past_the_empty_batches_a_cleaning_left(open_log):
    log = open_log(segment_bytes=1024, cleanup_policy="compact")
    fill(log, rounds=8, keys=3)
    clean(log)

    def first_batch(**kw):
        return next(iter_batches(log.read(0, 1 << 20, **kw).read_bytes()))[0]
    assert first_batch().record_count == 0                       # a follower copies the log as it is
    skipped = first_batch(skip_empty=True)
    assert skipped.record_count > 0 and skipped.base_offset > 0
    only_empty = first_batch(skip_empty=True, max_offset=skipped.base_offset)
    assert only_empty.record_count == 0                           # nothing else below: the reader still moves on


# --- a real crash: the cleaning process killed (SIGKILL) at each of its file-system steps ----------

CRASH_CHILD = Path(__file__).with_name("cleaner_crash_child.py")


@pytest.mark.parametrize("merging", [False, True], ids=["first cleaning", "merging cleaned segments"])
def test_a_cleaning_killed_at_any_file_system_step_reopens_consistent(tmp_path, clock, merging):
    import shutil
    import subprocess
    import sys

    from cleaner_crash_child import CONFIG
    original = tmp_path / "original" / "t-0"
    log = Log.open(original, CONFIG, now_ms=clock)
    written = fill(log, rounds=4, keys=6, kafka_every=2)
    if merging:                  # cleaned once: the killed cleaning merges the small cleaned segments
        clean(log)
        written += fill(log, rounds=2, keys=6, kafka_every=2)
    segments = len(log._segments)
    log.close()
    kill_at, finished = 1, False
    while not finished:
        assert kill_at < 400, "the cleaning never finished"
        directory = tmp_path / f"kill-{kill_at}" / "t-0"
        shutil.copytree(original, directory)
        child = subprocess.run([sys.executable, str(CRASH_CHILD), str(directory), str(kill_at)],
                               capture_output=True, text=True, timeout=120)
        finished = child.returncode == 0
        assert finished or child.returncode == -9, child.stderr[-2000:]
        reopened = Log.open(directory, CONFIG, now_ms=clock)
        try:
            after = records(reopened)
            assert set(after) <= set(written), kill_at
            assert set(latest(written).values()) <= set(after), kill_at
            assert [o for o, _, _ in after] == sorted(o for o, _, _ in after)
            assert not [p for p in directory.iterdir() if p.is_dir()], kill_at
            if finished:
                assert (len(reopened._segments) < segments) == merging
        finally:
            reopened.close()
        shutil.rmtree(directory.parent)
        kill_at += 1
    assert kill_at > 10          # the cleaning had steps to kill it at


def test_a_log_is_due_by_its_dirty_ratio_or_once_a_dirty_record_waited_max_compaction_lag(open_log, clock):
    log = open_log(segment_bytes=1024, cleanup_policy="compact")
    fill(log, rounds=4, keys=60, timestamp=clock.now)
    cleanable = log.cleanable()
    assert cleanable is not None and cleanable.dirty_ratio == 1.0
    assert cleanable.due(0.5, 1 << 62, clock.now) and not cleanable.due(1.0 + 1e-9, 1 << 62, clock.now)
    clean(log)
    fill(log, rounds=1, keys=2, timestamp=clock.now)          # a little dirt on a clean log
    write(log, [(b"roll", b"x" * 2000)], timestamp=clock.now)
    log.update_high_watermark(log.log_end_offset)
    cleanable = log.cleanable()
    ratio = cleanable.dirty_ratio
    assert 0 < ratio < 1 and cleanable.clean_bytes > 0
    assert cleanable.due(ratio, HOUR, clock.now) and not cleanable.due(ratio + 0.01, HOUR, clock.now)
    assert cleanable.due(ratio + 0.01, HOUR, clock.now + HOUR)    # max.compaction.lag.ms passed


def test_a_segment_retention_takes_under_a_cleaning_only_ends_that_cleaning(open_log, monkeypatch):
    log = open_log(segment_bytes=1024, cleanup_policy="compact,delete")
    written = fill(log, rounds=8, keys=5)
    real = cleaner._batches

    def batches_then_retention(segment, throttle):
        if segment is log._segments[1]:
            log.delete_records_before(segment.next_offset)       # the first segments go meanwhile
        yield from real(segment, throttle)
    monkeypatch.setattr(cleaner, "_batches", batches_then_retention)
    assert clean(log) is None
    monkeypatch.undo()
    assert clean(log) is not None
    assert set(records(log)) <= set(written)


def test_a_tombstone_beside_an_empty_batch_still_goes_after_delete_retention(open_log, clock):
    log = open_log(segment_bytes=1024, cleanup_policy="compact", delete_retention_ms=HOUR)
    write(log, [(b"k1", b"v")], kafka=True)
    write(log, [(b"k1", None)], kafka=True)                  # the delete of k1, mid-segment
    write(log, [(b"k0", b"old")], kafka=True)                # its segment's last batch: superseded below
    for round_ in range(40):                                 # k0 updates: roll on, past the segment
        write(log, [(b"k0", b"%d" % round_)], kafka=True)
    log.update_high_watermark(log.log_end_offset)
    clean(log)
    assert [r[2] for r in records(log) if r[1] == b"k1"] == [None]
    for _ in range(3):                                        # cleanings for other dirt, within the hour
        clock.now += HOUR // 4
        fill(log, rounds=12, keys=1, kafka_every=1)
        clean(log)
    assert [r[2] for r in records(log) if r[1] == b"k1"] == [None]
    for _ in range(2):                                        # and past it: the clock was never restarted
        clock.now += HOUR // 4
        fill(log, rounds=12, keys=1, kafka_every=1)
        clean(log)
    assert [r[2] for r in records(log) if r[1] == b"k1"] == []
