"""A full or failing disk (ENOSPC, EIO) never leaves a torn batch behind nor moves the log past
what was written: failed writes are undone, a failed fsync takes the log offline."""
from __future__ import annotations

import errno
import os

import pytest
from disk_faults import DiskFault
from log_helpers import numbered, values_batch

from ember import errors
from ember.log import checkpoint, read_offset_range
from ember.record.batch import check_batch


def append(log, count=4, **kw):
    return log.append_as_leader(values_batch(numbered(log.log_end_offset, count), **kw), 0)


def values(log_dir, end):
    return [v for b in read_offset_range(log_dir, 0, end) for v in b.column("value").to_pylist()]


def assert_whole_batches(path):
    """The segment file holds whole, CRC-valid batches back to back and nothing else."""
    data = path.read_bytes()
    position = 0
    while position < len(data):
        position += check_batch(data, position).size
    assert position == len(data)


def segment_files(log_dir):
    return sorted(p.name for p in log_dir.iterdir() if p.name.split(".")[0].isdigit())


def assert_storage_error(excinfo, log_dir):
    assert excinfo.value.code == errors.ErrorCode.KAFKA_STORAGE_ERROR and excinfo.value.retriable
    assert str(log_dir) in str(excinfo.value)
    assert isinstance(excinfo.value.__cause__, OSError)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_a_data_write_failing_part_way_is_cut_off_and_the_retry_takes_the_same_offsets(
        open_log, log_dir, monkeypatch, code):
    log = open_log()
    for _ in range(3):
        append(log)
    path = log._active.path
    size, end = path.stat().st_size, log.log_end_offset
    fault = DiskFault(monkeypatch, "pwritev", code, short=500)  # the disk fills mid-batch
    with pytest.raises(errors.StorageError) as excinfo:
        append(log)
    assert fault.failures == 2  # a short write, then the error
    assert_storage_error(excinfo, log_dir)
    assert path.stat().st_size == size and log.size_in_bytes == size
    assert log.log_end_offset == end and not log.offline
    assert_whole_batches(path)
    fault.heal()
    assert append(log).first_offset == end
    assert_whole_batches(path)
    assert values(log_dir, end + 4) == numbered(0, end + 4)


def test_a_failed_index_write_undoes_the_whole_append(open_log, log_dir, monkeypatch):
    log = open_log(index_interval_bytes=0)  # every append writes an offset-index entry
    for _ in range(3):
        append(log)
    segment = log._active
    size, end, entries = segment.size, log.log_end_offset, len(segment.offset_index)
    index_size = segment.offset_index.path.stat().st_size
    fault = DiskFault(monkeypatch, "write", short=3)  # 3 bytes of an 8-byte entry, then ENOSPC
    with pytest.raises(errors.StorageError):
        append(log)
    assert fault.failures == 2
    assert segment.path.stat().st_size == size and log.log_end_offset == end
    assert len(segment.offset_index) == entries
    assert segment.offset_index.path.stat().st_size == index_size
    fault.heal()
    assert append(log).first_offset == end
    assert [log.read(o, 1).first_offset for o in range(end + 4)] == [o - o % 4 for o in range(end + 4)]


def test_a_failed_epoch_checkpoint_undoes_the_append(open_log, log_dir, monkeypatch):
    log = open_log(index_interval_bytes=1 << 20)  # no index writes: the only write is the epoch's
    append(log)
    size, end = log._active.size, log.log_end_offset
    epochs = (log_dir / checkpoint.LEADER_EPOCH).read_text()
    fault = DiskFault(monkeypatch, "write")
    with pytest.raises(errors.StorageError):
        log.append_as_leader(values_batch(numbered(end, 4)), 1)  # a new leader epoch
    assert fault.failures == 1
    assert log.log_end_offset == end and log._active.path.stat().st_size == size
    assert log.latest_epoch == 0 and (log_dir / checkpoint.LEADER_EPOCH).read_text() == epochs
    assert not list(log_dir.glob("*.tmp"))
    fault.heal()
    assert log.append_as_leader(values_batch(numbered(end, 4)), 1).first_offset == end
    assert log.latest_epoch == 1


def test_a_failed_idempotent_append_is_not_remembered_as_written(open_log, log_dir, monkeypatch):
    log = open_log(index_interval_bytes=1 << 20)
    append(log)
    batch = values_batch(numbered(4, 4), producer_id=7, producer_epoch=0, base_sequence=0)
    # the batch is written whole, then recording the new leader epoch fails: all of it is undone
    fault = DiskFault(monkeypatch, "write")
    with pytest.raises(errors.StorageError):
        log.append_as_leader(batch, 1)
    assert fault.failures == 1 and log.log_end_offset == 4
    fault.heal()
    result = log.append_as_leader(batch, 1)  # the producer's retry is written, not a duplicate
    assert (result.first_offset, result.duplicate) == (4, False)
    assert log.append_as_leader(batch, 1).duplicate
    assert values(log_dir, 8) == numbered(0, 8)


