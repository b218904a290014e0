"""The chaos run's verdict: safety and liveness checks over a :class:`History` and the drained
cluster's :class:`FinalState`.

Each check is a function returning a :class:`CheckResult`, so unit tests can feed it a synthetic
history with one known defect (a lost record, a duplicate, a reorder, a phantom read...) and see
it fail.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

from .history import PENDING, ConsumerLog, FinalState, History, parse_value, record_value

#: Violations kept per check (the count covers all of them).
SHOWN = 10


@dataclass
class CheckResult:
    name: str
    violations: list[str] = field(default_factory=list)
    total: int = 0
    examined: int = 0

    @property
    def ok(self) -> bool:
        return self.total == 0

    def fail(self, message: str) -> None:
        self.total += 1
        if len(self.violations) < SHOWN:
            self.violations.append(message)

    def __str__(self) -> str:
        head = f"{'PASS' if self.ok else 'FAIL'} {self.name} ({self.examined:,} examined"
        if self.ok:
            return head + ")"
        return head + f", {self.total:,} violation(s))\n" + "\n".join(f"    {v}" for v in self.violations)


def acknowledged_records_in_place(history: History, final: FinalState) -> CheckResult:
    """Every acknowledged record is in the final log at the offset its acknowledgement named."""
    result = CheckResult("every acknowledged record is at the offset its ack named")
    for log in history.producers:
        for seq, offset in enumerate(log.offsets):
            if offset < 0:
                continue
            result.examined += 1
            partition = log.partitions[seq]
            entries = final.logs.get(partition, ())
            if offset >= len(entries):
                result.fail(f"lost: producer {log.producer} seq {seq} acked at {partition}@{offset}, "
                            f"but the log ends at {len(entries)}")
            elif entries[offset] != record_value(log.producer, seq):
                result.fail(f"lost: producer {log.producer} seq {seq} acked at {partition}@{offset}, "
                            f"which holds {entries[offset]!r}")
    return result


def each_record_once_in_order(history: History, final: FinalState) -> tuple[CheckResult, CheckResult]:
    """Scanning the final logs: every record is one a producer sent, to that partition, at most
    once (exactly once for acknowledged ones, with the check above); and each producer's
    records of a partition appear in the order it sent them."""
    once = CheckResult("no record twice, none unknown or in the wrong partition")
    order = CheckResult("per-producer order within each partition")
    logs = {log.producer: log for log in history.producers}
    seen = {producer: bytearray(len(log)) for producer, log in logs.items()}
    for partition, entries in sorted(final.logs.items()):
        last: dict[int, tuple[int, int]] = {}
        for offset, value in enumerate(entries):
            once.examined += 1
            parsed = parse_value(value)
            if parsed is None or parsed[0] not in logs or parsed[1] >= len(logs[parsed[0]]):
                once.fail(f"unknown record {value!r} at {partition}@{offset}")
                continue
            producer, seq = parsed
            if logs[producer].partitions[seq] != partition:
                once.fail(f"producer {producer} seq {seq} was sent to partition {logs[producer].partitions[seq]} "
                          f"but is at {partition}@{offset}")
                continue
            if seen[producer][seq]:
                once.fail(f"duplicate: producer {producer} seq {seq} again at {partition}@{offset}")
                continue
            seen[producer][seq] = 1
            order.examined += 1
            previous = last.get(producer)
            if previous is not None and seq < previous[0]:
                order.fail(f"reordered: producer {producer} seq {seq} at {partition}@{offset} after "
                           f"seq {previous[0]} at {partition}@{previous[1]}")
            last[producer] = (seq, offset)
    return once, order


def no_phantom_reads(name: str, consumer: ConsumerLog, final: FinalState) -> CheckResult:
    """Every record the consumer read is in the final log at the offset it was read from."""
    result = CheckResult(f"{name}: every record read is in the final log at the same offset")
    for partition, chunks in sorted(consumer.reads.items()):
        entries = final.logs.get(partition, ())
        for offsets, values in chunks:
            for offset, value in zip(_rows(offsets), _rows(values)):
                result.examined += 1
                if offset >= len(entries) or entries[offset] != value:
                    found = entries[offset] if offset < len(entries) else "nothing"
                    result.fail(f"phantom read: {value!r} at {partition}@{offset}; the final log has {found!r}")
    return result


def reads_contiguous(name: str, consumer: ConsumerLog, final: FinalState) -> CheckResult:
    """A consumer that started at offset 0 and never seeked reads each offset once, in order,
    its positions never go back, and after draining it has read up to the high watermark."""
    result = CheckResult(f"{name}: positions never go back, no offset skipped or re-read, caught up")
    for partition, positions in sorted(consumer.positions.items()):
        _never_decreasing(result, positions, f"position of partition {partition}")
    for partition, hw in sorted(final.high_watermarks.items()):
        expected = 0
        for offsets, _ in consumer.reads.get(partition, ()):
            for offset in _rows(offsets):
                result.examined += 1
                if offset != expected:
                    result.fail(f"partition {partition}: read offset {offset} where {expected} was next")
                expected = offset + 1
        if expected != hw:
            result.fail(f"partition {partition}: read up to {expected}, the high watermark is {hw}")
    return result


def high_watermark_never_goes_back(history: History, final: FinalState) -> CheckResult:
    """Sampled high watermarks never decrease, and none exceeds the final one."""
    result = CheckResult("the high watermark never goes back")
    for partition, samples in sorted(history.high_watermarks.items()):
        _never_decreasing(result, samples, f"high watermark of partition {partition}")
        hw = final.high_watermarks.get(partition, 0)
        if samples and max(samples) > hw:
            result.fail(f"partition {partition}: a high watermark of {max(samples)} was seen, the final one is {hw}")
    return result


def replicas_identical(final: FinalState) -> CheckResult:
    """Every replica's log below the high watermark is the same as every other's."""
    result = CheckResult("replicas identical below the high watermark")
    for partition, by_broker in sorted(final.replicas.items()):
        brokers = sorted(by_broker)
        for broker in brokers[1:]:
            result.examined += 1
            difference = _first_difference(by_broker[brokers[0]], by_broker[broker])
            if difference is not None:
                result.fail(f"partition {partition}: broker {broker} differs from broker {brokers[0]} {difference}")
    return result


def commits_within_high_watermark(history: History, final: FinalState) -> CheckResult:
    """No offset the group committed is ahead of the partition's high watermark."""
    result = CheckResult("committed group offsets never ahead of the high watermark")
    committed = [(p, o, "acknowledged commit") for p, o in history.commits]
    committed += [(p, o, "final committed offset") for p, o in final.committed.items() if o is not None]
    for partition, offset, what in committed:
        result.examined += 1
        hw = final.high_watermarks.get(partition, 0)
        if offset > hw:
            result.fail(f"partition {partition}: {what} {offset} is ahead of the high watermark {hw}")
    return result


