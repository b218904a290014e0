"""Small requests answered as they arrive (``ember.net.immediate``): only while the connection is
idle, in request order with everything the task handles, in the connection's context, counted by
the request metrics, and keeping the connection from expiring as idle."""
from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator

from net_serving import answer

from ember.metrics.requests import RequestObserver
from ember.net.server import BrokerServer
from ember.security.session import current_session
from ember.wire.api_keys import ApiKey
from ember.wire.frame import decode_request, encode_request, response_prefix
from ember.wire.reply import Reply


class _Broker:
    """Requests named ``now-*`` are answered at once by :meth:`answer_now`; the others go to the
    dispatch, where ``slow-*`` ones wait until released."""

    def __init__(self) -> None:
        self.dispatched: list[str] = []
        self.immediate: list[str] = []
        self.sessions: list[object] = []
        self.release = asyncio.Event()

    async def __call__(self, request: object) -> Reply:
        name = request.body["name"]     # type: ignore[attr-defined]
        self.dispatched.append(name)
        if name.startswith("slow"):
            await self.release.wait()
        return Reply({"error_code": 0, "name": name})

    def answer_now(self, frame: memoryview) -> bytes | None:
        request = decode_request(bytes(frame))
        name = request.body["name"]
        if name == "now-broken":
            raise RuntimeError("an answer that fails goes to the task")
        if not name.startswith("now"):
            return None
        self.immediate.append(name)
        self.sessions.append(current_session())
        return response_prefix(request.correlation_id, {"error_code": 0, "name": name}, 0)


@contextlib.asynccontextmanager
async def _connected(max_idle_ms: int = 60_000) -> AsyncIterator[tuple[_Broker, BrokerServer, asyncio.StreamReader,
                                                                        asyncio.StreamWriter]]:
    broker = _Broker()
    server = BrokerServer(broker, "127.0.0.1", 0, 1 << 20, max_idle_ms, observer=RequestObserver("EMBER"))  # type: ignore[arg-type]
    server.answer_now = broker.answer_now
    await server.bind()
    await server.start_serving()
    assert server._server is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", server._server.sockets[0].getsockname()[1])
    try:
        yield broker, server, reader, writer
    finally:
        writer.close()
        await server.close()


def _frame(correlation_id: int, name: str) -> bytes:
    return b"".join(encode_request(ApiKey.LIST_OFFSETS, 0, correlation_id, {"name": name}))


def test_an_idle_connection_gets_an_answerable_request_answered_without_its_task() -> None:
    async def scenario() -> None:
        async with _connected() as (broker, server, reader, writer):
            for n in range(3):
                writer.write(_frame(n, f"now-{n}"))
                assert await answer(reader) == (n, f"now-{n}")
            writer.write(_frame(3, "other"))
            assert await answer(reader) == (3, "other")
            assert broker.immediate == ["now-0", "now-1", "now-2"]
            assert broker.dispatched == ["other"]
            assert all(session is not None for session in broker.sessions)    # the connection's session
            assert server.observer is not None
            assert server.observer.api(ApiKey.LIST_OFFSETS).requests == 4
            assert server.observer.in_flight == 0

    asyncio.run(scenario())


def test_frames_behind_one_the_task_handles_go_to_the_task_in_order() -> None:
    async def scenario() -> None:
        async with _connected() as (broker, server, reader, writer):
            writer.write(_frame(1, "now-a") + _frame(2, "other") + _frame(3, "now-b"))
            assert [await answer(reader) for _ in range(3)] == [(1, "now-a"), (2, "other"), (3, "now-b")]
            assert broker.immediate == ["now-a"]
            assert broker.dispatched == ["other", "now-b"]

    asyncio.run(scenario())


def test_a_request_arriving_while_another_is_handled_waits_for_its_reply() -> None:
    async def scenario() -> None:
        async with _connected() as (broker, server, reader, writer):
            writer.write(_frame(1, "slow"))
            for _ in range(500):
                if broker.dispatched:
                    break
                await asyncio.sleep(0.01)
            writer.write(_frame(2, "now-behind"))
            pending = asyncio.ensure_future(answer(reader))
            await asyncio.sleep(0.2)
            assert not pending.done() and broker.immediate == []
            broker.release.set()
            assert [await pending, await answer(reader)] == [(1, "slow"), (2, "now-behind")]
            assert broker.dispatched == ["slow", "now-behind"]
            writer.write(_frame(3, "now-idle"))       # idle again: answered at once
            assert await answer(reader) == (3, "now-idle")
            assert broker.immediate == ["now-idle"]

    asyncio.run(scenario())


def test_an_answer_that_fails_leaves_the_request_to_the_task() -> None:
    async def scenario() -> None:
        async with _connected() as (broker, server, reader, writer):
            writer.write(_frame(1, "now-broken"))
            assert await answer(reader) == (1, "now-broken")
            assert broker.dispatched == ["now-broken"]

    asyncio.run(scenario())


def test_requests_answered_at_once_keep_the_connection_from_expiring_as_idle() -> None:
    async def scenario() -> None:
        async with _connected(max_idle_ms=1000) as (broker, server, reader, writer):
            for n in range(30):       # 3 s of requests, 0.1 s apart: three idle limits
                writer.write(_frame(n, f"now-{n}"))
                assert await answer(reader) == (n, f"now-{n}")
                await asyncio.sleep(0.1)
            assert server.connection_count == 1
            assert broker.dispatched == []
            for _ in range(100):      # really idle now: closed after the limit
                if server.connection_count == 0:
                    break
                await asyncio.sleep(0.05)
            assert server.connection_count == 0

    asyncio.run(scenario())
