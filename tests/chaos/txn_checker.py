"""The transactional chaos run's verdict, named after Jepsen's Kafka workload: aborted reads,
lost writes, torn transactions, duplicates, non-monotonic polls, a fenced (killed) instance's
writes, transactions that never end. Each check is a function over a :class:`TxnHistory` and the
drained cluster's :class:`TxnFinal` returning a :class:`CheckResult` (as :mod:`checker`).

Which transactions count as committed: those whose producer saw ``commit_transaction()`` return,
plus those of unknown outcome (the call failed or the process was killed) whose commit was asked
for and that the final read_committed read shows: the coordinator may complete a commit the
producer never heard of. A transaction of unknown outcome whose commit was never asked for must
never be visible to read_committed: its instance was fenced (by the next ``init_transactions``) or
timed out, and the coordinator aborts it.
"""
from __future__ import annotations

from collections import Counter
from typing import Iterable, Optional

from .checker import CheckResult, bounded_operations
from .txn_history import ABORTED, COMMITTED, UNKNOWN, Txn, TxnConsumerLog, TxnFinal, TxnHistory

READ_COMMITTED = "read_committed"


def _committed_readers(history: TxnHistory, final: TxnFinal) -> list[TxnConsumerLog]:
    return [c for c in history.consumers if c.isolation == READ_COMMITTED] + [final.committed_read]


def _all_readers(history: TxnHistory, final: TxnFinal) -> list[TxnConsumerLog]:
    return [*history.consumers, final.committed_read, final.uncommitted_read]


def visible_in_final(history: TxnHistory, final: TxnFinal) -> set[tuple[int, int]]:
    """The transactions (producer, txn) with at least one value in the final read_committed read."""
    owner = history.value_owner()
    return {(owner[p.value][0].producer, owner[p.value][0].txn) for p in final.committed_read.polls if p.value in owner}


def zombie(txn: Txn) -> bool:
    """A transaction of unknown outcome whose commit was never asked for: it must be aborted."""
    return txn.outcome == UNKNOWN and txn.end_call != "commit"


def decided_committed(history: TxnHistory, final: TxnFinal) -> list[Txn]:
    """Committed transactions, and those of unknown outcome with a commit asked for that the final
    read shows (all of whose writes must then be there)."""
    visible = visible_in_final(history, final)
    return [t for t in history.txns.values()
            if t.outcome == COMMITTED or (t.outcome == UNKNOWN and t.end_call == "commit"
                                          and (t.producer, t.txn) in visible)]


def no_aborted_reads(history: TxnHistory, final: TxnFinal) -> CheckResult:
    """No read_committed consumer sees a write of a transaction that was aborted (the producer's
    abort returned) or of one of unknown outcome that the final read does not show (never
    committed). Zombies (never asked to commit) are the fencing check's."""
    result = CheckResult("no aborted read (read_committed sees no write of an aborted or uncommitted transaction)")
    owner = history.value_owner()
    visible = visible_in_final(history, final)
    for reader in _committed_readers(history, final):
        for poll in reader.polls:
            result.examined += 1
            found = owner.get(poll.value) if poll.value is not None else None
            if found is None:
                continue   # unknown values: the values check
            txn = found[0]
            if txn.outcome == ABORTED:
                result.fail(f"{reader.name}: aborted read of {poll.value!r} at {poll.partition}@{poll.offset}: "
                            f"producer {txn.producer} txn {txn.txn} was aborted ({_why(txn)})")
            elif txn.outcome == UNKNOWN and not zombie(txn) and (txn.producer, txn.txn) not in visible:
                result.fail(f"{reader.name}: read {poll.value!r} at {poll.partition}@{poll.offset} of producer "
                            f"{txn.producer} txn {txn.txn} (outcome unknown, {_why(txn)}), which the final "
                            "read_committed read does not show: it never committed")
    return result


def no_lost_writes(history: TxnHistory, final: TxnFinal) -> CheckResult:
    """Every write of a committed transaction is in the final read_committed read of the whole log,
    in the partition it was written to."""
    result = CheckResult("no lost write (every committed write is in the final read_committed read)")
    found = {(p.partition, p.value) for p in final.committed_read.polls}
    for txn in history.txns.values():
        if txn.outcome != COMMITTED:
            continue
        missing = [(p, v) for p, v in txn.writes if (p, v) not in found]
        result.examined += len(txn.writes)
        for partition, value in missing:
            result.fail(f"lost write: {value!r} to partition {partition} of producer {txn.producer} txn {txn.txn} "
                        f"(committed; {len(missing)} of its {len(txn.writes)} writes missing)")
    return result


