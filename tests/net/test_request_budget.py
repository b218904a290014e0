"""``queued.max.request.bytes`` alone (:class:`ember.net.budget.RequestBudget`): frames are charged
before they are read, wait in arrival order while they do not fit, and one frame always fits when
nothing else is in flight."""
from __future__ import annotations

import asyncio
import socket

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


def test_a_swap_gives_back_a_frame_and_charges_its_response_without_waiting() -> None:
    async def scenario() -> None:
        budget = RequestBudget(100)
        await budget.acquire(10)                   # a small request frame, handled
        other = asyncio.create_task(budget.acquire(60))
        await asyncio.sleep(0)
        assert other.done()                        # 70 in flight
        budget.swap(10, 500)                       # its large response is being written: charged at once
        assert budget.in_flight == 560 and budget.peak == 560
        waiting = asyncio.create_task(budget.acquire(1))
        await asyncio.sleep(0)
        assert not waiting.done()                  # no new frame is read while the responses fill the limit
        budget.release(500)                        # written
        budget.release(60)
        await waiting
        assert budget.in_flight == 1

    asyncio.run(scenario())


def test_a_handled_requests_frame_is_given_back_and_its_unread_response_charged_until_written() -> None:
    """Through the server: a client that does not read a 4 MiB response holds those bytes (not its
    small frame's) until it reads them; then nothing is in flight."""
    from ember.net.server import BrokerServer
    from ember.wire.api_keys import ApiKey
    from ember.wire.frame import encode_request
    from ember.wire.reply import Reply

    # more than the kernel can hold between the two sockets (the client's receive buffer is pinned to
    # 64 KiB below; the server's send buffer autotunes up to net.ipv4.tcp_wmem's max, 4 MiB here), so
    # part of the response must stay in the server until the client reads
    response_bytes = 16 << 20

    async def dispatch(request: object) -> Reply:
        return Reply({"error_code": 0}, [bytes(response_bytes)])

    async def scenario() -> None:
        budget = RequestBudget(1 << 20)
        server = BrokerServer(dispatch, "127.0.0.1", 0, 1 << 20, 60_000, budget=budget)   # type: ignore[arg-type]
        await server.bind()
        await server.start_serving()
        assert server._server is not None
        port = server._server.sockets[0].getsockname()[1]
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)   # no autotuning up to tcp_rmem's max
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 10)
        try:
            frame = b"".join(encode_request(ApiKey.API_VERSIONS, 0, 1, {}))
            writer.write(frame)
            await writer.drain()
            for _ in range(100):
                if budget.in_flight > len(frame):
                    break
                await asyncio.sleep(0.02)
            # the frame's bytes were given back; the unread response's are charged
            assert response_bytes <= budget.in_flight <= response_bytes + 2048
            head = await reader.readexactly(4)
            await reader.readexactly(int.from_bytes(head, "big"))
            for _ in range(100):
                if budget.in_flight == 0:
                    break
                await asyncio.sleep(0.02)
            assert budget.in_flight == 0
        finally:
            writer.close()
            await server.close()

    asyncio.run(scenario())
