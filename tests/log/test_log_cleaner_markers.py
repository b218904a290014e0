"""The log cleaner removes transaction markers once it is safe: no batch of the marker's transaction
is left before it, and the delete horizon the cleaner stamped into it when it found it so has
passed. Everything read_committed readers, reopened logs and the aborted-transaction index see
stays the same as before the markers went."""
from __future__ import annotations

import shutil
from typing import Callable, Optional

import pyarrow as pa
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from log_helpers import kafka_batch
from test_log_transactions import keyed_txn_batch, marker

from ember.log import Log, LogConfig, cleaner, read_offset_range
from ember.log.log import AppendResult
from ember.log.txn_index import AbortedTxn
from ember.record.batch import check_batch, decode_payload, iter_batches
from ember.record.control import (
    AbortedFilter,
    delete_horizon,
    is_control,
    is_transactional,
    marker_batch,
    read_marker,
    with_delete_horizon,
)
from ember.record.header import BatchHeader
from ember.record.kafka_v2 import decode_records

HOUR = 3600 * 1000
CONFIG = {"segment_bytes": 300, "cleanup_policy": "compact", "delete_retention_ms": HOUR}


def plain_batch(key: bytes, value: bytes) -> bytes:
    return kafka_batch(pa.table({"key": pa.array([key], pa.binary()), "value": pa.array([value], pa.binary())}))


def plain(log: Log, key: bytes, value: bytes) -> None:
    log.append_as_leader(plain_batch(key, value), 0)


def seal(log: Log) -> None:
    """Roll the active segment (filler records of one key) and replicate everything."""
    segments = len(log._segments)
    while len(log._segments) == segments:
        plain(log, b"filler", b"f" * 40)
    log.update_high_watermark(log.log_end_offset)


def clean(log: Log, clock, *, advance: int = 0) -> Optional[cleaner.CleanStats]:
    """Move the clock by ``advance``, make the log dirty again (a later cleaning runs only then) and
    clean it."""
    clock.now += advance
    seal(log)
    return cleaner.clean(log, dedupe_buffer_bytes=1 << 30)


def batches(log: Log) -> list[tuple[BatchHeader, bytes]]:
    """Every stored batch from the log start, as the broker serves them."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        for header, raw in iter_batches(log.read(offset, 1 << 20).read_bytes()):
            out.append((header, bytes(raw)))
            offset = header.last_offset + 1
    return out


def marker_offsets(log: Log) -> list[int]:
    return [h.base_offset for h, _ in batches(log) if is_control(h)]


def read_committed(log: Log) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) below the last stable offset, filtered as a read_committed Fetch is:
    with the aborted transactions the log returns for the range."""
    end = log.last_stable_offset
    keep = AbortedFilter((a.producer_id, a.first_offset) for a in log.aborted_transactions(log.log_start_offset, end))
    out = []
    for header, raw in batches(log):
        if header.base_offset >= end or not keep.keep(header, raw):
            continue
        columns = decode_payload(header, raw)
        out += [r for r in zip(columns.column("offset").to_pylist(), columns.column("key").to_pylist(),
                               columns.column("value").to_pylist()) if r[0] < end]
    return out


def read_committed_direct(log: Log) -> list[tuple[int, bytes, bytes]]:
    """The same through the segment reader (Spark's direct path), which finds markers itself."""
    log.flush()
    out = []
    for batch in read_offset_range(log.directory, log.log_start_offset, log.last_stable_offset, committed=True):
        out += list(zip(batch.column("offset").to_pylist(), batch.column("key").to_pylist(),
                        batch.column("value").to_pylist()))
    return out


def later_transaction(log: Log, pid: int, key: bytes) -> None:
    """A committed transaction of ``pid`` on a key of its own: its earlier batches are no longer its
    last (the cleaner keeps each producer's last batch, and then its transaction's marker)."""
    seq = max((p.last_sequence + 1 for p in log.active_producers() if p.producer_id == pid), default=0)
    log.append_as_leader(keyed_txn_batch(pid, seq, [(key, b"later")]), 0)
    log.append_marker(marker(pid, commit=True), 0)


def latest(records: list[tuple[int, bytes, bytes]]) -> dict[bytes, tuple[int, bytes]]:
    return {k: (o, v) for o, k, v in records}