def fully_read(reader: TxnConsumerLog, final: TxnFinal) -> set[int]:
    """The partitions ``reader`` read up to the final last stable offset: it got the last record
    the final read_committed read has below it (or the partition holds none)."""
    last: dict[int, int] = {}
    for poll in final.committed_read.polls:
        last[poll.partition] = max(last.get(poll.partition, -1), poll.offset)
    reached: dict[int, int] = {}
    for poll in reader.polls:
        reached[poll.partition] = max(reached.get(poll.partition, -1), poll.offset)
    return {p for p in final.last_stable if reached.get(p, -1) >= last.get(p, -1)}


def no_torn_transactions(history: TxnHistory, final: TxnFinal) -> CheckResult:
    """A read_committed consumer that read a partition up to the final last stable offset saw all
    of every committed transaction's writes to it, or (a skipped transaction) reports it too."""
    result = CheckResult("no torn transaction (read_committed readers of a whole partition see all of each "
                         "committed transaction's writes to it)")
    committed = decided_committed(history, final)
    for reader in _committed_readers(history, final):
        seen: dict[int, set[bytes]] = {}
        for poll in reader.polls:
            if poll.value is not None:
                seen.setdefault(poll.partition, set()).add(poll.value)
        full = fully_read(reader, final)
        for txn in committed:
            for partition, values in sorted(txn.partitions().items()):
                if partition not in full:
                    continue
                result.examined += 1
                got = sum(v in seen.get(partition, ()) for v in values)
                if got == len(values):
                    continue
                how = "saw none" if got == 0 else f"saw {got} of {len(values)}"
                result.fail(f"{reader.name}: torn transaction: producer {txn.producer} txn {txn.txn} "
                            f"({txn.outcome}) wrote {len(values)} value(s) to partition {partition}; the consumer "
                            f"read it to the last stable offset and {how} (missing "
                            f"{[v for v in values if v not in seen.get(partition, ())][:3]!r})")
    return result


def no_duplicates(history: TxnHistory, final: TxnFinal) -> CheckResult:
    """No consumer reads a value twice, and the final read_uncommitted log holds each value once."""
    result = CheckResult("no duplicates (no value read twice by a consumer, none twice in the log)")
    for reader in _all_readers(history, final):
        counts = Counter(p.value for p in reader.polls)
        result.examined += len(reader.polls)
        for value, times in counts.items():
            if times > 1:
                where = [f"{p.partition}@{p.offset}" for p in reader.polls if p.value == value]
                result.fail(f"{reader.name}: {value!r} read {times} times, at {', '.join(where[:5])}")
    return result


def monotonic_polls(history: TxnHistory, final: TxnFinal) -> CheckResult:
    """Each consumer's offsets within a partition strictly increase, poll after poll."""
    result = CheckResult("monotonic polls (offsets strictly increase per consumer and partition)")
    for reader in _all_readers(history, final):
        last: dict[int, int] = {}
        for poll in reader.polls:
            result.examined += 1
            before = last.get(poll.partition)
            if before is not None and poll.offset <= before:
                result.fail(f"{reader.name}: partition {poll.partition}: offset {poll.offset} "
                            f"({poll.value!r}) polled after offset {before}")
            last[poll.partition] = poll.offset
    return result


def no_zombie_writes(history: TxnHistory, final: TxnFinal) -> CheckResult:
    """No read_committed consumer sees a write of a transaction whose instance was killed (or whose
    call failed) before it asked to commit: fenced by the next instance's ``init_transactions``,
    or timed out, it must have been aborted."""
    result = CheckResult("no write of a fenced instance visible (a killed producer's unfinished transaction "
                         "never shows up in read_committed)")
    owner = history.value_owner()
    for reader in _committed_readers(history, final):
        for poll in reader.polls:
            found = owner.get(poll.value) if poll.value is not None else None
            if found is None or not zombie(found[0]):
                continue
            result.examined += 1
            txn = found[0]
            result.fail(f"{reader.name}: zombie write {poll.value!r} at {poll.partition}@{poll.offset}: producer "
                        f"{txn.producer} txn {txn.txn} never asked to commit ({_why(txn)})")
    result.examined += sum(zombie(t) for t in history.txns.values())
    return result


