"""CI variant of the transactional fault harness: three transactional producer processes
(multi-partition transactions, one in four aborted on purpose; ``mixed`` clients: producers 0 and
2 on Kafka's Java client, transaction protocol v2 when the broker advertises it, producer 1 on
confluent-kafka, v1), a read_committed
and a read_uncommitted librdkafka consumer, under one round of every fault kind — the record
harness's and the producer kill (SIGKILL mid-transaction, restart with the same transactional
id) and the coordinator's broker — then every check of :mod:`txn_checker`. The long run is
``python -m tests.chaos --transactions --duration 1800 --min-faults 100 --seed N`` (docs/testing.md);
``CHAOS_SEED`` picks another seed."""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from .txn_runner import TxnChaosConfig, run_txn_chaos
from .txn_workload import ALL_TXN_KINDS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def test_transactions_hold_under_every_fault_kind(tmp_path: Path) -> None:
    seed = int(os.environ.get("CHAOS_SEED", "11"))
    config = TxnChaosConfig(duration_s=60, seed=seed, data_dir=tmp_path, partitions=3, producers=3, txn_rate=2.0,
                            min_faults=len(ALL_TXN_KINDS), txn_client="mixed")
    report = run_txn_chaos(config, progress=lambda message: None)
    print(report.summary())
    assert report.ok, report.summary()
    assert {fault.kind for fault in report.history.faults} == set(ALL_TXN_KINDS)
    clients = config.clients()
    committed = Counter(clients[t.producer] for t in report.history.txns.values() if t.outcome == "committed")
    assert set(clients) == {"java", "librdkafka"} and min(committed.values()) >= 30, committed   # both protocols ran
    counts = report.history.counts()
    assert counts["committed"] >= 100 and counts["aborted"] >= 20, counts
    assert report.final is not None and report.final.lso_caught_up_s is not None
