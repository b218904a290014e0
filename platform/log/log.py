"""The partition log: an ordered list of segments with offsets, epochs and producer state.

Thread safety: every public method may be called from any thread. ``_lock`` serializes appends,
reads of the segment list and metadata updates; ``_flush_lock`` serializes the slow work that
must not block appends (fsync) with whatever closes or deletes segment files (truncation,
retention, close). Lock order is always ``_flush_lock`` then ``_lock``.

Disk failures: a failed write (ENOSPC, EIO, ...) is undone before the typed, retriable
``StorageError`` is raised, so the log stays at its last complete batch and a retry appends at the
same offsets. A failed fsync, or a failed write that cannot be undone, takes the log *offline*
(``offline_reason``): every later operation raises ``StorageError`` until it is reopened, whose
recovery truncates whatever the disk tore.
"""
from __future__ import annotations

import bisect
import contextlib
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Collection, Iterator, Optional, Sequence

import pyarrow.compute as pc

from ember import errors
from ember.log import checkpoint, cleaner, producer_snapshot, recovery, retention
from ember.log.config import LogConfig
from ember.log.disk import UntrustedFiles
from ember.log.epoch_cache import LeaderEpochCache
from ember.log.producer_state import ActiveProducer, ProducerStateManager
from ember.log.segment import DELETED_SUFFIX, LogSegment
from ember.log.txn_index import AbortedTxn, TransactionIndex
from ember.record import kafka_v2
from ember.record.batch import decode_payload, iter_batches, stamp_log_append_time, stored_columns
from ember.record.control import Marker, is_control, is_transactional, marker_batch, read_marker
from ember.record.header import HEADER_SIZE, BatchHeader, Buffer, patch_base_offset, patch_leader_epoch

_log = logging.getLogger(__name__)

#: The name a deleted partition's directory ends with until it is removed (Kafka's ``-delete``).
DELETED_DIR_SUFFIX = "-delete"


def rename_for_delete(directory: Path) -> Path:
    """Rename a partition directory that is to be removed to ``<name>.<uuid>-delete``; returns
    the new path (see :meth:`Log.rename_for_delete`)."""
    target = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETED_DIR_SUFFIX}")
    directory.rename(target)
    return target


class FsyncNeeded(Exception):
    """An append made with ``fsync=False`` would have fsynced (a segment roll, flush.messages
    reached): nothing was written; append again where an fsync may block."""


@dataclass(frozen=True)
class AppendResult:
    first_offset: int
    last_offset: int
    max_timestamp: int
    record_count: int
    duplicate: bool = False  # an idempotent retry: offsets are the original append's