def test_a_committed_transactions_marker_goes_once_its_records_are_superseded_and_the_horizon_passed(open_log, clock):
    log = open_log(**CONFIG)
    log.append_as_leader(keyed_txn_batch(7, 0, [(b"k", b"first")]), 0)       # 0
    log.append_marker(marker(7, commit=True), 0)                              # 1
    log.append_as_leader(keyed_txn_batch(8, 0, [(b"k", b"second")]), 0)      # 2
    log.append_marker(marker(8, commit=True), 0)                              # 3
    later_transaction(log, 7, b"seven")
    stats = clean(log, clock)
    assert stats is not None and stats.markers_removed == 0
    assert 1 in marker_offsets(log)                     # its records went now: stamped, not removed
    stamped = {h.base_offset: delete_horizon(h) for h, _ in batches(log) if is_control(h)}
    assert stamped[1] == clock.now + HOUR and stamped[3] is None
    stats = clean(log, clock, advance=HOUR)
    assert stats is not None and stats.markers_removed == 1
    assert marker_offsets(log)[:1] == [3]
    assert latest(read_committed(log))[b"k"] == (2, b"second")


def test_an_aborted_transactions_marker_goes_after_its_records_and_leaves_the_aborted_index(open_log, clock):
    log = open_log(**CONFIG)
    log.append_as_leader(keyed_txn_batch(7, 0, [(b"k", b"kept")]), 0)        # 0
    log.append_marker(marker(7, commit=True), 0)                              # 1
    log.append_as_leader(keyed_txn_batch(8, 0, [(b"k", b"aborted")]), 0)     # 2
    log.append_as_leader(keyed_txn_batch(9, 0, [(b"j", b"other")]), 0)       # 3
    log.append_marker(marker(8, commit=False), 0)                             # 4
    log.append_marker(marker(9, commit=True), 0)                              # 5
    later_transaction(log, 8, b"eight")
    clean(log, clock)                                   # the aborted records go, the marker is stamped
    assert 4 in marker_offsets(log) and log.aborted_transactions(0, 100) == [AbortedTxn(8, 2)]
    clean(log, clock, advance=HOUR)
    assert 4 not in marker_offsets(log)
    assert log.aborted_transactions(0, 100) == []       # no stale entry: readers would drop 8's later batches
    assert {k: v for _, k, v in read_committed(log)} == {b"k": b"kept", b"j": b"other", b"eight": b"later",
                                                         b"filler": b"f" * 40}
    log.close()
    again = open_log(**CONFIG)
    assert again.aborted_transactions(0, 100) == [] and again.open_transactions() == {}


def test_a_marker_stays_while_a_record_of_its_transaction_remains_however_old(open_log, clock):
    log = open_log(**CONFIG)
    log.append_as_leader(keyed_txn_batch(7, 0, [(b"k", b"latest")]), 0)       # never superseded
    log.append_marker(marker(7, commit=True), 0)
    for _ in range(3):
        clean(log, clock, advance=10 * HOUR)
    assert 1 in marker_offsets(log)
    assert all(delete_horizon(h) is None for h, _ in batches(log) if is_control(h))


def test_records_of_the_transaction_in_a_segment_not_rewritten_keep_its_marker(open_log, clock):
    """The transaction's record sits in an earlier segment the cleaning leaves as it is; its marker,
    segments later, still sees it."""
    log = open_log(**CONFIG)
    log.append_as_leader(keyed_txn_batch(7, 0, [(b"k", b"latest")]), 0)       # 0: stays, its segment unchanged
    seal(log)
    for i in range(4):                                                        # other producers' transactions
        log.append_as_leader(keyed_txn_batch(20 + i, 0, [(b"x", b"v%d" % i)]), 0)
        log.append_marker(marker(20 + i, commit=True), 0)
    at = log.append_marker(marker(7, commit=True), 0).first_offset
    for _ in range(3):
        clean(log, clock, advance=10 * HOUR)
    assert len(log._segments) > 2 and at in marker_offsets(log)
    assert latest(read_committed(log))[b"k"] == (0, b"latest")


