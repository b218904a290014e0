"""The connection watchdog (``connections.max.idle.ms``) alone: a step that finished in time is
not cut off because the broker's event loop was stalled when its timer came due."""
from __future__ import annotations

import asyncio
import time

from ember.net.server import _Watchdog


def test_a_step_done_in_time_survives_a_stalled_event_loop() -> None:
    async def scenario() -> str:
        loop = asyncio.get_running_loop()
        arrived = loop.create_future()

        async def connection() -> str:
            watchdog.arm("sending a request frame")
            await arrived                    # the request's bytes
            watchdog.arm("handling the request")
            await asyncio.sleep(0.005)
            watchdog.disarm()
            return "served"

        task = loop.create_task(connection())
        watchdog = _Watchdog(task, max_idle_ms=50)
        await asyncio.sleep(0)               # the task arms its watchdog
        loop.call_later(0.01, arrived.set_result, None)          # the bytes come in time...
        loop.call_soon(time.sleep, 0.2)      # ...but the loop is busy past the deadline
        try:
            return await task
        except asyncio.CancelledError:
            return f"cut off: {watchdog.expired}"

    assert asyncio.run(scenario()) == "served"


def test_a_step_that_really_stalls_is_cut_off() -> None:
    async def scenario() -> str | None:
        loop = asyncio.get_running_loop()
        task = loop.create_task(asyncio.sleep(10))
        watchdog = _Watchdog(task, max_idle_ms=50)
        watchdog.arm("sending the next request")
        try:
            await task
        except asyncio.CancelledError:
            pass
        return watchdog.expired

    assert asyncio.run(scenario()).startswith("sending the next request took longer than connections.max.idle.ms=50")
