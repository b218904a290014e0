"""Producer-state snapshots: what a clean close knows, so the next open need not read every batch.

Producer state (epochs, the last batches' sequences, open transactions) and the transaction index
(aborted transactions, completed ones whose markers are not replicated yet) are derived from the
batch headers and markers. Deriving them on open reads every header of the log: about 3 s per
50,000 batches, on every partition of a restarting broker. Kafka writes a snapshot file at each
segment roll and at a clean shutdown; ember writes one at a clean close (``Log.close``) of a log
that holds batches, with the state at the log end offset.

The next open uses it only if the log still ends exactly there, fully flushed (the recovery point
is the end), with the same latest leader epoch (a lost epoch checkpoint is rebuilt from the
batches), and deletes it as it reads it: from then on appends change the state, so a crash
later can only ever find no snapshot and rebuild from the segments, never a stale one. A snapshot
that is missing, malformed or torn reads as None: the open rebuilds, as before.
"""
from __future__ import annotations

import logging
from collections import deque
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

from ember.log import checkpoint
from ember.log.producer_state import MAX_CACHED_BATCHES, BatchMetadata, CompletedTxn, ProducerEntry

SNAPSHOT = "producer-state-snapshot"
_VERSION = 1
_WIDTH = 7          # every row: a kind, then six integers (unused ones 0)
_HEADER, _PRODUCER, _BATCH, _ONGOING, _COMPLETED = range(5)

_log = logging.getLogger(__name__)


class ProducerSnapshot(NamedTuple):
    offset: int                              # the log end offset the state is at
    latest_epoch: int                        # the leader epoch cache's then (its checkpoint must agree)
    producers: dict[int, ProducerEntry]
    ongoing: dict[int, int]                  # producer id -> first offset of its open transaction
    completed: list[CompletedTxn]            # aborted ones and those not yet below the high watermark


def write(directory: Path, snapshot: ProducerSnapshot) -> None:
    """Write the directory's snapshot as a checkpoint file (OSError on failure), not fsynced: a
    broker stopping thousands of partitions would pay two fsyncs each, and a file the disk lost or
    tore after a power cut reads as malformed (its entry count no longer matches)."""
    rows: list[tuple[int, ...]] = [(_HEADER, _VERSION, snapshot.offset, len(snapshot.producers),
                                    len(snapshot.ongoing), len(snapshot.completed), snapshot.latest_epoch)]
    for pid, entry in snapshot.producers.items():
        rows.append((_PRODUCER, pid, entry.epoch, -1 if entry.txn_first_offset is None else entry.txn_first_offset,
                     entry.coordinator_epoch, entry.last_marker_offset, entry.last_marker_timestamp))
        rows += [(_BATCH, pid, *batch) for batch in entry.batches]
    rows += [(_ONGOING, pid, first, 0, 0, 0, 0) for pid, first in snapshot.ongoing.items()]
    rows += [(_COMPLETED, t.producer_id, t.first_offset, t.last_offset, int(t.aborted), 0, 0)
             for t in snapshot.completed]
    checkpoint.write_entries(directory / SNAPSHOT, rows, durable=False)


def take(directory: Path) -> Optional[ProducerSnapshot]:
    """Read and delete the directory's snapshot (None if there is none or it does not parse).
    Raises OSError if it cannot be deleted: left in place, a later open could take it for the
    state of a log that has changed since."""
    path = directory / SNAPSHOT
    rows = checkpoint.read_entries(path, _WIDTH)
    try:
        path.unlink()
    except FileNotFoundError:
        return None
    checkpoint.fsync_dir(directory)
    if rows is None:
        return None
    try:
        return _parse(rows)
    except ValueError as e:
        _log.warning("ignoring malformed producer-state snapshot in %s: %s", directory, e)
        return None


def _parse(rows: Sequence[tuple[int, ...]]) -> ProducerSnapshot:
    if not rows or rows[0][0] != _HEADER or rows[0][1] != _VERSION:
        raise ValueError("no header row of this version")
    _, _, offset, producer_count, ongoing_count, completed_count, latest_epoch = rows[0]
    producers: dict[int, ProducerEntry] = {}
    ongoing: dict[int, int] = {}
    completed: list[CompletedTxn] = []
    for kind, pid, *fields in rows[1:]:
        if kind == _PRODUCER:
            epoch, txn_first, coordinator_epoch, marker_offset, marker_timestamp = fields
            producers[pid] = ProducerEntry(epoch, deque(maxlen=MAX_CACHED_BATCHES),
                                           None if txn_first < 0 else txn_first, coordinator_epoch,
                                           marker_offset, marker_timestamp)
        elif kind == _BATCH and pid in producers:
            producers[pid].batches.append(BatchMetadata(*fields[:5]))
        elif kind == _ONGOING:
            ongoing[pid] = fields[0]
        elif kind == _COMPLETED:
            completed.append(CompletedTxn(pid, fields[0], fields[1], bool(fields[2])))
        else:
            raise ValueError(f"unexpected row kind {kind} (producer {pid})")
    if (len(producers), len(ongoing), len(completed)) != (producer_count, ongoing_count, completed_count):
        raise ValueError("row counts differ from the header's")
    return ProducerSnapshot(offset, latest_epoch, producers, ongoing, completed)