def test_a_marker_stays_until_the_horizon_stamped_when_its_records_went(open_log, clock):
    """The horizon counts from the cleaning that found the transaction empty, not from the marker's
    own (old) timestamp: a reader that was behind has delete.retention.ms to pass the marker."""
    log = open_log(**CONFIG)
    log.append_as_leader(keyed_txn_batch(7, 0, [(b"k", b"first")]), 0)
    log.append_marker(marker(7, commit=True), 0)                              # 1
    clock.now += 100 * HOUR                                                   # the marker is very old now
    log.append_as_leader(keyed_txn_batch(8, 0, [(b"k", b"second")]), 0)
    log.append_marker(marker(8, commit=True), 0)
    later_transaction(log, 7, b"seven")
    clean(log, clock)
    assert 1 in marker_offsets(log)
    clean(log, clock, advance=HOUR - 1)
    assert 1 in marker_offsets(log)
    clean(log, clock, advance=1)
    assert 1 not in marker_offsets(log)


def test_markers_at_or_above_the_last_stable_offset_stay(open_log, clock):
    log = open_log(**CONFIG)
    log.append_as_leader(keyed_txn_batch(7, 0, [(b"k", b"first")]), 0)       # 0
    log.append_marker(marker(7, commit=True), 0)                              # 1
    log.append_as_leader(keyed_txn_batch(9, 0, [(b"open", b"v")]), 0)        # 2: holds the last stable offset
    log.append_as_leader(keyed_txn_batch(8, 0, [(b"k", b"second")]), 0)      # 3
    log.append_marker(marker(8, commit=True), 0)                              # 4
    log.append_as_leader(keyed_txn_batch(10, 0, [(b"k", b"third")]), 0)      # 5
    log.append_marker(marker(10, commit=True), 0)                             # 6
    for _ in range(3):
        clean(log, clock, advance=10 * HOUR)
    assert log.last_stable_offset == 2
    assert marker_offsets(log) == [1, 4, 6]            # 4's records are superseded too, but above the LSO
    log.append_marker(marker(9, commit=True), 0)
    later_transaction(log, 7, b"seven")
    later_transaction(log, 8, b"eight")
    for _ in range(2):
        clean(log, clock, advance=10 * HOUR)
    assert 1 not in marker_offsets(log) and 4 not in marker_offsets(log) and 6 in marker_offsets(log)


def test_a_removed_marker_that_ends_its_segment_leaves_a_placeholder_of_no_producer(open_log, clock):
    """A cleaned segment still ends where the next begins, so the batch at its end stays: an empty
    batch of no producer and no transaction, which no rebuild counts as the transaction's."""
    log = open_log(**CONFIG)
    log.append_as_leader(keyed_txn_batch(7, 0, [(b"k", b"first")]), 0)       # 0
    log.append_marker(marker(7, commit=False), 0)                             # 1: ends the segment
    with log._lock:
        log._roll()
    log.append_as_leader(keyed_txn_batch(8, 0, [(b"k", b"s" * 250)]), 0)     # too big to share a group with it
    log.append_marker(marker(8, commit=True), 0)
    later_transaction(log, 7, b"seven")
    clean(log, clock)
    clean(log, clock, advance=HOUR)
    stored = {h.base_offset: h for h, _ in batches(log)}
    assert 0 not in stored and log._segments[1].base_offset == 2
    placeholder = stored[1]
    assert (placeholder.record_count, placeholder.producer_id, placeholder.attributes) == (0, -1, 0)
    assert log.aborted_transactions(0, 100) == []
    log.close()
    again = open_log(**CONFIG)
    assert again.open_transactions() == {} and again.aborted_transactions(0, 100) == []


def test_a_producers_last_transaction_keeps_its_batch_and_marker(open_log, clock):
    """The last batch of each producer stays (empty if need be: its sequence), so its marker does."""
    log = open_log(**CONFIG)
    log.append_as_leader(keyed_txn_batch(7, 0, [(b"k", b"first")]), 0)       # 0: 7's last batch
    log.append_marker(marker(7, commit=True), 0)                              # 1
    log.append_as_leader(keyed_txn_batch(8, 0, [(b"k", b"second")]), 0)
    log.append_marker(marker(8, commit=True), 0)
    for _ in range(3):
        clean(log, clock, advance=10 * HOUR)
    stored = {h.base_offset: h for h, _ in batches(log)}
    assert stored[0].record_count == 0 and 1 in stored
    log.close()
    assert open_log(**CONFIG).open_transactions() == {}


