"""``LogDirSpace``: appends are checked against the free space a log directory keeps, from a
cached ``statvfs`` reading that each accepted append lowers."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from ember.errors import StorageError
from ember.ingest.log_dir_space import LogDirSpace

MIB = 1 << 20


def free_bytes(path: Path) -> int:
    usage = os.statvfs(path)
    return usage.f_bavail * usage.f_frsize


def test_appends_are_counted_against_the_reading_until_the_minimum_would_be_crossed(tmp_path: Path) -> None:
    partition_dir = tmp_path / "t-0"
    space = LogDirSpace(free_bytes(tmp_path) - 10 * MIB, refresh_s=3600)   # one reading for the whole test
    space.check(partition_dir, 6 * MIB)
    with pytest.raises(StorageError, match="log.dir.min.free.bytes"):
        space.check(partition_dir, 6 * MIB)    # 12 MiB since the reading: under the minimum


def test_no_minimum_checks_nothing(tmp_path: Path) -> None:
    LogDirSpace(0).check(tmp_path / "missing" / "t-0", 1 << 62)
