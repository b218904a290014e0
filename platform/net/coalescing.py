"""Sending a connection's replies in as few socket writes as possible.

A client that pipelines requests got one ``send`` per reply: librdkafka's consumer asks each
broker for its partitions' start offsets with one ListOffsets request per partition, 333 of them
at once per broker at 1,000 partitions. On loopback each ``send`` also runs the receiving side's
TCP path and wakes the client, and these sends were half of the broker's busy time while a
consumer started; its first Fetch then went out with the few partitions whose offsets had come
back, all empty, and waited ``fetch.wait.max.ms``.

:class:`CoalescingWriter` holds small replies and sends what it holds together once the
connection's task lets the event loop run (``loop.call_soon``): requests already read ahead are
handled without waiting and their replies go out in one write, while no reply waits longer than the
task's current run, which ends at its first await that suspends (the next request not read yet, a
handler that waits, a full socket); one held longer than :data:`MAX_HOLD_S` goes at the next write.
This is what Linux's ``tcp_autocorking`` does for small writes inside the kernel, with the syscall
saved too. Replies keep their order: a large one (a fetch's records, sent without a copy) goes
after what is held, and a file region (``sendfile``) is preceded by :meth:`flush`.
"""
from __future__ import annotations

import asyncio
import logging

from ember.record.header import Buffer

log = logging.getLogger(__name__)

#: Bytes held at most; a write that reaches it is sent at once, without a copy.
HOLD_LIMIT = 64 * 1024
#: Seconds a reply is held at most while the task goes on without waiting (handling a long run of
#: requests read ahead): the next write sends what is held first.
MAX_HOLD_S = 0.005


class CoalescingWriter:
    """A connection's StreamWriter for replies: :meth:`write` holds small pieces until the event
    loop runs (at most :data:`HOLD_LIMIT` bytes), :meth:`flush` sends them now."""

    def __init__(self, writer: asyncio.StreamWriter, limit: int = HOLD_LIMIT) -> None:
        self._writer = writer
        self._limit = limit
        self._held: list[bytes] = []
        self._size = 0
        self._held_since = 0.0

    @property
    def transport(self) -> asyncio.WriteTransport:
        return self._writer.transport

    @property
    def holding(self) -> int:
        """Bytes held, not handed to the transport yet."""
        return self._size

    def write(self, data: Buffer) -> None:
        size = memoryview(data).nbytes
        loop = asyncio.get_running_loop()
        if self._held and loop.time() - self._held_since > MAX_HOLD_S:
            self.flush()
        if self._size + size >= self._limit:
            self.flush()
            self._write(data)
            return
        if not self._held:
            loop.call_soon(self.flush)
            self._held_since = loop.time()
        self._held.append(data if isinstance(data, bytes) else bytes(data))   # its buffer may be released next
        self._size += size

    def flush(self) -> None:
        """Hand what is held to the transport (dropped if the connection is closing)."""
        if not self._held:
            return
        held, self._held, self._size = self._held, [], 0
        if not self._writer.transport.is_closing():
            self._write(held[0] if len(held) == 1 else b"".join(held))

    def _write(self, data: Buffer) -> None:
        """A write that fails (from the scheduled flush, nobody would hear it) closes the connection:
        its client would otherwise wait for replies that never come."""
        try:
            self._writer.write(data)
        except Exception:
            log.exception("could not write replies to %s; closing the connection",
                          self._writer.get_extra_info("peername"))
            self._writer.transport.abort()

    async def drain(self) -> None:
        """StreamWriter.drain: waits while the transport holds more than its high-water mark."""
        await self._writer.drain()
