"""Leader epoch cache: the offset at which each leader epoch started writing.

Followers use it (through OffsetsForLeaderEpoch) to truncate to the exact point where their log
diverged from a new leader's, instead of to a high watermark that may be stale. Every change is
checkpointed because a wrong cache after restart means wrong truncation. A change is written
before it is applied in memory, so a failed write (OSError) leaves the cache as it was.
"""
from __future__ import annotations

import bisect
from pathlib import Path
from typing import Optional, Sequence

from ember.log import checkpoint
from ember.record.header import NO_EPOCH

UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    """Sorted (epoch, start_offset) entries, both strictly increasing, persisted on change."""

    def __init__(self, path: Path) -> None:
        self._path = path
        rows = checkpoint.read_entries(path, 2) or []
        self._entries: list[tuple[int, int]] = [(e, o) for e, o in rows]
        if any(b[0] <= a[0] or b[1] < a[1] for a, b in zip(self._entries, self._entries[1:])):
            self._set([])  # not monotonic: trust nothing rather than truncate wrongly

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else NO_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` started writing at ``start_offset`` (no-op if already known).

        Entries that a newer epoch contradicts (same or later epoch or start offset) are dropped,
        as in Kafka.
        """
        self.assign_all([(epoch, start_offset)])

    def assign_all(self, assignments: Sequence[tuple[int, int]]) -> None:
        """``assign`` each (epoch, start_offset) in turn, persisting once (if anything changed)."""
        entries = self._entries
        for epoch, start_offset in assignments:
            entries = _assigned(entries, epoch, start_offset) or entries
        if entries is not self._entries:
            self._set(entries)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer: (largest epoch ≤ requested, its end offset).

        The end offset is where the next epoch started (or the log end for the latest epoch);
        ``(-1, -1)`` when the epoch is newer than anything known.
        """
        if requested_epoch == NO_EPOCH or not self._entries:
            return NO_EPOCH, UNDEFINED_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        epochs = [e for e, _ in self._entries]
        higher = bisect.bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            return NO_EPOCH, UNDEFINED_OFFSET
        higher_start = self._entries[higher][1]
        if higher == 0:
            return requested_epoch, higher_start
        return epochs[higher - 1], higher_start

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that started at or after ``end_offset`` (the log was truncated there)."""
        kept = [(e, o) for e, o in self._entries if o < end_offset]
        if kept != self._entries:
            self._set(kept)

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop epochs wholly below the new log start; the one covering it now starts there."""
        below = [i for i, (_, o) in enumerate(self._entries) if o < start_offset]
        if not below:
            return
        last = below[-1]
        epoch = self._entries[last][0]
        kept = self._entries[last + 1:]
        if not kept or kept[0][1] > start_offset:
            kept = [(epoch, start_offset)] + kept
        self._set(kept)

    def clear(self) -> None:
        self._set([])

    def _set(self, entries: list[tuple[int, int]]) -> None:
        """Persist ``entries``, then use them (unchanged if the write fails)."""
        checkpoint.write_entries(self._path, entries)
        self._entries = entries


def _assigned(entries: list[tuple[int, int]], epoch: int, start_offset: int
              ) -> Optional[list[tuple[int, int]]]:
    """``entries`` after recording that ``epoch`` started at ``start_offset``; None if unchanged.

    Entries that a newer epoch contradicts (same or later epoch or start offset) are dropped,
    as in Kafka."""
    if epoch < 0:
        return None
    if entries and entries[-1][0] == epoch and entries[-1][1] <= start_offset:
        return None
    return [(e, o) for e, o in entries if e < epoch and o < start_offset] + [(epoch, start_offset)]
