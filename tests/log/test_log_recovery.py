"""Recovery on open: torn tails, corruption, indexes, stray files, checkpoints."""
from __future__ import annotations

import os

import pytest
from log_helpers import numbered, values_batch

from ember import errors
from ember.log import checkpoint, read_offset_range
from ember.record import to_table


def write_batches(log, count, per_batch=4):
    for _i in range(count):
        log.append_as_leader(values_batch(numbered(log.log_end_offset, per_batch)), 0)


def files(log_dir, suffix):
    return sorted(p for p in log_dir.iterdir() if p.name.endswith(suffix))


def crash(log):
    """Drop a log without closing: nothing flushed or checkpointed after the last flush."""
    for segment in log._segments:
        segment.close()
    log._closed = True


def test_torn_tail_of_the_active_segment_is_truncated(open_log, log_dir):
    log = open_log()
    write_batches(log, 5)
    log.flush()
    write_batches(log, 3)  # unflushed region
    good_size = log.size_in_bytes
    crash(log)
    with open(files(log_dir, ".log")[-1], "ab") as f:
        f.write(values_batch([b"torn"])[:40])  # half a header + garbage
    log = open_log()
    assert log.log_end_offset == 32 and log.size_in_bytes == good_size
    assert log.append_as_leader(values_batch([b"next"]), 0).first_offset == 32


