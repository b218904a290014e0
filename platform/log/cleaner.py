"""The log cleaner's work on one log (``cleanup.policy=compact``): keep each key's latest record.

A cleaning takes the log's *cleanable* part: the sealed segments from the log start up to the first
segment that is active, reaches the high watermark, or is younger than ``min.compaction.lag.ms``.
Below the *first dirty offset* (the cleaner checkpoint) the log was cleaned before; from it on it is
*dirty*. The cleaning builds the latest offset of each key in the dirty part (columnar: keys and
offsets as Arrow arrays, a hash group-by), then rewrites the cleanable segments keeping a record
only if no later record of its key exists: an Arrow ``index_in`` per chunk of records and a filter
per batch, never a Python loop per record. When the key map would outgrow its memory bound (the
broker's ``log.cleaner.dedupe.buffer.size``), the dirty part is cleaned in several passes, up to a
segment boundary each. Consecutive segments that fit ``segment.bytes`` together are cleaned into
one, as Kafka groups them.

What a cleaning never changes: offsets (the log gets gaps; a rewritten batch keeps its base offset,
last offset delta, leader epoch and producer fields). The last batch of each idempotent producer
(its sequence state, which a restart rebuilds from batch headers) stays, with no records if none is
left (Kafka's cleaner keeps such empty batches too); the last batch of a cleaned group (so every
segment still ends where the next begins) stays as an empty placeholder of no producer if nothing
of it is left. Transaction markers go once no batch of their transaction is left and the delete
horizon stamped into them when that was found has passed (:class:`_Markers`, docs/log.md). A batch
that loses records is written as a Kafka RecordBatch v2 with the survivors at their offsets,
whatever its format was: v2 carries offset deltas, and every reader decodes it. Records without a
key are dropped, as in Kafka. Tombstones (null values) stay while their segment was cleaned less
than ``delete.retention.ms`` ago (told by the segment file's modification time, set to the log's
clock when it is written), so a consumer reading from the start sees the delete; after that the
next cleaning drops them.

Crash safety: a cleaned segment is written whole into ``<base>.cleaning/`` with the offset its group
ends at and fsynced, then that directory is renamed to ``<base>.swap/`` (the commit point), then
its files replace the group's (:func:`finish_swap`). Opening a log deletes ``*.cleaning``
directories and finishes ``*.swap`` ones (:func:`finish_interrupted`), so each group is either the
old segments or the cleaned one. Any mix of old and cleaned groups is consistent, because a record
is only ever removed in favour of a later record of its key that every cleaning keeps.
"""
from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc

from ember.log import checkpoint, recovery
from ember.log.checkpoint import fsync_dir
from ember.log.config import LogConfig
from ember.log.segment import MAX_RELATIVE_OFFSET, SEGMENT_SUFFIXES, LogSegment, base_offset_of, scan_batches, segment_path
from ember.record import kafka_v2
from ember.record.batch import decode_payload, stored_columns
from ember.record.control import delete_horizon, is_control, is_transactional, with_delete_horizon
from ember.record.header import (
    KAFKA_MAGIC,
    LOG_APPEND_TIME_FLAG,
    NO_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    Buffer,
)

if TYPE_CHECKING:
    from ember.log.log import Log

