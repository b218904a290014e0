"""The connection watchdog (``connections.max.idle.ms``) alone: a step that finished in time is
not cut off because the broker's event loop was stalled when its timer came due."""
from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from ember.net import server
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


def test_each_step_gets_its_own_limit_from_when_it_began() -> None:
    async def scenario() -> tuple[str, str | None]:
        loop = asyncio.get_running_loop()

        async def connection(second_step_s: float) -> str:
            watchdog.arm("reading")
            await asyncio.sleep(0.04)
            watchdog.arm("writing")          # 40 ms in: this step's 60 ms start now, not at the first arm
            await asyncio.sleep(second_step_s)
            watchdog.disarm()
            return "served"

        task = loop.create_task(connection(0.04))
        watchdog = _Watchdog(task, max_idle_ms=60)
        served = await task
        slow = loop.create_task(connection(0.5))
        watchdog = _Watchdog(slow, max_idle_ms=60)
        try:
            await slow
        except asyncio.CancelledError:
            pass
        return served, watchdog.expired

    served, expired = asyncio.run(scenario())
    assert served == "served"
    assert expired is not None and expired.startswith("writing took longer than connections.max.idle.ms=60")


def test_a_busy_connection_sets_no_timer_per_step() -> None:
    """Thousands of small requests (four steps each) reuse one pending timer."""
    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        timers = 0
        call_at = loop.call_at

        def counting_call_at(when, callback, *args, **kwargs):  # type: ignore[no-untyped-def]
            nonlocal timers
            timers += 1
            return call_at(when, callback, *args, **kwargs)

        loop.call_at = counting_call_at  # type: ignore[method-assign]
        task = loop.create_task(asyncio.sleep(10))
        watchdog = _Watchdog(task, max_idle_ms=600_000)
        reader = asyncio.StreamReader()
        for _ in range(1000):
            watchdog.arm("sending the next request")
            watchdog.arm("sending a request frame")
            watchdog.watch_client(reader, None)  # type: ignore[arg-type]
            watchdog.disarm()
            watchdog.arm("writing a response")
            watchdog.disarm()
        watchdog.close()
        task.cancel()
        return timers

    assert asyncio.run(scenario()) <= 2


def test_a_handled_request_notices_its_client_leave_after_several_checks(monkeypatch) -> None:
    """watch_client looks every CLIENT_CHECK_S for as long as the request is handled."""
    monkeypatch.setattr(server, "CLIENT_CHECK_S", 0.02)

    async def scenario() -> tuple[bool, str | None]:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        task = loop.create_task(asyncio.sleep(10))     # a long-poll fetch
        watchdog = _Watchdog(task, max_idle_ms=600_000)
        watchdog.watch_client(reader, SimpleNamespace(get_extra_info=lambda name: None))  # type: ignore[arg-type]
        await asyncio.sleep(0.15)                      # several checks: the client is still there
        still_served = not task.done()
        reader.feed_eof()                              # the client closes its side
        try:
            await asyncio.wait_for(task, 2)
        except asyncio.CancelledError:
            pass
        return still_served, watchdog.expired

    assert asyncio.run(scenario()) == (True, "the client went away while its request was being handled")


def test_a_closed_watchdog_never_cancels_its_connection() -> None:
    async def scenario() -> bool:
        loop = asyncio.get_running_loop()
        task = loop.create_task(asyncio.sleep(0.2))
        watchdog = _Watchdog(task, max_idle_ms=20)
        watchdog.arm("sending the next request")
        watchdog.close()
        await task
        return task.cancelled()

    assert asyncio.run(scenario()) is False
