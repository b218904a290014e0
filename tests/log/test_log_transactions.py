"""Transactions in the log: open transactions hold the last stable offset, markers end them,
aborted ones are indexed for read_committed readers, and all of it is rebuilt from the segments."""
from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_helpers import kafka_batch

from ember import errors
from ember.log import cleaner, read_offset_range
from ember.log.log import Log
from ember.log.txn_index import AbortedTxn
from ember.record.batch import iter_batches
from ember.record.control import Marker, is_control, read_marker
from ember.record.crc import crc32c
from ember.record.header import CRC_START, TRANSACTIONAL_FLAG, BatchHeader
from ember.record.kafka_v2 import decode_records


def txn_batch(pid: int, epoch: int, seq: int, n: int = 2, transactional: bool = True) -> bytes:
    """A Kafka producer's batch of ``n`` records (key = value), transactional unless told otherwise."""
    values = [f"p{pid}-{seq + i}".encode() for i in range(n)]
    return keyed_txn_batch(pid, seq, list(zip(values, values)), epoch, transactional)


def marker(pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> Marker:
    return Marker(pid, epoch, commit, coordinator_epoch)


def test_an_open_transaction_holds_the_last_stable_offset_until_its_marker_is_replicated(open_log):
    log = open_log()
    log.append_as_leader(txn_batch(1, 0, 0, transactional=False), 0)   # offsets 0-1, plain idempotent
    log.append_as_leader(txn_batch(7, 0, 0), 0)                         # 2-3, transaction of producer 7
    log.append_as_leader(txn_batch(8, 0, 0), 0)                         # 4-5, transaction of producer 8
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 2
    assert log.open_transactions() == {7: 2, 8: 4}
    done = log.append_marker(marker(7, commit=True), 0)                  # 6
    assert done.first_offset == 6
    assert log.last_stable_offset == 2          # the marker is not below the high watermark yet
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 4          # producer 8's transaction is still open
    log.append_marker(marker(8, commit=False), 0)                        # 7
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.high_watermark == 8
    assert log.aborted_transactions(0, 8) == [AbortedTxn(8, 4)]
    assert log.aborted_transactions(6, 8) == [AbortedTxn(8, 4)]   # its marker is at 7
    assert log.aborted_transactions(8, 9) == []
    assert log.aborted_transactions(0, 4) == []                  # it starts at 4


def test_the_marker_is_a_kafka_control_batch(open_log):
    log = open_log()
    log.append_as_leader(txn_batch(7, 3, 0), 0)
    log.append_marker(marker(7, commit=False, epoch=3, coordinator_epoch=5), 0)
    raw = log.read(2, 1 << 20).read_bytes()
    header = BatchHeader.parse(raw)
    assert is_control(header) and (header.producer_id, header.producer_epoch, header.base_offset) == (7, 3, 2)
    assert read_marker(header, raw) == Marker(7, 3, False, 5)
    key = decode_records(header, raw).column("key")[0].as_py()
    assert key == b"\x00\x00\x00\x00"          # Kafka's ControlRecordType: version 0, ABORT


def test_reopening_rebuilds_open_and_aborted_transactions(open_log):
    log = open_log()
    log.append_as_leader(txn_batch(7, 0, 0), 0)
    log.append_marker(marker(7, commit=False), 0)
    log.append_as_leader(txn_batch(8, 0, 0), 0)
    log.update_high_watermark(log.log_end_offset)
    log.flush()
    log.close()
    again = open_log()
    assert again.open_transactions() == {8: 3}
    assert again.aborted_transactions(0, 10) == [AbortedTxn(7, 0)]
    assert again.last_stable_offset == 3


def test_truncating_a_marker_away_reopens_its_transaction(open_log):
    log = open_log()
    log.append_as_leader(txn_batch(7, 0, 0), 0)
    log.append_marker(marker(7, commit=False), 0)
    log.truncate_to(2)
    assert log.open_transactions() == {7: 0}
    assert log.aborted_transactions(0, 10) == []
    log.append_marker(marker(7, commit=True), 0)
    assert log.open_transactions() == {} and log.aborted_transactions(0, 10) == []


def test_retention_forgets_aborted_transactions_below_the_log_start(open_log):
    log = open_log(segment_bytes=14)      # a segment per batch
    log.append_as_leader(txn_batch(7, 0, 0), 0)
    log.append_marker(marker(7, commit=False), 0)
    log.append_as_leader(txn_batch(1, 0, 0, transactional=False), 0)
    log.update_high_watermark(log.log_end_offset)
    assert log.aborted_transactions(0, 10) == [AbortedTxn(7, 0)]
    log.delete_records_before(3)
    assert log.aborted_transactions(0, 10) == []


def test_fenced_producer_epochs_and_stale_coordinators_cannot_end_a_transaction(open_log):
    log = open_log()
    log.append_as_leader(txn_batch(7, 2, 0), 0)
    log.append_marker(marker(7, commit=True, epoch=2, coordinator_epoch=4), 0)
    with pytest.raises(errors.InvalidProducerEpoch):
        log.append_marker(marker(7, commit=False, epoch=1, coordinator_epoch=4), 0)
    with pytest.raises(errors.TransactionCoordinatorFenced):
        log.append_marker(marker(7, commit=False, epoch=2, coordinator_epoch=3), 0)


def test_a_marker_at_a_new_epoch_starts_the_producer_over_at_sequence_zero(open_log):
    """A coordinator aborting a timed-out transaction bumps the producer's epoch and writes the
    marker at the new one; the producer continues there from sequence 0."""
    log = open_log()
    log.append_as_leader(txn_batch(7, 5, 0, n=10), 0)
    log.append_marker(marker(7, commit=False, epoch=6), 0)
    assert log.append_as_leader(txn_batch(7, 6, 0), 0).first_offset == 11
    with pytest.raises(errors.InvalidProducerEpoch):
        log.append_as_leader(txn_batch(7, 5, 10), 0)      # the fenced epoch stays fenced


def test_a_transaction_at_the_next_epoch_waits_for_the_marker_of_the_previous_one(open_log):
    """Transaction version 2: the producer's next transaction runs at the epoch EndTxn bumped to.
    Its first batch here, arriving before the marker of the previous transaction (written at that
    same epoch), would join the previous transaction: refused as CONCURRENT_TRANSACTIONS, retried."""
    log = open_log()
    log.append_as_leader(txn_batch(7, 3, 0), 0)
    assert log.in_transaction(7, 3) and not log.in_transaction(7, 4)
    with pytest.raises(errors.ConcurrentTransactions):
        log.append_as_leader(txn_batch(7, 4, 0), 0)
    log.append_marker(marker(7, commit=True, epoch=4), 0)
    assert not log.in_transaction(7, 3)
    assert log.append_as_leader(txn_batch(7, 4, 0), 0).first_offset == 3
    assert log.in_transaction(7, 4)
    assert log.open_transactions() == {7: 3}


def test_producers_cannot_write_control_batches_or_transactions_without_an_id(open_log):
    log = open_log()
    log.append_as_leader(txn_batch(7, 0, 0), 0)
    log.append_marker(marker(7, commit=True), 0)
    control = log.read(2, 1 << 20).read_bytes()
    with pytest.raises(errors.InvalidRecord, match="control batches"):
        log.append_as_leader(control, 0)
    with pytest.raises(errors.InvalidRecord, match="producer id"):
        log.append_as_leader(txn_batch(-1, -1, -1), 0)


def test_a_follower_learns_markers_from_the_batches_it_copies(open_log, tmp_path):
    leader = open_log()
    leader.append_as_leader(txn_batch(7, 0, 0), 0)
    leader.append_as_leader(txn_batch(8, 0, 0), 0)
    leader.append_marker(marker(7, commit=False), 0)
    follower = Log.open(tmp_path / "follower")
    try:
        while follower.log_end_offset < leader.log_end_offset:      # one segment per read
            follower.append_as_follower(leader.read(follower.log_end_offset, 1 << 20).read_bytes())
        assert follower.open_transactions() == {8: 2}
        assert follower.aborted_transactions(0, 10) == [AbortedTxn(7, 0)]
    finally:
        follower.close()


# --- the model: any interleaving of transactional writes and markers --------------------------

_steps = st.lists(st.tuples(st.sampled_from(["data", "commit", "abort", "replicate", "plain"]),
                            st.integers(min_value=1, max_value=3)), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps)
def test_last_stable_offset_and_aborted_index_match_a_model(open_log, steps):
    log = open_log()
    log.truncate_fully_and_start_at(0)
    sequences: dict[int, int] = {}
    open_first: dict[int, int] = {}
    completed: list[tuple[int, int, int, bool]] = []   # pid, first, marker offset, aborted
    markers_at: set[int] = set()
    owner: dict[int, int] = {}                          # offset -> producer of a transactional record there
    for action, pid in steps:
        if action in ("data", "plain"):
            seq = sequences.get(pid, 0)
            result = log.append_as_leader(txn_batch(pid, 0, seq, transactional=action == "data"), 0)
            sequences[pid] = seq + 2
            if action == "data":
                open_first.setdefault(pid, result.first_offset)
                owner.update({result.first_offset: pid, result.first_offset + 1: pid})
        elif action == "replicate":
            log.update_high_watermark(log.log_end_offset)
        else:
            at = log.append_marker(marker(pid, commit=action == "commit"), 0).first_offset
            markers_at.add(at)
            completed.append((pid, open_first.pop(pid, at), at, action == "abort"))
    hw = log.high_watermark
    unstable = [*open_first.values(), *(first for _, first, end, _ in completed if end >= hw)]
    assert log.last_stable_offset == min([hw, *unstable])
    assert log.open_transactions() == open_first
    assert log.aborted_transactions(0, 1 << 40) == [AbortedTxn(p, f) for p, f, _, aborted in completed if aborted]
    stable = log.last_stable_offset
    aborted_spans = [(p, f, end) for p, f, end, aborted in completed if aborted]
    wanted = [o for o in range(stable) if o not in markers_at
              and not any(p == owner.get(o) and f <= o < end for p, f, end in aborted_spans)]
    assert offsets_read(log, 0, stable) == wanted
    log.flush()
    log.close()
    again = open_log()
    assert again.open_transactions() == open_first
    assert again.aborted_transactions(0, 1 << 40) == [AbortedTxn(p, f) for p, f, _, a in completed if a]
    again.close()


# --- compaction with transactions -------------------------------------------------------------

def keyed_txn_batch(pid: int, seq: int, pairs: list[tuple[bytes, bytes]], epoch: int = 0,
                    transactional: bool = True) -> bytes:
    keys = pa.array([k for k, _ in pairs], pa.binary())
    values = pa.array([v for _, v in pairs], pa.binary())
    raw = bytearray(kafka_batch(pa.table({"key": keys, "value": values}), producer_id=pid, producer_epoch=epoch,
                                base_sequence=seq))
    if transactional:
        struct.pack_into(">h", raw, CRC_START, BatchHeader.parse(raw).attributes | TRANSACTIONAL_FLAG)
        struct.pack_into(">I", raw, 17, crc32c(memoryview(raw)[CRC_START:]))
    return bytes(raw)


def stored(log: Log) -> list[tuple[int, bool, list[tuple[bytes, bytes]]]]:
    """(base offset, is control, [(key, value)]) of every batch from the log start."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read_bytes()
        for header, raw in iter_batches(data):
            columns = decode_records(header, raw)
            out.append((header.base_offset, is_control(header),
                        list(zip(columns.column("key").to_pylist(), columns.column("value").to_pylist()))))
            offset = header.last_offset + 1
    return out


def test_a_first_cleaning_drops_aborted_records_keeps_committed_ones_and_every_marker(open_log):
    """Markers go only in a later cleaning past their delete horizon (test_log_cleaner_markers.py)."""
    log = open_log(segment_bytes=300, cleanup_policy="compact")
    log.append_as_leader(keyed_txn_batch(7, 0, [(b"k", b"committed")]), 0)           # 0
    log.append_marker(marker(7, commit=True), 0)                                      # 1
    log.append_as_leader(keyed_txn_batch(8, 0, [(b"k", b"aborted"), (b"j", b"x")]), 0)  # 2-3
    log.append_marker(marker(8, commit=False), 0)                                     # 4
    for i in range(6):                                                                # seal what came before
        log.append_as_leader(keyed_txn_batch(9 + i, 0, [(b"other%d" % i, b"v")]), 0)
        log.append_marker(marker(9 + i, commit=True), 0)
    log.update_high_watermark(log.log_end_offset)
    assert cleaner.clean(log, dedupe_buffer_bytes=1 << 30) is not None
    batches = stored(log)
    data = {k: (o, v) for o, control, pairs in batches if not control for k, v in pairs}
    assert data[b"k"] == (0, b"committed")               # the aborted write did not supersede it
    assert b"j" not in data                               # aborted records are gone
    markers = [o for o, control, _ in batches if control]
    assert 1 in markers and 4 in markers                  # markers stay (readers pass them)
    assert log.aborted_transactions(0, 100) == [AbortedTxn(8, 2)]


def test_an_open_transaction_holds_the_cleaner_back(open_log):
    log = open_log(segment_bytes=300, cleanup_policy="compact")
    log.append_as_leader(keyed_txn_batch(7, 0, [(b"k", b"open")]), 0)
    for i in range(6):
        log.append_as_leader(keyed_txn_batch(9 + i, 0, [(b"k", b"v%d" % i)]), 0)
        log.append_marker(marker(9 + i, commit=True), 0)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 0
    assert log.cleanable() is None                        # nothing is below the last stable offset
    log.append_marker(marker(7, commit=True), 0)
    log.update_high_watermark(log.log_end_offset)
    assert log.cleanable() is not None


# --- read_committed straight from the segment files (Spark's direct path) -----------------------

def offsets_read(log: Log, start: int, end: int, committed: bool = True) -> list[int]:
    log.flush()
    return [o for batch in read_offset_range(log.directory, start, end, committed=committed)
            for o in batch.column("offset").to_pylist()]


def test_the_segment_reader_leaves_out_aborted_transactions_even_when_their_marker_is_past_the_range(open_log):
    log = open_log(segment_bytes=300)
    log.append_as_leader(txn_batch(7, 0, 0), 0)                         # 0-1 aborted below
    log.append_as_leader(txn_batch(8, 0, 0), 0)                         # 2-3 committed below
    log.append_as_leader(txn_batch(1, 0, 0, transactional=False), 0)    # 4-5 plain
    log.append_marker(marker(7, commit=False), 0)                       # 6
    log.append_as_leader(txn_batch(9, 0, 0), 0)                         # 7-8 committed at 10
    log.append_marker(marker(8, commit=True), 0)                        # 9
    log.append_marker(marker(9, commit=True), 0)                        # 10
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 11
    assert offsets_read(log, 0, 11) == [2, 3, 4, 5, 7, 8]
    assert offsets_read(log, 0, 6) == [2, 3, 4, 5]                     # markers at 6 and 9 are past the range
    assert offsets_read(log, 3, 8) == [3, 4, 5, 7]
    assert offsets_read(log, 0, 11, committed=False) == [0, 1, 2, 3, 4, 5, 7, 8]


def test_the_segment_reader_never_returns_a_transaction_it_cannot_see_end(open_log):
    log = open_log()
    log.append_as_leader(txn_batch(7, 0, 0), 0)                         # open: its marker is not written
    log.append_as_leader(txn_batch(1, 0, 0, transactional=False), 0)
    log.update_high_watermark(log.log_end_offset)
    assert offsets_read(log, 0, 4) == [2, 3]