CLEANING_SUFFIX = ".cleaning"
SWAP_SUFFIX = ".swap"
#: in a cleaning's directory: the offset the segments it replaces end at
END_FILE = "end-offset"
#: Memory a key of the map costs beyond its bytes (its offset and the hash table's share).
KEY_OVERHEAD_BYTES = 24
#: Records looked up in the key map at once (one hash build of the map per chunk, never per batch).
CHUNK_RECORDS = 1 << 16
#: ember batches' Arrow codecs (header bits 0-2) -> the Kafka codec their cleaned v2 batch gets.
_KAFKA_CODEC_OF_ARROW = {0: kafka_v2.NONE, 1: kafka_v2.LZ4, 2: kafka_v2.ZSTD}

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cleanable:
    """The part of a log one cleaning may rewrite, as the log was when it was looked at."""
    segments: list[LogSegment]    # sealed, oldest first, each wholly below ``end``
    first_dirty: int              # cleaned before below this offset
    end: int                      # the first offset no cleaning may touch yet
    clean_bytes: int
    dirty_bytes: int
    #: the last batch of each idempotent producer: kept whole (offsets of those batches)
    producer_last_batches: frozenset[int] = field(default_factory=frozenset)
    #: producer id -> (first offset, marker offset) of its aborted transactions in the log: their
    #: records neither supersede a key nor survive a cleaning
    aborted: dict[int, list[tuple[int, int]]] = field(default_factory=dict)

    oldest_dirty_ms: int = -1     # the first dirty batch's timestamp (max.compaction.lag.ms counts from it)

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    def due(self, min_dirty_ratio: float, max_lag_ms: int, now_ms: int) -> bool:
        """Whether the log should be cleaned now: dirty enough, or a dirty record waited too long."""
        if self.first_dirty >= self.end:
            return False
        return self.dirty_ratio >= min_dirty_ratio or 0 <= self.oldest_dirty_ms <= now_ms - max_lag_ms


@dataclass
class CleanStats:
    """What one cleaning of one log did (Kafka's cleaner metrics are built from these)."""
    segments: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    keys: int = 0
    markers_removed: int = 0      # transaction markers left out (their transactions' batches were gone)
    first_dirty: int = 0
    end: int = 0
    seconds: float = 0.0

    @property
    def recopy_percent(self) -> float:
        """Share of the bytes read that were written back (Kafka's cleaner-recopy-percent)."""
        return 100.0 * self.bytes_written / self.bytes_read if self.bytes_read else 0.0


Throttle = Callable[[int], None]   # called with bytes read or written; sleeps to hold the I/O rate


def clean(log: "Log", *, dedupe_buffer_bytes: int, throttle: Optional[Throttle] = None,
          now_ms: Optional[int] = None) -> Optional[CleanStats]:
    """Clean ``log`` once if it has a dirty part; the stats, or None when there was nothing to do.
    Raises StorageError on a disk failure (the log's old segments stay in place)."""
    started = time.monotonic()
    cleanable = log.cleanable(now_ms)
    if cleanable is None or cleanable.first_dirty >= cleanable.end:
        return None
    now = log.now_ms() if now_ms is None else now_ms
    horizon = now - log.config.delete_retention_ms      # tombstones of segments cleaned before this go
    markers = _Markers(now, log.config.delete_retention_ms)
    try:
        keys, offsets, end = _key_map(cleanable, dedupe_buffer_bytes, throttle)
        stats = CleanStats(keys=len(keys), first_dirty=cleanable.first_dirty, end=end)
        for group in _groups([s for s in cleanable.segments if s.base_offset < end], log.config,
                             cleanable.first_dirty, horizon):
            drop = [s.next_offset <= cleanable.first_dirty and _mtime_ms(s) <= horizon for s in group]
            # "cleaned at" of the copy: now if it holds dirty records, else the latest of its segments', so
            # merging clean segments does not restart their tombstones' delete.retention.ms
            cleaned_at = now if any(s.next_offset > cleanable.first_dirty for s in group) else \
                max(_mtime_ms(s) for s in group)
            markers.removed = []
            swap = _rewrite(log, group, keys, offsets, cleanable, drop, cleaned_at, stats, markers,
                            throttle)
            if swap is None:
                for segment in group:
                    if segment.next_offset > cleanable.first_dirty:
                        _set_mtime(segment.path, now)   # its tombstones' delete.retention.ms counts from here
            elif not log.install_cleaned(group, swap, markers.removed):
                shutil.rmtree(swap, ignore_errors=True)     # the log changed meanwhile: the next cleaning redoes it
                return None
            else:
                stats.markers_removed += len(markers.removed)
            stats.segments += len(group)
    except FileNotFoundError:
        return None     # retention or a truncation took a segment from under the cleaning: the next one redoes it
    log.set_first_dirty(end)
    stats.seconds = time.monotonic() - started
    return stats


