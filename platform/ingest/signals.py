"""Event-driven wake-ups for long polls: a waiter parks on a future that the next change resolves."""
from __future__ import annotations

import asyncio
import weakref
from typing import Iterable, Protocol


class Observer(Protocol):
    """What a signal forwards its fires to (another Signal, or a session's per-partition hook)."""

    def fire(self) -> None: ...


class Signal:
    """Wakes every coroutine waiting for "something changed" (an append, a new high watermark,
    new metadata). Costs nothing when nobody waits: the future exists only while someone does.

    A signal can also forward its fires to observers (``forward_to``): a fetch session observes
    every partition it holds, so its long poll parks on one signal whatever its partition count,
    and learns which partitions fired."""

    __slots__ = ("_future", "_observers", "__weakref__")

    def __init__(self) -> None:
        self._future: asyncio.Future[None] | None = None
        self._observers: weakref.WeakSet[Observer] | None = None

    def future(self) -> asyncio.Future[None]:
        if self._future is None or self._future.done():
            self._future = asyncio.get_running_loop().create_future()
        return self._future

    def fire(self) -> None:
        if self._future is not None and not self._future.done():
            self._future.set_result(None)
        self._future = None
        if self._observers:
            for observer in list(self._observers):
                observer.fire()

    def forward_to(self, observer: Observer) -> None:
        """Fire ``observer`` too whenever this fires, until ``stop_forwarding`` (or until the
        observer is garbage: held weakly, so a dropped session needs no clean-up here)."""
        if self._observers is None:
            self._observers = weakref.WeakSet()
        self._observers.add(observer)

    def stop_forwarding(self, observer: Observer) -> None:
        if self._observers is not None:
            self._observers.discard(observer)


async def wait_any(signals: Iterable[Signal], timeout_s: float) -> None:
    """Return when any of ``signals`` fires or ``timeout_s`` passes, whichever is first."""
    futures = {signal.future() for signal in signals}
    if futures and timeout_s > 0:
        await asyncio.wait(futures, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
