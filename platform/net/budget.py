"""Bytes of request frames a broker holds at once: Kafka's ``queued.max.request.bytes``.

A connection charges a frame's declared size *before* reading the frame (its 4-byte length is all
that was read). Once the request is handled, the frame is dropped and its bytes are given back, and
the response's in-memory bytes are charged instead until it is written (or the connection closes):
a client that does not read its responses holds what they take, and a large response (a Kafka
Fetch of up to ``fetch.max.bytes``) keeps new frames out while it is written. A frame
that does not fit waits: the connection reads nothing more meanwhile, so the client's bytes stay
in the socket buffers (back-pressure), and the wait is bounded by ``connections.max.idle.ms`` like
any other step of a connection. A frame is admitted when it fits under the limit, or when nothing
else is in flight (so one frame of up to ``socket.request.max.bytes`` is always served, even above
a smaller limit): frames in flight never hold more than ``max(limit, socket.request.max.bytes)``;
responses being written are charged without waiting (they exist already), so frames and responses
together exceed the limit by at most the responses of the requests handled meanwhile.
Waiting frames are admitted in arrival order, so a large frame is not starved by small ones.

One accounting step per frame; a limit of -1 (Kafka's default) counts but never waits.
"""
from __future__ import annotations

import asyncio
from collections import deque


class RequestBudget:
    def __init__(self, limit: int) -> None:
        #: Bytes of frames in flight before the next one waits; <= 0: unbounded.
        self.limit = limit
        #: Bytes of frames read (or being read) and not yet answered.
        self.in_flight = 0
        #: Most bytes ever in flight (for tests and the fuzzer's report).
        self.peak = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _fits(self, size: int) -> bool:
        return self.limit <= 0 or self.in_flight == 0 or self.in_flight + size <= self.limit

    async def acquire(self, size: int) -> None:
        """Charge ``size`` bytes, waiting until they fit (cancellable: nothing is charged then)."""
        if not self._waiters and self._fits(size):
            self._charge(size)
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, waiter)
        self._waiters.append(entry)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():   # admitted just as it was cancelled: give it back
                self.release(size)
            else:
                if entry in self._waiters:
                    self._waiters.remove(entry)
                self._admit()    # a large frame that left may have blocked smaller ones behind it
            raise

    def swap(self, released: int, charged: int) -> None:
        """Give back ``released`` bytes and charge ``charged`` at once, without waiting: a handled
        request's frame is replaced by its response, which exists already (waiting would not free
        it), while it is written; new frames wait while the responses being written fill the limit."""
        self.in_flight -= released
        self._charge(charged)
        self._admit()

    def release(self, size: int) -> None:
        self.in_flight -= size
        self._admit()

    @property
    def waiting(self) -> int:
        """Connections waiting for their frame to fit."""
        return len(self._waiters)

    def _charge(self, size: int) -> None:
        self.in_flight += size
        self.peak = max(self.peak, self.in_flight)

    def _admit(self) -> None:
        while self._waiters and self._fits(self._waiters[0][0]):
            size, waiter = self._waiters.popleft()
            if waiter.done():    # its connection was cancelled while it waited
                continue
            self._charge(size)
            waiter.set_result(None)
