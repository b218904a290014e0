"""Producer state: per producer id, its epoch, its last few batches and its open transaction.

A leader checks every batch of an idempotent producer against this state before writing: a retry
of one of the last ``MAX_CACHED_BATCHES`` batches gets the original offsets back instead of being
written twice, a sequence gap is refused, an older epoch is fenced. A transactional producer's
first batch in this partition opens its transaction here (the first offset the last stable offset
cannot pass); the marker the leader writes when the transaction ends closes it, as a
``CompletedTxn`` the log keeps (aborted ones in its aborted-transaction index). The state is
derived from batch headers (and the markers' one record) only, so it is rebuilt from the segments
on open and after truncation (an open after a clean close loads it from a snapshot instead,
``ember.log.producer_snapshot``).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Optional, Sequence

from ember import errors
from ember.record.control import Marker, is_transactional
from ember.record.header import NO_EPOCH, BatchHeader, increment_sequence

MAX_CACHED_BATCHES = 5  # Kafka's max.in.flight.requests.per.connection limit for idempotence


class BatchMetadata(NamedTuple):
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int

    @property
    def record_count(self) -> int:
        return self.last_offset - self.first_offset + 1


class CompletedTxn(NamedTuple):
    """A transaction's span in this partition: its first batch here (the marker's own offset when
    it wrote nothing here) to its marker."""
    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


class ActiveProducer(NamedTuple):
    """A producer's state in one partition (Kafka's DescribeProducers ``ProducerState``)."""
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int     # -1: no transaction open here


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    #: The open transaction's first offset in this partition (None: none open here).
    txn_first_offset: Optional[int] = None
    #: The newest transaction coordinator epoch whose marker this producer got (older ones are fenced).
    coordinator_epoch: int = -1
    #: The offset and timestamp of the producer's last marker here (-1: none since its last new epoch).
    last_marker_offset: int = -1
    last_marker_timestamp: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, header: BatchHeader) -> Optional[BatchMetadata]:
        if header.producer_epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_sequence == header.base_sequence and batch.last_sequence == header.last_sequence:
                return batch
        return None


class ProducerStateManager:
    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}
        #: producer id -> first offset of its open transaction, for the last stable offset
        self._ongoing: dict[int, int] = {}

    def check(self, headers: Sequence[BatchHeader]) -> Optional[BatchMetadata]:
        """Validate a leader append's batches in order; the metadata of a retried batch, if any.

        Raises ``InvalidProducerEpoch`` for a fenced epoch and ``OutOfOrderSequenceNumber`` for a
        gap. Nothing is changed: the caller writes, then calls ``update`` per batch.
        """
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last sequence)
        for header in headers:
            pid = header.producer_id
            if pid < 0:
                continue
            entry = self._producers.get(pid)
            if entry is not None and pid not in pending:
                duplicate = entry.find_duplicate(header)
                if duplicate is not None:
                    return duplicate
            if (entry is not None and pid in self._ongoing and header.producer_epoch > entry.epoch
                    and is_transactional(header)):
                # the producer's next transaction (transaction version 2: at the next epoch) before the
                # marker ending its previous one here: it would join that transaction
                raise errors.ConcurrentTransactions(
                    f"producer {pid}'s transaction at epoch {entry.epoch} is still open here (since offset "
                    f"{self._ongoing[pid]}); its batch at epoch {header.producer_epoch} waits for that transaction's "
                    f"marker (if it never comes, the transaction hangs: `ember transactions producers` finds it, "
                    f"`ember transactions abort` ends it)")
            epoch, last_seq = pending.get(pid) or (
                (entry.epoch, entry.last_sequence) if entry else (NO_EPOCH, -1))
            _check_sequence(header, epoch, last_seq, known=entry is not None or pid in pending)
            pending[pid] = (header.producer_epoch, header.last_sequence)
        return None

    def check_marker(self, marker: Marker) -> None:
        """Refuse a marker from a fenced producer epoch or a stale transaction coordinator."""
        entry = self._producers.get(marker.producer_id)
        if entry is None:
            return
        if marker.producer_epoch < entry.epoch:
            raise errors.InvalidProducerEpoch(f"marker for producer {marker.producer_id} epoch {marker.producer_epoch} "
                                              f"is older than its epoch {entry.epoch}")
        if marker.coordinator_epoch < entry.coordinator_epoch:
            raise errors.TransactionCoordinatorFenced(
                f"marker for producer {marker.producer_id} from coordinator epoch {marker.coordinator_epoch}; "
                f"a newer coordinator (epoch {entry.coordinator_epoch}) already wrote one")

    def update(self, header: BatchHeader, marker: Optional[Marker] = None) -> Optional[CompletedTxn]:
        """Record a written batch (header carrying its final offsets); a control batch's
        ``marker`` ends its producer's transaction, which is returned."""
        pid = header.producer_id
        if pid < 0:
            return None
        entry = self._producers.get(pid)
        if marker is not None:
            if entry is None:
                entry = self._producers[pid] = ProducerEntry(header.producer_epoch)
            if header.producer_epoch > entry.epoch:
                # a coordinator that fenced the producer (a timed-out transaction) wrote the marker at a
                # new epoch, which the producer then continues at from sequence 0 (Kafka's
                # maybeUpdateProducerEpoch): the old epoch's sequences must not be expected
                entry.epoch = header.producer_epoch
                entry.batches.clear()
            entry.coordinator_epoch = max(entry.coordinator_epoch, marker.coordinator_epoch)
            entry.last_marker_offset, entry.last_marker_timestamp = header.base_offset, header.max_timestamp
            first = self._ongoing.pop(pid, None)
            entry.txn_first_offset = None
            return CompletedTxn(pid, header.base_offset if first is None else first, header.base_offset,
                                not marker.commit)
        if entry is None or header.producer_epoch != entry.epoch:
            previous = entry
            entry = self._producers[pid] = ProducerEntry(header.producer_epoch)
            if previous is not None:    # a new epoch keeps the open transaction (its marker ends it)
                entry.txn_first_offset, entry.coordinator_epoch = previous.txn_first_offset, previous.coordinator_epoch
        entry.batches.append(BatchMetadata(header.base_sequence, header.last_sequence,
                                           header.base_offset, header.last_offset,
                                           header.max_timestamp))
        if is_transactional(header) and entry.txn_first_offset is None:
            entry.txn_first_offset = self._ongoing[pid] = header.base_offset
        return None

    def entries(self) -> tuple[dict[int, ProducerEntry], dict[int, int]]:
        """Every producer's entry and the open transactions' first offsets (for a snapshot: the
        caller holds the log's lock, so neither changes while it is written)."""
        return self._producers, self._ongoing

    def restore(self, producers: dict[int, ProducerEntry], ongoing: dict[int, int]) -> None:
        """The state a snapshot held (instead of a rebuild from the segments)."""
        self._producers, self._ongoing = producers, ongoing

    def rebuild(self, batches: Iterable[tuple[BatchHeader, Optional[Marker]]]) -> list[CompletedTxn]:
        """State from every batch in log order; the transactions the markers among them ended."""
        self.clear()
        return [done for header, marker in batches if (done := self.update(header, marker)) is not None]

    def first_unstable_offset(self) -> Optional[int]:
        """The first offset of the oldest open transaction, None if none is open."""
        return min(self._ongoing.values()) if self._ongoing else None

    def active(self) -> list[ActiveProducer]:
        """Every producer known here, as DescribeProducers shows them."""
        return [ActiveProducer(pid, e.epoch, e.last_sequence, e.batches[-1].max_timestamp if e.batches else -1,
                               e.coordinator_epoch, -1 if e.txn_first_offset is None else e.txn_first_offset)
                for pid, e in self._producers.items()]

    def has_ongoing(self, producer_id: int, producer_epoch: int) -> bool:
        entry = self._producers.get(producer_id)
        return producer_id in self._ongoing and entry is not None and entry.epoch == producer_epoch

    @property
    def ongoing_count(self) -> int:
        return len(self._ongoing)

    def ongoing(self) -> dict[int, int]:
        """producer id -> first offset of each open transaction (a copy)."""
        return dict(self._ongoing)

    def remove_before(self, log_start_offset: int) -> None:
        """Forget producers whose every batch is below the log start (as a rebuild would), except
        those with an open transaction: its marker must still find it."""
        for pid in [p for p, e in self._producers.items()
                    if e.last_offset < log_start_offset and p not in self._ongoing]:
            del self._producers[pid]

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose last batch and last marker are older than ``expiration_ms``
        (one known only by markers too); returns how many.
        Without this, state grows with every producer id ever seen (the exactly-once Spark sink
        uses one per micro-batch task) until retention passes their batches."""
        cutoff = now_ms - expiration_ms
        expired = [p for p, e in self._producers.items()
                   if (e.batches or e.last_marker_offset >= 0) and p not in self._ongoing
                   and max(e.batches[-1].max_timestamp if e.batches else -1, e.last_marker_timestamp) < cutoff]
        for pid in expired:
            del self._producers[pid]
        return len(expired)

    def last_batch_offsets(self) -> frozenset[int]:
        """The base offsets the log cleaner keeps batches at: each known producer's last data batch
        (its sequence) and its last marker when that came after it (its epoch and coordinator epoch,
        which a rebuild from the segments reads there)."""
        kept = {e.batches[-1].first_offset for e in self._producers.values() if e.batches}
        kept.update(e.last_marker_offset for e in self._producers.values() if e.last_marker_offset > e.last_offset)
        return frozenset(kept)

    def __len__(self) -> int:
        return len(self._producers)

    def clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()


def _check_sequence(header: BatchHeader, epoch: int, last_seq: int, *, known: bool) -> None:
    if not known:
        return  # a producer we have no state for (new, or expired with retention) may start anywhere
    if header.producer_epoch < epoch:
        raise errors.InvalidProducerEpoch(
            f"producer {header.producer_id} epoch {header.producer_epoch} is older than {epoch}")
    if header.producer_epoch > epoch:
        if header.base_sequence != 0:
            raise errors.OutOfOrderSequenceNumber(
                f"producer {header.producer_id} new epoch {header.producer_epoch} must start at "
                f"sequence 0, got {header.base_sequence}")
        return
    expected = increment_sequence(last_seq, 1)
    if header.base_sequence != expected:
        raise errors.OutOfOrderSequenceNumber(
            f"producer {header.producer_id} epoch {epoch}: expected sequence {expected}, "
            f"got {header.base_sequence}")