def values_known_and_placed(history: TxnHistory, final: TxnFinal) -> CheckResult:
    """Every value any consumer reads was written by a producer, to that partition; and whatever a
    read_committed reader got at an offset is what the final read_uncommitted log holds there."""
    result = CheckResult("every value read was written, to that partition, at the offset the log holds it")
    owner = history.value_owner()
    log = {(p.partition, p.offset): p.value for p in final.uncommitted_read.polls}
    for reader in _all_readers(history, final):
        for poll in reader.polls:
            result.examined += 1
            found = owner.get(poll.value) if poll.value is not None else None
            if found is None:
                result.fail(f"{reader.name}: unknown value {poll.value!r} at {poll.partition}@{poll.offset}")
            elif found[1] != poll.partition:
                result.fail(f"{reader.name}: {poll.value!r} written to partition {found[1]}, read at "
                            f"{poll.partition}@{poll.offset}")
            elif reader is not final.uncommitted_read and log.get((poll.partition, poll.offset)) != poll.value:
                result.fail(f"{reader.name}: read {poll.value!r} at {poll.partition}@{poll.offset}; the final log "
                            f"holds {log.get((poll.partition, poll.offset))!r} there")
    return result


def transactions_end(history: TxnHistory, final: TxnFinal) -> CheckResult:
    """Every transaction ends within a bound: after the run drained (and ``transaction.timeout.ms``
    passed), no partition's last stable offset stays below its high watermark; every commit or
    abort the producers called returned within the call bound."""
    result = CheckResult(f"every transaction ends (LSO reaches the high watermark within {final.lso_bound_s:.0f}s; "
                         f"each transaction ends at its producer within {history.txn_bound_s:.0f}s)")
    for partition, hw in sorted(final.high_watermarks.items()):
        result.examined += 1
        lso = final.last_stable.get(partition)
        if lso != hw:
            result.fail(f"partition {partition}: last stable offset {lso} stuck below the high watermark {hw} "
                        f"(a transaction never ended)")
    if final.lso_caught_up_s is None or final.lso_caught_up_s > final.lso_bound_s:
        took = "never" if final.lso_caught_up_s is None else f"after {final.lso_caught_up_s:.1f}s"
        result.fail(f"the last stable offsets reached the high watermarks {took} (bound {final.lso_bound_s:.0f}s)")
    for txn in history.txns.values():
        if txn.ended_at is None:
            continue
        result.examined += 1
        seconds = txn.ended_at - txn.began_at
        if seconds > history.txn_bound_s:
            result.fail(f"producer {txn.producer} txn {txn.txn} took {seconds:.1f}s to end ({txn.outcome})")
    return result


def readers_caught_up(history: TxnHistory, final: TxnFinal) -> CheckResult:
    """Every consumer of the run read every partition to its end (read_committed: the last record
    below the last stable offset; read_uncommitted: the last record below the high watermark)."""
    result = CheckResult("every consumer caught up to the end of every partition")
    last_uncommitted: dict[int, int] = {}
    for poll in final.uncommitted_read.polls:
        last_uncommitted[poll.partition] = max(last_uncommitted.get(poll.partition, -1), poll.offset)
    for reader in history.consumers:
        reached: dict[int, int] = {}
        for poll in reader.polls:
            reached[poll.partition] = max(reached.get(poll.partition, -1), poll.offset)
        if reader.isolation == READ_COMMITTED:
            missing = sorted(set(final.last_stable) - fully_read(reader, final))
        else:
            missing = sorted(p for p in final.high_watermarks if reached.get(p, -1) < last_uncommitted.get(p, -1))
        result.examined += len(final.high_watermarks)
        for partition in missing:
            result.fail(f"{reader.name}: partition {partition} read only up to offset {reached.get(partition, -1)}")
    return result


def check_txn(history: TxnHistory, final: TxnFinal) -> list[CheckResult]:
    """Every check, safety first, then liveness (with the record harness's bounded operations)."""
    return [no_aborted_reads(history, final), no_lost_writes(history, final), no_torn_transactions(history, final),
            no_duplicates(history, final), monotonic_polls(history, final), no_zombie_writes(history, final),
            values_known_and_placed(history, final), transactions_end(history, final),
            readers_caught_up(history, final), bounded_operations(history)]


def _why(txn: Txn) -> str:
    parts = [f"intent {txn.intent}"]
    if txn.end_call:
        parts.append(f"{txn.end_call} called")
    if txn.killed:
        parts.append("producer killed")
    if txn.error:
        parts.append(f"error {txn.error}")
    return ", ".join(parts)


def summarize(results: Iterable[CheckResult]) -> Optional[str]:
    failed = [r.name for r in results if not r.ok]
    return ", ".join(failed) if failed else None