def sends_resolved_in_time(history: History) -> CheckResult:
    """Every send resolved (acknowledged or failed) within delivery.timeout.ms plus a margin."""
    result = CheckResult(f"every send resolves within {history.delivery_bound_s:.0f}s")
    for log in history.producers:
        late = unresolved = 0
        worst = 0.0
        for seq in range(len(log)):
            result.examined += 1
            if log.offsets[seq] == PENDING:
                unresolved += 1
                continue
            took = log.resolved_at[seq] - log.sent_at[seq]
            worst = max(worst, took)
            if took > history.delivery_bound_s:
                late += 1
        if unresolved:
            first = next(seq for seq in range(len(log)) if log.offsets[seq] == PENDING)
            result.fail(f"producer {log.producer}: {unresolved:,} send(s) never resolved (first: seq {first})")
        if late:
            result.fail(f"producer {log.producer}: {late:,} send(s) resolved after the bound (worst {worst:.1f}s)")
    return result


def bounded_operations(history: History) -> CheckResult:
    """Every close() returned, every restarted broker served again, every heal completed, each
    within its bound; the watchdog saw nothing hang."""
    result = CheckResult("every close, restart and heal is bounded; nothing hangs")
    for timing in history.timings:
        result.examined += 1
        if not timing.ok:
            took = "never finished" if timing.seconds is None else f"took {timing.seconds:.1f}s"
            result.fail(f"{timing.what} {took} (bound {timing.bound_s:.0f}s)")
    for stall in history.stalls:
        result.fail(stall)
    return result


def check(history: History, final: FinalState) -> list[CheckResult]:
    """Every check, safety first."""
    once, order = each_record_once_in_order(history, final)
    return [acknowledged_records_in_place(history, final), once, order,
            no_phantom_reads("live consumer", history.live, final),
            no_phantom_reads("group consumer", history.group, final),
            reads_contiguous("live consumer", history.live, final),
            high_watermark_never_goes_back(history, final),
            replicas_identical(final),
            commits_within_high_watermark(history, final),
            sends_resolved_in_time(history),
            bounded_operations(history)]


def _never_decreasing(result: CheckResult, values: Sequence[int], what: str) -> None:
    for before, after in zip(values, values[1:]):
        result.examined += 1
        if after < before:
            result.fail(f"{what} went back from {before} to {after}")


def _first_difference(a: Any, b: Any) -> Optional[str]:
    """None when ``a`` and ``b`` hold the same records, else where they first differ."""
    equal: Callable[[Any], bool] = getattr(a, "equals", None) or a.__eq__
    if equal(b) is True:
        return None
    rows_a, rows_b = _rows(a), _rows(b)
    for offset, (x, y) in enumerate(zip(rows_a, rows_b)):
        if x != y:
            return f"at offset {offset}: {x!r} vs {y!r}"
    return f"in length: {len(rows_a)} vs {len(rows_b)} records"


def _rows(records: Any) -> list[Any]:
    """A table's rows (as dicts), an Arrow array's values, or a sequence's items."""
    to_pylist: Optional[Callable[[], Iterable[Any]]] = getattr(records, "to_pylist", None)
    return list(to_pylist() if to_pylist else records)

