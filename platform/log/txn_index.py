"""A log's transaction index: the aborted transactions read_committed readers must filter, and
the completed ones whose markers are not yet replicated (they still hold the last stable offset).

Kafka keeps aborted transactions in a ``.txnindex`` file per segment. ember derives them from the
segments (markers are found by header, their one record says commit or abort) when a log opens or
truncates, as it derives producer state (a clean close saves both in a snapshot the next open
loads instead, ``ember.log.producer_snapshot``); retention drops the
entries whose markers it deleted, and so does the log cleaner for the markers it removes. The log
changes it under its lock; ``aborted_in`` may be called without it (a fetch on the broker's event
loop), so the aborted list is replaced, never changed in place: a reader works on the snapshot it
took.
"""
from __future__ import annotations

import bisect
from typing import Collection, Iterable, NamedTuple, Optional

from ember.log.producer_state import CompletedTxn


class AbortedTxn(NamedTuple):
    """What a read_committed Fetch returns per aborted transaction (Kafka's AbortedTransaction)."""
    producer_id: int
    first_offset: int


class TransactionIndex:
    def __init__(self) -> None:
        self._aborted: list[CompletedTxn] = []     # in marker (last) offset order
        self._unreplicated: list[CompletedTxn] = []

    def completed(self, txn: CompletedTxn) -> None:
        """A marker was appended (markers are appended in offset order)."""
        if txn.aborted:
            self._aborted = [*self._aborted, txn]
        self._unreplicated.append(txn)

    def reset(self, completed: Iterable[CompletedTxn], high_watermark: int) -> None:
        """Everything from the markers found by a rebuild."""
        txns = list(completed)
        self._aborted = [t for t in txns if t.aborted]
        self._unreplicated = [t for t in txns if t.last_offset >= high_watermark]

    def completed_to_keep(self) -> list[CompletedTxn]:
        """The transactions a reset needs to give this index back (aborted ones and those whose
        markers may not be replicated yet), in marker order: what a snapshot keeps."""
        kept = {t.last_offset: t for t in (*self._aborted, *self._unreplicated)}
        return [kept[offset] for offset in sorted(kept)]

    def remove_before(self, log_start_offset: int) -> None:
        """Forget transactions whose markers are below the log start (retention deleted them)."""
        cut = bisect.bisect_left(self._aborted, log_start_offset, key=lambda t: t.last_offset)
        if cut:
            self._aborted = self._aborted[cut:]

    def forget_markers(self, offsets: Collection[int]) -> None:
        """Forget the aborted transactions whose markers the log cleaner removed (their records went
        before them), as a rebuild from the segments would."""
        gone = set(offsets)
        if any(t.last_offset in gone for t in self._aborted):
            self._aborted = [t for t in self._aborted if t.last_offset not in gone]

    def first_unstable_offset(self, open_first: Optional[int], high_watermark: int) -> int:
        """Kafka's last stable offset before the log-start clamp: the high watermark, or the first
        offset of an open transaction (``open_first``) or of a completed one whose marker is not
        below the high watermark yet, whichever is smallest."""
        self._unreplicated = [t for t in self._unreplicated if t.last_offset >= high_watermark]
        candidates = [high_watermark, *(t.first_offset for t in self._unreplicated)]
        if open_first is not None:
            candidates.append(open_first)
        return min(candidates)

    def aborted_in(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [``start_offset``, ``end_offset``): those a reader of
        that range must filter (Kafka: last offset ≥ the fetch offset, first offset < the end)."""
        aborted = self._aborted
        at = bisect.bisect_left(aborted, start_offset, key=lambda t: t.last_offset)
        return [AbortedTxn(t.producer_id, t.first_offset) for t in aborted[at:] if t.first_offset < end_offset]

    def aborted_spans(self) -> dict[int, list[tuple[int, int]]]:
        """producer id -> (first offset, marker offset) of each aborted transaction (the log cleaner
        removes their records)."""
        spans: dict[int, list[tuple[int, int]]] = {}
        for txn in self._aborted:
            spans.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
        return spans

    def __len__(self) -> int:
        return len(self._aborted)
