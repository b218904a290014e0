"""One transactional id's transaction metadata and its legal transitions (Kafka's
TransactionMetadata and TransactionState).

Metadata is immutable: a transition returns the next value, which the coordinator stores in
ZooKeeper (compare-and-set) before it replaces the one in memory, so nothing takes effect that is
not durable. ``last_producer_id``/``last_producer_epoch`` remember the producer before the last
epoch bump, so a producer retrying an InitProducerId whose answer it lost is recognised rather
than fenced.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterable

from ember.errors import InvalidTxnState

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: Kafka bumps an epoch only below Short.MAX_VALUE - 1; at that point the producer gets a new id.
MAX_PRODUCER_EPOCH = 32767 - 1

Partition = tuple[str, int]


class TxnState(Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"

    @property
    def preparing(self) -> bool:
        """Markers are being written: the transaction's outcome is decided but not complete."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def ended(self) -> bool:
        """No open transaction: a new one may start (and the id may expire)."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


_ENDED = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})

#: Kafka's TransactionState.validPreviousStates (without PrepareEpochFence: a fencing abort is
#: stored as PrepareAbort with the bumped epoch directly).
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: _ENDED,
    TxnState.ONGOING: _ENDED | {TxnState.ONGOING},
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: _ENDED,
}


@dataclass(frozen=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    #: Partitions with records of the open transaction (markers go to each).
    partitions: frozenset[Partition] = frozenset()
    #: Groups whose offsets the transaction commits (AddOffsetsToTxn).
    groups: frozenset[str] = frozenset()
    #: When the open transaction started (-1: none), and when this metadata last changed.
    start_ms: int = -1
    update_ms: int = -1
    #: Bumped by each coordinator that takes the id over; markers carry it so a partition refuses
    #: markers of a coordinator that was replaced.
    coordinator_epoch: int = 0
    #: The broker whose coordinator wrote this metadata last.
    coordinator: int = -1
    #: Transaction version 2 (KIP-890): the producer id a bump past the last epoch moves the
    #: producer to once the transaction completes (-1: none).
    next_producer_id: int = NO_PRODUCER_ID

    def transition(self, state: TxnState, now_ms: int, **changes: Any) -> "TransactionMetadata":
        """The metadata after moving to ``state`` (with ``changes``), or InvalidTxnState."""
        if self.state not in VALID_PREVIOUS[state]:
            raise InvalidTxnState(f"transactional id {self.transactional_id!r}: cannot go from "
                                  f"{self.state.value} to {state.value}")
        return dataclasses.replace(self, state=state, update_ms=now_ms, **changes)

    def begin_or_add(self, now_ms: int, partitions: Iterable[Partition] = (),
                     groups: Iterable[str] = ()) -> "TransactionMetadata":
        """Ongoing with these partitions and groups added (a transaction starts if none is open)."""
        starting = self.state != TxnState.ONGOING
        return self.transition(
            TxnState.ONGOING, now_ms,
            partitions=(frozenset() if starting else self.partitions) | frozenset(partitions),
            groups=(frozenset() if starting else self.groups) | frozenset(groups),
            start_ms=now_ms if starting else self.start_ms)

    def prepare(self, commit: bool, now_ms: int, **changes: Any) -> "TransactionMetadata":
        return self.transition(TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, now_ms, **changes)

    def complete(self, now_ms: int) -> "TransactionMetadata":
        """The transaction's markers are written: CompleteCommit/CompleteAbort, nothing open."""
        if not self.state.preparing:
            raise InvalidTxnState(f"transactional id {self.transactional_id!r} is {self.state.value}, "
                                  f"not preparing to complete")
        done = TxnState.COMPLETE_COMMIT if self.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        moved: dict[str, int] = {}
        if self.next_producer_id != NO_PRODUCER_ID:     # the epochs ran out: the producer goes on under a new id
            moved = {"producer_id": self.next_producer_id, "producer_epoch": 0,
                     "last_producer_id": self.producer_id, "next_producer_id": NO_PRODUCER_ID}
        return self.transition(done, now_ms, partitions=frozenset(), groups=frozenset(), start_ms=-1, **moved)

    def prepare_with_bump(self, commit: bool, now_ms: int, next_producer_id: int) -> "TransactionMetadata":
        """Transaction version 2's end: the decision at the next epoch, which the markers carry, so
        a batch the producer sent at the old epoch can no longer join any transaction; the epoch
        the producer ended with is remembered, so its retried EndTxn is recognised.
        ``next_producer_id`` (or -1) is where the producer goes on when that was its last epoch."""
        return self.prepare(commit, now_ms, producer_epoch=self.producer_epoch + 1,
                            last_producer_id=self.producer_id, last_producer_epoch=self.producer_epoch,
                            next_producer_id=next_producer_id)

    @property
    def client_producer(self) -> tuple[int, int]:
        """The producer id and epoch the producer uses next (after a completed bump past the last
        epoch: the new id at epoch 0)."""
        if self.next_producer_id != NO_PRODUCER_ID:
            return self.next_producer_id, 0
        return self.producer_id, self.producer_epoch

    @property
    def committing(self) -> bool:
        return self.state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)

    def with_producer(self, producer_id: int, producer_epoch: int, now_ms: int, timeout_ms: int,
                      continuing: bool = False) -> "TransactionMetadata":
        """After InitProducerId: Empty with the new producer id/epoch. The previous epoch is
        remembered only when the same producer ``continuing`` asked for the bump (KIP-360), so
        its retry gets the same answer; after a new instance's bump nothing older is let back in."""
        return self.transition(TxnState.EMPTY, now_ms, producer_id=producer_id, producer_epoch=producer_epoch,
                               last_producer_id=self.producer_id,
                               last_producer_epoch=self.producer_epoch if continuing else NO_PRODUCER_EPOCH,
                               timeout_ms=timeout_ms, partitions=frozenset(), groups=frozenset(), start_ms=-1)

    def to_bytes(self) -> bytes:
        doc = dataclasses.asdict(self)
        doc.update(version=1, state=self.state.value, partitions=sorted([t, p] for t, p in self.partitions),
                   groups=sorted(self.groups))
        return json.dumps(doc).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "TransactionMetadata":
        doc = json.loads(data)
        doc.pop("version", None)
        doc["state"] = TxnState(doc["state"])
        doc["partitions"] = frozenset((str(t), int(p)) for t, p in doc["partitions"])
        doc["groups"] = frozenset(doc["groups"])
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in known})
