"""CI variant of the fault harness: one round of every fault kind against a 3-broker cluster
under load, then every safety and liveness check of :mod:`checker`. The long run is
``python -m tests.chaos --duration 1800 --seed N`` (docs/testing.md). ``CHAOS_SEED`` picks
another seed."""
from __future__ import annotations

import os

import pytest

from . import runner
from .nemesis import DISK_KINDS, KINDS
from .runner import ChaosConfig, run_chaos

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def test_records_survive_every_fault_kind_and_nothing_hangs(tmp_path) -> None:
    seed = int(os.environ.get("CHAOS_SEED", "11"))
    config = ChaosConfig(duration_s=45, seed=seed, data_dir=tmp_path, partitions=3, record_rate=200,
                         columnar_rate=600, min_faults=len(KINDS))
    report = run_chaos(config, progress=lambda message: None)
    print(report.summary())
    assert report.ok, report.summary()
    assert {fault.kind for fault in report.history.faults} == set(KINDS)
    assert all(log.counts()["acked"] for log in report.history.producers)


def test_records_survive_failing_disks_and_each_broker_comes_back(tmp_path) -> None:
    """Each broker's data directory on a fault FUSE file system (root only; skipped otherwise): its
    disk fails with EIO or turns read-only mid-append, then works again; the broker must be back in
    every ISR by itself, and every check of :mod:`checker` holds."""
    seed = int(os.environ.get("CHAOS_SEED", "11"))
    config = ChaosConfig(duration_s=20, seed=seed, data_dir=tmp_path, partitions=3, record_rate=200,
                         columnar_rate=600, kinds=DISK_KINDS, min_faults=2 * len(DISK_KINDS))
    try:
        report = run_chaos(config, progress=lambda message: None)
    except runner.faultfs.CannotMount as exc:
        pytest.skip(str(exc))
    print(report.summary())
    assert report.ok, report.summary()
    assert {fault.kind for fault in report.history.faults} == set(DISK_KINDS)
    assert all("back in every ISR after" in fault.note for fault in report.history.faults)
