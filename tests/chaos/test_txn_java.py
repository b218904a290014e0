"""The Java transactional producer (TxnProducer.java) is txn_producer.py's twin: from the same
seed, producer and first transaction number it draws the same transactions (CPython's Mersenne
Twister and random.py's algorithms, ported), the same flush coin and hold; its flags are checked;
``mixed`` alternates the clients with the last producer on Java; the runner finds every
producer's first init."""
from __future__ import annotations

import json
import random
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from .txn_history import TxnHistory
from .txn_java import command
from .txn_producer import plan
from .txn_runner import _await_first_inits
from .txn_workload import producer_clients


@pytest.mark.parametrize("seed, producer, first_txn, partitions, abort_every", [
    (11, 0, 0, 3, 4), (11, 2, 57, 3, 4), (7, 1, 0, 1, 0), (0, 0, 0, 2, 1),
    (123456789, 5, 1000, 1000, 3),      # a seed of two 32-bit words; sample()'s set branch (n > 21)
    (5, 7, 3, 30, 4)])
def test_java_producer_draws_the_same_transactions(seed: int, producer: int, first_txn: int, partitions: int,
                                                   abort_every: int) -> None:
    count, hold_ms = 300, 30
    done = subprocess.run(command(["--print-plans", str(count), "--seed", str(seed), "--producer", str(producer),
                                   "--first-txn", str(first_txn), "--partitions", str(partitions),
                                   "--abort-every", str(abort_every), "--hold-ms", str(hold_ms)]),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = [json.loads(line) for line in done.stdout.splitlines()]
    rng = random.Random(seed * 1000003 + producer * 7919 + first_txn)      # as txn_producer.main seeds it
    want = []
    for txn in range(first_txn, first_txn + count):
        intent, writes = plan(rng, producer, txn, partitions, abort_every)
        flush = rng.random() < 0.5                                          # main's draws, in its order
        hold = rng.uniform(0, hold_ms / 1000)
        want.append({"txn": txn, "intent": intent, "writes": writes, "flush": flush, "hold": hold})
    assert got == want


def test_java_producer_refuses_unknown_and_missing_flags() -> None:
    for args in (["--partitions", "3", "--producer", "0", "--bootstrap", "x", "--topic", "t", "--events", "e",
                  "--no-such-flag", "1"],
                 ["--partitions", "3", "--producer", "0"]):
        done = subprocess.run(command(args), capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done
        assert "TxnProducer:" in done.stderr


def test_mixed_clients_alternate_with_the_last_producer_on_java() -> None:
    assert producer_clients("mixed", 3) == ["java", "librdkafka", "java"]
    assert producer_clients("mixed", 4) == ["librdkafka", "java", "librdkafka", "java"]
    assert producer_clients("java", 2) == ["java", "java"]
    assert producer_clients("librdkafka", 1) == ["librdkafka"]
    with pytest.raises(ValueError):
        producer_clients("kafka-python", 3)


def test_first_inits_are_found_however_many_events_follow(tmp_path: Path) -> None:
    """The nemesis waits for every producer's first init; a producer that got there long before
    the others has hundreds of events after its init line by then (a bug seen once: only the last 50
    were searched, and the wait ran into its 90 s bound)."""
    history = TxnHistory(delivery_bound_s=0.0)
    producers = []
    for index in range(2):
        events = tmp_path / f"txn-producer-{index}.events"
        lines = [json.dumps({"ev": "init", "t": time.monotonic()})]
        lines += [json.dumps({"ev": "begin", "t": time.monotonic(), "txn": n, "intent": "commit", "writes": []})
                  for n in range(500 * (1 - index))]
        events.write_text("\n".join(lines) + "\n")
        producers.append(SimpleNamespace(index=index, client="java", events=events, alive=lambda: True))
    started = time.monotonic()
    _await_first_inits(producers, started - 1.0, history)     # type: ignore[arg-type]
    assert time.monotonic() - started < 5
    assert [t.seconds is not None for t in history.timings] == [True, True], history.timings
