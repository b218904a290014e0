"""Futures returned by ``Producer.send``.

One :class:`concurrent.futures.Future` per *batch* carries the broker's answer; each record gets a
tiny :class:`FutureRecordMetadata` pointing into it (as Kafka's FutureRecordMetadata does), so
``send`` never pays for a lock or condition variable per record. Its fields live in a C base
(``ember.client._append.RecordFuture``) so the C send path makes one without running Python code.
"""
from __future__ import annotations

from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable, NamedTuple

from ember.client._append import RecordFuture
from ember.errors import KafkaTimeoutError
from ember.wire.types import RecordMetadata


class ProduceResult(NamedTuple):
    """A batch's acknowledgement; base_offset -1 when unknown (acks=0)."""
    topic: str
    partition: int
    base_offset: int
    log_append_time: int = -1


class FutureRecordMetadata(RecordFuture):
    """The eventual :class:`RecordMetadata` of one record sent with ``Producer.send``:
    ``FutureRecordMetadata(batch_future, index_in_batch, timestamp_ms)``."""

    __slots__ = ()
    _batch: "Future[ProduceResult]"

    def _metadata(self, result: ProduceResult) -> RecordMetadata:
        offset = result.base_offset + self._index if result.base_offset >= 0 else -1
        timestamp = result.log_append_time if result.log_append_time >= 0 else self._timestamp
        return RecordMetadata(result.topic, result.partition, offset, timestamp)

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Block until the record is acknowledged; raise its error, or KafkaTimeoutError."""
        try:
            return self._metadata(self._batch.result(timeout))
        except FutureTimeout:
            raise KafkaTimeoutError(f"record not acknowledged within {timeout}s") from None

    def done(self) -> bool:
        return self._batch.done()

    def succeeded(self) -> bool:
        return self._batch.done() and self._batch.exception() is None

    def failed(self) -> bool:
        return self._batch.done() and self._batch.exception() is not None

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._batch.exception(timeout)

    def add_callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "FutureRecordMetadata":
        """Call ``fn(*args, record_metadata, **kwargs)`` on success (in a client thread)."""
        def on_done(batch: Future[ProduceResult]) -> None:
            if batch.exception() is None:
                fn(*args, self._metadata(batch.result()), **kwargs)
        self._batch.add_done_callback(on_done)
        return self

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "FutureRecordMetadata":
        """Call ``fn(*args, exception, **kwargs)`` on failure (in a client thread)."""
        def on_done(batch: Future[ProduceResult]) -> None:
            error = batch.exception()
            if error is not None:
                fn(*args, error, **kwargs)
        self._batch.add_done_callback(on_done)
        return self