def test_a_producers_last_marker_stays_so_a_reopened_log_keeps_its_epochs(open_log, clock):
    """A marker after the producer's last data batch carries its epoch (a coordinator that fenced it
    wrote it at the next one) and its coordinator epoch: a rebuild from the segments needs it."""
    log = open_log(**CONFIG)
    log.append_as_leader(keyed_txn_batch(7, 0, [(b"k", b"first")]), 0)                  # 0
    log.append_marker(marker(7, commit=False, epoch=1, coordinator_epoch=3), 0)          # 1: fenced, aborted
    log.append_as_leader(keyed_txn_batch(8, 0, [(b"k", b"second")]), 0)
    log.append_marker(marker(8, commit=True), 0)
    for _ in range(3):
        clean(log, clock, advance=10 * HOUR)
    assert 1 in marker_offsets(log)
    log.close()
    again = open_log(**CONFIG)
    producer = next(p for p in again.active_producers() if p.producer_id == 7)
    assert (producer.producer_epoch, producer.coordinator_epoch) == (1, 3)
    assert again.open_transactions() == {}


def test_a_producers_last_marker_goes_once_the_producer_expired(open_log, clock):
    log = open_log(**CONFIG, producer_id_expiration_ms=2 * HOUR)
    log.append_as_leader(keyed_txn_batch(7, 0, [(b"k", b"first")]), 0)                  # 0
    log.append_marker(marker(7, commit=False, epoch=1, coordinator_epoch=3), 0)          # 1: 7's last batch
    log.append_as_leader(keyed_txn_batch(8, 0, [(b"k", b"second")]), 0)
    log.append_marker(marker(8, commit=True), 0)
    clean(log, clock)                                   # stamped: its transaction's batch went
    clean(log, clock, advance=HOUR)
    log.apply_retention()
    assert 7 in {p.producer_id for p in log.active_producers()}
    assert [delete_horizon(h) is not None for h, _ in batches(log) if h.base_offset == 1] == [True]
    clock.now += 2 * HOUR
    log.apply_retention()                               # idle past producer.id.expiration.ms: forgotten
    assert 7 not in {p.producer_id for p in log.active_producers()}
    clean(log, clock)
    assert 1 not in marker_offsets(log)


