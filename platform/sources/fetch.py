"""Executor side: the records of one :class:`OffsetRange`, as Arrow batches of the source's columns.

Two paths give identical rows. ``direct`` reads segment files under ``storageRoot`` with
``ember.log.reader`` (no broker round trip): only in-sync copies, only offsets below the high
watermark the driver planned (which every in-sync copy holds) and only what the copy's broker has
fsynced (its recovery point, or its sealed segments), so a shared mount (NFS) never shows it a
missing or torn tail. ``broker`` fetches through the brokers with the consumer's columnar
``poll_batches``. ``auto`` reads directly what it can and fetches the rest.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Generator, Iterator, Optional

import pyarrow as pa

from ember.client import Consumer, TopicPartition
from ember.errors import CorruptRecord, CorruptSegment, EmberError, ErrorCode, KafkaTimeoutError, OffsetOutOfRange
from ember.log import checkpoint
from ember.log.data_dir import META_FILE, broker_id_of
from ember.log.reader import read_offset_range
from ember.log.recovery import segment_bases
from ember.record.batch import slice_offsets
from ember.sources.options import ReaderOptions
from ember.sources.planning import OffsetRange, RangeGroup, Task, check_data_loss
from ember.sources.schema import to_spark_batch

FETCH_BYTES = 16 * 1024 * 1024  # per fetch: a task reads one partition, so large fetches pay off
FLUSH_POLL_S = 0.2  # readPath=direct: how often to look again for a copy's broker to flush the rest
# what a damaged or vanishing copy raises: try the next copy (or the brokers) instead
UNREADABLE_COPY = (CorruptSegment, CorruptRecord, pa.ArrowException, OSError)

log = logging.getLogger(__name__)


class DirectReadError(EmberError):
    """readPath=direct: no readable in-sync copy under storageRoot holds the planned offsets."""
    code = ErrorCode.KAFKA_STORAGE_ERROR
    hint = "use readPath=auto (falls back to the brokers) or point storageRoot at the brokers' data dirs"


class FetchTimeout(KafkaTimeoutError):
    """A broker fetch made no progress within fetchTimeoutMs."""
    hint = "check that the brokers are up (`ember cluster status`) or raise fetchTimeoutMs"


def read_task(task: Task, options: ReaderOptions, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """A planned Spark task's records: its ranges one after the other, in the task's order, each
    in offset order, whichever path gives them -- the same rows in the same order on every run
    (exactly-once writes place rows by their position in the task). Stored copies give what they
    can (readPath direct or auto); the rest of every range comes through the brokers, all ranges
    of a packed group with one consumer (a consumer per range made a group of 1,000 small ranges
    1,000 connections and metadata requests one after the other); a range that arrives ahead of
    its turn is held until the ranges before it are done."""
    pieces = task.ranges if isinstance(task, RangeGroup) else (task,)
    order = _InTaskOrder(len(pieces))
    rest: list[tuple[OffsetRange, int]] = []
    for index, piece in enumerate(pieces):
        position = yield from _passed_on(_read_stored(piece, options, target), order, index)
        if position < piece.end:
            rest.append((piece, position))
        else:
            yield from order.finish(index)
    index_of = {piece: index for index, piece in enumerate(pieces)}
    for wave in _distinct_partitions(rest):
        for piece, fetched in _read_broker(wave, options, target):
            yield from order.add(index_of[piece], fetched) if fetched is not None else order.finish(index_of[piece])


def _passed_on(batches: Generator[pa.RecordBatch, None, int], order: "_InTaskOrder", index: int
               ) -> Generator[pa.RecordBatch, None, int]:
    """Range ``index``'s ``batches`` through ``order``; returns what ``batches`` returns."""
    while True:
        try:
            batch = next(batches)
        except StopIteration as done:
            return int(done.value)
        yield from order.add(index, batch)


