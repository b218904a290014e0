"""``python -m tests.faults --repeats 5 --long``: issue 23's full-disk scenario, every case and both
recoveries (or those named), again and again; a summary per run; exit status 0 when every run
passed (docs/operations.md, "Fault tests"). Needs root (it mounts tmpfs)."""
from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .disks import CannotMount
from .scenario import CASES, LONG, RECOVERIES, Sizes, run_case


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__)
    parser.add_argument("--case", action="append", choices=CASES, help="a case (repeatable; default every one)")
    parser.add_argument("--recovery", action="append", choices=RECOVERIES, help="default both")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--long", action="store_true", help="bigger disks and segments (4 MiB), longer producing")
    parser.add_argument("--root", type=Path, help="where to mount (default a fresh temp directory)")
    parser.add_argument("--keep", action="store_true", help="keep the run directories (the tmpfs contents go)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    root = args.root or Path(tempfile.mkdtemp(prefix="ember-faults-"))
    sizes = LONG if args.long else Sizes()
    failed = 0
    for repeat in range(args.repeats):
        for case in args.case or CASES:
            for recovery in args.recovery or RECOVERIES:
                run_dir = root / f"{repeat}-{case}-{recovery}"
                run_dir.mkdir(parents=True)
                started = time.monotonic()
                try:
                    outcome = run_case(run_dir, case, recovery, sizes, progress=lambda m: print(m, flush=True))
                except CannotMount as exc:
                    print(f"cannot run: {exc}")
                    return 2
                print(f"[{repeat}] {outcome.summary()}  ({time.monotonic() - started:.0f}s)", flush=True)
                failed += bool(outcome.problems)
                if not args.keep and not outcome.problems:
                    shutil.rmtree(run_dir, ignore_errors=True)
    print(f"{failed} run(s) failed" if failed else "every run passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
