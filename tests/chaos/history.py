"""What a chaos run observed, recorded while it runs and judged by :mod:`checker` afterwards.

Everything here is plain data, so the checker can be fed synthetic histories in unit tests.
Per-record bookkeeping uses ``array`` columns indexed by sequence number (a few bytes per record),
because a long run acknowledges millions of records.
"""
from __future__ import annotations

import threading
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

PENDING = -1
FAILED = -2


def record_value(producer: int, seq: int) -> bytes:
    """The value of a producer's ``seq``-th record: unique across the run, decodable."""
    return b"%03d:%012d" % (producer, seq)


def parse_value(value: Optional[bytes]) -> Optional[tuple[int, int]]:
    """(producer, seq) of a :func:`record_value`, None for anything else."""
    if value is None or len(value) != 16 or value[3:4] != b":":
        return None
    try:
        return int(value[:3]), int(value[4:])
    except ValueError:
        return None


class ProducerLog:
    """Every record one producer sent, indexed by seq: its partition, when it was sent, when and
    how it resolved (acknowledged offset, FAILED, or still PENDING)."""

    def __init__(self, producer: int) -> None:
        self.producer = producer
        self.partitions = array("h")
        self.sent_at = array("d")
        self.resolved_at = array("d")
        self.offsets = array("q")
        self.errors: Counter[str] = Counter()
        self.acked_count = self.failed_count = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.offsets)

    def sent(self, partition: int, count: int = 1, now: Optional[float] = None) -> int:
        """Record ``count`` records sent to ``partition``; returns the first one's seq."""
        now = time.monotonic() if now is None else now
        with self._lock:
            first = len(self.offsets)
            self.partitions.extend([partition] * count)
            self.sent_at.extend([now] * count)
            self.resolved_at.extend([0.0] * count)
            self.offsets.extend([PENDING] * count)
        return first

    def acked(self, first_seq: int, base_offset: int, count: int = 1, now: Optional[float] = None) -> None:
        now = time.monotonic() if now is None else now
        for i in range(count):
            self.offsets[first_seq + i] = base_offset + i
            self.resolved_at[first_seq + i] = now
        with self._lock:
            self.acked_count += count

    def failed(self, first_seq: int, error: BaseException, count: int = 1, now: Optional[float] = None) -> None:
        now = time.monotonic() if now is None else now
        for i in range(count):
            self.offsets[first_seq + i] = FAILED
            self.resolved_at[first_seq + i] = now
        with self._lock:
            self.errors[type(error).__name__] += count
            self.failed_count += count

    def counts(self) -> dict[str, int]:
        with self._lock:
            sent, acked, failed = len(self.offsets), self.acked_count, self.failed_count
        return {"sent": sent, "acked": acked, "failed": failed, "pending": sent - acked - failed}


@dataclass
class ConsumerLog:
    """What one consumer read (per partition: chunks of offsets and values, in read order) and
    the positions it reported after each poll."""

    reads: dict[int, list[tuple[Sequence[int], Sequence[bytes]]]] = field(default_factory=dict)
    positions: dict[int, list[int]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)

    def read(self, partition: int, offsets: Sequence[int], values: Sequence[bytes]) -> None:
        self.reads.setdefault(partition, []).append((offsets, values))

    def position(self, partition: int, position: int) -> None:
        seen = self.positions.setdefault(partition, [])
        if not seen or seen[-1] != position:
            seen.append(position)

    def count(self) -> int:
        return sum(len(offsets) for chunks in self.reads.values() for offsets, _ in chunks)


@dataclass
class Timing:
    """How long something that must be bounded took (None: it never finished)."""
    what: str
    seconds: Optional[float]
    bound_s: float

    @property
    def ok(self) -> bool:
        return self.seconds is not None and self.seconds <= self.bound_s


@dataclass
class Fault:
    kind: str
    targets: tuple[Any, ...]
    injected_at: float
    healed_at: float = 0.0
    note: str = ""


@dataclass
class History:
    """Everything a run recorded. ``delivery_bound_s`` is delivery.timeout.ms plus the margin a
    send may take to resolve."""

    delivery_bound_s: float
    producers: list[ProducerLog] = field(default_factory=list)
    live: ConsumerLog = field(default_factory=ConsumerLog)
    group: ConsumerLog = field(default_factory=ConsumerLog)
    high_watermarks: dict[int, list[int]] = field(default_factory=dict)
    commits: list[tuple[int, int]] = field(default_factory=list)    # (partition, offset) acknowledged commits
    timings: list[Timing] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    stalls: list[str] = field(default_factory=list)                 # what the watchdog saw hang

    def high_watermark(self, partition: int, value: int) -> None:
        seen = self.high_watermarks.setdefault(partition, [])
        if not seen or seen[-1] != value:
            seen.append(value)

    def timing(self, what: str, seconds: Optional[float], bound_s: float) -> Timing:
        entry = Timing(what, seconds, bound_s)
        self.timings.append(entry)
        return entry


@dataclass
class FinalState:
    """The cluster after draining: per partition the high watermark, the leader's log below it
    (values, offset = index), each replica's log below it (anything comparable with ``equals`` or
    ``==``), and the group's committed offset."""

    high_watermarks: dict[int, int]
    logs: dict[int, Sequence[Optional[bytes]]]
    replicas: dict[int, dict[int, Any]] = field(default_factory=dict)
    committed: dict[int, Optional[int]] = field(default_factory=dict)