class _InTaskOrder:
    """Passes on a task's batches range by range, in the task's order: a range's batches go out as
    they come while every range before it is finished, and are held until then otherwise."""

    def __init__(self, count: int) -> None:
        self._held: list[list[pa.RecordBatch]] = [[] for _ in range(count)]
        self._finished = [False] * count
        self._turn = 0   # the range whose batches go out as they come

    def add(self, index: int, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        if index == self._turn:
            yield batch
        else:
            self._held[index].append(batch)

    def finish(self, index: int) -> Iterator[pa.RecordBatch]:
        """Mark range ``index`` complete; the held batches of the ranges whose turn comes now."""
        self._finished[index] = True
        while self._turn < len(self._finished) and self._finished[self._turn]:
            self._turn += 1
            if self._turn < len(self._held):
                held, self._held[self._turn] = self._held[self._turn], []
                yield from held


def _distinct_partitions(ranges: list[tuple[OffsetRange, int]]) -> list[list[tuple[OffsetRange, int]]]:
    """The ranges in waves, each wave at most one range per partition, in offset order: a packed
    task may hold neighbouring pieces of one partition (``minPartitions`` split it), and a
    consumer holds one position per partition."""
    waves: list[list[tuple[OffsetRange, int]]] = []
    for item in sorted(ranges, key=lambda item: item[0].start):
        key = (item[0].topic, item[0].partition)
        wave = next((w for w in waves if all((r.topic, r.partition) != key for r, _ in w)), None)
        if wave is None:
            waves.append([item])
        else:
            wave.append(item)
    return waves


def _read_stored(task: OffsetRange, options: ReaderOptions, target: pa.Schema
                 ) -> Generator[pa.RecordBatch, None, int]:
    """The range's records from stored copies under storageRoot, as far as they go (none with
    readPath=broker); returns the offset reached. readPath=direct waits for the brokers to flush
    and fails if the copies cannot give the whole range."""
    position = task.start
    problems: list[str] = []
    if options.read_path != "broker" and options.storage_root:
        roots = [Path(part.strip()) for part in options.storage_root.split(",") if part.strip()]
        deadline = time.monotonic() + options.fetch_timeout_ms / 1000
        while True:
            before = position
            position, problems, unflushed = yield from _read_direct(task, position, roots, options, target)
            # auto: the brokers serve what is not flushed yet; direct: wait for the brokers to flush
            if position >= task.end or options.read_path != "direct" or not unflushed:
                break
            if position > before:
                deadline = time.monotonic() + options.fetch_timeout_ms / 1000
            elif time.monotonic() > deadline:
                problems.append(f"waited fetchTimeoutMs={options.fetch_timeout_ms} for the brokers to flush "
                                f"offset {position}")
                break
            time.sleep(FLUSH_POLL_S)
    if position < task.end and options.read_path == "direct":
        raise DirectReadError(
            f"readPath=direct: no readable in-sync copy of topic {task.topic!r} partition {task.partition} "
            f"holds offsets [{position}, {task.end}) under storageRoot {options.storage_root} "
            f"(ISR {list(task.replicas)}): {'; '.join(problems) or 'no copy found'}")
    return position


def _read_direct(task: OffsetRange, position: int, roots: list[Path], options: ReaderOptions, target: pa.Schema
                 ) -> Generator[pa.RecordBatch, None, tuple[int, list[str], bool]]:
    """Batches from ``position`` on, from the first copy that has them, then the next copy from
    where it stopped. Returns the offset it got to (the rest is left to the broker path), why the
    copies found could not give more, and whether one of them only lacked flushed data (so waiting
    can help). A lagging, unflushed, truncated or damaged copy ends early, never yields wrong
    offsets, and is never read past its flushed end."""
    copies, problems = find_copies(roots, task.topic, task.partition, task.replicas)
    unflushed = False
    while copies and position < task.end:
        copy = copies[0]
        try:
            stop = min(task.end, flushed_end(copy))
        except OSError as exc:
            problems.append(f"{copy}: {exc}")
            copies.pop(0)
            continue
        if stop < task.end:
            unflushed = True
            problems.append(f"{copy} is flushed only up to offset {stop}")
        batches = read_offset_range(copy, position, stop, committed=options.committed) if stop > position else iter(())
        while True:
            try:
                batch = next(batches, None)  # contiguous, trimmed
            except OffsetOutOfRange as exc:
                skipped_to = check_data_loss(task.topic, task.partition, position,
                                             _log_start(task, options), options.fail_on_data_loss)
                if skipped_to > position:
                    position = skipped_to
                    batches = read_offset_range(copy, position, stop, committed=options.committed) \
                        if stop > position else iter(())
                    continue  # retention deleted what we wanted: read the same copy from the log start
                problems.append(f"{copy} stops early ({exc})")  # it lags behind the high watermark
                break
            except UNREADABLE_COPY as exc:
                log.warning("topic %r partition %d: cannot read offset %d from %s (%s: %s); trying the next "
                            "in-sync copy%s", task.topic, task.partition, position, copy, type(exc).__name__, exc,
                            "" if options.read_path == "direct" else " or the brokers")
                problems.append(f"{copy} is unreadable at offset {position} ({type(exc).__name__}: {exc})")
                break
            if batch is None:
                # the reader got to ``stop``: offsets without a record to hand out (transaction markers,
                # aborted or cleaned records) end a range as well as records do
                position = max(position, stop)
                break
            position = batch.column("offset")[batch.num_rows - 1].as_py() + 1
            yield to_spark_batch(batch, task.topic, task.partition, target)
        copies.pop(0)
    return position, problems, unflushed


def flushed_end(copy: Path) -> int:
    """The offset below which ``copy`` is safe to read from another host: its broker's recovery
    point checkpoint (everything below was fsynced), or the base of its newest segment when that is
    larger (every older segment was sealed and fsynced when the log rolled). The active segment's
    unflushed tail may be missing or torn on a shared mount (NFS)."""
    recovery_point = checkpoint.read_offset(copy / checkpoint.RECOVERY_POINT) or 0
    bases = segment_bases(copy)
    return max(recovery_point, bases[-1] if bases else 0)


def find_copies(roots: list[Path], topic: str, partition: int,
                replicas: tuple[int, ...]) -> tuple[list[Path], list[str]]:
    """The copies of a partition under ``roots`` that may be read, in the order of ``replicas``
    (the ISR, leader first), and why each other copy found is not read.

    Each root is either one broker log dir (holding ``<topic>-<partition>/``) or a directory of
    them (a broker with several ``log.dirs`` has its copy in one of them). A copy is read only
    when its owner, told by its log dir's ``meta.properties`` (brokers write it) or a
    ``broker-<id>`` name, is in ``replicas`` -- even when it is the only copy: a replica outside
    the ISR (a stale former leader) may hold records that were never committed, below the high
    watermark too, and a copy whose owner cannot be told may be such a replica. Those are left to
    the brokers (``auto``) or fail (``direct``).
    """
    name = f"{topic}-{partition}"
    candidates = [d for root in roots for d in [root / name, *sorted(root.glob(f"*/{name}"))] if d.is_dir()]
    owners = {d: broker_id_of(d.parent) for d in candidates}
    copies = [d for broker in replicas for d in candidates if owners[d] == broker]
    problems = [f"{d} not read: its owner is unknown (no {META_FILE} with broker.id, no broker-<id> name)"
                if owners[d] is None else f"{d} not read: broker {owners[d]} is not in the ISR"
                for d in candidates if d not in copies]
    return copies, problems


def _read_broker(ranges: list[tuple[OffsetRange, int]], options: ReaderOptions,
                 target: pa.Schema) -> Iterator[tuple[OffsetRange, Optional[pa.RecordBatch]]]:
    """The ranges' records from ``position`` on, through the brokers with one consumer: every
    partition in each fetch, each partition's batches in offset order as they arrive, tagged with
    their range; ``(range, None)`` once a range is complete."""
    tasks = {TopicPartition(task.topic, task.partition): task for task, _ in ranges}
    positions = {TopicPartition(task.topic, task.partition): position for task, position in ranges}
    consumer = Consumer(bootstrap_servers=options.bootstrap, enable_auto_commit=False, auto_offset_reset="none",
                        max_partition_fetch_bytes=FETCH_BYTES, fetch_max_bytes=FETCH_BYTES,
                        isolation_level=options.isolation_level, **options.security.options())
    try:
        consumer.assign(list(tasks))
        for tp, position in positions.items():
            consumer.seek(tp, position)
        deadline = time.monotonic() + options.fetch_timeout_ms / 1000
        while positions:
            try:
                fetched = consumer.poll_batches(timeout_ms=500)
            except OffsetOutOfRange as exc:
                moved = exc.partitions.keys() & positions.keys()
                if not moved:
                    raise
                for tp in moved:
                    task = tasks[tp]
                    positions[tp] = check_data_loss(task.topic, task.partition, positions[tp],
                                                    _log_start(task, options), options.fail_on_data_loss)
                    if positions[tp] >= task.end:
                        del positions[tp]         # retention took the rest of the range
                        yield task, None
                    else:
                        consumer.seek(tp, positions[tp])
                if positions:
                    consumer.assign(list(positions))
                continue
            done = False
            for tp in list(positions):
                task = tasks[tp]
                batch = fetched.get(tp)
                if batch is not None:
                    batch = slice_offsets(batch, positions[tp], task.end)
                    if batch.num_rows:
                        deadline = time.monotonic() + options.fetch_timeout_ms / 1000
                        yield task, to_spark_batch(batch, task.topic, task.partition, target)
                # the consumer's position also moves past offsets a log cleaning removed
                moved_to = consumer.position(tp)
                if moved_to > positions[tp]:
                    positions[tp] = moved_to
                    deadline = time.monotonic() + options.fetch_timeout_ms / 1000
                if positions[tp] >= task.end:
                    del positions[tp]
                    done = True
                    yield task, None
            if done and positions:
                consumer.assign(list(positions))   # fetch no further past a finished range's end
            if positions and time.monotonic() > deadline:
                tp, position = min(positions.items(), key=lambda item: item[1] - tasks[item[0]].start)
                raise FetchTimeout(
                    f"no records of topic {tp.topic!r} partition {tp.partition} at offset {position} "
                    f"within fetchTimeoutMs={options.fetch_timeout_ms} (planned up to {tasks[tp].end})")
    finally:
        consumer.close()


def _log_start(task: OffsetRange, options: ReaderOptions) -> int:
    """The partition's log start now, asked of the brokers (retention moved it under our feet)."""
    tp = TopicPartition(task.topic, task.partition)
    consumer = Consumer(bootstrap_servers=options.bootstrap, enable_auto_commit=False, **options.security.options())
    try:
        return int(consumer.beginning_offsets([tp])[tp])
    finally:
        consumer.close()
