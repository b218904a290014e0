"""What a transactional chaos run observed, as plain data judged by :mod:`txn_checker` afterwards
(unit tests feed it synthetic histories).

Transactions come from the producers' event files (:mod:`txn_producer`): per producer and
transaction number, the writes attempted (partition, value), the intent, whether commit or abort
was called, and the outcome the producer saw (committed, aborted, or unknown: killed, or a call
that failed). Consumers record every poll, in order, as (partition, offset, value). The final
state is what two fresh ember consumers read after the run drained: read_committed up to the last
stable offset and read_uncommitted up to the high watermark, with both ends per partition.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .history import History
from .txn_producer import parse_txn_value

COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"


@dataclass
class Txn:
    """One transaction a producer began."""
    producer: int
    txn: int
    intent: str                                     # "commit" or "abort" (on purpose)
    writes: list[tuple[int, bytes]]                 # (partition, value), in produce order
    began_at: float = 0.0
    end_call: Optional[str] = None                  # "commit"/"abort" once that call was made
    outcome: str = UNKNOWN
    ended_at: Optional[float] = None                # when the producer saw the outcome
    error: Optional[str] = None
    killed: bool = False                            # cut by a SIGKILL (no "end" event)

    def partitions(self) -> dict[int, list[bytes]]:
        out: dict[int, list[bytes]] = {}
        for partition, value in self.writes:
            out.setdefault(partition, []).append(value)
        return out


@dataclass
class Poll:
    """One record a consumer got: partition, offset, value."""
    partition: int
    offset: int
    value: Optional[bytes]


@dataclass
class TxnConsumerLog:
    """A consumer's polls in order, its last known positions, its errors."""
    name: str
    isolation: str                                  # "read_committed" or "read_uncommitted"
    polls: list[Poll] = field(default_factory=list)
    positions: dict[int, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)

    def read(self, partition: int, offset: int, value: Optional[bytes]) -> None:
        self.polls.append(Poll(partition, offset, value))


@dataclass
class TxnFinal:
    """After draining: per partition the last stable offset and high watermark (ember's consumer,
    read_committed vs read_uncommitted ``end_offsets``), and the whole log read both ways."""
    last_stable: dict[int, int]
    high_watermarks: dict[int, int]
    committed_read: TxnConsumerLog
    uncommitted_read: TxnConsumerLog
    #: seconds from the end of the run until every partition's LSO reached its high watermark (None: never)
    lso_caught_up_s: Optional[float] = None
    lso_bound_s: float = 0.0


@dataclass
class TxnHistory(History):
    """The record workload's :class:`History` (faults and timings: the nemesis and the settle
    helpers write there) plus the transactional workload's transactions and consumers."""
    txns: dict[tuple[int, int], Txn] = field(default_factory=dict)
    consumers: list[TxnConsumerLog] = field(default_factory=list)
    #: (producer, monotonic time) of every ``init_transactions`` that returned: an instance fencing the previous one
    inits: list[tuple[int, float]] = field(default_factory=list)
    #: (producer, monotonic time) of every SIGKILL of a producer process
    kills: list[tuple[int, float]] = field(default_factory=list)
    #: bound on a transaction's commit/abort call (the producer's call timeout plus a margin)
    txn_bound_s: float = 40.0
    #: failed ``init_transactions`` calls by error (the producer retries them)
    init_errors: dict[str, int] = field(default_factory=dict)
    #: consumers replaced because librdkafka wedged its own threads (txn_runner._await_consumers)
    client_restarts: list[str] = field(default_factory=list)

    def add_events(self, producer: int, lines: list[str]) -> None:
        """Fold a producer's event lines (its whole file, any number of instances) into the history."""
        open_txn: Optional[Txn] = None
        for line in lines:
            if not line.endswith("}"):
                continue                          # a line cut by a SIGKILL
            event = json.loads(line)
            ev = event["ev"]
            if ev == "init":
                self.inits.append((producer, event["t"]))
            elif ev == "begin":
                if open_txn is not None and open_txn.ended_at is None:
                    open_txn.killed = True
                writes = [(int(p), v.encode()) for p, v in event["writes"]]
                open_txn = Txn(producer, event["txn"], event["intent"], writes, began_at=event["t"])
                self.txns[(producer, open_txn.txn)] = open_txn
            elif ev == "end-call" and open_txn is not None and open_txn.txn == event["txn"]:
                open_txn.end_call = open_txn.end_call or event["call"]
            elif ev == "end" and open_txn is not None and open_txn.txn == event["txn"]:
                open_txn.outcome, open_txn.ended_at, open_txn.error = event["outcome"], event["t"], event.get("error")
            elif ev == "init-failed":
                error = str(event.get("error", "?"))[:80]
                self.init_errors[error] = self.init_errors.get(error, 0) + 1
        if open_txn is not None and open_txn.ended_at is None:
            open_txn.killed = True

    def counts(self) -> dict[str, int]:
        out = {COMMITTED: 0, ABORTED: 0, UNKNOWN: 0, "killed": 0, "writes": 0}
        for txn in self.txns.values():
            out[txn.outcome] += 1
            out["killed"] += txn.killed
            out["writes"] += len(txn.writes)
        return out

    def value_owner(self) -> dict[bytes, tuple[Txn, int]]:
        """Every value attempted -> (its transaction, the partition it was written to)."""
        return {value: (txn, partition) for txn in self.txns.values() for partition, value in txn.writes}


def read_events(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


__all__ = ["ABORTED", "COMMITTED", "UNKNOWN", "Poll", "Txn", "TxnConsumerLog", "TxnFinal", "TxnHistory",
           "parse_txn_value", "read_events"]
