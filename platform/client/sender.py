"""The producer's background sender thread.

It takes ready batches from the :class:`RecordAccumulator`, groups them by partition leader into
Produce requests (at most ``max_in_flight`` per connection and per partition), builds each Arrow
payload once (stamped with the idempotent producer id and sequence), and turns answers into
completed futures, retries, or errors. Responses are handled on the connection's reader thread;
they only complete futures and requeue batches, then wake the sender.

A transactional producer's sender sends a partition's batches only once the partition is in the
transaction (:meth:`TransactionManager.sendable` adds it first), marks them transactional, fails
the batches not yet sent once the transaction has an error (Kafka's abortUndrainedBatches), and
reports a failed batch to the transaction manager (which makes the transaction abortable or fatal).
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, cast

from ember.client.accumulator import ProducerBatch, RecordAccumulator
from ember.client.futures import ProduceResult
from ember.client.metadata import STALE_METADATA, MetadataClient
from ember.client.transaction_manager import TransactionManager
from ember.errors import (
    EmberError,
    ErrorCode,
    InvalidProducerEpoch,
    KafkaTimeoutError,
    OutOfOrderSequenceNumber,
    TransactionAborted,
    UnknownProducerId,
    error_for_code,
)
from ember.record.batch import build_batch
from ember.record.header import increment_sequence
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Response, response_error
from ember.wire.types import TopicPartition

log = logging.getLogger(__name__)

#: Shortest wait for a produce answer, for a batch sent just before its delivery timeout.
_MIN_REQUEST_TIMEOUT_S = 0.05


@dataclass(frozen=True)
class SenderConfig:
    acks: int
    compression: str
    retries: int
    retry_backoff_s: float
    delivery_timeout_s: float
    request_timeout_ms: int
    max_in_flight: int
    max_request_size: int
    idempotent: bool
    producer_id: int = -1      # >= 0: a caller-chosen identity (no InitProducerId, never replaced)
    producer_epoch: int = 0


#: Produce errors a broker answers before it appends anything: a batch refused with one of these
#: was not written, so it may be resent under a new producer id (see ``ProducerBatch.maybe_written``).
#: Not NOT_LEADER_OR_FOLLOWER: a leader deposed while an acks=all write waits for its followers
#: answers it after the write (as Kafka's does).
REFUSED_UNWRITTEN = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.UNKNOWN_PRODUCER_ID,
    ErrorCode.CORRUPT_RECORD, ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
    ErrorCode.INVALID_RECORD, ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED})


class IdempotenceState:
    """Producer id/epoch and the next sequence number of every partition.

    A ``fixed`` identity (given by the caller) is never replaced by a new producer id: its
    sequences must stay the same on a re-send so that the broker deduplicates it."""

    def __init__(self, producer_id: int = -1, producer_epoch: int = -1) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.fixed = producer_id >= 0
        self.next_sequence: dict[TopicPartition, int] = {}
        self.reset_requested = False
        #: A numbered batch of a transactional producer failed or was dropped: its partition's
        #: sequences may have a gap, which only a new epoch closes (``Producer.abort_transaction``).
        self.sequence_gap = False

    def use(self, producer_id: int, producer_epoch: int) -> None:
        """Take a fixed identity given from outside (a transactional producer's, from its
        coordinator), sequences starting again at 0."""
        self.producer_id, self.producer_epoch, self.fixed = producer_id, producer_epoch, True
        self.next_sequence, self.sequence_gap = {}, False

    def assign(self, batch: ProducerBatch) -> None:
        if batch.base_sequence < 0:
            batch.base_sequence = self.next_sequence.get(batch.tp, 0)
            self.next_sequence[batch.tp] = increment_sequence(batch.base_sequence, batch.count)


class Sender(threading.Thread):
    """Drains the accumulator into Produce requests until closed."""

    def __init__(self, metadata: MetadataClient, accumulator: RecordAccumulator, config: SenderConfig,
                 topics: set[str], transactions: TransactionManager | None = None) -> None:
        super().__init__(name="ember-producer-sender", daemon=True)
        self.metadata = metadata
        self.acc = accumulator
        self.config = config
        self.topics = topics
        self.idempotence = IdempotenceState(config.producer_id, config.producer_epoch) if config.idempotent else None
        self.transactions = transactions
        self.running = True
        self.force_close = False

    # -- loop --------------------------------------------------------------------------------

    def run(self) -> None:
        while self.running or (self.acc.pending() and not self.force_close):
            try:
                wait = self._run_once()
            except Exception:   # never let the thread die with records queued
                log.exception("producer sender iteration failed")
                wait = self.config.retry_backoff_s
            if wait > 0:
                self.acc.wakeup.wait(wait)
            self.acc.wakeup.clear()
        self.abort_unsent(KafkaTimeoutError("producer closed before the record was sent"))

    def _run_once(self) -> float:
        now = time.monotonic()
        for batch in self.acc.expired(now, self.config.delivery_timeout_s):
            self._fail(batch, self._expiry_error(batch, now), in_flight=False)
        if self.metadata.needs_refresh() and self.topics:
            try:
                self.metadata.refresh(self.topics)
            except EmberError as exc:
                log.debug("metadata refresh failed: %s", exc)
                return self.config.retry_backoff_s
        ready, wait = self.acc.next_ready(now)
        if ready and self.idempotence is not None and not self._ensure_producer_id(self.idempotence):
            return self.config.retry_backoff_s
        if ready and self.transactions is not None:
            error = self.transactions.error()
            if error is not None:
                self.abort_unsent(error)
                return self.config.retry_backoff_s
            ready = self.transactions.sendable(ready)
            if not ready:
                return self.config.retry_backoff_s
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in ready:
            leader = self.metadata.leader(tp.topic, tp.partition)
            if leader is None:
                self.metadata.mark_stale()
                head = self.acc.peek(tp)
                if head is not None:   # a delivery timeout then says why (e.g. the partition is offline)
                    head.last_error = self.metadata.leader_error(tp.topic, tp.partition)
                wait = min(wait, self.config.retry_backoff_s)
            else:
                by_leader.setdefault(leader, []).append(tp)
        sent = [self._send_to(leader, tps) for leader, tps in by_leader.items()]
        if any(sent):
            return 0.0   # look again at once: more may be ready
        # Nothing could go (connections busy or down): answers and appends set the wakeup event.
        return wait or self.config.retry_backoff_s

    def use_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """The transactional producer's id and epoch (``init_transactions``), used from now on."""
        assert self.idempotence is not None      # a transactional producer is idempotent
        self.idempotence.use(producer_id, producer_epoch)

    def sequence_gap(self) -> bool:
        """Whether the transactional producer needs a new epoch before its next transaction."""
        return self.idempotence is not None and self.idempotence.sequence_gap

    def _ensure_producer_id(self, state: IdempotenceState) -> bool:
        if self.transactions is not None:     # its id comes from init_transactions, never from here
            return state.producer_id >= 0
        if state.reset_requested:
            if self.acc.in_flight_count():
                return False   # hold new batches until the old producer id has no requests out
            for batch in self.acc.reset_sequences():
                self._fail(batch, self._not_resent_error(batch), in_flight=False)
            state.producer_id, state.next_sequence, state.reset_requested = -1, {}, False
        if state.producer_id >= 0:
            return True
        # Never past the oldest batch's delivery timeout: a broker that accepts the request and
        # never answers (paused, overloaded) must not hold every send beyond its bound.
        oldest = self.acc.oldest_created()
        timeout_s = self.config.request_timeout_ms / 1000
        if oldest is not None:
            timeout_s = min(timeout_s, max(oldest + self.config.delivery_timeout_s - time.monotonic(),
                                           _MIN_REQUEST_TIMEOUT_S))
        try:
            body = self.metadata.request(ApiKey.INIT_PRODUCER_ID, {}, timeout_s=timeout_s).body
            error = response_error(body)
            if error is not None:
                raise error
        except EmberError as exc:
            log.debug("InitProducerId failed: %s", exc)
            for tp in self.acc.partitions():
                head = self.acc.peek(tp)
                if head is not None:
                    head.last_error = exc
            return False
        state.producer_id, state.producer_epoch = body["producer_id"], body["producer_epoch"]
        return True

    # -- requests ----------------------------------------------------------------------------

    def _send_to(self, leader: int, tps: list[TopicPartition]) -> bool:
        """Send one Produce request with the ready batches led by ``leader``; True if one went out."""
        config = self.config
        try:
            conn = self.metadata.connection(leader)
        except EmberError as exc:
            self.metadata.mark_stale()
            for tp in tps:
                head = self.acc.peek(tp)
                if head is not None:
                    head.last_error = exc
            return False
        if conn.in_flight >= config.max_in_flight:
            return False
        batches: list[ProducerBatch] = []
        payload: list[bytes] = []   # the batches' encoded bytes
        size = 0
        for tp in tps:
            while size < config.max_request_size:
                batch = self.acc.pop(tp, config.max_in_flight)
                if batch is None:
                    break
                payload.append(self._encode(batch))
                batches.append(batch)
                size += len(payload[-1])
                if self.acc.peek(tp) is None or not self._sealed(tp):
                    break
        if not batches:
            return False
        body: dict[str, Any] = {"acks": config.acks, "timeout_ms": config.request_timeout_ms,
                                "partitions": [{"topic": b.tp.topic, "partition": b.tp.partition,
                                                "size": len(encoded)} for b, encoded in zip(batches, payload)]}
        if self.idempotence is not None:
            body["producer_id"] = self.idempotence.producer_id
        if self.transactions is not None:
            body["transactional_id"] = self.transactions.transactional_id
        # Never wait for an answer past a batch's delivery timeout: every send resolves within it.
        first_deadline = min(b.created for b in batches) + config.delivery_timeout_s
        timeout_s = min(config.request_timeout_ms / 1000, max(first_deadline - time.monotonic(), _MIN_REQUEST_TIMEOUT_S))
        try:
            # With acks=0 (expect_response=False) the future resolves to None, though request() says Future[Response].
            future = cast("Future[Response | None]", conn.request(
                ApiKey.PRODUCE, body, payload, expect_response=config.acks != 0, timeout_s=timeout_s))
        except EmberError as exc:     # nothing went out
            self.metadata.mark_stale()
            for batch in batches:
                self._retry_or_fail(batch, exc, maybe_written=False)
            return False
        future.add_done_callback(lambda f: self._on_response(batches, f))
        return True

    def _sealed(self, tp: TopicPartition) -> bool:
        head = self.acc.peek(tp)
        return head is not None and (head.table is not None or head.size >= self.acc.batch_size)

    def _encode(self, batch: ProducerBatch) -> bytes:
        """The batch's payload, built on first use and kept for retries."""
        if batch.encoded is not None:
            return batch.encoded
        state = self.idempotence
        if state is None:
            batch.encoded = build_batch(batch.records(), compression=self.config.compression)
            return batch.encoded
        state.assign(batch)
        batch.encoded = build_batch(batch.records(), compression=self.config.compression,
                                    producer_id=state.producer_id, producer_epoch=state.producer_epoch,
                                    base_sequence=batch.base_sequence, transactional=self.transactions is not None)
        return batch.encoded

    # -- responses ---------------------------------------------------------------------------

    def _on_response(self, batches: list[ProducerBatch], future: Future[Response | None]) -> None:
        error = future.exception()
        if error is not None:      # a timeout or a lost connection: the broker may have written them
            self.metadata.mark_stale()
            for batch in batches:
                self._retry_or_fail(batch, error, maybe_written=True)
            return
        response = future.result()
        if response is None:   # acks=0
            for batch in batches:
                self._complete(batch, -1, -1)
            return
        body = response.body
        # One result per batch, in request order (a partition may have several batches in a request).
        results = body.get("partitions", [])
        if len(results) != len(batches):
            results = [None] * len(batches)
        for batch, result in zip(batches, results):
            code = result.get("error_code", 0) if result else body.get("error_code") or ErrorCode.UNKNOWN_SERVER_ERROR
            if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                self._complete(batch, result.get("base_offset", -1), result.get("log_append_time", -1))
                continue
            message = (result or body).get("error_message") or f"producing to {batch.tp.topic}-{batch.tp.partition} failed"
            if code in STALE_METADATA:
                self.metadata.mark_stale()
            self._retry_or_fail(batch, error_for_code(code, message), maybe_written=code not in REFUSED_UNWRITTEN)
        self.acc.wakeup.set()

    def _retry_or_fail(self, batch: ProducerBatch, error: BaseException, *, maybe_written: bool) -> None:
        batch.last_error = error
        batch.maybe_written = batch.maybe_written or maybe_written
        retriable = isinstance(error, EmberError) and error.retriable
        if isinstance(error, OutOfOrderSequenceNumber) and self.idempotence is not None:
            # A later batch rejected because an earlier one is being retried: retry it after that one.
            retriable = self.acc.has_earlier_unacked(batch)
        elif isinstance(error, UnknownProducerId) and self.idempotence is not None and self.idempotence.fixed:
            retriable = False   # the same id would be refused again; only the caller can decide
        now = time.monotonic()
        if (retriable and batch.attempts < self.config.retries
                and now + self.config.retry_backoff_s - batch.created < self.config.delivery_timeout_s):
            batch.attempts += 1
            batch.retry_at = now + self.config.retry_backoff_s
            self.acc.requeue(batch)
            return
        if retriable:
            error = self._expiry_error(batch, now)
        self._fail(batch, error, in_flight=True)

    def abort_unsent(self, error: BaseException) -> None:
        """Fail every batch still queued (the sender has stopped or will never get to them)."""
        for batch in self.acc.abort_all():
            self._fail(batch, error, in_flight=False)

    def _complete(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        if batch.future.done():   # failed by close() while its answer was on the way
            return
        # Resolve (running the record callbacks) before the batch leaves the accumulator, so a
        # flush() never returns while a callback of an acknowledged batch is still to run.
        batch.future.set_result(ProduceResult(batch.tp.topic, batch.tp.partition, base_offset, log_append_time))
        batch.settled.set_result(None)
        self.acc.landed(batch)
        self.acc.release(batch)

    def _fail(self, batch: ProducerBatch, error: BaseException, *, in_flight: bool) -> None:
        state = self.idempotence
        if (state is not None and not state.fixed and batch.base_sequence >= 0
                and not isinstance(error, InvalidProducerEpoch)):
            # Later sequences of this partition now have a gap: start over with a new producer id.
            # A fixed identity keeps it (and its later batches fail too): a new id would turn a
            # deduplicated re-send into duplicates.
            state.reset_requested = True
        if self.transactions is not None:
            if state is not None and batch.base_sequence >= 0:
                state.sequence_gap = True
            if not isinstance(error, TransactionAborted):
                self.transactions.fail(error)
        if not batch.future.done():
            batch.future.set_exception(error)
        if not batch.settled.done():
            batch.settled.set_result(None)
        if in_flight:
            self.acc.landed(batch)
        self.acc.release(batch)
        self.acc.wakeup.set()

    @staticmethod
    def _not_resent_error(batch: ProducerBatch) -> KafkaTimeoutError:
        tp = batch.tp
        return KafkaTimeoutError(
            f"{batch.count} record(s) for {tp.topic}-{tp.partition} not acknowledged{_last_error(batch)} and not "
            f"sent again: another batch failed, so the producer id was replaced, and under a new id the broker "
            f"could not tell a resend of records it may already have written from new ones; they may or may not "
            f"be in the log")

    def _expiry_error(self, batch: ProducerBatch, now: float) -> KafkaTimeoutError:
        tp = batch.tp
        cause = _last_error(batch)
        return KafkaTimeoutError(
            f"expiring {batch.count} record(s) for {tp.topic}-{tp.partition}: {(now - batch.created) * 1000:.0f} ms "
            f"since the batch was created exceeds delivery_timeout_ms after {batch.attempts} retries{cause}")


def _last_error(batch: ProducerBatch) -> str:
    """"; last error: Type: text" of the batch's last failed attempt, "" if none failed."""
    error = batch.last_error
    return f"; last error: {type(error).__name__}: {error}" if error else ""
