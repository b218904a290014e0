"""Replies to pipelined requests go out in few writes (``ember.net.coalescing``), in order, and none
waits for a later request's handler."""
from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from net_serving import answer, connected

from ember.net.coalescing import MAX_HOLD_S, CoalescingWriter
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Request, encode_request
from ember.wire.reply import Reply


class _Transport:
    def __init__(self) -> None:
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing


class _Writer:
    """What CoalescingWriter uses of a StreamWriter, recording each write."""

    def __init__(self) -> None:
        self.transport = _Transport()
        self.writes: list[Any] = []

    def write(self, data: Any) -> None:
        self.writes.append(data)


def _coalescing(limit: int = 1024) -> tuple[CoalescingWriter, _Writer]:
    inner = _Writer()
    return CoalescingWriter(inner, limit), inner  # type: ignore[arg-type]


def test_small_writes_in_one_run_of_the_task_go_out_in_one_write_once_the_loop_runs() -> None:
    async def scenario() -> None:
        writer, inner = _coalescing()
        for piece in (b"a", b"bc", b"def"):
            writer.write(piece)
        assert inner.writes == [] and writer.holding == 6
        await asyncio.sleep(0)
        assert inner.writes == [b"abcdef"] and writer.holding == 0
        writer.write(b"g")                 # the next run's writes are held anew
        await asyncio.sleep(0)
        assert inner.writes == [b"abcdef", b"g"]

    asyncio.run(scenario())


def test_a_write_reaching_the_limit_sends_what_is_held_first_and_itself_without_a_copy() -> None:
    async def scenario() -> None:
        writer, inner = _coalescing(limit=100)
        writer.write(b"head")
        large = memoryview(bytearray(200))
        writer.write(large)
        assert inner.writes[0] == b"head" and inner.writes[1] is large
        await asyncio.sleep(0)
        assert len(inner.writes) == 2      # the scheduled flush found nothing left

    asyncio.run(scenario())



def test_a_task_that_runs_on_without_waiting_holds_a_reply_for_at_most_max_hold_s() -> None:
    async def scenario() -> None:
        writer, inner = _coalescing()
        writer.write(b"first")
        time.sleep(MAX_HOLD_S * 2)        # handling more requests read ahead, without yielding
        writer.write(b"second")
        assert inner.writes == [b"first"]
        await asyncio.sleep(0)
        assert inner.writes == [b"first", b"second"]

    asyncio.run(scenario())

def test_a_held_piece_is_copied_so_its_buffer_may_be_reused() -> None:
    async def scenario() -> None:
        writer, inner = _coalescing()
        buffer = bytearray(b"before")
        writer.write(memoryview(buffer))
        buffer[:] = b"after!"
        writer.flush()
        assert inner.writes == [b"before"]

    asyncio.run(scenario())


def test_what_is_held_is_dropped_when_the_connection_is_closing() -> None:
    async def scenario() -> None:
        writer, inner = _coalescing()
        writer.write(b"late")
        inner.transport.closing = True
        await asyncio.sleep(0)
        assert inner.writes == [] and writer.holding == 0

    asyncio.run(scenario())


# -- a real server ----------------------------------------------------------------------------

class _Dispatch:
    """Answers each request with its name; a request named ``wait`` waits until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def __call__(self, request: Request) -> Reply | None:
        if request.body["name"] == "wait":
            await self.release.wait()
        return Reply({"error_code": 0, "name": request.body["name"]})


async def _answers(reader: asyncio.StreamReader, count: int) -> list[tuple[int, str]]:
    return [await answer(reader) for _ in range(count)]


def _serving(dispatch: _Dispatch, scenario: Any) -> None:
    async def run() -> None:
        async with connected(dispatch) as (server, reader, writer):
            assert server._server is not None
            await scenario(reader, writer, server._server.sockets[0].getsockname()[1])

    asyncio.run(run())


def test_replies_to_pipelined_requests_come_in_order_in_far_fewer_writes_than_replies(
        monkeypatch: pytest.MonkeyPatch) -> None:
    server_writes: list[int] = []
    real_write = asyncio.StreamWriter.write

    def counting(self: asyncio.StreamWriter, data: Any) -> None:
        if self.get_extra_info("sockname")[1] == server_port[0]:
            server_writes.append(len(data))
        real_write(self, data)

    server_port: list[int] = [0]
    monkeypatch.setattr(asyncio.StreamWriter, "write", counting)

    async def scenario(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int) -> None:
        server_port[0] = port
        frames = [piece for i in range(200) for piece in encode_request(ApiKey.LIST_OFFSETS, 0, i, {"name": f"r{i}"})]
        writer.write(b"".join(frames))     # one burst, as librdkafka's ListOffsets per partition
        assert await _answers(reader, 200) == [(i, f"r{i}") for i in range(200)]

    _serving(_Dispatch(), scenario)
    assert 0 < len(server_writes) < 50, server_writes


def test_a_reply_is_not_held_while_the_next_requests_handler_waits() -> None:
    dispatch = _Dispatch()

    async def scenario(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int) -> None:
        frames = [*encode_request(ApiKey.LIST_OFFSETS, 0, 1, {"name": "quick"}),
                  *encode_request(ApiKey.FETCH, 0, 2, {"name": "wait"})]
        writer.write(b"".join(frames))
        assert await _answers(reader, 1) == [(1, "quick")]    # while "wait" still waits
        dispatch.release.set()
        assert await _answers(reader, 1) == [(2, "wait")]

    _serving(dispatch, scenario)
