"""CI variant of issue 23's acceptance scenario (tests/faults/scenario.py) on small tmpfs mounts and a
fault FUSE file system (tests/faults/faultfs.py), root only (skipped otherwise): the four full-disk
runs (each case once, each recovery — space back while the brokers run, and after ``ember cluster
down`` + ``ember cluster up`` — twice, about 45 s a run) and a broker's disk failing with EIO
mid-append (healed while running) or turning read-only (then down and up), about 35-45 s a run.
``EMBER_FAULT_TESTS=all`` runs every case with both recoveries; the long run is
``python -m tests.faults --repeats 5 --long`` (docs/operations.md, "Fault tests")."""
from __future__ import annotations

import os

import pytest

from .disks import CannotMount
from .scenario import CASES, RECOVERIES, Sizes, run_case

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SHORT = [("one-broker", "running"), ("all-brokers", "restart"), ("segment-roll", "running"), ("issue", "restart"),
         ("eio", "running"), ("read-only", "restart")]
RUNS = [(c, r) for c in CASES for r in RECOVERIES] if os.environ.get("EMBER_FAULT_TESTS") == "all" else SHORT


@pytest.mark.parametrize(("case", "recovery"), RUNS)
def test_a_full_or_failing_disk_loses_nothing_and_every_partition_comes_back(tmp_path, case: str,
                                                                              recovery: str) -> None:
    try:
        outcome = run_case(tmp_path, case, recovery, Sizes())
    except CannotMount as exc:
        pytest.skip(str(exc))
    print(outcome.summary())
    assert not outcome.problems, outcome.summary()
