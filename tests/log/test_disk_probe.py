"""The probe that tells the broker a log's disk works again (``ember.log.disk.probe``), before it
reopens a log a disk failure took offline: on a real size-limited tmpfs (full, then freed) and
with a failing fsync. A probe never leaves its file behind."""
from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Callable

import pytest
from disk_faults import DiskFault

from ember.log import Log, LogConfig
from ember.log.disk import PROBE_FILE, probe


@pytest.fixture
def small_disk(tmpfs: Callable[[str], Path]) -> Path:
    """A 1m tmpfs (root only; unmounted at teardown)."""
    return tmpfs("1m")


def fill(directory: Path) -> Path:
    """Write a file until the file system refuses more; returns it."""
    ballast = directory / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\1" * 4096)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return ballast


def test_a_full_disk_fails_the_probe_until_room_for_a_batch_returns(small_disk: Path) -> None:
    directory = small_disk / "t-0"
    directory.mkdir()
    ballast = fill(small_disk)
    assert "under the 4096 needed" in (probe(directory, 4096) or "")
    assert "No space left on device" in (probe(directory, 0) or "")   # the free-space check passes, the write fails
    assert not (directory / PROBE_FILE).exists()
    ballast.unlink()
    assert probe(directory, 256 * 1024) is None
    assert "under the" in (probe(directory, 4 << 20) or "")            # more than the disk holds
    assert list(directory.iterdir()) == []


def test_a_failing_fsync_fails_the_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fault = DiskFault(monkeypatch, "fsync", errno.EIO)
    assert "Input/output error" in (probe(tmp_path, 0) or "")
    assert not (tmp_path / PROBE_FILE).exists()
    fault.heal()
    assert probe(tmp_path, 0) is None


def test_a_probe_file_left_by_a_crash_is_removed_when_the_log_opens(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    Log.open(directory, LogConfig()).close()
    (directory / PROBE_FILE).write_bytes(b"\0" * 4096)
    Log.open(directory, LogConfig()).close()
    assert not (directory / PROBE_FILE).exists()
