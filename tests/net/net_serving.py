"""A BrokerServer on loopback with one client connection to it, for the tests of ``ember.net``."""
from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator

from ember.net.server import BrokerServer, Dispatch
from ember.wire.frame import FRAME_LENGTH, decode_response


@contextlib.asynccontextmanager
async def connected(dispatch: Dispatch) -> AsyncIterator[tuple[BrokerServer, asyncio.StreamReader, asyncio.StreamWriter]]:
    """A server on ``dispatch`` and one client connection to it, both closed afterwards."""
    server = BrokerServer(dispatch, "127.0.0.1", 0, 1 << 20, 60_000)
    await server.bind()
    await server.start_serving()
    assert server._server is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", server._server.sockets[0].getsockname()[1])
    try:
        yield server, reader, writer
    finally:
        writer.close()
        await server.close()


async def answer(reader: asyncio.StreamReader) -> tuple[int, str]:
    """The next reply on the client's side: its correlation id and the ``name`` it carries."""
    (size,) = FRAME_LENGTH.unpack(await asyncio.wait_for(reader.readexactly(FRAME_LENGTH.size), 10))
    response = decode_response(await asyncio.wait_for(reader.readexactly(size), 10))
    return response.correlation_id, response.body["name"]
