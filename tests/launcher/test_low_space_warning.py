"""`ember cluster up` warns, in one line with the numbers, when the data directory's file system is
low on space (under 1 GiB or under 10% free)."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import NamedTuple

import pytest

from ember.cli import main
from ember.errors import BrokerNotAvailable
from ember.launcher.local import LocalCluster, low_space_warning

GIB = 1 << 30


class Usage(NamedTuple):
    total: int
    used: int
    free: int


def _disk(monkeypatch: pytest.MonkeyPatch, total: int, free: int) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(total, total - free, free))


def test_no_warning_with_room(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _disk(monkeypatch, 100 * GIB, 50 * GIB)
    assert low_space_warning(tmp_path / "not-yet-created") is None


@pytest.mark.parametrize(("total", "free"), [(80 << 20, 10 << 20), (500 * GIB, 20 * GIB)],
                         ids=["under-1GiB", "under-10-percent"])
def test_warning_names_the_numbers_and_what_a_full_disk_does(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                              total: int, free: int) -> None:
    _disk(monkeypatch, total, free)
    warning = low_space_warning(tmp_path / "data")
    assert warning is not None and warning.startswith("WARNING: low disk space") and "\n" not in warning
    assert "appends to the logs fail" in warning and "ZooKeeper" in warning


def test_cluster_up_prints_the_warning(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    _disk(monkeypatch, 80 << 20, 10 << 20)

    def refuse(self: LocalCluster, *args: object, **kwargs: object) -> LocalCluster:
        raise BrokerNotAvailable("not started in this test")

    monkeypatch.setattr(LocalCluster, "start", refuse)
    monkeypatch.setattr(LocalCluster, "stop", lambda self, *args, **kwargs: None)
    assert main(["cluster", "up", "--brokers", "1", "--data", str(tmp_path / "data")]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("WARNING")]
    assert lines == [lines[0]] and "10.0 MiB free of 80.0 MiB (12%" in lines[0]
