"""The transactional checker fails on synthetic histories with one known defect each (an aborted
read, a lost write, a torn transaction, a duplicate, a poll going back, a zombie's write, a
transaction that never ends, ...) and passes the same history without it."""
from __future__ import annotations

import json

from .txn_checker import check_txn
from .txn_history import ABORTED, COMMITTED, UNKNOWN, Poll, Txn, TxnConsumerLog, TxnFinal, TxnHistory
from .txn_producer import parse_txn_value, txn_value

PARTITIONS = 2


def txn(producer: int, number: int, outcome: str, partitions: tuple[int, ...] = (0, 1), per: int = 2,
        end_call: str | None = "commit", killed: bool = False) -> Txn:
    writes = [(p, txn_value(producer, number, i * len(partitions) + j))
              for i in range(per) for j, p in enumerate(partitions)]
    intent = "abort" if outcome == ABORTED else "commit"
    return Txn(producer, number, intent, writes, began_at=float(number), end_call=end_call if not killed else end_call,
               outcome=outcome, ended_at=None if killed else number + 0.5, killed=killed)


def clean_run() -> tuple[TxnHistory, TxnFinal]:
    """Producer 0: txn 0 committed, txn 1 aborted, txn 2 committed; producer 1: txn 0 committed,
    txn 1 killed before it asked to commit (a zombie, aborted by the coordinator), txn 2 of
    unknown outcome whose commit the coordinator completed (visible). Each transaction writes 2
    values to each partition; a marker follows each one in each partition it wrote."""
    history = TxnHistory(delivery_bound_s=0.0)
    txns = [txn(0, 0, COMMITTED), txn(0, 1, ABORTED, end_call="abort"), txn(1, 0, COMMITTED),
            txn(1, 1, UNKNOWN, end_call=None, killed=True), txn(0, 2, COMMITTED),
            txn(1, 2, UNKNOWN, end_call="commit", killed=True)]
    for t in txns:
        history.txns[(t.producer, t.txn)] = t
    visible = {(0, 0), (1, 0), (0, 2), (1, 2)}
    committed = TxnConsumerLog("final read_committed", "read_committed")
    uncommitted = TxnConsumerLog("final read_uncommitted", "read_uncommitted")
    offsets = {p: 0 for p in range(PARTITIONS)}
    for t in txns:
        for partition, values in sorted(t.partitions().items()):
            for value in values:
                uncommitted.read(partition, offsets[partition], value)
                if (t.producer, t.txn) in visible:
                    committed.read(partition, offsets[partition], value)
                offsets[partition] += 1
            offsets[partition] += 1          # the marker
    live_committed = TxnConsumerLog("librdkafka read_committed", "read_committed", list(committed.polls))
    live_uncommitted = TxnConsumerLog("librdkafka read_uncommitted", "read_uncommitted", list(uncommitted.polls))
    history.consumers += [live_committed, live_uncommitted]
    history.timing("producer 1 init_transactions after its restart", 1.0, 90.0)
    final = TxnFinal(dict(offsets), dict(offsets), committed, uncommitted, lso_caught_up_s=12.0, lso_bound_s=42.0)
    return history, final


def failures(history: TxnHistory, final: TxnFinal) -> dict[str, list[str]]:
    return {r.name.split(" (")[0]: r.violations for r in check_txn(history, final) if not r.ok}


def live(history: TxnHistory, isolation: str = "read_committed") -> TxnConsumerLog:
    return next(c for c in history.consumers if c.isolation == isolation)


def test_a_clean_history_passes_every_check() -> None:
    assert failures(*clean_run()) == {}


def test_values_name_producer_transaction_and_write() -> None:
    assert parse_txn_value(txn_value(12, 3456, 7)) == (12, 3456, 7)
    assert parse_txn_value(b"000:000000000001") is None


def test_an_aborted_read_fails() -> None:
    history, final = clean_run()
    aborted = history.txns[(0, 1)]
    partition, value = aborted.writes[0]
    live(history).polls.append(Poll(partition, 99, value))
    found = failures(history, final)
    assert any("aborted read" in v and "txn 1 was aborted" in v for v in found["no aborted read"])


def test_reading_an_unknown_transaction_that_never_committed_fails() -> None:
    history, final = clean_run()
    maybe = history.txns[(1, 2)]
    gone = {value for _, value in maybe.writes}
    final.committed_read.polls = [p for p in final.committed_read.polls if p.value not in gone]
    found = failures(history, final)
    assert any("never committed" in v for v in found["no aborted read"])


def test_a_lost_write_fails() -> None:
    history, final = clean_run()
    value = history.txns[(0, 2)].writes[1][1]
    final.committed_read.polls = [p for p in final.committed_read.polls if p.value != value]
    found = failures(history, final)
    assert any(f"lost write: {value!r}" in v for v in found["no lost write"])


def test_a_torn_transaction_fails() -> None:
    history, final = clean_run()
    value = history.txns[(1, 0)].writes[0][1]      # one of its two writes to partition 0
    reader = live(history)
    reader.polls = [p for p in reader.polls if p.value != value]
    found = failures(history, final)
    assert any("librdkafka read_committed: torn transaction: producer 1 txn 0" in v and "saw 1 of 2" in v
               for v in found["no torn transaction"])


