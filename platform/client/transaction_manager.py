"""The transactional producer's state machine and its requests to the coordinators (Kafka's
``TransactionManager``).

States and moves are Kafka's: UNINITIALIZED → INITIALIZING (``init_transactions``) → READY →
IN_TRANSACTION (``begin_transaction``) → COMMITTING_TRANSACTION or ABORTING_TRANSACTION → READY.
A failure inside a transaction makes it ABORTABLE_ERROR (only ``abort_transaction`` is then
allowed); ProducerFenced, InvalidProducerEpoch and TransactionalIdAuthorizationFailed make it
FATAL_ERROR (every later call raises the error: the producer can only be closed), as Kafka's
TransactionManager classifies them.

The manager asks the transaction coordinator (found with FindCoordinator key type 1) for the
producer id (InitProducerId), adds partitions to the transaction before their first batch is sent
(AddPartitionsToTxn, on the sender thread: :meth:`sendable`), adds a group's offsets
(AddOffsetsToTxn, then TxnOffsetCommit at the group's coordinator) and ends the transaction
(EndTxn). Retriable errors (a coordinator moving, CONCURRENT_TRANSACTIONS while the previous
transaction completes) are retried until the call's deadline.
"""
from __future__ import annotations

import enum
import logging
import threading
import time
from typing import Any, Callable, Iterable, Mapping, Optional, Protocol

from ember.client.coordinator_client import TRANSACTION_KEY, CoordinatorClient
from ember.client.group_metadata import ConsumerGroupMetadata
from ember.client.metadata import MetadataClient
from ember.errors import (
    EmberError,
    ErrorCode,
    IllegalStateError,
    InvalidProducerEpoch,
    KafkaTimeoutError,
    ProducerFenced,
    TransactionalIdAuthorizationFailed,
    error_for_code,
)
from ember.wire.api_keys import ApiKey
from ember.wire.types import OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

#: Errors after which the producer may not go on (Kafka's fatal transactional errors).
FATAL_ERRORS = (ProducerFenced, InvalidProducerEpoch, TransactionalIdAuthorizationFailed)


class TransactionState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TransactionState
#: Kafka's TransactionManager.State.isTransitionValid: the states each state may be entered from.
_ENTERED_FROM: dict[TransactionState, frozenset[TransactionState]] = {
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.INITIALIZING}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR}),
}
_NEEDS_TRANSACTION = frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION})


class Coordinator(Protocol):
    """What the manager needs of a :class:`CoordinatorClient` (a fake one in unit tests)."""

    def request(self, api_key: int, body: dict[str, Any], timeout_s: Optional[float] = None,
                deadline_s: Optional[float] = None) -> dict[str, Any]: ...

    def forget(self) -> None: ...

    def close(self) -> None: ...


