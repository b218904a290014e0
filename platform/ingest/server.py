"""The broker's network loop: one asyncio TCP server speaking the framed protocol.

Each connection is served by one coroutine that reads a frame, hands the decoded request to the
dispatcher and writes the reply before reading the next frame, so pipelined requests are
answered in the order they were sent (the unread ones wait in the socket buffer, which is also
the back-pressure). Fetch payloads go out with ``loop.sendfile`` straight from segment files.
A frame over ``socket.request.max.bytes``, a truncated header or a body that is not JSON is
logged and closes that connection only.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from ember.errors import EmberError
from ember.ingest.protocol import FRAME_LENGTH, Request, check_frame_size, decode_request, response_prefix
from ember.ingest.reply import CloseConnection, FileRegion, Reply

log = logging.getLogger(__name__)

Dispatch = Callable[[Request], Awaitable[Reply | None]]


class BrokerServer:
    #: Turns a frame (without its length) into a request; the Kafka listener decodes its own.
    decode_frame = staticmethod(decode_request)

    def __init__(self, dispatch: Dispatch, host: str, port: int, max_frame_bytes: int) -> None:
        self.dispatch = dispatch
        self.host, self.port = host, port
        self.max_frame_bytes = max_frame_bytes
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def bind(self) -> None:
        """Bind the listening socket without accepting yet (see :meth:`start_serving`)."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port,
                                                  start_serving=False, reuse_address=True)

    async def start_serving(self) -> None:
        assert self._server is not None
        await self._server.start_serving()
        log.info("listening on %s:%d", self.host, self.port)

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    break
                reply = await self.dispatch(request)
                if reply is not None:
                    await self._write(writer, request.correlation_id, reply)
        except EmberError as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except CloseConnection as exc:
            log.info("closing connection from %s: %s", peer, exc)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._connections.discard(task)
            writer.close()

    async def _read_request(self, reader: asyncio.StreamReader) -> Request | None:
        """The next request, None at a clean end of stream; raises EmberError on bad frames."""
        try:
            head = await reader.readexactly(FRAME_LENGTH.size)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise
            return None
        (size,) = FRAME_LENGTH.unpack(head)
        check_frame_size(size, self.max_frame_bytes)
        return self.decode_frame(await reader.readexactly(size))

    async def _write(self, writer: asyncio.StreamWriter, correlation_id: int, reply: Reply) -> None:
        try:
            writer.write(response_prefix(correlation_id, reply.body, reply.payload_size))
            for piece in reply.payload:
                if isinstance(piece, FileRegion):
                    await asyncio.get_running_loop().sendfile(
                        writer.transport, piece.file, piece.position, piece.size)
                else:
                    writer.write(piece)
            await writer.drain()
        finally:
            reply.close()