@dataclass
class _Markers:
    """What a cleaning does with transaction markers, met in offset order from the log's first batch
    (every segment below the pass's end is read, cleaned this time or not; all of it is below the
    last stable offset). A marker stays as it is while a batch of its transaction is kept before it
    (even one left empty: a rebuild of producer state would take it for an open transaction); once
    none is, it is stamped with a delete horizon (now + ``delete.retention.ms``,
    :func:`ember.record.control.with_delete_horizon`), and a cleaning past that horizon removes it:
    leaves it out, or, where the group must end, leaves a placeholder (an empty batch of no producer).
    Its producer's last batch stays as it is (:attr:`Cleanable.producer_last_batches`): a rebuild
    reads the producer's epoch and coordinator epoch there."""
    now_ms: int
    retention_ms: int
    #: producers with a transactional batch kept since their last marker
    live: set[int] = field(default_factory=set)
    #: offsets of the markers left out of the group being cleaned
    removed: list[int] = field(default_factory=list)

    def kept(self, header: BatchHeader) -> None:
        """A data batch was kept (with records or empty)."""
        if is_transactional(header):
            self.live.add(header.producer_id)

    def marker(self, header: BatchHeader, raw: Buffer, producer_last: bool, ends_group: bool
               ) -> Optional[tuple[BatchHeader, Buffer]]:
        """The batch to write in the marker ``raw``'s place (itself, stamped, or a placeholder where
        the group must end), None to leave it out."""
        if header.producer_id in self.live:
            self.live.discard(header.producer_id)       # the producer's next transaction starts after it
            return header, bytes(raw)
        horizon = delete_horizon(header)
        if horizon is None:
            stamped = with_delete_horizon(header, raw, self.now_ms + self.retention_ms)
            return BatchHeader.parse(stamped), stamped
        if horizon > self.now_ms or producer_last:
            return header, bytes(raw)
        self.removed.append(header.base_offset)
        return _placeholder(header) if ends_group else None


def _key_map(cleanable: Cleanable, budget: int, throttle: Optional[Throttle]) -> tuple[pa.Array, pa.Array, int]:
    """(keys, their latest offsets, the end of this pass): the latest offset of every key in the dirty
    segments, over as many whole segments as a map of ``budget`` bytes holds (at least one). The map
    is reduced to one entry per key after every ``CHUNK_RECORDS`` records read, so its memory follows
    the distinct keys, as Kafka's dedupe buffer does."""
    keys, offsets = pa.array([], pa.binary()), pa.array([], pa.int64())
    end = cleanable.first_dirty
    for segment in cleanable.segments:
        if segment.next_offset <= cleanable.first_dirty:
            continue
        seg_keys, seg_offsets, pending = [keys], [offsets], 0
        for _, header, raw in _batches(segment, throttle):
            if is_control(header) or _aborted(header, cleanable.aborted):
                continue
            columns = decode_payload(header, raw)
            keyed = columns.filter(pc.is_valid(columns.column("key")))
            seg_keys.append(keyed.column("key"))
            seg_offsets.append(keyed.column("offset"))
            pending += keyed.num_rows
            if pending >= CHUNK_RECORDS:
                merged = _latest(seg_keys, seg_offsets)
                seg_keys, seg_offsets, pending = [merged[0]], [merged[1]], 0
        merged = _latest(seg_keys, seg_offsets)
        size = merged[0].nbytes + KEY_OVERHEAD_BYTES * len(merged[0])
        if end > cleanable.first_dirty and size > budget:
            break                                   # the rest of the dirty part waits for the next pass
        (keys, offsets), end = merged, segment.next_offset
        if size >= budget:
            break
    return keys, offsets, end


def _aborted(header: BatchHeader, aborted: dict[int, list[tuple[int, int]]]) -> bool:
    """Whether the batch belongs to an aborted transaction (as Kafka's cleaner, which removes
    them: a read_committed reader never sees them, and kept they would supersede committed values)."""
    spans = aborted.get(header.producer_id) if is_transactional(header) else None
    return spans is not None and any(first <= header.base_offset <= last for first, last in spans)


def _latest(keys: list[pa.Array], offsets: list[pa.Array]) -> tuple[pa.Array, pa.Array]:
    """Each distinct key's largest offset (a hash group-by)."""
    latest = pa.table({"key": pa.concat_arrays(keys), "offset": pa.concat_arrays(offsets)}) \
        .group_by("key", use_threads=False).aggregate([("offset", "max")])
    return latest.column("key").combine_chunks(), latest.column("offset_max").combine_chunks()