def test_a_failed_roll_leaves_no_stray_files_and_the_next_roll_works(open_log, log_dir, monkeypatch):
    log = open_log(segment_bytes=3000)
    while len(log._segments) == 1 or log._active.size == 0:
        append(log)
    while not log._active.should_roll(1100, 1_000, log.log_end_offset + 3, segment_bytes=3000,
                                      segment_ms=log.config.segment_ms):
        append(log)
    end, count, before = log.log_end_offset, len(log._segments), segment_files(log_dir)
    new_segment = f"{end:020d}.log"  # creating the new segment's file fails (its indexes come later)
    fault = DiskFault(monkeypatch, "open", when=lambda path, *a: str(path).endswith(new_segment))
    with pytest.raises(errors.StorageError):
        append(log)
    assert fault.failures == 1
    sealed = f"{log._active.base_offset:020d}"   # the seal gave it its time index file, nothing else is new
    assert set(segment_files(log_dir)) - set(before) <= {f"{sealed}.index", f"{sealed}.timeindex"}
    assert log.log_end_offset == end and len(log._segments) == count and not log.offline
    fault.heal()
    assert append(log).first_offset == end
    assert len(log._segments) == count + 1 and log._active.base_offset == end
    assert values(log_dir, end + 4) == numbered(0, end + 4)


def test_a_failed_fsync_takes_the_log_offline(open_log, log_dir, monkeypatch):
    log = open_log()
    append(log)
    log.flush()
    append(log)
    fault = DiskFault(monkeypatch, "fsync", errno.EIO)
    with pytest.raises(errors.StorageError) as excinfo:
        log.flush()
    assert_storage_error(excinfo, log_dir)
    assert log.offline and str(log_dir) in log.offline_reason
    assert log.recovery_point == 4 and checkpoint.read_offset(log_dir / checkpoint.RECOVERY_POINT) == 4
    fault.heal()  # the page cache can no longer be trusted: stay offline until reopened
    for operation in (lambda: append(log), log.flush, lambda: log.read(0, 1 << 20),
                      lambda: log.truncate_to(2)):
        with pytest.raises(errors.StorageError, match="offline"):
            operation()
    log.close()  # closes the files without flushing
    log = open_log()
    assert not log.offline and log.log_end_offset == 8
    assert values(log_dir, 8) == numbered(0, 8)


def test_a_failed_fsync_in_a_roll_or_flush_messages_takes_the_log_offline(open_log, monkeypatch):
    log = open_log(flush_messages=1)
    append(log)
    DiskFault(monkeypatch, "fsync", errno.EIO)
    with pytest.raises(errors.StorageError):
        append(log)
    assert log.offline
    with pytest.raises(errors.StorageError, match="offline"):
        append(log)


def test_a_failed_undo_takes_the_log_offline(open_log, monkeypatch):
    log = open_log()
    append(log)
    DiskFault(monkeypatch, "pwritev", errno.EIO, short=10)
    real_ftruncate = os.ftruncate

    def ftruncate(fd, length):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(os, "ftruncate", ftruncate)
    with pytest.raises(errors.StorageError, match="offline.*undo"):
        append(log)
    assert log.offline and "undo" in log.offline_reason
    monkeypatch.setattr(os, "ftruncate", real_ftruncate)


def test_a_failed_checkpoint_write_keeps_the_old_one_and_is_retried(open_log, log_dir, monkeypatch):
    log = open_log()
    append(log)
    log.flush()
    append(log)
    fault = DiskFault(monkeypatch, "write", short=1)  # the .tmp gets one byte, then ENOSPC
    with pytest.raises(errors.StorageError):
        log.flush()
    assert fault.failures == 2
    assert not log.offline and not list(log_dir.glob("*.tmp"))
    assert checkpoint.read_offset(log_dir / checkpoint.RECOVERY_POINT) == 4
    fault.heal()
    log.flush()
    assert checkpoint.read_offset(log_dir / checkpoint.RECOVERY_POINT) == 8


def test_the_high_watermark_checkpoint_never_passes_flushed_data(open_log, log_dir, monkeypatch):
    log = open_log()
    append(log)
    real_fsync = os.fsync
    raced = []

    def fsync(fd):  # appends and a high-watermark move race with the flush's fsync
        if not raced:
            raced.append(True)
            append(log)
            log.update_high_watermark(log.log_end_offset)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    log.flush()
    assert log.high_watermark == 8
    recovery_point = checkpoint.read_offset(log_dir / checkpoint.RECOVERY_POINT)
    assert recovery_point == 4
    assert checkpoint.read_offset(log_dir / checkpoint.HIGH_WATERMARK) <= recovery_point
    log.flush()
    assert checkpoint.read_offset(log_dir / checkpoint.HIGH_WATERMARK) == 8