def test_a_partly_visible_transaction_of_unknown_outcome_is_torn() -> None:
    history, final = clean_run()
    maybe = history.txns[(1, 2)]
    gone = {v for p, v in maybe.writes if p == 1}
    for log in (final.committed_read, live(history)):
        log.polls = [p for p in log.polls if p.value not in gone]
    found = failures(history, final)
    assert any("final read_committed: torn transaction: producer 1 txn 2" in v and "saw none" in v
               for v in found["no torn transaction"])


def test_a_duplicate_fails() -> None:
    history, final = clean_run()
    first = final.uncommitted_read.polls[0]
    final.uncommitted_read.polls.append(Poll(first.partition, 1000, first.value))
    found = failures(history, final)
    assert any("read 2 times" in v for v in found["no duplicates"])


def test_a_poll_going_back_fails() -> None:
    history, final = clean_run()
    reader = live(history, "read_uncommitted")
    reader.polls[0], reader.polls[1] = reader.polls[1], reader.polls[0]     # partition 0: offset 1, then 0
    assert "monotonic polls" in failures(history, final)


def test_a_zombie_write_visible_fails() -> None:
    history, final = clean_run()
    partition, value = history.txns[(1, 1)].writes[0]
    offset = next(p.offset for p in final.uncommitted_read.polls if p.value == value)
    reader = live(history)
    reader.polls.append(Poll(partition, offset, value))
    reader.polls.sort(key=lambda p: (p.partition, p.offset))
    found = failures(history, final)
    assert any("zombie write" in v and "producer 1 txn 1 never asked to commit" in v
               for v in found["no write of a fenced instance visible"])


def test_an_unknown_or_misplaced_value_fails() -> None:
    history, final = clean_run()
    live(history, "read_uncommitted").polls.append(Poll(0, 500, b"not ours"))
    live(history, "read_uncommitted").polls.append(Poll(0, 501, history.txns[(0, 0)].writes[1][1]))  # partition 1's
    found = failures(history, final)["every value read was written, to that partition, at the offset the log holds it"]
    assert any("unknown value" in v for v in found) and any("written to partition 1" in v for v in found)


def test_a_stuck_last_stable_offset_fails() -> None:
    history, final = clean_run()
    final.last_stable[1] -= 3
    final.lso_caught_up_s = None
    found = failures(history, final)
    assert any("stuck below the high watermark" in v for v in found["every transaction ends"])


def test_a_transaction_that_took_too_long_fails() -> None:
    history, final = clean_run()
    history.txns[(0, 2)].ended_at = 2 + history.txn_bound_s + 1
    assert any("took" in v for v in failures(history, final)["every transaction ends"])


def test_a_consumer_that_did_not_catch_up_fails() -> None:
    history, final = clean_run()
    reader = live(history)
    last = max(p.offset for p in reader.polls if p.partition == 1)
    reader.polls = [p for p in reader.polls if not (p.partition == 1 and p.offset == last)]
    assert "every consumer caught up to the end of every partition" in failures(history, final)


def test_a_producer_init_that_never_returned_fails() -> None:
    history, final = clean_run()
    history.timing("producer 0 init_transactions after its restart", None, 90.0)
    assert "every close, restart and heal is bounded; nothing hangs" in failures(history, final)


def test_events_fold_into_transactions() -> None:
    """A producer's events file, two instances: a committed transaction, an aborted one, one cut
    by a SIGKILL after its begin (a torn last line too), then the next instance's."""
    w = [[0, txn_value(3, 0, 0).decode()], [1, txn_value(3, 0, 1).decode()]]
    lines = [{"ev": "init", "t": 1.0}, {"ev": "begin", "txn": 0, "intent": "commit", "writes": w, "t": 1.1},
             {"ev": "end-call", "txn": 0, "call": "commit", "t": 1.2},
             {"ev": "end", "txn": 0, "outcome": "committed", "error": None, "t": 1.3},
             {"ev": "begin", "txn": 1, "intent": "abort", "writes": w[:1], "t": 1.4},
             {"ev": "end-call", "txn": 1, "call": "abort", "t": 1.5},
             {"ev": "end", "txn": 1, "outcome": "aborted", "error": None, "t": 1.6},
             {"ev": "begin", "txn": 2, "intent": "commit", "writes": w[1:], "t": 1.7},
             {"ev": "init", "t": 5.0}, {"ev": "begin", "txn": 3, "intent": "commit", "writes": w, "t": 5.1}]
    text = [json.dumps(line) for line in lines[:8]] + ['{"ev": "flush'] + [json.dumps(line) for line in lines[8:]]
    history = TxnHistory(delivery_bound_s=0.0)
    history.add_events(3, text)
    assert [(t.txn, t.outcome, t.end_call, t.killed) for t in history.txns.values()] == [
        (0, COMMITTED, "commit", False), (1, ABORTED, "abort", False), (2, UNKNOWN, None, True), (3, UNKNOWN, None, True)]
    assert history.inits == [(3, 1.0), (3, 5.0)]
    assert history.txns[(3, 0)].writes == [(0, txn_value(3, 0, 0)), (1, txn_value(3, 0, 1))]
