"""Answering small requests as their bytes arrive, without waking the connection's task.

A request normally takes three turns of the event loop: the bytes arrive (the transport's
callback), the connection's task wakes to read, decode, handle and write, and the reply is flushed
(:mod:`ember.net.coalescing`); each turn has its Python overhead. Spark's Kafka connector sends
two ListOffsets after every poll of 500 records, one at a time on the connection, so that overhead,
not the answer, was most of a broker's CPU while Spark read: 150-180 µs per request against
Kafka's 60 (bench/vs_kafka round-trips row).

A protocol whose server has an ``answer_now`` (the Kafka listener's: ListOffsets for offsets held
in memory) answers such frames in the transport's callback itself. Only while the connection is
idle: its task waits for the next request with nothing read ahead, no reply owed or held, no
authentication in progress and the socket taking what is written; a frame that cannot be answered
so (another request, one that must wait or read a file, a partial frame) and everything behind it
go to the task as before, so replies keep their order. The request is handled in the connection's
context (its session, for ACLs), counted by the request metrics and keeps the connection from
expiring as idle, as a request through the task does.
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from typing import Callable

from ember.wire.frame import FRAME_LENGTH

log = logging.getLogger(__name__)

#: The answer to a request frame (without its length) as complete response bytes, or None: the
#: connection's task handles it.
AnswerNow = Callable[[memoryview], "bytes | None"]
#: Frames above this size always go through the connection's task (the answerable ones are tiny).
SMALL_FRAME = 16 * 1024
#: Told of each request answered: its frame, when it started (``time.perf_counter``), the reply.
Answered = Callable[[memoryview, float, bytes], None]


class ImmediateAnswers:
    """One connection's immediate answers: :meth:`take` answers the complete frames at the start of
    newly arrived bytes that ``answer`` can answer and returns the rest for the connection's task.
    ``busy`` says whether anything is held back that the reply would overtake (replies held for a
    coalesced write); ``answered`` is told of each request answered (the server re-arms its idle
    watchdog and counts it in the request metrics)."""

    def __init__(self, answer: AnswerNow, transport: asyncio.WriteTransport, busy: Callable[[], bool],
                 answered: Answered) -> None:
        self._answer = answer
        self._transport = transport
        self._busy = busy
        self._answered = answered
        self._context = contextvars.copy_context()   # the connection's session, as its task sees it

    def take(self, data: bytes) -> bytes:
        """What of ``data`` is left for the connection's task (all of it when nothing could be answered)."""
        transport = self._transport
        if transport.is_closing() or transport.get_write_buffer_size() or self._busy():
            return data
        view = memoryview(data)
        position, end = 0, len(view)
        while end - position > FRAME_LENGTH.size:
            (size,) = FRAME_LENGTH.unpack_from(view, position)
            start = position + FRAME_LENGTH.size
            if size > SMALL_FRAME or end - start < size:
                break
            frame = view[start:start + size]
            started = time.perf_counter()
            reply = self._reply(frame)
            if reply is None:
                break
            transport.write(reply)
            self._answered(frame, started, reply)
            position = start + size
        return data[position:] if position else data

    def _reply(self, frame: memoryview) -> bytes | None:
        try:
            return self._context.run(self._answer, frame)
        except Exception:   # the task handles the frame again and says what is wrong with it
            log.debug("a frame not answered at once goes to the connection's task", exc_info=True)
            return None