class TransactionManager:
    """One transactional producer's transaction state; thread-safe (the sender thread adds
    partitions and reports failed batches while the application thread drives the transaction)."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int, coordinator: Coordinator,
                 group_coordinator: Callable[[str], Coordinator], request_timeout_s: float,
                 retry_backoff_s: float) -> None:
        if not transactional_id:
            raise ValueError("transactional_id must be a non-empty string")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.coordinator = coordinator
        self._group_coordinator = group_coordinator
        self._groups: dict[str, Coordinator] = {}     # the group coordinators offsets went to, kept
        self.request_timeout_s = request_timeout_s
        self.retry_backoff_s = retry_backoff_s
        self.producer_id = -1
        self.producer_epoch = -1
        self.state = TransactionState.UNINITIALIZED
        self.last_error: Optional[BaseException] = None
        #: Partitions added to the current transaction at the coordinator.
        self.partitions: set[TopicPartition] = set()
        #: Whether the coordinator knows of the current transaction (a partition or group was added),
        #: so ending it needs an EndTxn.
        self.started = False
        self._lock = threading.RLock()          # state, partitions, started
        self._requests = threading.Lock()       # one coordinator request at a time, in order

    @classmethod
    def connect(cls, metadata: MetadataClient, transactional_id: str, transaction_timeout_ms: int,
                request_timeout_s: float) -> "TransactionManager":
        """A manager talking to the coordinators found through ``metadata``'s brokers."""
        return cls(transactional_id, transaction_timeout_ms,
                   CoordinatorClient(metadata, transactional_id, request_timeout_s, TRANSACTION_KEY),
                   lambda group_id: CoordinatorClient(metadata, group_id, request_timeout_s),
                   request_timeout_s, metadata.retry_backoff_s)

    # -- states ------------------------------------------------------------------------------

    def _transition(self, target: TransactionState, error: Optional[BaseException] = None) -> None:
        with self._lock:
            if self.state == S.FATAL_ERROR:
                raise self._fatal()
            if target != S.FATAL_ERROR and self.state not in _ENTERED_FROM[target]:
                raise IllegalStateError(f"transactional id {self.transactional_id!r}: invalid transition from "
                                        f"{self.state.value} to {target.value}")
            log.debug("transactional id %s: %s -> %s", self.transactional_id, self.state.value, target.value)
            self.state = target
            if error is not None:
                self.last_error = error

    def _fatal(self) -> EmberError:
        cause = self.last_error
        if isinstance(cause, EmberError):
            return type(cause)(f"the producer of transactional id {self.transactional_id!r} hit a fatal error "
                               f"and can only be closed: {cause}")
        return IllegalStateError(f"the producer of transactional id {self.transactional_id!r} hit a fatal error "
                                 f"and can only be closed: {cause}")

    def _require(self, operation: str, *allowed: TransactionState) -> None:
        """Raise unless the state allows ``operation``: the fatal error, the abortable one, or
        IllegalStateError naming the state."""
        with self._lock:
            if self.state in allowed:
                return
            if self.state == S.FATAL_ERROR:
                raise self._fatal()
            if self.state == S.ABORTABLE_ERROR:
                raise type(self.last_error)(str(self.last_error)) if isinstance(self.last_error, EmberError) \
                    else IllegalStateError(f"{operation}: the transaction must be aborted ({self.last_error})")
            if self.state == S.UNINITIALIZED:
                raise IllegalStateError(f"{operation} before init_transactions()")
            raise IllegalStateError(f"{operation} in state {self.state.value}"
                                    + (" (begin_transaction() first)" if self.state == S.READY else ""))

    def fail(self, error: BaseException) -> None:
        """A request of the transaction failed: FATAL_ERROR for Kafka's fatal errors, else
        ABORTABLE_ERROR (while a transaction is open; other states keep theirs)."""
        with self._lock:
            if self.state == S.FATAL_ERROR:
                return
            if isinstance(error, FATAL_ERRORS):
                self._transition(S.FATAL_ERROR, error)
            elif self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR):
                self._transition(S.ABORTABLE_ERROR, error)

    def error(self) -> Optional[BaseException]:
        """The error that stops the current transaction's sends, if any."""
        with self._lock:
            return self.last_error if self.state in (S.ABORTABLE_ERROR, S.FATAL_ERROR) else None

    def check_send(self) -> None:
        """``send``/``send_batch`` are allowed only inside a transaction."""
        if self.state != S.IN_TRANSACTION:
            self._require("send", S.IN_TRANSACTION)

    # -- the application's calls ---------------------------------------------------------------

    def init_transactions(self, timeout_s: float) -> tuple[int, int]:
        """InitProducerId with the transactional id: the (producer id, epoch) that fence every
        earlier producer of it. A call that timed out may be repeated."""
        self._transition(S.INITIALIZING)
        body = self._call(ApiKey.INIT_PRODUCER_ID, {"transactional_id": self.transactional_id,
                                                    "transaction_timeout_ms": self.transaction_timeout_ms},
                          time.monotonic() + timeout_s, "init_transactions")
        with self._lock:
            self.producer_id, self.producer_epoch = body["producer_id"], body["producer_epoch"]
            self._transition(S.READY)
        return self.producer_id, self.producer_epoch

    def bump_epoch(self, timeout_s: float) -> tuple[int, int]:
        """InitProducerId naming this producer's id and epoch (KIP-360): the next epoch, whose
        sequences start again at 0. Needed after an aborted transaction whose batches may have
        left a gap in a partition's sequence numbers (a batch failed or dropped after it was
        numbered), which the broker would refuse as OUT_OF_ORDER_SEQUENCE_NUMBER."""
        self._require("bump_epoch", S.READY)
        body = self._call(ApiKey.INIT_PRODUCER_ID, {"transactional_id": self.transactional_id,
                                                    "transaction_timeout_ms": self.transaction_timeout_ms,
                                                    "producer_id": self.producer_id,
                                                    "producer_epoch": self.producer_epoch},
                          time.monotonic() + timeout_s, "bump_epoch")
        with self._lock:
            self.producer_id, self.producer_epoch = body["producer_id"], body["producer_epoch"]
        return self.producer_id, self.producer_epoch

    def begin_transaction(self) -> None:
        self._require("begin_transaction", S.READY)
        with self._lock:
            self.partitions, self.started = set(), False
            self._transition(S.IN_TRANSACTION)

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
                                    group: str | ConsumerGroupMetadata, timeout_s: float) -> None:
        """AddOffsetsToTxn at the transaction coordinator, then TxnOffsetCommit at the group's
        coordinator: the offsets are committed with the transaction, or not at all."""
        self._require("send_offsets_to_transaction", S.IN_TRANSACTION)
        meta = ConsumerGroupMetadata(group) if isinstance(group, str) else group
        deadline = time.monotonic() + timeout_s
        self._call(ApiKey.ADD_OFFSETS_TO_TXN, {**self._producer(), "group_id": meta.group_id}, deadline,
                   "send_offsets_to_transaction")
        with self._lock:
            self.started = True
        body: dict[str, Any] = {**self._producer(), "group_id": meta.group_id, "member_id": meta.member_id,
                                "generation": meta.generation_id, "offsets": [
                                    {"topic": tp.topic, "partition": tp.partition,
                                     "offset": om if isinstance(om, int) else om.offset,
                                     "metadata": "" if isinstance(om, int) else om.metadata}
                                    for tp, om in offsets.items()]}
        if meta.group_instance_id is not None:
            body["group_instance_id"] = meta.group_instance_id
        group_coordinator = self._groups.get(meta.group_id)
        if group_coordinator is None:
            group_coordinator = self._groups[meta.group_id] = self._group_coordinator(meta.group_id)
        self._call(ApiKey.TXN_OFFSET_COMMIT, body, deadline, "send_offsets_to_transaction", group_coordinator)

    def begin_commit(self) -> None:
        """IN_TRANSACTION → COMMITTING_TRANSACTION (a commit that timed out may be called again)."""
        with self._lock:
            if self.state != S.COMMITTING_TRANSACTION:
                self._require("commit_transaction", S.IN_TRANSACTION)
                self._transition(S.COMMITTING_TRANSACTION)

    def begin_abort(self) -> None:
        """IN_TRANSACTION or ABORTABLE_ERROR → ABORTING_TRANSACTION (again after a timeout)."""
        with self._lock:
            if self.state == S.FATAL_ERROR:
                raise self._fatal()
            if self.state != S.ABORTING_TRANSACTION:
                if self.state not in (S.IN_TRANSACTION, S.ABORTABLE_ERROR):
                    self._require("abort_transaction")
                self._transition(S.ABORTING_TRANSACTION)

    def end_transaction(self, commit: bool, timeout_s: float,
                        use_producer: Optional[Callable[[int, int], None]] = None) -> Optional[tuple[int, int]]:
        """EndTxn (when the coordinator knows of the transaction), then READY. A commit whose
        batches failed meanwhile is not sent: the transaction becomes abortable. The transaction
        ends at the next epoch (``bump_epoch``, as Kafka's transaction version 2), which the
        producer goes on with (returned; None when no EndTxn was sent; given to ``use_producer``
        before READY, so no batch of the next transaction takes the old epoch): a batch of this
        transaction arriving late at a partition is refused there instead of joining the next one.
        A coordinator that answers no epoch (a broker before this) leaves it as it was."""
        operation = "commit_transaction" if commit else "abort_transaction"
        with self._lock:
            expected = S.COMMITTING_TRANSACTION if commit else S.ABORTING_TRANSACTION
            if self.state != expected:
                self._require(operation, expected)
            started = self.started
        bumped = None
        if started:
            body = self._call(ApiKey.END_TXN, {**self._producer(), "commit": commit, "bump_epoch": True},
                              time.monotonic() + timeout_s, operation)
            bumped = body.get("producer_id", self.producer_id), body.get("producer_epoch", self.producer_epoch)
        with self._lock:
            if bumped is not None:
                self.producer_id, self.producer_epoch = bumped
                if use_producer is not None:
                    use_producer(*bumped)
            self.partitions, self.started = set(), False
            self._transition(S.READY)
        return bumped

    # -- the sender's call ---------------------------------------------------------------------

    def sendable(self, ready: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Of the partitions with batches ready, those in the transaction: the others are added
        first (one AddPartitionsToTxn, on the calling sender thread, bounded by the request
        timeout). A refused partition makes the transaction abortable (or fatal)."""
        ready = list(ready)
        with self._lock:
            if self.state not in _NEEDS_TRANSACTION:
                return []
            new = [tp for tp in ready if tp not in self.partitions]
            producer = self.producer_id, self.producer_epoch
        if new:
            try:
                self._add_partitions(new, producer)
            except EmberError as exc:
                if self._ended_since(producer):
                    # the transaction ended meanwhile (an abort's EndTxn bumped the epoch): this answer
                    # is about it, and must not fail the next (it made the producer fatal: "fenced")
                    log.debug("AddPartitionsToTxn of a transaction that has ended: %s", exc)
                    return []
                if not exc.retriable and not isinstance(exc, KafkaTimeoutError):
                    self.fail(exc)
                    return []
                log.debug("AddPartitionsToTxn: %s; retried", exc)     # at the sender's next round
        with self._lock:
            return [tp for tp in ready if tp in self.partitions]

    def _ended_since(self, producer: tuple[int, int]) -> bool:
        """Whether the producer id or epoch moved on since ``producer`` (its transaction ended)."""
        with self._lock:
            return (self.producer_id, self.producer_epoch) != producer

    def _add_partitions(self, partitions: list[TopicPartition], producer: tuple[int, int]) -> None:
        body = {**self._producer(producer), "partitions": [{"topic": tp.topic, "partition": tp.partition}
                                                           for tp in partitions]}
        answer = self._call(ApiKey.ADD_PARTITIONS_TO_TXN, body, time.monotonic() + self.request_timeout_s,
                            "AddPartitionsToTxn", record_failure=False)
        errors = [p for p in answer.get("partitions", []) if p.get("error_code")]
        if errors:   # the partition that was refused, not the others (OPERATION_NOT_ATTEMPTED)
            first = next((p for p in errors if p["error_code"] != ErrorCode.OPERATION_NOT_ATTEMPTED), errors[0])
            raise error_for_code(first["error_code"], f"AddPartitionsToTxn {first['topic']}-{first['partition']}: "
                                                      f"{first.get('error_message', '')}")
        with self._lock:
            if not self._ended_since(producer):   # else added to a transaction that has ended
                self.partitions.update(partitions)
                self.started = True

    # -- requests ------------------------------------------------------------------------------

    def _producer(self, producer: tuple[int, int] | None = None) -> dict[str, Any]:
        """The request fields naming this producer: its current id and epoch, or ``producer``'s."""
        producer_id, producer_epoch = producer or (self.producer_id, self.producer_epoch)
        return {"transactional_id": self.transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch}

    def _call(self, api_key: ApiKey, body: dict[str, Any], deadline: float, operation: str,
              coordinator: Optional[Coordinator] = None, record_failure: bool = True) -> dict[str, Any]:
        """Send to the coordinator until it answers without a retriable error or ``deadline``
        passes (KafkaTimeoutError); a non-retriable error is recorded (:meth:`fail`) and raised."""
        target = coordinator or self.coordinator
        last: Optional[BaseException] = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(f"{operation} did not complete in time for transactional id "
                                        f"{self.transactional_id!r}" + (f"; last error: {last}" if last else ""))
            try:
                with self._requests:
                    return target.request(api_key, body, timeout_s=min(self.request_timeout_s, remaining),
                                          deadline_s=remaining)
            except KafkaTimeoutError as exc:
                last = exc
            except EmberError as exc:
                if not exc.retriable:
                    if record_failure:
                        self.fail(exc)
                    raise
                last = exc
                target.forget()
            time.sleep(min(self.retry_backoff_s, max(deadline - time.monotonic(), 0)))

    def close(self) -> None:
        self.coordinator.close()
        for group_coordinator in self._groups.values():
            group_coordinator.close()

