"""The log cleaner's I/O throttle: it holds the cleaners back, and stopping the cleaner interrupts a
cleaning that waits in it (a broker stops in bounded time whatever the cleaner was doing)."""
from __future__ import annotations

import threading

import pytest

from ember.ingest.log_cleaner import IoThrottle, Stopped


def test_stopping_interrupts_a_cleaning_held_by_the_throttle() -> None:
    throttle = IoThrottle(bytes_per_second=1.0)
    outcome: list[BaseException] = []

    def clean() -> None:
        try:
            throttle(2 * IoThrottle.STEP)      # two MiB at one byte a second: held for weeks
        except BaseException as exc:         # noqa: BLE001 - the outcome is what is checked
            outcome.append(exc)
    cleaning = threading.Thread(target=clean)
    cleaning.start()
    cleaning.join(0.3)
    assert cleaning.is_alive()                # held
    throttle.stopping.set()
    cleaning.join(10)
    assert not cleaning.is_alive() and len(outcome) == 1 and isinstance(outcome[0], Stopped)


def test_a_stopped_throttle_refuses_the_next_batch_and_an_unlimited_one_never_waits() -> None:
    unlimited = IoThrottle(bytes_per_second=float("inf"))
    for _ in range(100):
        unlimited(IoThrottle.STEP)
    unlimited.stopping.set()
    with pytest.raises(Stopped):
        unlimited(1)