def test_corrupt_batch_in_the_unflushed_region_truncates_from_there(open_log, log_dir):
    log = open_log()
    write_batches(log, 4)
    log.flush()
    flushed_size = log.size_in_bytes
    write_batches(log, 4)
    crash(log)
    path = files(log_dir, ".log")[-1]
    with open(path, "r+b") as f:  # flip a byte in the middle of batch 5 (offsets 20..23)
        f.seek(flushed_size + (log.size_in_bytes - flushed_size) * 3 // 8)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    log = open_log()
    assert log.log_end_offset == 20  # batches 5.. dropped, 0..4 intact
    assert to_table(log.read(0, 1 << 20).read_bytes()).column("value").to_pylist() == numbered(0, 20)


def test_corruption_in_a_sealed_segment_is_reported_not_truncated(open_log, log_dir):
    log = open_log(segment_bytes=3000, index_interval_bytes=0)
    write_batches(log, 12)
    log.close()
    sealed = files(log_dir, ".log")[0]
    size = sealed.stat().st_size
    with open(sealed, "r+b") as f:
        f.seek(size - 10)  # payload of its last batch
        f.write(b"\xff" * 4)
    log = open_log(segment_bytes=3000, index_interval_bytes=0)
    assert log.log_end_offset == 48  # nothing silently dropped
    with pytest.raises(errors.CorruptSegment, match=f"{sealed.name}.*CRC mismatch.*position"):
        list(read_offset_range(log_dir, 0, 48))
    with open(sealed, "r+b") as f:  # now damage a batch header's length
        f.seek(8)
        f.write(b"\x7f\xff\xff\xff")
    with pytest.raises(errors.CorruptSegment, match=f"{sealed.name}.*position 0"):
        log.read(0, 1 << 20)


def test_missing_and_damaged_indexes_are_rebuilt(open_log, log_dir):
    log = open_log(segment_bytes=3000, index_interval_bytes=0)
    write_batches(log, 12)
    expected = [log.read(o, 1).first_offset for o in range(48)]
    log.close()
    indexes = files(log_dir, ".index")
    indexes[0].unlink()
    indexes[1].write_bytes(b"\x00\x00\x00\x09\xff\xff\xff\x00" * 3)  # points past the file
    files(log_dir, ".timeindex")[0].write_bytes(b"junk")
    log = open_log(segment_bytes=3000, index_interval_bytes=0)
    assert [log.read(o, 1).first_offset for o in range(48)] == expected
    assert len(log._segments[0].offset_index) > 0 and log._segments[0].max_timestamp == 1_000
    assert files(log_dir, ".index")[0].stat().st_size > 0


def test_a_segment_gets_its_index_files_with_its_first_index_entry(open_log, log_dir):
    log = open_log(index_interval_bytes=4096)
    assert files(log_dir, ".log") and not files(log_dir, ".index") and not files(log_dir, ".timeindex")
    write_batches(log, 1)
    log.flush()
    assert not files(log_dir, ".index")          # one batch: no entry yet, so no file
    while not len(log._active.offset_index):
        write_batches(log, 1)
    log.flush()
    assert files(log_dir, ".index")[0].stat().st_size > 0 and files(log_dir, ".timeindex")[0].stat().st_size > 0


def test_sealed_segments_never_indexed_reopen_without_a_rebuild(open_log, log_dir, caplog):
    """Segments smaller than one index interval never get an entry, so never index files."""
    log = open_log(segment_bytes=3000, index_interval_bytes=4096)
    write_batches(log, 12)
    assert len(log._segments) > 2 and not files(log_dir, ".index")
    expected = [log.read(o, 1).first_offset for o in range(48)]
    log.close()
    log = open_log(segment_bytes=3000, index_interval_bytes=4096)
    assert [log.read(o, 1).first_offset for o in range(48)] == expected and log.log_end_offset == 48
    assert "rebuilding" not in caplog.text
    write_batches(log, 1)
    assert log.log_end_offset == 52


def test_a_small_sealed_segment_missing_its_time_index_is_rebuilt_with_its_max_timestamp(open_log, log_dir):
    log = open_log(segment_bytes=3000, index_interval_bytes=4096)
    write_batches(log, 12)
    log.close()
    files(log_dir, ".timeindex")[0].unlink()
    for _reopen in range(2):
        log = open_log(segment_bytes=3000, index_interval_bytes=4096)
        assert log._segments[0].max_timestamp == 1_000
        log.close()


def test_sealed_segments_recovered_after_a_crash_keep_their_max_timestamp(open_log, log_dir):
    """A crash after rolls, before the recovery point moved past them: their indexes are rebuilt
    from headers, and their time index must end with the max timestamp again (retention reads
    it on the next open), not only in memory."""
    log = open_log(segment_bytes=3000, index_interval_bytes=4096)
    log.append_as_leader(values_batch(numbered(0, 4), timestamp=5_000), 0)
    write_batches(log, 11)
    assert len(log._segments) > 2
    crash(log)
    log = open_log(segment_bytes=3000, index_interval_bytes=4096)
    log.close()
    log = open_log(segment_bytes=3000, index_interval_bytes=4096)
    assert [s.max_timestamp for s in log._segments[:2]] == [5_000, 1_000]
    assert log.offset_for_timestamp(2_000) == (0, 5_000)


def test_stray_files_are_deleted_and_hw_clamped(open_log, log_dir):
    log = open_log()
    write_batches(log, 2)
    log.update_high_watermark(8)
    log.close()
    for name in ("00000000000000000000.log.deleted", "high-watermark-checkpoint.tmp",
                 "00000000000000000099.index"):
        (log_dir / name).write_bytes(b"x")
    checkpoint.write_offset(log_dir / checkpoint.HIGH_WATERMARK, 50)
    log = open_log()
    assert log.high_watermark == 8
    assert sorted(p.name for p in log_dir.iterdir() if not p.name.endswith("checkpoint")) == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex"]


def test_recovery_point_moves_with_flush_and_roll(open_log):
    log = open_log(segment_bytes=3000)
    write_batches(log, 2)
    assert log.recovery_point == 0
    log.flush()
    assert log.recovery_point == 8
    write_batches(log, 12)
    assert log.recovery_point >= log._segments[-1].base_offset  # the roll fsynced the old segment


def test_checkpoints_are_atomic_and_versioned(tmp_path):
    path = tmp_path / "cp"
    checkpoint.write_entries(path, [(1, 0), (3, 40)])
    assert path.read_text() == "0\n2\n1 0\n3 40\n"
    assert checkpoint.read_entries(path, 2) == [(1, 0), (3, 40)]
    assert not (tmp_path / "cp.tmp").exists()
    (tmp_path / "cp.tmp").write_text("half")  # a crash mid-write leaves only the tmp file
    assert checkpoint.read_entries(path, 2) == [(1, 0), (3, 40)]
    for bad in ("1\n1\n5\n", "0\n2\n5\n", "0\n1\nx\n", ""):
        path.write_text(bad)
        assert checkpoint.read_offset(path) is None
    assert checkpoint.read_offset(tmp_path / "missing") is None


def test_epoch_cache_rebuilt_from_batches_when_checkpoint_lost(open_log, log_dir):
    log = open_log()
    for epoch in (2, 2, 4):
        log.append_as_leader(values_batch([b"a"]), epoch)
    log.close()
    (log_dir / checkpoint.LEADER_EPOCH).unlink()
    log = open_log()
    assert log.end_offset_for_epoch(2) == (2, 2) and log.latest_epoch == 4
