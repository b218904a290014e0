"""A Produce whose appends are done reads on (``ember.net.pipelining``): the connection's next
Produce is handled while it waits for its replicas, the replies still go out in request order,
and any other request waits until every earlier reply went out, as it would on Kafka."""
from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator

from net_serving import answer, connected

from ember.net.pipelining import MAX_REPLIES_OWED, read_on
from ember.net.server import BrokerServer
from ember.wire.api_keys import ApiKey
from ember.wire.frame import FRAME_LENGTH, Request, encode_request
from ember.wire.reply import CloseConnection, Reply


class _Broker:
    """A dispatch whose Produce requests read on, then wait until the test releases them by name."""

    def __init__(self) -> None:
        self.handled: list[str] = []
        self.released: dict[str, asyncio.Event] = {}

    async def __call__(self, request: Request) -> Reply | None:
        name = request.body["name"]
        self.handled.append(name)
        if request.body.get("fail"):
            raise CloseConnection(f"{name} failed")
        if request.api_key == ApiKey.PRODUCE and request.body.get("wait"):
            read_on()
            await self.released.setdefault(name, asyncio.Event()).wait()
        return Reply({"error_code": 0, "name": name})

    def release(self, name: str) -> None:
        self.released.setdefault(name, asyncio.Event()).set()


@contextlib.asynccontextmanager
async def _connected() -> AsyncIterator[tuple[_Broker, BrokerServer, asyncio.StreamReader, asyncio.StreamWriter]]:
    """A server on a _Broker and one client connection to it, both closed afterwards."""
    broker = _Broker()
    async with connected(broker) as (server, reader, writer):
        yield broker, server, reader, writer


def _send(writer: asyncio.StreamWriter, correlation_id: int, api_key: int, name: str, wait: bool = False,
          fail: bool = False) -> None:
    writer.writelines(encode_request(api_key, 0, correlation_id, {"name": name, "wait": wait, "fail": fail}))


async def _settle(broker: _Broker, count: int) -> None:
    for _ in range(500):
        if len(broker.handled) >= count:
            return
        await asyncio.sleep(0.01)


def test_a_produce_waiting_for_replicas_does_not_hold_the_next_and_replies_stay_in_order() -> None:
    async def scenario() -> None:
        async with _connected() as (broker, server, reader, writer):
            _send(writer, 1, ApiKey.PRODUCE, "slow", wait=True)
            _send(writer, 2, ApiKey.PRODUCE, "fast")
            _send(writer, 3, ApiKey.PRODUCE, "middle", wait=True)
            await _settle(broker, 3)
            assert broker.handled == ["slow", "fast", "middle"]     # all three read while "slow" waits
            broker.release("middle")
            pending = asyncio.ensure_future(answer(reader))
            await asyncio.sleep(0.2)
            assert not pending.done()           # "fast" and "middle" are done, but "slow" is answered first
            broker.release("slow")
            assert [await pending, await answer(reader), await answer(reader)] == \
                [(1, "slow"), (2, "fast"), (3, "middle")]

    asyncio.run(scenario())


def test_a_request_other_than_produce_is_handled_only_after_every_earlier_reply() -> None:
    """A ListOffsets pipelined behind an acks=all Produce sees the high watermark that Produce
    waited for, as on Kafka: it is not handled while the Produce waits."""
    async def scenario() -> None:
        async with _connected() as (broker, server, reader, writer):
            _send(writer, 1, ApiKey.PRODUCE, "produce", wait=True)
            _send(writer, 2, ApiKey.LIST_OFFSETS, "list-offsets")
            await _settle(broker, 1)
            await asyncio.sleep(0.2)
            assert broker.handled == ["produce"]
            broker.release("produce")
            assert [await answer(reader), await answer(reader)] == [(1, "produce"), (2, "list-offsets")]
            assert broker.handled == ["produce", "list-offsets"]

    asyncio.run(scenario())


def test_a_connection_owes_a_bounded_number_of_replies_before_it_stops_reading() -> None:
    async def scenario() -> None:
        async with _connected() as (broker, server, reader, writer):
            for n in range(MAX_REPLIES_OWED + 2):
                _send(writer, n, ApiKey.PRODUCE, f"p{n}", wait=True)
            await _settle(broker, MAX_REPLIES_OWED + 2)
            await asyncio.sleep(0.2)
            assert len(broker.handled) == MAX_REPLIES_OWED
            broker.release("p0")
            assert await answer(reader) == (0, "p0")
            await _settle(broker, MAX_REPLIES_OWED + 1)
            assert len(broker.handled) == MAX_REPLIES_OWED + 1
            for n in range(1, MAX_REPLIES_OWED + 2):
                broker.release(f"p{n}")
            assert [(await answer(reader))[0] for _ in range(MAX_REPLIES_OWED + 1)] == \
                list(range(1, MAX_REPLIES_OWED + 2))

    asyncio.run(scenario())


def test_a_client_that_goes_away_cancels_the_produces_it_left_waiting() -> None:
    async def scenario() -> tuple[Any, int]:
        cancelled = 0
        async with _connected() as (broker, server, _reader, writer):
            original = broker.__call__

            async def counting(request: Request) -> Reply | None:
                nonlocal cancelled
                try:
                    return await original(request)
                except asyncio.CancelledError:
                    cancelled += 1
                    raise

            server.dispatch = counting
            _send(writer, 1, ApiKey.PRODUCE, "a", wait=True)
            _send(writer, 2, ApiKey.PRODUCE, "b", wait=True)
            await _settle(broker, 2)
            writer.close()
            for _ in range(500):
                if cancelled == 2:
                    break
                await asyncio.sleep(0.01)
            return server.budget.in_flight, cancelled

    assert asyncio.run(scenario()) == (0, 2)    # both handlers cancelled, their frames' bytes given back


def test_a_produce_that_fails_behind_waiting_ones_ends_the_connection_after_their_replies() -> None:
    """As if handled one at a time: nothing after the failed Produce is read, what came before is
    answered, then the connection closes (an acks=0 producer's only signal)."""
    async def scenario() -> tuple[list[str], list[tuple[int, str]], bytes]:
        async with _connected() as (broker, server, reader, writer):
            _send(writer, 1, ApiKey.PRODUCE, "waiting", wait=True)
            _send(writer, 2, ApiKey.PRODUCE, "failing", fail=True)
            _send(writer, 3, ApiKey.PRODUCE, "after")
            await _settle(broker, 2)
            await asyncio.sleep(0.2)
            broker.release("waiting")
            answers = [await answer(reader)]
            return broker.handled, answers, await asyncio.wait_for(reader.read(), 10)

    assert asyncio.run(scenario()) == (["waiting", "failing"], [(1, "waiting")], b"")


def test_a_connection_the_broker_closes_still_answers_the_produces_it_read() -> None:
    """A bad frame behind an acks=all Produce closes the connection, but that Produce was
    appended: its reply goes out first, as it would have before the bad frame was read."""
    async def scenario() -> tuple[tuple[int, str], bytes]:
        async with _connected() as (broker, server, reader, writer):
            _send(writer, 1, ApiKey.PRODUCE, "waiting", wait=True)
            await _settle(broker, 1)
            garbage = b"\x00\x00\x00\x01\x00\x00\x00\x07\x00\x00\x00\x05{oops"
            writer.write(FRAME_LENGTH.pack(len(garbage)) + garbage)
            await asyncio.sleep(0.2)
            broker.release("waiting")
            return await answer(reader), await asyncio.wait_for(reader.read(), 10)

    assert asyncio.run(scenario()) == ((1, "waiting"), b"")
