"""Reading on while a Produce waits for its replicas, answering in request order.

Kafka's broker reads a connection's next request only once it has answered the current one. An
acks=all Produce spends most of its time after its appends, waiting for the followers to fetch
them, so the Produce requests a producer keeps in flight on a connection (up to 5 with
librdkafka's and the Java client's idempotence) are each held for one replication round after
another: at hundreds of partitions, where a round takes tens of milliseconds, records queued in
the producer for seconds. ember's server reads the next request as soon as a Produce's appends
are done (its handler calls :func:`read_on`) and writes the replies in request order
(:class:`RepliesInOrder`). The appends still happen in the order the requests came, so offsets,
idempotent sequence numbers and per-partition order are what they would be on Kafka. Any request
other than a Produce waits until every earlier reply went out, so what it sees (a ListOffsets
after a Produce, say) is what it would see on Kafka.
"""
from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Coroutine, Iterable, SupportsIndex

from ember.net.immediate import ImmediateAnswers

_reader: contextvars.ContextVar["ArrivalReader | None"] = contextvars.ContextVar("ember_reader", default=None)


class ArrivalReader(asyncio.StreamReader):
    """A connection's reader that tells the request being handled when its client has sent more
    (:func:`next_request_sent`) and, while its task waits idle for the next request
    (:meth:`idle`), lets :class:`~ember.net.immediate.ImmediateAnswers` answer what arrives."""

    _arrival: asyncio.Future[None] | None = None
    _immediate: ImmediateAnswers | None = None

    def idle(self, immediate: ImmediateAnswers) -> None:
        """The connection's task is about to wait for its next request: until bytes are left for it,
        ``immediate`` answers what it can as it arrives. Only with nothing read ahead, which the
        task reads first."""
        if not getattr(self, "_buffer", None):
            self._immediate = immediate

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        immediate = self._immediate
        if immediate is not None:
            self._immediate = None      # the task takes over, unless every frame is answered
            data = immediate.take(data)  # type: ignore[arg-type]   # a transport feeds bytes
            if not data:
                self._immediate = immediate
                return
        super().feed_data(data)
        self._arrived()

    def _arrived(self) -> None:
        arrival = self._arrival
        if arrival is not None and not arrival.done():
            arrival.set_result(None)

    def more_sent(self) -> asyncio.Future[None]:
        """Done once bytes beyond the frames read so far are here (at once if they already are)."""
        if self._arrival is None or self._arrival.done():
            self._arrival = asyncio.get_running_loop().create_future()
            if getattr(self, "_buffer", None):   # bytes read ahead (asyncio's buffer)
                self._arrival.set_result(None)
        return self._arrival

    def serve_here(self) -> None:
        """The connection's task serves this reader: :func:`next_request_sent` looks at it."""
        _reader.set(self)


def next_request_sent() -> asyncio.Future[None] | None:
    """A future done once the client has sent its next request while the current one is handled
    (a client that closes is the server's watchdog's business); None outside a connection. A long
    poll ends then, with what it has: the requests behind it on the connection would otherwise
    wait for it, since replies go out in order (librdkafka pipelines its ListOffsets behind its
    first Fetch, which waited 500 ms on empty partitions while the partitions it was about to add
    waited behind it)."""
    reader = _reader.get()
    return reader.more_sent() if reader is not None else None


#: Replies a connection may owe at once before it stops reading requests: the budget of
#: ``queued.max.request.bytes`` bounds their bytes, this bounds their number.
MAX_REPLIES_OWED = 8

_read_on: contextvars.ContextVar[asyncio.Future[None] | None] = contextvars.ContextVar("ember_read_on", default=None)


def read_on() -> None:
    """Called by a Produce handler once its appends are done and only its replication waits
    remain: the connection reads its next request meanwhile. Does nothing outside such a request."""
    signal = _read_on.get()
    if signal is not None and not signal.done():
        signal.set_result(None)


async def handle_reading_on(handle: Coroutine[Any, Any, Any]) -> tuple[asyncio.Task[Any], bool]:
    """Run ``handle`` (a Produce's dispatch) in a task of its own; returns it once it is done or
    has called :func:`read_on`, with True in the latter case (the task is still running). A
    cancelled caller cancels it."""
    signal: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    context = contextvars.copy_context()
    context.run(_read_on.set, signal)
    task: asyncio.Task[Any] = asyncio.create_task(handle, context=context)
    try:
        await asyncio.wait([task, signal], return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise
    return task, not task.done()


def failed(task: asyncio.Task[Any]) -> bool:
    """Whether a finished handler's task ended in an exception (raised again by ``result()``)."""
    return task.done() and (task.cancelled() or task.exception() is not None)


@dataclass
class OwedReply:
    """A request read whose reply is not written yet: its handler (a task), with what the server
    keeps for it until the reply is out (the frame's charge, the request timer, the correlation id)."""
    handling: asyncio.Task[Any]
    correlation_id: int
    charged: int
    timer: Any = None


class RepliesInOrder:
    """The replies one connection owes, written in request order by a task of their own while the
    connection reads on. ``write(owed, reply)`` writes one (and gives back its charge); a handler
    or a write that fails ends the connection: ``failure`` says why and ``on_failure`` is called
    (the server cancels the connection's task)."""

    def __init__(self, write: Callable[[OwedReply, Any], Awaitable[None]],
                 release: Callable[[OwedReply], None], on_failure: Callable[[], object]) -> None:
        self._write = write
        self._release = release
        self._on_failure = on_failure
        self._owed: deque[OwedReply] = deque()
        self._writer: asyncio.Task[None] | None = None
        self._written = asyncio.Event()
        self.failure: BaseException | None = None

    def __len__(self) -> int:
        return len(self._owed)

    def add(self, owed: OwedReply) -> None:
        self._owed.append(owed)
        self._written.clear()
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_all(), name="replies-in-order")

    async def written(self, below: int = 1) -> None:
        """Wait until fewer than ``below`` replies are owed (1: every reply went out)."""
        while len(self._owed) >= below and self.failure is None:
            self._written.clear()
            await self._written.wait()

    async def _write_all(self) -> None:
        try:
            while self._owed:
                owed = self._owed[0]
                try:
                    reply = await owed.handling
                    await self._write(owed, reply)
                except asyncio.CancelledError as exc:
                    current = asyncio.current_task()
                    if current is None or current.cancelling():
                        raise       # this writer is stopped (the connection ends)
                    self.failure = exc      # the handler's own task was cancelled: that reply is lost
                    self._on_failure()
                    return
                except BaseException as exc:
                    self.failure = exc
                    self._on_failure()
                    return
                finally:
                    if self._owed and self._owed[0] is owed:
                        self._owed.popleft()
                        self._release(owed)
                    self._written.set()
        finally:
            self._writer = None
            self._written.set()

    async def close(self) -> None:
        """The connection ends: stop writing, cancel the handlers still running, give back what
        each owed reply held."""
        writer, self._writer = self._writer, None
        handlers = [owed.handling for owed in self._owed]
        for task in handlers:
            task.cancel()
        if writer is not None:
            writer.cancel()
        try:
            await asyncio.gather(*handlers, *([writer] if writer is not None else []), return_exceptions=True)
        finally:     # also when the connection's task is cancelled again meanwhile (the server closing)
            while self._owed:
                self._release(self._owed.popleft())