def test_a_reopened_log_rebuilds_the_same_transactions_after_markers_went(open_log, clock):
    log = open_log(**CONFIG)
    for i in range(6):
        pid = 7 + i % 2
        log.append_as_leader(keyed_txn_batch(pid, i // 2, [(b"k", b"v%d" % i)]), 0)
        log.append_marker(marker(pid, commit=i % 3 != 0), 0)
    clean(log, clock)
    stats = clean(log, clock, advance=HOUR)
    assert stats is not None and stats.markers_removed > 0
    aborted, committed = log.aborted_transactions(0, 1 << 40), read_committed(log)
    producers = sorted(log.active_producers())
    log.close()
    again = open_log(**CONFIG)
    assert again.open_transactions() == {}
    assert again.aborted_transactions(0, 1 << 40) == aborted
    assert sorted(again.active_producers()) == producers
    assert read_committed(again) == committed == read_committed_direct(again)


def test_a_stamped_marker_is_still_the_same_marker_to_every_reader():
    raw = marker_batch(7, 3, 5, False, 1_234)
    header = BatchHeader.parse(raw)
    stamped = with_delete_horizon(header, raw, 99_000)
    checked = check_batch(stamped)                      # CRC-32C and header valid
    assert delete_horizon(header) is None and delete_horizon(checked) == 99_000
    assert read_marker(checked, stamped) == read_marker(header, raw)
    assert decode_records(checked, stamped).column("timestamp").to_pylist() == [1_234]
    assert (checked.base_offset, checked.last_offset_delta, checked.max_timestamp, checked.producer_epoch) == \
        (header.base_offset, header.last_offset_delta, header.max_timestamp, header.producer_epoch)


# --- random transactional histories -----------------------------------------------------------

_actions = st.lists(st.one_of(
    st.tuples(st.just("data"), st.integers(1, 3), st.lists(st.sampled_from([b"a", b"b", b"c", b"d"]),
                                                              min_size=1, max_size=3)),
    st.tuples(st.sampled_from(["commit", "abort"]), st.integers(1, 3), st.just([])),
    st.tuples(st.just("plain"), st.just(0), st.lists(st.sampled_from([b"a", b"b"]), min_size=1, max_size=2)),
    st.tuples(st.just("clean"), st.just(0), st.just([])),
), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=_actions)
def test_cleaning_transactional_histories_keeps_what_read_committed_readers_see(open_log, clock, tmp_path, actions):
    """The same history goes to a log cleaned now and then and to a twin never cleaned; after the
    cleaned one is cleaned repeatedly past delete.retention.ms, its read_committed read is the twin's
    reduced to each key's latest record, and a marker is gone only with every batch of its transaction."""
    clock.now = 1_700_000_000_000
    log = open_log(**CONFIG)
    log.truncate_fully_and_start_at(0)
    shutil.rmtree(tmp_path / "twin", ignore_errors=True)
    twin = Log.open(tmp_path / "twin", LogConfig.from_properties({k.replace("_", "."): v for k, v in CONFIG.items()}),
                    now_ms=clock)
    sequences: dict[int, int] = {}
    txn_batches: dict[int, list[int]] = {}          # producer -> base offsets of its open transaction's batches
    marker_txn: dict[int, list[int]] = {}           # marker offset -> base offsets of its transaction's batches
    values = 0

    def both(append: Callable[[Log], AppendResult]) -> int:
        first = append(log).first_offset
        assert append(twin).first_offset == first
        return first

    def end_txn(pid: int, commit: bool) -> None:
        at = both(lambda target: target.append_marker(marker(pid, commit=commit), 0))
        marker_txn[at] = txn_batches.pop(pid, [])

    def clean_now() -> None:
        clock.now += HOUR + 1
        active = log._segments[-1].base_offset          # roll it (the twin's active segment is the same)
        while log._segments[-1].base_offset == active:
            both(lambda target: target.append_as_leader(plain_batch(b"filler", b"f" * 40), 0))
        assert twin._segments[-1].base_offset == log._segments[-1].base_offset
        log.update_high_watermark(log.log_end_offset)
        twin.update_high_watermark(twin.log_end_offset)
        cleaner.clean(log, dedupe_buffer_bytes=1 << 30)

    try:
        for action, pid, keys in actions:
            if action == "data":
                values += 1
                pairs = [(k, b"%s-%d" % (k, values)) for k in keys]
                seq = sequences.get(pid, 0)
                first = both(lambda target: target.append_as_leader(keyed_txn_batch(pid, seq, pairs), 0))
                sequences[pid] = seq + len(pairs)
                txn_batches.setdefault(pid, []).append(first)
            elif action in ("commit", "abort"):
                end_txn(pid, action == "commit")
            elif action == "plain":
                values += 1
                both(lambda target: target.append_as_leader(plain_batch(keys[0], b"plain-%d" % values), 0))
            else:
                clean_now()
        for pid in sorted(txn_batches):
            end_txn(pid, commit=pid % 2 == 0)
        for _ in range(4):
            clean_now()
        assert log.last_stable_offset == twin.last_stable_offset == log.log_end_offset
        reference, after = read_committed(twin), read_committed(log)
    finally:
        twin.close()
    assert latest(after) == latest(reference)
    assert set(after) <= set(reference) and [o for o, _, _ in after] == sorted(o for o, _, _ in after)
    assert read_committed_direct(log) == after
    assert log.open_transactions() == {}
    stored = batches(log)
    markers_left = {h.base_offset for h, _ in stored if is_control(h)}
    txn_batches_left = {h.base_offset for h, _ in stored if is_transactional(h) and not is_control(h)}
    for at, txn in marker_txn.items():
        if at not in markers_left:                      # a marker went only with every batch of its transaction
            assert not txn_batches_left.intersection(txn), (at, txn)
    event(f"markers removed: {'some' if set(marker_txn) - markers_left else 'none'}")
    # the aborted index names no transaction whose marker is gone, and a reopened log agrees
    aborted = log.aborted_transactions(0, 1 << 40)
    markers = {h.base_offset: h.producer_id for h, _ in stored if is_control(h)}
    assert all(any(pid == a.producer_id and at >= a.first_offset for at, pid in markers.items()) for a in aborted)
    producers = sorted(log.active_producers())
    log.close()
    again = open_log(**CONFIG)
    assert again.open_transactions() == {}
    rebuilt = again.aborted_transactions(0, 1 << 40)
    # the same transactions; a rebuild starts one at its first batch still there (the cleaner may have
    # removed earlier ones, as it removes every aborted record), the live index where it began
    assert [a.producer_id for a in rebuilt] == [a.producer_id for a in aborted]
    assert all(r.first_offset >= a.first_offset for r, a in zip(rebuilt, aborted))
    assert read_committed(again) == after
    assert sorted(again.active_producers()) == producers
    again.close()
