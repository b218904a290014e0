"""Waiting in tests for something another process or thread does: poll, bounded."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")

#: Long next to anything a healthy run waits for; a hang still ends the test.
WAIT_S = 60.0


def eventually(check: Callable[[], T], what: str = "the condition", timeout_s: float = WAIT_S,
               step_s: float = 0.1) -> T:
    """``check()``'s first truthy result, polled every ``step_s``; fails the test naming
    ``what`` once ``timeout_s`` passes without one."""
    deadline = time.monotonic() + timeout_s
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f}s waiting for {what}"
        time.sleep(step_s)
    return result
