"""A BrokerServer on loopback with one client connection to it, for the tests of ``ember.net``."""
from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator

from ember.net.server import BrokerServer, Dispatch


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
