"""The producer's record accumulator: per-partition batches waiting for the sender thread.

``append`` only pushes Python objects onto lists; the Arrow payload is built once, by the sender,
when the batch leaves. The common append (a bytes record into an open batch with room) is
done in C by :attr:`RecordAccumulator.appender`, which ``Producer.send`` is (``ember.client._append``):
it holds the bytes in use and writes a batch's lists, size and count (a C base of
:class:`ProducerBatch`) under the same lock as this module. Memory is bounded by ``buffer_memory``: a
full buffer blocks ``append`` up to ``max_block_ms``.

Batches of one partition leave in order. A batch that must be retried goes back to the *front*
of its partition's queue in sequence order, and :meth:`drain` holds the partition until it is
the only one in flight, so retries never reorder records (and keep their idempotent sequence).
"""
from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Iterable, Literal, Optional, overload

import pyarrow as pa

from ember.client._append import BatchRecords, RecordAppender
from ember.client.futures import FutureRecordMetadata, ProduceResult
from ember.errors import KafkaTimeoutError
from ember.record.schema import RECORD_SCHEMA
from ember.wire.types import TopicPartition

#: Per-record bytes on top of key and value in the Arrow payload (offsets, timestamp, validity; measured ~29).
RECORD_OVERHEAD = 32
#: Bytes of an Arrow IPC stream around the columns (schema message, batch metadata, padding).
BATCH_OVERHEAD = 1024

_HEADERS_TYPE = RECORD_SCHEMA.field("headers").type

#: A record's headers: (key, value) pairs, a value may be None.
Headers = list[tuple[str, Optional[bytes]]]


def record_size(key: Optional[bytes], value: Optional[bytes], headers: Optional[Headers]) -> int:
    """Estimated encoded size of one record, used for batch.size and buffer.memory accounting."""
    size = RECORD_OVERHEAD + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    if headers:
        size += sum(len(k) + (len(v) if v is not None else 0) + 8 for k, v in headers)
    return size


class ProducerBatch(BatchRecords):
    """Records for one partition, sent (and retried) as one unit. ``keys``, ``values``,
    ``timestamps``, ``headers``, ``size``, ``count`` and ``future`` are fields of the C base."""

    __slots__ = ("tp", "table", "created", "settled", "attempts", "retry_at", "base_sequence", "encoded",
                 "last_error", "maybe_written")

    def __init__(self, tp: TopicPartition, now: float, table: Optional[pa.Table] = None, size: int = 0) -> None:
        self.tp = tp
        self.keys: list[Optional[bytes]] = []
        self.values: list[Optional[bytes]] = []
        self.timestamps: list[int] = []
        self.headers: list[Optional[Headers]] = []
        self.table = table
        self.size = size
        self.count = 0 if table is None else table.num_rows
        self.created = now
        self.future: Future[ProduceResult] = Future()
        # Done once ``future`` is resolved *and* its callbacks have run: Future wakes waiters
        # before it runs callbacks, and flush() promises that callbacks have run.
        self.settled: Future[None] = Future()
        self.attempts = 0
        self.retry_at = 0.0
        self.base_sequence = -1
        self.encoded: Optional[bytes] = None
        self.last_error: Optional[BaseException] = None
        #: A send of it ended without saying it was not written (a timeout, a lost connection,
        #: an append not replicated in time): only its own producer id and sequence may resend it.
        self.maybe_written = False

    def records(self) -> pa.Table:
        """The batch's records as a RECORD_SCHEMA table (built from the lists on first call)."""
        if self.table is None:
            headers = self.headers
            self.table = pa.Table.from_arrays([
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.array(self.timestamps, pa.int64()),
                pa.nulls(self.count, _HEADERS_TYPE) if not any(headers) else pa.array(
                    [None if h is None else [{"key": k, "value": v} for k, v in h] for h in headers],
                    _HEADERS_TYPE),
            ], schema=RECORD_SCHEMA)
            self.keys, self.values, self.timestamps, self.headers = [], [], [], []
        return self.table


