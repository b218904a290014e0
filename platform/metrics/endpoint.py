"""A minimal HTTP/1.1 server on the broker's event loop for ``/metrics``, ``/livez`` and ``/readyz``.

On the event loop rather than prometheus-client's own server thread because the collectors read
state that lives on the loop (partition leadership, ISRs), and because answering from the loop
is what makes ``/livez`` mean something. GET only, one request per connection (``Connection:
close``), headers bounded in size and time: it serves scrapers and probes, not browsers at scale.
"""
from __future__ import annotations

import asyncio
import logging
from http import HTTPStatus
from typing import Awaitable, Callable, Mapping
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

#: (status, content type, body) for the request's headers (lower-case names).
Route = Callable[[Mapping[str, str]], Awaitable[tuple[int, str, bytes]]]

HEADER_TIMEOUT_S = 10.0
MAX_HEADER_BYTES = 16 * 1024


class HttpEndpoint:
    def __init__(self, host: str, port: int, routes: Mapping[str, Route]) -> None:
        self.host, self.port = host, port
        self.routes = dict(routes)
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Bind and serve; ``port`` 0 takes a free one, and :attr:`port` tells which."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port, reuse_address=True,
                                                  limit=MAX_HEADER_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics endpoint on http://%s:%d (%s)", self.host, self.port, ", ".join(sorted(self.routes)))

    async def close(self) -> None:
        """Stop accepting; an exchange in progress ends within HEADER_TIMEOUT_S or with the loop."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEADER_TIMEOUT_S)
            status, content_type, body = await self._answer(head.decode("latin-1"))
            reason = HTTPStatus(status).phrase
            writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1") + body)
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, head: str) -> tuple[int, str, bytes]:
        request_line, *header_lines = head.split("\r\n")
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return 400, "text/plain", b"malformed request line\n"
        method, target, _ = parts
        route = self.routes.get(urlsplit(target).path)
        if route is None:
            return 404, "text/plain", f"no such path; try {', '.join(sorted(self.routes))}\n".encode()
        if method != "GET":
            return 405, "text/plain", b"only GET is served\n"
        headers = {}
        for line in header_lines:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        try:
            return await route(headers)
        except Exception:
            log.exception("metrics endpoint: %s failed", target)
            return 500, "text/plain", b"internal error; see the broker log\n"
