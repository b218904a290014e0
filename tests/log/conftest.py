"""Fixtures for the ember.log tests."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from log_helpers import FakeClock

from ember.log import Log, LogConfig


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


@pytest.fixture
def open_log(log_dir: Path, clock: FakeClock) -> Callable[..., Log]:
    """Open (or reopen) the test partition with config overrides (``segment_bytes=...``);
    closes every log it opened at teardown."""
    opened: list[Log] = []

    def _open(**props) -> Log:
        config = LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})
        log = Log.open(log_dir, config, now_ms=clock)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()
