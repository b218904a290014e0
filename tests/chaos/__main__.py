"""``python -m tests.chaos --duration 600 --seed 7``: one chaos run, progress on stdout, a
summary at the end; exit status 0 when every check passed (docs/testing.md)."""
from __future__ import annotations

import argparse
import logging
import shutil
import sys
import time
from pathlib import Path

from .nemesis import ALL_KINDS, KINDS
from .runner import ChaosConfig, run_chaos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--duration", type=float, default=600, help="seconds of faults (default 600)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the nemesis (default 7)")
    parser.add_argument("--data", type=Path, help="run directory (default data/chaos-SEED-TIME)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--record-producers", type=int, default=1, help="producers calling send() per record")
    parser.add_argument("--record-rate", type=float, default=300, help="records/s of each send() producer")
    parser.add_argument("--columnar-producers", type=int, default=1, help="producers calling send_batch()")
    parser.add_argument("--columnar-rate", type=float, default=1000, help="records/s of each send_batch() producer")
    parser.add_argument("--faults", default=",".join(KINDS),
                        help=f"comma-separated kinds among {','.join(ALL_KINDS)} (default the first {len(KINDS)}; "
                             "the disk-* kinds mount a fault FUSE file system under each broker: root only)")
    parser.add_argument("--keep", action="store_true", help="keep the run directory after a passing run")
    txn = parser.add_argument_group("transactional workload (--transactions; tests/chaos/txn_*.py)")
    txn.add_argument("--transactions", action="store_true",
                     help="run the transactional workload instead of the record one (default faults: every kind "
                          "plus kill-txn-producer,kill-txn-coordinator)")
    txn.add_argument("--txn-producers", type=int, default=3, help="transactional producer processes")
    txn.add_argument("--txn-rate", type=float, default=0.0, help="transactions/s per producer (0: as fast as it goes)")
    txn.add_argument("--abort-every", type=int, default=4, help="about one transaction in N aborted on purpose")
    txn.add_argument("--min-faults", type=int, default=0, help="keep injecting past the duration until this many")
    txn.add_argument("--txn-client", choices=("librdkafka", "java", "mixed"), default="mixed",
                     help="the producers' client: librdkafka (confluent-kafka: transaction protocol v1), java "
                          "(Kafka's KafkaProducer: v2 when the broker advertises it), mixed (alternating, the last "
                          "producer Java) (default mixed)")
    args = parser.parse_args(argv)
    if args.transactions:
        return _transactions(args)
    data = args.data or Path("data") / f"chaos-{args.seed}-{int(time.time())}"
    data.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=data / "clients.log", level=logging.INFO,
                        format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
    config = ChaosConfig(duration_s=args.duration, seed=args.seed, data_dir=data, partitions=args.partitions,
                         record_producers=args.record_producers, record_rate=args.record_rate,
                         columnar_producers=args.columnar_producers, columnar_rate=args.columnar_rate,
                         kinds=tuple(k for k in args.faults.split(",") if k), progress_every_s=15)
    print(f"chaos: seed {args.seed}, {args.duration:.0f}s of faults, run directory {data}", flush=True)
    report = run_chaos(config, progress=lambda message: print(message, flush=True))
    print(report.summary(), flush=True)
    if report.ok and not args.keep:
        shutil.rmtree(data, ignore_errors=True)
    elif not report.ok:
        print(f"run directory kept for inspection: {data} (broker logs, clients.log, stalls.txt)")
    return 0 if report.ok else 1


def _transactions(args: argparse.Namespace) -> int:
    from .txn_runner import TxnChaosConfig, run_txn_chaos
    from .txn_workload import ALL_TXN_KINDS

    data = args.data or Path("data") / f"chaos-txn-{args.seed}-{int(time.time())}"
    data.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=data / "clients.log", level=logging.INFO,
                        format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
    kinds = ALL_TXN_KINDS if args.faults == ",".join(KINDS) else tuple(k for k in args.faults.split(",") if k)
    config = TxnChaosConfig(duration_s=args.duration, seed=args.seed, data_dir=data, partitions=args.partitions,
                            producers=args.txn_producers, txn_rate=args.txn_rate, abort_every=args.abort_every,
                            kinds=kinds, min_faults=args.min_faults, progress_every_s=15, txn_client=args.txn_client)
    print(f"transactional chaos: seed {args.seed}, {args.duration:.0f}s of faults, producers "
          f"{', '.join(f'{i}: {c}' for i, c in enumerate(config.clients()))}, run directory {data}", flush=True)
    report = run_txn_chaos(config, progress=lambda message: print(message, flush=True))
    print(report.summary(), flush=True)
    if report.ok and not args.keep:
        shutil.rmtree(data, ignore_errors=True)
    elif not report.ok:
        print(f"run directory kept for inspection: {data} (broker logs under cluster/, txn-producer-N.events/.log)")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
