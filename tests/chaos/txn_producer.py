"""One transactional producer of the transactional chaos workload, run as its own OS process (so
the nemesis can SIGKILL it mid-transaction and start it again with the same ``transactional.id``):
``python txn_producer.py --bootstrap ... --topic ... --producer N --first-txn T --events FILE``.

It runs transactions through confluent-kafka (librdkafka) against the cluster's Kafka listener:
each writes unique values (:func:`txn_value`: producer, transaction number, write index) to a few
partitions, and about one in ``--abort-every`` is aborted on purpose. Every step is appended to
``--events`` as one JSON line, flushed at once, before the call it announces, so what the parent
reads after a SIGKILL is what was attempted:

``{"ev": "init", "t": ...}`` after ``init_transactions()`` returned (this instance fenced the
previous one); ``{"ev": "begin", "txn": n, "intent": "commit"|"abort", "writes": [[partition,
value], ...], "t": ...}`` before the first ``produce``; ``{"ev": "flushed", "txn": n, ...}`` when
(half the time) it waited for its writes before ending the transaction; ``{"ev": "end-call",
"txn": n, "call": "commit"|"abort", ...}`` before ``commit_transaction``/``abort_transaction``;
``{"ev": "end", "txn": n, "outcome": "committed"|"aborted"|"unknown", "error": ..., ...}`` after
it; ``{"ev": "exit", ...}`` on a clean stop (SIGTERM: the current transaction finishes first). A
transaction with a ``begin`` and no ``end`` was cut by a SIGKILL. Times are ``time.monotonic()``
(CLOCK_MONOTONIC, the same clock in every process of the machine).

Only the standard library and confluent_kafka are imported: the script runs by its path.
"""
from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time
from typing import IO, Any, Optional

#: Bound on every transactional call (init, commit, abort), in seconds.
CALL_TIMEOUT_S = 30.0


def txn_value(producer: int, txn: int, write: int) -> bytes:
    """The value of a transaction's ``write``-th write: unique across the run, decodable."""
    return b"t%03d-%08d-%03d" % (producer, txn, write)


def parse_txn_value(value: Optional[bytes]) -> Optional[tuple[int, int, int]]:
    """(producer, transaction, write) of a :func:`txn_value`, None for anything else."""
    if value is None or len(value) != 17 or value[:1] != b"t" or value[4:5] != b"-" or value[13:14] != b"-":
        return None
    try:
        return int(value[1:4]), int(value[5:13]), int(value[14:17])
    except ValueError:
        return None


class Events:
    """The append-only JSON-lines report to the parent, flushed line by line."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out

    def __call__(self, ev: str, **fields: Any) -> None:
        self.out.write(json.dumps({"ev": ev, "t": time.monotonic(), **fields}) + "\n")
        self.out.flush()


def plan(rng: random.Random, producer: int, txn: int, partitions: int, abort_every: int) -> tuple[str, list[list[Any]]]:
    """A transaction's intent and writes: 1 to 3 partitions, 1 to 4 values each."""
    chosen = rng.sample(range(partitions), rng.randint(1, min(3, partitions)))
    writes: list[list[Any]] = []
    for partition in chosen:
        for _ in range(rng.randint(1, 4)):
            writes.append([partition, txn_value(producer, txn, len(writes)).decode()])
    rng.shuffle(writes)
    intent = "abort" if abort_every > 0 and rng.randrange(abort_every) == 0 else "commit"
    return intent, writes


def main(argv: Optional[list[str]] = None) -> int:
    from confluent_kafka import KafkaException, Producer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--producer", type=int, required=True)
    parser.add_argument("--first-txn", type=int, default=0)
    parser.add_argument("--events", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--abort-every", type=int, default=4)
    parser.add_argument("--rate", type=float, default=0.0, help="transactions/s (0: as fast as it goes)")
    parser.add_argument("--transaction-timeout-ms", type=int, default=10000)
    parser.add_argument("--hold-ms", type=int, default=30, help="longest random pause inside a transaction")
    args = parser.parse_args(argv)

    stopping = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
    signal.signal(signal.SIGTERM, on_term)

    rng = random.Random(args.seed * 1000003 + args.producer * 7919 + args.first_txn)
    config = {"bootstrap.servers": args.bootstrap, "transactional.id": f"chaos-txn-{args.producer}",
              "transaction.timeout.ms": args.transaction_timeout_ms, "linger.ms": 5,
              "socket.timeout.ms": 10000, "log_level": 3}
    with open(args.events, "a") as out:
        events = Events(out)

        def new_producer() -> Any:
            """A producer instance with its transactions initialised: retried on the same instance
            while the error is retriable, on a fresh one otherwise (bounded by the parent, which
            SIGKILLs a producer that does not stop). None when asked to stop meanwhile."""
            while not stopping:
                producer = Producer(config)
                while not stopping:
                    try:
                        producer.init_transactions(CALL_TIMEOUT_S)
                        events("init")
                        return producer
                    except KafkaException as exc:
                        events("init-failed", error=str(exc.args[0]))
                        time.sleep(0.5)
                        if exc.args[0].fatal() or not exc.args[0].retriable():
                            break
            return None

        producer = new_producer()
        txn = args.first_txn
        began = time.monotonic()
        while not stopping and producer is not None:
            if args.rate > 0:
                due = began + (txn - args.first_txn) / args.rate
                if due > time.monotonic():
                    time.sleep(min(0.5, due - time.monotonic()))
                    continue
            intent, writes = plan(rng, args.producer, txn, args.partitions, args.abort_every)
            events("begin", txn=txn, intent=intent, writes=writes)
            outcome, error, call = "unknown", None, None
            try:
                producer.begin_transaction()
                for partition, value in writes:
                    while True:
                        try:
                            producer.produce(args.topic, value=value.encode(), partition=partition)
                            break
                        except BufferError:
                            producer.poll(0.05)
                    producer.poll(0)
                if rng.random() < 0.5:           # half the transactions wait for their writes first
                    producer.flush(CALL_TIMEOUT_S)
                    events("flushed", txn=txn)
                if args.hold_ms:
                    time.sleep(rng.uniform(0, args.hold_ms / 1000))
                call = intent
                events("end-call", txn=txn, call=intent)
                if intent == "commit":
                    producer.commit_transaction(CALL_TIMEOUT_S)
                    outcome = "committed"
                else:
                    producer.abort_transaction(CALL_TIMEOUT_S)
                    outcome = "aborted"
            except KafkaException as exc:
                err = exc.args[0]
                error = f"{err.name()}: {err.str()}"
                if err.txn_requires_abort():
                    try:
                        if call != "abort":
                            events("end-call", txn=txn, call="abort")
                        producer.abort_transaction(CALL_TIMEOUT_S)
                        outcome = "aborted"
                    except KafkaException as again:
                        error += f"; abort: {again.args[0].name()}: {again.args[0].str()}"
                if outcome == "unknown":
                    # Fatal, retriable past its timeout, or an abort that failed: the transaction's
                    # fate is the coordinator's (the next instance fences this one and ends it).
                    events("end", txn=txn, outcome=outcome, error=error, call=call)
                    txn += 1
                    producer = new_producer()
                    continue
            events("end", txn=txn, outcome=outcome, error=error, call=call)
            txn += 1
        if producer is not None:
            producer.flush(CALL_TIMEOUT_S)
        events("exit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
