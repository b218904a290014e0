"""``queued.max.request.bytes`` alone (:class:`ember.net.budget.RequestBudget`): frames are charged
before they are read, wait in arrival order while they do not fit, and one frame always fits when
nothing else is in flight."""
from __future__ import annotations

import asyncio

from ember.net.budget import RequestBudget


def test_frames_that_do_not_fit_wait_in_order_until_answered_ones_give_their_bytes_back() -> None:
    async def scenario() -> list[str]:
        budget = RequestBudget(100)
        admitted: list[str] = []

        async def frame(name: str, size: int) -> None:
            await budget.acquire(size)
            admitted.append(name)

        await frame("a", 60)
        waiting = [asyncio.create_task(frame(n, s)) for n, s in (("b", 50), ("c", 10), ("d", 30))]
        await asyncio.sleep(0)
        assert admitted == ["a"] and budget.waiting == 3 and budget.in_flight == 60   # c fits, but waits behind b
        budget.release(60)
        await asyncio.gather(*waiting)
        assert budget.in_flight == 90 and budget.peak == 90
        return admitted

    assert asyncio.run(scenario()) == ["a", "b", "c", "d"]


def test_a_frame_above_the_limit_is_served_alone() -> None:
    async def scenario() -> None:
        budget = RequestBudget(100)
        await budget.acquire(500)                  # nothing in flight: admitted
        small = asyncio.create_task(budget.acquire(1))
        await asyncio.sleep(0)
        assert not small.done()
        budget.release(500)
        await small
        assert budget.in_flight == 1 and budget.peak == 500

    asyncio.run(scenario())


def test_a_waiting_connection_that_is_cancelled_charges_nothing_and_unblocks_the_next() -> None:
    async def scenario() -> None:
        budget = RequestBudget(100)
        await budget.acquire(90)
        big = asyncio.create_task(budget.acquire(80))
        small = asyncio.create_task(budget.acquire(10))
        await asyncio.sleep(0)
        assert not small.done()                    # behind the big one
        big.cancel()                               # its connection timed out
        await asyncio.gather(big, return_exceptions=True)
        await small
        assert budget.in_flight == 100 and budget.waiting == 0

    asyncio.run(scenario())


def test_unbounded_counts_but_never_waits() -> None:
    async def scenario() -> None:
        budget = RequestBudget(-1)
        for _ in range(3):
            await budget.acquire(1 << 30)
        assert budget.in_flight == 3 << 30

    asyncio.run(scenario())