class RecordAccumulator:
    """Open and sealed batches per partition, bounded by ``buffer_memory`` bytes."""

    def __init__(self, *, batch_size: int, buffer_memory: int, linger_ms: float) -> None:
        self.batch_size = batch_size
        self.buffer_memory = buffer_memory
        self.linger_s = linger_ms / 1000
        self.flushing = 0
        self.closing = False
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._open: dict[TopicPartition, ProducerBatch] = {}   # the batch append() adds to
        self._in_flight: dict[TopicPartition, list[ProducerBatch]] = {}
        self._lock = threading.Lock()
        #: The C append path (what ``Producer.send`` is once configured); it holds :attr:`used`.
        self.appender = RecordAppender(self._open, self._lock, batch_size, buffer_memory, FutureRecordMetadata)
        self._space = threading.Condition(self._lock)
        self.wakeup = threading.Event()   # set when the sender should look again

    @property
    def used(self) -> int:
        """Bytes of queued records (``buffer_memory``'s count); written under the lock only."""
        return self.appender.used

    @used.setter
    def used(self, value: int) -> None:
        self.appender.used = value

    # -- producer side -----------------------------------------------------------------------

    @overload
    def append(self, tp: TopicPartition, timestamp: int, key: Optional[bytes], value: Optional[bytes],
               headers: Optional[Headers], size: int, max_block_s: float,
               abort_on_new_batch: Literal[False] = False) -> FutureRecordMetadata: ...
    @overload
    def append(self, tp: TopicPartition, timestamp: int, key: Optional[bytes], value: Optional[bytes],
               headers: Optional[Headers], size: int, max_block_s: float,
               abort_on_new_batch: bool) -> Optional[FutureRecordMetadata]: ...

    def append(self, tp: TopicPartition, timestamp: int, key: Optional[bytes], value: Optional[bytes],
               headers: Optional[Headers], size: int, max_block_s: float,
               abort_on_new_batch: bool = False) -> Optional[FutureRecordMetadata]:
        """Add a record to the partition's open batch; None if ``abort_on_new_batch`` and the
        record would start a new batch (the sticky partitioner then picks another partition)."""
        with self._lock:
            batch = self._open.get(tp)
            if batch is None or (batch.size + size > self.batch_size and batch.count):
                if abort_on_new_batch:
                    return None
            if self.used + size > self.buffer_memory and self.used:
                self._wait_for_space(size, max_block_s)   # releases the lock: look again after
                batch = self._open.get(tp)
            if batch is None or (batch.size + size > self.batch_size and batch.count):
                # the old batch just became full, or a new one starts its linger: the sender may be
                # asleep for longer (with linger_ms=0, until retry_backoff_ms), as Kafka's producer wakes it
                self.wakeup.set()
                batch = self._open[tp] = ProducerBatch(tp, time.monotonic())
                queue = self._queues.get(tp)
                if queue is None:
                    queue = self._queues[tp] = deque()
                queue.append(batch)
            self.used += size
            batch.keys.append(key)
            batch.values.append(value)
            batch.timestamps.append(timestamp)
            batch.headers.append(headers)
            batch.size += size
            batch.count += 1
            return FutureRecordMetadata(batch.future, batch.count - 1, timestamp)

    def append_table(self, tp: TopicPartition, table: pa.Table, size: int, max_block_s: float) -> ProducerBatch:
        """Queue a ready-made, sealed batch (``Producer.send_batch``) after everything sent before."""
        with self._lock:
            if self.used + size > self.buffer_memory and self.used:
                self._wait_for_space(size, max_block_s)
            self.used += size
            self._open.pop(tp, None)
            batch = ProducerBatch(tp, time.monotonic(), table, size)
            self._queues.setdefault(tp, deque()).append(batch)
        self.wakeup.set()
        return batch

    def _wait_for_space(self, size: int, max_block_s: float) -> None:
        self.wakeup.set()
        deadline = time.monotonic() + max_block_s
        while self.used + size > self.buffer_memory and self.used:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(f"buffer_memory ({self.buffer_memory} bytes) stayed full for "
                                        f"max_block_ms; the brokers are not keeping up or unreachable")
            self._space.wait(remaining)

    # -- sender side -------------------------------------------------------------------------

    def next_ready(self, now: float) -> tuple[list[TopicPartition], float]:
        """Partitions whose head batch may be sent now, and the seconds until the next one may."""
        ready, wait = [], self.linger_s
        with self._lock:
            for tp, queue in self._queues.items():
                if not queue:
                    continue
                head = queue[0]
                if head.attempts and self._in_flight.get(tp):
                    continue
                if head.retry_at > now:
                    wait = min(wait, head.retry_at - now)
                    continue
                due = head.created + self.linger_s - now
                if (len(queue) > 1 or head.table is not None or head.size >= self.batch_size or due <= 0
                        or self.flushing or self.closing or self._space_wanted()):
                    ready.append(tp)
                else:
                    wait = min(wait, due)
        return ready, max(wait, 0.0)

    def _space_wanted(self) -> bool:
        return self.used >= self.buffer_memory * 0.9

    def pop(self, tp: TopicPartition, max_in_flight: int) -> Optional[ProducerBatch]:
        """Take the partition's head batch for sending, or None if ordering forbids it now."""
        with self._lock:
            queue = self._queues.get(tp)
            if not queue:
                return None
            in_flight = self._in_flight.setdefault(tp, [])
            head = queue[0]
            if (head.attempts and in_flight) or len(in_flight) >= max_in_flight:
                return None
            self._take_head(tp, queue)
            in_flight.append(head)
            return head

    def _take_head(self, tp: TopicPartition, queue: deque[ProducerBatch]) -> ProducerBatch:
        head = queue.popleft()
        if self._open.get(tp) is head:
            del self._open[tp]
        return head

    def peek(self, tp: TopicPartition) -> Optional[ProducerBatch]:
        queue = self._queues.get(tp)
        return queue[0] if queue else None

    def landed(self, batch: ProducerBatch) -> None:
        """A sent batch's request finished (either way): it no longer counts as in flight."""
        with self._lock:
            self._in_flight[batch.tp].remove(batch)

    def requeue(self, batch: ProducerBatch) -> None:
        """Put a batch to retry back in its partition's queue, ordered by sequence."""
        with self._lock:
            self._in_flight[batch.tp].remove(batch)
            queue = self._queues.setdefault(batch.tp, deque())
            retries = [b.base_sequence for b in queue if b.encoded is not None]
            queue.insert(bisect.bisect(retries, batch.base_sequence), batch)
        self.wakeup.set()

    def release(self, batch: ProducerBatch) -> None:
        """Give a finished batch's memory back to blocked ``append`` calls."""
        with self._lock:
            self.used -= batch.size
            self._space.notify_all()

    def has_earlier_unacked(self, batch: ProducerBatch) -> bool:
        """Whether a batch of the same partition with a smaller sequence is still unacknowledged."""
        with self._lock:
            others = [*self._in_flight.get(batch.tp, ()), *self._queues.get(batch.tp, ())]
        return any(0 <= b.base_sequence < batch.base_sequence for b in others)

    def expired(self, now: float, delivery_timeout_s: float) -> list[ProducerBatch]:
        """Remove and return queued batches older than the delivery timeout."""
        out = []
        with self._lock:
            for tp, queue in self._queues.items():
                while queue and now - queue[0].created > delivery_timeout_s:
                    out.append(self._take_head(tp, queue))
        return out

    def abort_all(self) -> list[ProducerBatch]:
        with self._lock:
            batches = [b for q in self._queues.values() for b in q]
            self._queues.clear()
            self._open.clear()
        return batches

    def reset_sequences(self) -> list[ProducerBatch]:
        """After a producer id reset: take out the queued batches that may have been written
        (returned, for the caller to fail: resent under the new id, the broker could not know
        them and would write them twice) and forget the others' sequences so they are re-encoded."""
        taken: list[ProducerBatch] = []
        with self._lock:
            for tp, queue in self._queues.items():
                kept: deque[ProducerBatch] = deque()
                for batch in queue:
                    if batch.maybe_written:
                        taken.append(batch)
                    else:
                        batch.base_sequence, batch.encoded = -1, None
                        kept.append(batch)
                self._queues[tp] = kept
        return taken

    def in_flight_count(self) -> int:
        with self._lock:
            return sum(len(batches) for batches in self._in_flight.values())

    def unfinished(self) -> list[Future[None]]:
        """``settled`` futures of every batch queued or in flight now (what ``flush`` waits for)."""
        with self._lock:
            return [b.settled for group in (*self._queues.values(), *self._in_flight.values()) for b in group]

    def pending(self) -> bool:
        with self._lock:
            return any(self._queues.values()) or any(self._in_flight.values())

    def partitions(self) -> Iterable[TopicPartition]:
        return list(self._queues)

    def oldest_created(self) -> Optional[float]:
        """When the oldest queued batch was created (None: nothing queued): the first delivery
        timeout that can run out."""
        with self._lock:
            return min((queue[0].created for queue in self._queues.values() if queue), default=None)