def _batches(segment: LogSegment, throttle: Optional[Throttle]) -> Iterator[tuple[int, BatchHeader, memoryview]]:
    """The segment's batches, CRC-checked, read through the cleaner's own descriptor."""
    fd = os.open(segment.path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        for position, header, raw in scan_batches(fd, 0, size):
            if throttle is not None:
                throttle(header.size)
            yield position, header, raw
    finally:
        os.close(fd)


def _mtime_ms(segment: LogSegment) -> int:
    return os.stat(segment.path).st_mtime_ns // 1_000_000


def _set_mtime(path: Path, now_ms: int) -> None:
    """Mark a segment file cleaned at ``now_ms`` (the log's clock)."""
    os.utime(path, ns=(now_ms * 1_000_000, now_ms * 1_000_000))


def _groups(segments: list[LogSegment], config: LogConfig, first_dirty: int, horizon: int
            ) -> Iterator[list[LogSegment]]:
    """Consecutive segments whose sizes together fit one segment (``segment.bytes``, its index limits
    and 32-bit relative offsets), as Kafka's cleaner groups them: cleaned together into one, so a
    compacted log's segment count shrinks as it does. What may share a group is bounded by the
    tombstones' clock (a segment file's time of cleaning): dirty segments group with dirty ones (their
    copy is cleaned now); clean segments only once past ``delete.retention.ms`` (their tombstones go
    in this cleaning, so no clock is left to keep); a clean segment still inside it stays alone, else
    merging would move its tombstones' clock, or a neighbour's, at every cleaning."""
    def kind(segment: LogSegment) -> object:
        if segment.next_offset > first_dirty:
            return "dirty"
        return "past" if _mtime_ms(segment) <= horizon else segment

    group: list[LogSegment] = []
    size = 0
    for segment in segments:
        if group and (size + segment.size > config.segment_bytes
                      or segment.next_offset - group[0].base_offset > MAX_RELATIVE_OFFSET
                      or kind(segment) != kind(group[0]) or kind(segment) is segment):
            yield group
            group, size = [], 0
        group.append(segment)
        size += segment.size
    if group:
        yield group


def _rewrite(log: "Log", group: list[LogSegment], keys: pa.Array, offsets: pa.Array, cleanable: Cleanable,
             drop_tombstones: list[bool], cleaned_at_ms: int, stats: CleanStats, markers: _Markers,
             throttle: Optional[Throttle]) -> Optional[Path]:
    """Write the cleaned copy of ``group`` as one segment into ``<base>.cleaning/`` (batches stream
    through in chunks: memory stays a chunk's, whatever the segment size) with the offset the group
    ends at, fsync it all, and commit it by renaming the directory to ``<base>.swap/``. None, and
    nothing kept, if the group is one segment in which nothing changed."""
    first = group[0]
    cleaning = segment_path(first.path.parent, first.base_offset, CLEANING_SUFFIX)
    shutil.rmtree(cleaning, ignore_errors=True)
    cleaning.mkdir()
    cleaned = LogSegment(cleaning, first.base_offset, index_interval_bytes=log.config.index_interval_bytes,
                         index_max_bytes=log.config.segment_index_bytes, create=True)
    changed = len(group) > 1
    try:
        for segment, drop in zip(group, drop_tombstones):
            for out, chunk_changed in _cleaned_chunks(segment, keys, offsets, cleanable, drop,
                                                      segment is group[-1], stats, markers, throttle):
                changed = changed or chunk_changed
                if out:
                    cleaned.append([h for h, _ in out], [b for _, b in out])
        if not changed:
            cleaned.close()
            shutil.rmtree(cleaning)
            return None
        cleaned.seal()
        written = cleaned.size
    finally:
        cleaned.close()
    _set_mtime(cleaned.path, cleaned_at_ms)
    if throttle is not None:
        throttle(written)
    stats.bytes_written += written
    checkpoint.write_offset(cleaning / END_FILE, group[-1].next_offset)
    fsync_dir(cleaning)
    swap = segment_path(first.path.parent, first.base_offset, SWAP_SUFFIX)
    os.rename(cleaning, swap)                 # the commit point
    fsync_dir(first.path.parent)
    return swap


Chunk = list[tuple[BatchHeader, memoryview, pa.RecordBatch]]


def _cleaned_chunks(segment: LogSegment, keys: pa.Array, offsets: pa.Array, cleanable: Cleanable,
                    drop_tombstones: bool, last_of_group: bool, stats: CleanStats, markers: _Markers,
                    throttle: Optional[Throttle]) -> Iterator[tuple[list[tuple[BatchHeader, Buffer]], bool]]:
    """The kept batches of ``segment``, about ``CHUNK_RECORDS`` records' worth at a time, and whether
    any record of the chunk went."""
    chunk: Chunk = []
    count = 0
    for _, header, raw in _batches(segment, throttle):
        columns = decode_payload(header, raw)
        chunk.append((header, raw, columns))
        count += columns.num_rows
        if count >= CHUNK_RECORDS:
            yield _clean_chunk(chunk, keys, offsets, cleanable, drop_tombstones, False, stats, markers)
            chunk, count = [], 0
    if chunk:
        yield _clean_chunk(chunk, keys, offsets, cleanable, drop_tombstones, last_of_group, stats, markers)


def _clean_chunk(chunk: Chunk, keys: pa.Array, offsets: pa.Array, cleanable: Cleanable,
                 drop_tombstones: bool, ends_group: bool, stats: CleanStats, markers: _Markers
                 ) -> tuple[list[tuple[BatchHeader, Buffer]], bool]:
    """One chunk's kept batches: one map lookup for the whole chunk, then a filter per batch.
    Records of aborted transactions go; transaction markers are decided by ``markers``
    (:class:`_Markers`)."""
    records = pa.Table.from_batches([columns for _, _, columns in chunk]).combine_chunks()
    keep_all = _keep(records, keys, offsets, drop_tombstones)
    out: list[tuple[BatchHeader, Buffer]] = []
    changed, start = False, 0
    for index, (header, raw, columns) in enumerate(chunk):
        keep = keep_all.slice(start, columns.num_rows)
        start += columns.num_rows
        stats.records_read += columns.num_rows
        stats.bytes_read += header.size
        # the batch must stay, empty if need be: the segment's end offset (any batch there will do), the
        # producer's sequence and epochs (the batch itself)
        ends = ends_group and index == len(chunk) - 1
        producer_last = header.base_offset in cleanable.producer_last_batches
        if is_control(header):
            marker = markers.marker(header, raw, producer_last, ends)
            changed = changed or marker is None or marker[0] is not header
            if marker is not None:
                out.append(marker)
            continue
        if _aborted(header, cleanable.aborted):
            keep = pa.array([False] * columns.num_rows, pa.bool_())
        written, batch_changed = _clean_batch(header, raw, columns, keep, producer_last, ends, stats)
        changed = changed or batch_changed
        if written is not None:
            out.append(written)
            markers.kept(written[0])
    return out, changed


def _clean_batch(header: BatchHeader, raw: memoryview, columns: pa.RecordBatch, keep: pa.Array,
                 producer_last: bool, ends_group: bool, stats: CleanStats
                 ) -> tuple[Optional[tuple[BatchHeader, Buffer]], bool]:
    """A data batch after its filter ``keep``: what to write (itself, its survivors, empty, a
    placeholder, or None) and whether that is a change."""
    kept = pc.sum(keep).as_py() or 0
    if columns.num_rows == 0:             # an empty batch an earlier cleaning left
        if producer_last or (ends_group and header.producer_id < 0):
            return (header, bytes(raw)), False
        return (_placeholder(header), True) if ends_group else (None, True)
    if kept == 0 and producer_last:
        empty = kafka_v2.empty_batch(header)
        return (BatchHeader.parse(empty), empty), True
    if kept == 0 and ends_group:
        return _placeholder(header), True
    stats.records_kept += kept
    if kept == columns.num_rows:
        return (header, bytes(raw)), False
    if kept == 0:
        return None, True
    rebuilt = _cleaned_batch(header, raw, columns, keep)
    return (BatchHeader.parse(rebuilt), rebuilt), True


def _placeholder(header: BatchHeader) -> tuple[BatchHeader, bytes]:
    """An empty batch spanning ``header``'s offsets that belongs to no producer and no transaction:
    what stays of a batch kept only because the segment must end at its last offset (a producer's
    batch there, even empty, would still count as its transaction's: a rebuild would reopen it were
    its marker gone)."""
    empty = kafka_v2.empty_batch(header._replace(
        attributes=header.attributes & LOG_APPEND_TIME_FLAG, first_timestamp=header.max_timestamp,
        producer_id=NO_PRODUCER_ID, producer_epoch=NO_EPOCH, base_sequence=NO_SEQUENCE))
    return BatchHeader.parse(empty), empty


def _keep(columns: pa.Table, keys: pa.Array, offsets: pa.Array, drop_tombstones: bool) -> pa.Array:
    """Which of the decoded records survive: keyed, not superseded by a later record of their key in
    the dirty part, and not a tombstone past its retention."""
    key = columns.column("key")
    latest = pc.take(offsets, pc.index_in(key, value_set=keys))
    keep = pc.and_(pc.is_valid(key), pc.or_kleene(pc.is_null(latest),
                                                  pc.greater_equal(columns.column("offset"), latest)))
    if drop_tombstones:
        keep = pc.and_(keep, pc.is_valid(columns.column("value")))
    keep = pc.fill_null(keep, False)
    return keep.combine_chunks() if isinstance(keep, pa.ChunkedArray) else keep


def _cleaned_batch(header: BatchHeader, raw: Buffer, columns: pa.RecordBatch, keep: pa.Array) -> bytes:
    """The surviving records of one batch as a Kafka v2 batch at their offsets (same base offset, last
    offset delta, epoch, producer fields and timestamp type)."""
    if header.magic == KAFKA_MAGIC:
        codec = header.codec
        records = pa.RecordBatch.from_arrays([columns.column(n) for n in ("key", "value", "timestamp", "headers")],
                                             names=["key", "value", "timestamp", "headers"])
    else:
        codec = header.kafka_codec or _KAFKA_CODEC_OF_ARROW[header.codec]
        records = stored_columns(header, raw)
    deltas = pc.subtract(columns.column("offset").filter(keep), header.base_offset).cast(pa.int32())
    target = header._replace(magic=KAFKA_MAGIC, attributes=header.attributes & (LOG_APPEND_TIME_FLAG | TRANSACTIONAL_FLAG))
    return kafka_v2.encode_batch(target, records.filter(keep), codec, deltas)


def finish_interrupted(directory: Path) -> bool:
    """On opening a log: drop cleanings that did not reach their commit point (``*.cleaning/``) and
    finish those that did (``*.swap/``, see :func:`finish_swap`); True if it finished one (the
    segments changed since the log was last open)."""
    finished = False
    for path in sorted(directory.iterdir()):
        if not path.is_dir():
            continue
        if path.name.endswith(CLEANING_SUFFIX):
            _log.info("%s: dropping an interrupted cleaning", path)
            shutil.rmtree(path)
        elif path.name.endswith(SWAP_SUFFIX):
            _log.info("%s: finishing an interrupted cleaning", path)
            finish_swap(directory, path)
            finished = True
    return finished


def finish_swap(directory: Path, swap: Path) -> None:
    """Put a committed cleaned segment in place: its files replace the first old segment's under the
    same names, and the other old segments it replaces (based below the offset it ends at) go.
    Idempotent, so a crash in the middle is finished by the next open."""
    end = checkpoint.read_offset(swap / END_FILE)
    base = base_offset_of(swap)
    if base is None:
        raise OSError(f"{swap}: not named by a base offset")
    if end is None:       # the end file goes last (the removal below): the rest was done before
        shutil.rmtree(swap)
        fsync_dir(directory)
        return
    for part in sorted(swap.iterdir()):
        if part.name != END_FILE:
            os.replace(part, directory / part.name)
    for later in recovery.segment_bases(directory):
        if base < later < end:
            for suffix in SEGMENT_SUFFIXES:
                segment_path(directory, later, suffix).unlink(missing_ok=True)
    fsync_dir(directory)
    shutil.rmtree(swap)   # holds only the end file now
    fsync_dir(directory)