@dataclass(frozen=True)
class FetchSlice:
    """Whole batches at ``position`` of segment file ``path``, ready for ``sendfile``."""
    path: Path
    position: int
    size: int
    first_offset: int  # base offset of the first batch (may be below the requested offset)
    inode: int = 0     # the file the positions are in (0: whichever has the name)

    def open(self) -> BinaryIO:
        """The segment file, also if retention or a log cleaning renamed it meanwhile
        (``file.delete.delay.ms``): a cleaned copy under the same name is not it.

        Raises ``OffsetOutOfRange`` once the file is gone.
        """
        for path in (self.path, self.path.with_name(self.path.name + DELETED_SUFFIX)):
            with contextlib.suppress(FileNotFoundError):
                f = open(path, "rb")
                if not self.inode or os.fstat(f.fileno()).st_ino == self.inode:
                    return f
                f.close()
        raise errors.OffsetOutOfRange(f"segment {self.path} was deleted")

    def read_bytes(self) -> bytes:
        if self.size == 0:
            return b""
        with self.open() as f:
            data = os.pread(f.fileno(), self.size, self.position)
        if len(data) != self.size:
            raise errors.OffsetOutOfRange(f"segment {self.path} was truncated under the read")
        return data


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class Log:
    """One partition's log in its own directory. Create with ``Log.open``."""

    def __init__(self, directory: Path, config: LogConfig, now_ms: Callable[[], int]) -> None:
        self.directory = directory
        self._config = config
        self._now_ms = now_ms
        self._lock = threading.RLock()
        self._flush_lock = threading.Lock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._log_start_offset = 0
        self._recovery_point = 0
        self._high_watermark = 0
        self._last_stable_offset = 0
        self._epochs = LeaderEpochCache(directory / checkpoint.LEADER_EPOCH)
        self._producers = ProducerStateManager()
        self._txns = TransactionIndex()
        self._unflushed_records = 0
        self._last_flush_ms = now_ms()
        self._written: dict[str, int] = {}  # checkpoint name -> value on disk
        self._pending_deletes: list[tuple[int, list[Path]]] = []
        self._first_dirty = 0   # the log cleaner's checkpoint: cleaned below this offset
        self._closed = False
        self._offline_reason: Optional[str] = None

    @classmethod
    def open(cls, directory: os.PathLike[str] | str, config: Optional[LogConfig] = None, *,
             now_ms: Callable[[], int] = _wall_clock_ms) -> "Log":
        """Open (creating if needed) and recover the log in ``directory``."""
        directory = Path(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            if cleaner.finish_interrupted(directory):
                producer_snapshot.take(directory)   # of the segments before the cleaning: not used
            recovery.clean_directory(directory)
        except (OSError, UntrustedFiles) as e:
            raise errors.StorageError(f"cannot open log {directory}: {e}") from e
        return cls._filled(directory, config, now_ms, cls._load, "open")

    @classmethod
    def create(cls, directory: os.PathLike[str] | str, config: Optional[LogConfig] = None, *,
               now_ms: Callable[[], int] = _wall_clock_ms) -> "Log":
        """A new, empty log in ``directory``, which the caller has just made: with nothing in it to
        clean, recover or read, this is a third of ``open``'s file-system calls (a topic of 1,000
        partitions is 1,000 of these on each broker)."""
        return cls._filled(Path(directory), config, now_ms, cls._start_empty, "create")

    @classmethod
    def _filled(cls, directory: Path, config: Optional[LogConfig], now_ms: Callable[[], int],
                fill: Callable[["Log"], None], verb: str) -> "Log":
        """A Log of ``directory`` that ``fill`` loads or starts; on failure the segments it opened
        are closed and a StorageError raised."""
        log: Optional[Log] = None
        try:
            log = cls(directory, config or LogConfig(), now_ms)
            fill(log)
            return log
        except (OSError, UntrustedFiles) as e:
            if log is not None:
                for segment in log._segments:
                    segment.close()
            raise errors.StorageError(f"cannot {verb} log {directory}: {e}") from e

    def _load(self) -> None:
        def read(name: str) -> Optional[int]:
            return checkpoint.read_offset(self.directory / name)

        snapshot = producer_snapshot.take(self.directory)   # gone from disk before anything is appended
        recovery_point = read(checkpoint.RECOVERY_POINT)
        self._recovery_point = recovery_point or 0
        self._written[checkpoint.RECOVERY_POINT] = self._recovery_point
        self._set_segments(recovery.load_segments(self.directory, self._config, self._recovery_point))
        checkpointed_start = read(checkpoint.LOG_START_OFFSET)
        self._first_dirty = read(checkpoint.CLEANER_OFFSET) or 0
        if not self._segments and recovery_point is None and checkpointed_start is None and \
                read(checkpoint.HIGH_WATERMARK) is None:
            self._start_empty()
            return
        if not self._segments:
            self._set_segments([self._new_segment(checkpointed_start or 0)])
        first = self._segments[0].base_offset
        self._log_start_offset = max(first, checkpointed_start or first)
        # recovery may have truncated below the checkpointed recovery point (a torn tail)
        self._recovery_point = min(self._recovery_point, self.log_end_offset)
        self._epochs.truncate_from_end(self.log_end_offset)
        if self._log_start_offset > self.log_end_offset:  # the data the checkpoint promised is gone
            with self._flush_lock:
                self._truncate_fully(self._log_start_offset)
        if snapshot is not None and snapshot.offset == self.log_end_offset == self._recovery_point \
                and snapshot.latest_epoch == self._epochs.latest_epoch:
            self._producers.restore(snapshot.producers, snapshot.ongoing)   # a clean close left it: no scan
            self._txns.reset(snapshot.completed, self._high_watermark)
        else:
            self._rebuild_from_headers(include_epochs=True)
        self._epochs.truncate_from_start(self._log_start_offset)
        hw = read(checkpoint.HIGH_WATERMARK)
        self._high_watermark = self._clamp(hw if hw is not None else self._log_start_offset)
        self._refresh_last_stable_offset()
        with self._flush_lock:
            self._flush()
            self._checkpoint(checkpoint.LOG_START_OFFSET, self._log_start_offset)

    def _start_empty(self) -> None:
        """A new log (no segment, no checkpoint): one empty segment and nothing to fsync, since
        no files read back as the same empty log. Creating a topic of 1,000 partitions spent most
        of its time in the six fsyncs per log a recovery-style open made."""
        self._set_segments([self._new_segment(0)])
        self._log_start_offset = self._high_watermark = 0
        self._written.update({checkpoint.LOG_START_OFFSET: 0, checkpoint.HIGH_WATERMARK: 0})
        self._last_flush_ms = self._now_ms()

    # --- state ----------------------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        """Apply an altered topic config (index sizes apply to new segments)."""
        with self._lock:
            self._config = config
            self._active.index_interval_bytes = config.index_interval_bytes

    @property
    def offline(self) -> bool:
        """A disk failure took the log offline: every operation raises StorageError until the
        partition is reopened (``Log.open`` recovers the files)."""
        return self._offline_reason is not None

    @property
    def offline_reason(self) -> Optional[str]:
        """Why the log went offline (the directory and the failed operation), or None."""
        return self._offline_reason

    @contextlib.contextmanager
    def locked(self, *, blocking: bool = True) -> Iterator[bool]:
        """Hold the log's lock (reentrant) for the block; ``blocking=False`` takes it only if no
        other thread holds it, and yields whether it did. The broker's event loop runs a job of
        a few microseconds in memory or the page cache (a high-watermark move, a read at the log's
        end, a small append with ``fsync=False``) inline this way: on the I/O pool two thread
        hand-offs cost it 0.3-1 ms under load, and a thread holding the lock sends the job there."""
        held = self._lock.acquire(blocking=blocking)
        try:
            yield held
        finally:
            if held:
                self._lock.release()

    def take_offline(self, reason: str) -> None:
        """Take the log offline although its files are whole (the broker's choice after a write
        the disk refused, as Kafka's KIP-112): every later operation raises StorageError until
        it is reopened. A closed log stays closed."""
        with self._lock:
            if not self._closed:
                self._go_offline(reason)

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._active.next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """What read_committed readers may read below: the high watermark, or the first offset of
        a transaction that is open or whose marker is not below the high watermark yet. Kept up to
        date under the lock by whatever moves it, and read without it: a fetch reads it on the
        broker's event loop, which must not wait behind an append's roll or fsync."""
        return self._last_stable_offset

    def _refresh_last_stable_offset(self) -> None:
        first = self._txns.first_unstable_offset(self._producers.first_unstable_offset(), self._high_watermark)
        self._last_stable_offset = max(self._log_start_offset, first)

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed reader of [start, end) must filter (without
        the lock: see ``TransactionIndex``)."""
        return self._txns.aborted_in(start_offset, end_offset)

    @property
    def open_transaction_count(self) -> int:
        """How many transactions are open here (without the lock: metrics read it on the event loop)."""
        return self._producers.ongoing_count

    def active_producers(self) -> list[ActiveProducer]:
        """The producers this log knows, with the transaction each has open here (DescribeProducers)."""
        with self._lock:
            return self._producers.active()

    def in_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether ``producer_id`` has a transaction open here at ``producer_epoch`` (without the
        lock: dict lookups). One at an older epoch does not count: under transaction version 2 the
        producer's next transaction runs at the next epoch, and must wait for the marker ending the
        previous one here."""
        return self._producers.has_ongoing(producer_id, producer_epoch)

    def open_transactions(self) -> dict[int, int]:
        """producer id -> first offset of each transaction open in this partition."""
        with self._lock:
            return self._producers.ongoing()

    @property
    def recovery_point(self) -> int:
        """Everything below this offset is fsynced."""
        return self._recovery_point

    @property
    def latest_epoch(self) -> int:
        """The newest leader epoch in the log, -1 if none."""
        return self._epochs.latest_epoch

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)

    @property
    def segment_stats(self) -> tuple[int, int]:
        """(segment count, bytes) without the lock, for metrics scraped on the broker's event loop,
        which must not wait behind an append or a roll's fsync: the segment list is only ever
        replaced, never changed in place, so one read of it is a consistent snapshot."""
        segments = self._segments
        return len(segments), sum(s.size for s in segments)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to [log start, log end]; returns the new value."""
        with self._lock:
            self._high_watermark = self._clamp(offset)
            self._refresh_last_stable_offset()
            return self._high_watermark

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (largest known epoch ≤ ``epoch``, the offset it ended at)."""
        with self._lock:
            return self._epochs.end_offset_for(epoch, self.log_end_offset)

    # --- appending ------------------------------------------------------------------------------

    def append_as_leader(self, raw: Buffer, leader_epoch: int, *, fsync: bool = True) -> AppendResult:
        """Validate, assign offsets to and append producer batches.

        Nothing is written if any batch is bad. A retried idempotent batch returns its original
        offsets with ``duplicate=True``. ``fsync=False``: raise ``FsyncNeeded`` instead of an
        append that would fsync.
        """
        view = memoryview(raw)
        batches = _validate(view, self._config.max_message_bytes, require_keys=self._config.compact)
        with self._lock:
            self._check_open()
            if leader_epoch < self._epochs.latest_epoch:
                # A leader append that lost a race with a leadership change: writing it would put
                # an old epoch after a newer one and diverge this replica from the new leader.
                raise errors.FencedLeaderEpoch(
                    f"append with leader epoch {leader_epoch} refused: the log is already at epoch "
                    f"{self._epochs.latest_epoch}")
            duplicate = self._producers.check([h for _, h in batches])
            if duplicate is not None:
                return AppendResult(duplicate.first_offset, duplicate.last_offset,
                                    duplicate.max_timestamp, duplicate.record_count, duplicate=True)
            append_time = self._now_ms() if self._config.message_timestamp_type == "LogAppendTime" else None
            offset = self.log_end_offset
            headers: list[BatchHeader] = []
            buffers: list[Buffer] = []
            for position, header in batches:
                head = bytearray(view[position:position + HEADER_SIZE])
                payload = view[position + HEADER_SIZE:position + header.size]
                patch_base_offset(head, offset)
                patch_leader_epoch(head, leader_epoch)
                if append_time is not None:
                    stamp_log_append_time(head, payload, append_time)
                headers.append(BatchHeader.parse(head))
                buffers += (head, payload)
                offset += header.record_count
            self._append(headers, buffers, [(leader_epoch, headers[0].base_offset)], fsync=fsync)
            return _result(headers)

    def append_as_follower(self, raw: Buffer, *, fsync: bool = True) -> AppendResult:
        """Append batches fetched from the leader, keeping its offsets and epochs.

        The first batch must start at the log end offset and the batches must be contiguous,
        else ``UnexpectedAppendOffset``. ``fsync=False`` as in :meth:`append_as_leader`.
        """
        view = memoryview(raw)
        batches = _validate(view, None)
        headers = [h for _, h in batches]
        markers = [read_marker(h, view[p:p + h.size]) if is_control(h) else None for p, h in batches]
        with self._lock:
            self._check_open()
            expected = self.log_end_offset
            for header in headers:
                if header.base_offset != expected:
                    raise errors.UnexpectedAppendOffset(
                        f"{self.directory}: follower batch starts at {header.base_offset}, "
                        f"expected {expected}")
                expected = header.last_offset + 1
            self._append(headers, [view], [(h.partition_leader_epoch, h.base_offset) for h in headers], markers,
                         fsync=fsync)
            return _result(headers)

    def append_marker(self, marker: Marker, leader_epoch: int) -> AppendResult:
        """Append, as leader, the control batch ending ``marker``'s producer's transaction here
        (WriteTxnMarkers). Refused for a fenced producer epoch or coordinator."""
        with self._lock:
            self._check_open()
            if leader_epoch < self._epochs.latest_epoch:
                raise errors.FencedLeaderEpoch(f"marker with leader epoch {leader_epoch} refused: the log is "
                                               f"already at epoch {self._epochs.latest_epoch}")
            self._producers.check_marker(marker)
            batch = bytearray(marker_batch(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                                           marker.commit, self._now_ms()))
            patch_base_offset(batch, self.log_end_offset)
            patch_leader_epoch(batch, leader_epoch)
            header = BatchHeader.parse(batch)
            self._append([header], [batch], [(leader_epoch, header.base_offset)], [marker])
            return _result([header])

    def _append(self, headers: Sequence[BatchHeader], buffers: Sequence[Buffer],
                epochs: Sequence[tuple[int, int]], markers: Optional[Sequence[Optional[Marker]]] = None,
                *, fsync: bool = True) -> None:
        """Write batches and record their (epoch, start offset)s; all or nothing: on a disk
        failure the files, offsets, epoch cache and producer state are as before. Without
        ``fsync``, raise FsyncNeeded before writing if the append would roll or sync."""
        size = sum(h.size for h in headers)
        max_timestamp = max(h.max_timestamp for h in headers)
        records = sum(h.record_count for h in headers)
        flush_messages = self._config.flush_messages
        syncs = flush_messages is not None and self._unflushed_records + records >= flush_messages
        with self._disk():
            rolls = self._active.should_roll(size, max_timestamp, headers[-1].last_offset,
                                             segment_bytes=self._config.segment_bytes,
                                             segment_ms=self._config.segment_ms)
            if not fsync and (rolls or syncs):
                raise FsyncNeeded(f"{self.directory}: this append would {'roll' if rolls else 'sync'}")
            if rolls:
                self._roll()
            active = self._active
            mark = active.mark()
            active.append(headers, buffers)  # undoes itself on failure
            try:
                self._epochs.assign_all(epochs)  # unchanged on failure
            except OSError:
                active.rollback(mark)
                raise
            for i, header in enumerate(headers):
                done = self._producers.update(header, markers[i] if markers is not None else None)
                if done is not None:
                    self._txns.completed(done)
            self._refresh_last_stable_offset()
            self._unflushed_records += records
            if syncs:
                self._sync_unflushed()

    def _roll(self) -> None:
        """Seal (and fsync) the active segment and start a new one at the log end.

        If creating the new segment fails, its files are removed and the sealed segment stays
        active (the next append rolls again)."""
        self._active.seal()
        self._recovery_point = max(self._recovery_point, self.log_end_offset)
        self._set_segments(self._segments + [self._new_segment(self.log_end_offset)])

    def _sync_unflushed(self) -> None:
        """fsync under the append lock (flush.messages); the checkpoint follows at the next flush."""
        for segment in self._unflushed_segments():
            segment.flush()
        self._recovery_point = self.log_end_offset
        self._unflushed_records = 0
        self._last_flush_ms = self._now_ms()

    # --- flushing -------------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync everything appended so far and checkpoint the recovery point and high watermark.

        Appends proceed while the fsync runs.
        """
        with self._flush_lock:
            self._flush()

    def flush_check_has_work(self, now_ms: Optional[int] = None) -> bool:
        """Whether ``flush_if_due`` would do anything (flush, or delete files whose delay is over),
        looked at without I/O or the lock, so the broker's flush timer sends only such logs to the
        I/O pool (one thread hop per idle log per second adds up over thousands of partitions). A
        stale look only moves the work to the timer's next round."""
        now = self._now_ms() if now_ms is None else now_ms
        if any(due <= now for due, _ in self._pending_deletes):
            return True
        dirty = self._unflushed_records > 0 or self._high_watermark != self._written.get(checkpoint.HIGH_WATERMARK)
        return dirty and now - self._last_flush_ms >= self._config.flush_ms

    def flush_if_due(self, now_ms: Optional[int] = None) -> bool:
        """The broker's flush timer: flush if unflushed data is ``flush.ms`` old; True if it did."""
        now = self._now_ms() if now_ms is None else now_ms
        with self._lock:
            self._purge_deleted_files(now)
            dirty = self._unflushed_records > 0 or \
                self._high_watermark != self._written.get(checkpoint.HIGH_WATERMARK)
            due = dirty and now - self._last_flush_ms >= self._config.flush_ms
        if due:
            self.flush()
        return due

    def _flush(self) -> None:
        with self._lock:
            self._check_open()
            end = self.log_end_offset
            segments = self._unflushed_segments()
            counted = self._unflushed_records
        with self._disk():
            for segment in segments:
                segment.flush()
        with self._lock:
            self._recovery_point = max(self._recovery_point, end)
            self._unflushed_records -= counted
            self._last_flush_ms = self._now_ms()
            recovery_point, log_start = self._recovery_point, self._log_start_offset
            # never checkpoint a high watermark above what is on disk
            high_watermark = min(self._high_watermark, recovery_point)
        self._checkpoint(checkpoint.RECOVERY_POINT, recovery_point)
        self._checkpoint(checkpoint.HIGH_WATERMARK, high_watermark)
        self._checkpoint(checkpoint.LOG_START_OFFSET, log_start)  # if retention could not

    def _unflushed_segments(self) -> list[LogSegment]:
        first = max(0, bisect.bisect_right(self._bases, self._recovery_point) - 1)
        return self._segments[first:]

    def _checkpoint(self, name: str, value: int) -> None:
        """Write a single-offset checkpoint if it changed (caller holds ``_flush_lock``)."""
        if self._written.get(name) != value:
            with self._disk():
                checkpoint.write_offset(self.directory / name, value)
            self._written[name] = value

    # --- reading --------------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int, *, max_offset: Optional[int] = None,
             min_one_batch: bool = True, skip_empty: bool = False) -> FetchSlice:
        """Whole batches from the one holding ``start_offset``, for ``sendfile``.

        At most ``max_bytes`` (but at least one batch if ``min_one_batch``), never a batch whose
        base offset is ``max_offset`` or more, all from one segment. ``skip_empty`` (a consumer's
        read) starts at the first batch with records, in a later segment if need be, past the
        empty batches a log cleaning leaves (a Kafka consumer given nothing but those several
        times takes them for a record too large to fetch); with none, the empty ones are read, so
        the reader still moves on. Raises ``OffsetOutOfRange`` outside [log start, log end] and
        ``CorruptSegment`` at a damaged batch header.
        """
        with self._lock, self._disk():
            self._check_open()
            self._check_range(start_offset)
            segment = self._segment_for(start_offset)
            found = None
            if max_offset is None or start_offset < max_offset:
                found = segment.read(start_offset, max_bytes, max_offset, min_one_batch)
            if found is not None and skip_empty and self._config.compact:
                segment, found = self._past_empty(segment, start_offset, max_bytes, max_offset, min_one_batch, found)
            if found is None:
                return FetchSlice(self._active.path, self._active.size, 0, start_offset, self._active.inode)
            return FetchSlice(segment.path, *found, segment.inode)

    def _past_empty(self, segment: LogSegment, offset: int, max_bytes: int, max_offset: Optional[int],
                    min_one_batch: bool, found: tuple[int, int, int]) -> tuple[LogSegment, tuple[int, int, int]]:
        """The first read holding records from ``segment`` on, else ``segment`` and its ``found``."""
        first = segment
        index = self._segments.index(segment)
        while True:
            if max_offset is not None and offset >= max_offset:
                return first, found
            nonempty = segment.read(offset, max_bytes, max_offset, min_one_batch, skip_empty=True)
            if nonempty is not None:
                return segment, nonempty
            index += 1
            if index >= len(self._segments):
                return first, found
            segment = self._segments[index]
            offset = segment.base_offset

    def offset_for_timestamp(self, timestamp_ms: int) -> Optional[tuple[int, int]]:
        """(offset, timestamp) of the first record with timestamp ≥ ``timestamp_ms``, or None."""
        with self._lock, self._disk():
            self._check_open()
            for segment in self._segments:
                if segment.max_timestamp < timestamp_ms or segment.next_offset <= self._log_start_offset:
                    continue
                for position, header in segment.timestamp_candidates(timestamp_ms, self._log_start_offset):
                    records = decode_payload(header, segment.read_batch(position, header))
                    match = pc.and_(pc.greater_equal(records.column("timestamp"), timestamp_ms),
                                    pc.greater_equal(records.column("offset"), self._log_start_offset))
                    row = pc.index(match, True).as_py()
                    if row >= 0:
                        return records.column("offset")[row].as_py(), records.column("timestamp")[row].as_py()
            return None

    def offset_of_max_timestamp(self) -> Optional[tuple[int, int]]:
        """(offset, timestamp) of the first record holding the log's largest timestamp, or None
        when it holds no record (Kafka's ListOffsets MAX_TIMESTAMP)."""
        with self._lock:
            self._check_open()
            largest = max((s.max_timestamp for s in self._segments if s.next_offset > self._log_start_offset),
                          default=-1)
            return self.offset_for_timestamp(largest) if largest >= 0 else None

    # --- compaction (the log cleaner: ember.log.cleaner) ------------------------------------------

    def now_ms(self) -> int:
        """The log's clock (tests set it)."""
        return self._now_ms()

    def cleanable(self, now_ms: Optional[int] = None) -> Optional[cleaner.Cleanable]:
        """What a cleaning may rewrite now: the sealed segments wholly below the last stable offset
        (no open transaction's records are touched) and older than min.compaction.lag.ms; None
        unless the log is compacted, open and has some."""
        now = self._now_ms() if now_ms is None else now_ms
        with self._lock:
            if self._closed or self._offline_reason is not None or not self._config.compact:
                return None
            segments = []
            for segment in self._segments[:-1]:
                if segment.next_offset > self._last_stable_offset or \
                        now - segment.max_timestamp < self._config.min_compaction_lag_ms:
                    break
                segments.append(segment)
            if not segments:
                return None
            end = segments[-1].next_offset
            first_dirty = min(max(self._first_dirty, segments[0].base_offset), end)
            dirty = [s for s in segments if s.next_offset > first_dirty]
            return cleaner.Cleanable(
                segments, first_dirty, end, clean_bytes=sum(s.size for s in segments if s not in dirty),
                dirty_bytes=sum(s.size for s in dirty), producer_last_batches=self._producers.last_batch_offsets(),
                aborted=self._txns.aborted_spans(),
                oldest_dirty_ms=dirty[0].rolling_timestamp() if dirty else -1)

    def install_cleaned(self, group: Sequence[LogSegment], swap: Path, removed_markers: Collection[int] = ()) -> bool:
        """Put the cleaned copy of the consecutive sealed segments ``group`` (one segment, its files
        in the committed ``swap`` directory) in their place; False, changing nothing, if they are no
        longer in the log as they were (retention, truncation). The old files linger as
        ``*.deleted`` for readers holding a FetchSlice of them. ``removed_markers``: the offsets of
        the transaction markers the copy left out; their aborted transactions leave the index."""
        with self._flush_lock, self._lock:
            self._check_open()
            if group[0] not in self._segments[:-1]:
                return False
            index = self._segments.index(group[0])
            if self._segments[index:index + len(group)] != list(group) or index + len(group) >= len(self._segments):
                return False
            end = group[-1].next_offset
            with self._disk(fatal=True):
                due = self._now_ms() + self._config.file_delete_delay_ms
                for old in group:
                    self._pending_deletes.append((due, old.rename_for_delete()))
                cleaner.finish_swap(self.directory, swap)
                cleaned = recovery.open_segment(self.directory, group[0].base_offset, self._config)
                try:
                    cleaned.open_sealed(end)
                except BaseException:
                    cleaned.close()
                    raise
                if cleaned.next_offset != end:
                    cleaned.close()
                    raise OSError(f"cleaned segment {cleaned.path} ends at {cleaned.next_offset}, not at {end}")
            self._set_segments(self._segments[:index] + [cleaned] + self._segments[index + len(group):])
            self._txns.forget_markers(removed_markers)
            return True

    def set_first_dirty(self, offset: int) -> None:
        """Record that the log is clean below ``offset`` (checkpointed; a crash only cleans again)."""
        with self._flush_lock:
            with self._lock:
                self._check_open()
                self._first_dirty = offset
            self._checkpoint(checkpoint.CLEANER_OFFSET, offset)

    @property
    def first_dirty_offset(self) -> int:
        """The log cleaner's checkpoint: the log was compacted below this offset."""
        return self._first_dirty

    # --- truncation, deletion, retention --------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop every record at or after ``offset`` (a follower diverged from its leader).

        Truncation is batch-aligned: a batch holding ``offset`` is dropped whole, so the log end
        may end up below ``offset``.
        """
        with self._flush_lock, self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                return
            # a half-done truncation cannot be undone: any disk failure takes the log offline
            with self._disk(fatal=True):
                if offset <= self._log_start_offset:
                    self._truncate_fully(offset)
                    return
                doomed = [s for s in self._segments[1:] if s.base_offset >= offset]
                self._set_segments(self._segments[:len(self._segments) - len(doomed)])
                self._delete_segments(doomed)
                self._active.truncate_to(offset)
                end = self.log_end_offset
                self._first_dirty = min(self._first_dirty, end)
                self._recovery_point = min(self._recovery_point, end)
                self._high_watermark = min(self._high_watermark, end)
                self._epochs.truncate_from_end(end)
                self._rebuild_from_headers(include_epochs=False)
                self._refresh_last_stable_offset()
            self._checkpoint(checkpoint.RECOVERY_POINT, self._recovery_point)
            self._checkpoint(checkpoint.HIGH_WATERMARK, self._high_watermark)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete all data and restart the log, empty, at ``offset``."""
        with self._flush_lock, self._lock, self._disk(fatal=True):
            self._check_open()
            self._truncate_fully(offset)

    def _truncate_fully(self, offset: int) -> None:
        doomed = self._segments
        self._set_segments([])
        self._delete_segments(doomed)
        self._set_segments([self._new_segment(offset)])
        self._log_start_offset = self._recovery_point = self._high_watermark = self._first_dirty = offset
        self._epochs.clear()
        self._producers.clear()
        self._txns.reset((), offset)
        self._refresh_last_stable_offset()
        self._unflushed_records = 0
        for name in (checkpoint.LOG_START_OFFSET, checkpoint.RECOVERY_POINT, checkpoint.HIGH_WATERMARK,
                     checkpoint.CLEANER_OFFSET):
            self._checkpoint(name, offset)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: advance the log start offset to ``offset`` (≤ high watermark) and
        delete segments wholly below it; returns the new log start offset."""
        with self._flush_lock, self._lock:
            self._check_open()
            if offset > self._high_watermark:
                raise errors.OffsetOutOfRange(
                    f"cannot delete records before {offset}: above the high watermark {self._high_watermark}")
            if offset > self._log_start_offset:
                self._advance_log_start(offset)
                with self._disk(fatal=True):
                    self._delete_oldest(retention.below_log_start(self._segments, offset))
            return self._log_start_offset

    def apply_retention(self, now_ms: Optional[int] = None) -> int:
        """Delete sealed segments past retention.ms / retention.bytes (returns how many) and
        forget producers idle past producer.id.expiration.ms."""
        now = self._now_ms() if now_ms is None else now_ms
        with self._flush_lock, self._lock:
            self._check_open()
            count = retention.deletable_count(
                self._segments, config=self._config, now_ms=now,
                log_start_offset=self._log_start_offset, high_watermark=self._high_watermark)
            with self._disk(fatal=True):
                self._delete_oldest(count)
            self._purge_deleted_files(now)
            self._producers.remove_expired(now, self._config.producer_id_expiration_ms)
            return count

    def _delete_oldest(self, count: int) -> None:
        if count == 0:
            return
        doomed = self._segments[:count]
        self._set_segments(self._segments[count:])
        self._delete_segments(doomed)
        self._advance_log_start(self._segments[0].base_offset)

    def _advance_log_start(self, offset: int) -> None:
        if offset <= self._log_start_offset:
            return
        self._log_start_offset = offset
        self._high_watermark = max(self._high_watermark, offset)
        self._producers.remove_before(offset)
        self._txns.remove_before(offset)
        self._refresh_last_stable_offset()
        try:  # not fatal: the old checkpoints are safe (open takes the larger of it and the first segment)
            with self._disk():
                self._epochs.truncate_from_start(offset)
            self._checkpoint(checkpoint.LOG_START_OFFSET, offset)
        except errors.StorageError as e:
            _log.warning("%s: log start offset %d not checkpointed yet (the next flush retries): %s",
                         self.directory, offset, e)

    def _delete_segments(self, segments: Sequence[LogSegment]) -> None:
        """Rename to ``*.deleted`` now (readers holding a FetchSlice may still open them), unlink
        after ``file.delete.delay.ms``."""
        due = self._now_ms() + self._config.file_delete_delay_ms
        for segment in segments:
            self._pending_deletes.append((due, segment.rename_for_delete()))
        self._purge_deleted_files(self._now_ms())

    def _purge_deleted_files(self, now_ms: int) -> None:
        keep = []
        for due, paths in self._pending_deletes:
            if due > now_ms:
                keep.append((due, paths))
                continue
            try:
                for path in paths:
                    path.unlink(missing_ok=True)
            except OSError as e:
                _log.warning("%s: cannot delete old segment files yet: %s", self.directory, e)
                keep.append((due, paths))
        self._pending_deletes = keep

    @property
    def closed(self) -> bool:
        """Closed or deleted: every further operation raises StorageError."""
        return self._closed

    def close(self) -> None:
        """Flush, checkpoint and close the files (only close them if the log is offline).
        Idempotent; the files are closed even if the flush fails."""
        with self._flush_lock:
            if self._closed:
                return
            try:
                if self._offline_reason is None:
                    self._flush()
                    self._write_snapshot()
            finally:
                with self._lock:
                    for segment in self._segments:
                        segment.close()
                    self._closed = True

    def _write_snapshot(self) -> None:
        """The producer state and transaction index at the log end, for the next open
        (``ember.log.producer_snapshot``). A failure only costs that open a rebuild from the
        segments."""
        with self._lock:
            if self.log_end_offset != self._recovery_point or self.log_end_offset == self._log_start_offset:
                return      # appended to since the flush, or empty: nothing to read on open
            producers, ongoing = self._producers.entries()
            snapshot = producer_snapshot.ProducerSnapshot(self.log_end_offset, self._epochs.latest_epoch, producers,
                                                          ongoing, self._txns.completed_to_keep())
            try:
                producer_snapshot.write(self.directory, snapshot)
            except OSError as e:
                _log.warning("no producer-state snapshot for %s (the next open reads every batch): %s",
                             self.directory, e)

    def rename_for_delete(self) -> Path:
        """Close the log without flushing and rename its directory to ``<name>.<uuid>-delete``
        (topic deletion; Kafka's naming); returns the new path. A rename costs the same whatever
        the log holds, so a topic of thousands of partitions leaves at once; its owner removes the
        renamed directory later, and a name of its own means a re-created partition's directory
        never meets the old one's files."""
        with self._flush_lock, self._lock:
            for segment in self._segments:
                segment.close()
            self._closed = True
        return rename_for_delete(self.directory)

    # --- helpers --------------------------------------------------------------------------------

    @property
    def _active(self) -> LogSegment:
        return self._segments[-1]

    def _set_segments(self, segments: list[LogSegment]) -> None:
        self._segments = segments
        self._bases = [s.base_offset for s in segments]

    def _new_segment(self, base_offset: int) -> LogSegment:
        return recovery.open_segment(self.directory, base_offset, self._config, create=True)

    def _segment_for(self, offset: int) -> LogSegment:
        return self._segments[max(0, bisect.bisect_right(self._bases, offset) - 1)]

    def _clamp(self, offset: int) -> int:
        return min(max(offset, self._log_start_offset), self.log_end_offset)

    def _check_range(self, offset: int) -> None:
        if not self._log_start_offset <= offset <= self.log_end_offset:
            raise errors.OffsetOutOfRange(
                f"offset {offset} is outside the log [{self._log_start_offset}, {self.log_end_offset}]"
                f" of {self.directory}")

    def _check_open(self) -> None:
        if self._offline_reason is not None:
            raise self._offline_error()
        if self._closed:
            raise errors.StorageError(f"log {self.directory} is closed")

    def _offline_error(self) -> errors.StorageError:
        return errors.StorageError(f"log {self.directory} is offline after a disk failure: "
                                   f"{self._offline_reason}")

    @contextlib.contextmanager
    def _disk(self, *, fatal: bool = False) -> Iterator[None]:
        """Disk failures (ENOSPC, EIO, ...) surface as the typed, retriable StorageError. Failures
        that leave the files unlike the in-memory state (``UntrustedFiles``: a failed fsync or
        undo; any OSError when ``fatal``) first take the log offline."""
        try:
            yield
        except UntrustedFiles as e:
            self._go_offline(str(e))
            raise self._offline_error() from e.cause
        except OSError as e:
            if fatal:
                self._go_offline(str(e))
                raise self._offline_error() from e
            raise errors.StorageError(f"{self.directory}: {e}") from e

    def _go_offline(self, reason: str) -> None:
        if self._offline_reason is None:
            _log.error("log %s goes offline: %s", self.directory, reason)
            self._offline_reason = reason

    def _rebuild_from_headers(self, *, include_epochs: bool) -> None:
        """Producer state, the transaction index (and, on open, missing epoch-cache entries) from
        every batch header and every marker."""
        batches = list(self._iter_headers())
        self._txns.reset(self._producers.rebuild(batches), self._high_watermark)
        if include_epochs:
            for header, _ in batches:
                if header.partition_leader_epoch > self._epochs.latest_epoch:
                    self._epochs.assign(header.partition_leader_epoch, header.base_offset)

    def _iter_headers(self) -> Iterator[tuple[BatchHeader, Optional[Marker]]]:
        """Each batch's header, with the marker of a control batch."""
        for segment in self._segments:
            try:
                for position, header in segment.iter_headers():
                    yield header, (read_marker(header, segment.read_batch(position, header))
                                   if is_control(header) else None)
            except (errors.CorruptSegment, errors.CorruptRecord) as e:  # reads there fail loudly; opening must not
                _log.error("skipping the rest of a damaged segment: %s", e)


def _validate(view: memoryview, max_batch_bytes: Optional[int], *,
              require_keys: bool = False) -> list[tuple[int, BatchHeader]]:
    """(position, header) of every batch, all checked (length, header, CRC, size) before any is
    written; raises CorruptRecord, InvalidRecord or MessageTooLarge. A producer's Kafka batch
    (``max_batch_bytes`` given: a leader append) has its records checked too, as Kafka's broker
    does: it is stored and served as it came, so a malformed one would fail every reader. With
    ``require_keys`` (a compacted topic) a record without a key is refused, as Kafka does."""
    batches, position = [], 0
    for header, raw in iter_batches(view):
        if max_batch_bytes is not None and header.size > max_batch_bytes:
            raise errors.MessageTooLarge(
                f"batch of {header.size} bytes exceeds max.message.bytes {max_batch_bytes}")
        keyless = 0
        if max_batch_bytes is not None and is_control(header):
            raise errors.InvalidRecord("a producer cannot write control batches: transaction markers are written "
                                       "by the partition leader when the transaction coordinator ends a transaction")
        if max_batch_bytes is not None and is_transactional(header) and header.producer_id < 0:
            raise errors.InvalidRecord("a transactional batch needs a producer id (InitProducerId with a "
                                       "transactional.id)")
        if max_batch_bytes is not None and (header.record_count == 0 or header.has_gaps):
            raise errors.InvalidRecord(f"a producer's batch of {header.record_count} records spans offset deltas "
                                       f"0..{header.last_offset_delta}: they must run 0..count-1")
        if max_batch_bytes is not None and header.is_kafka:
            keyless = kafka_v2.validate_records(header, raw)
        elif require_keys:
            keyless = stored_columns(header, raw).column("key").null_count
        if require_keys and keyless:
            raise errors.InvalidRecord(f"Compacted topic cannot accept message without key: {keyless} of the "
                                       f"{header.record_count} records of a batch have none (cleanup.policy="
                                       f"compact keeps each key's latest record, so every record needs a key)")
        batches.append((position, header))
        position += header.size
    if not batches:
        raise errors.CorruptRecord("no record batches to append")
    return batches


def _result(headers: Sequence[BatchHeader]) -> AppendResult:
    return AppendResult(headers[0].base_offset, headers[-1].last_offset,
                        max(h.max_timestamp for h in headers), sum(h.record_count for h in headers))

