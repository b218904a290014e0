"""Requests one broker sends another (follower fetches, leader-epoch queries), from asyncio.

Wraps the client :class:`~ember.client.connection.Connection` (pipelined, correlation-matched,
its own reader thread) so replica fetchers reuse the client network layer instead of a second
protocol implementation: connecting runs on a thread, responses arrive as awaitable futures.
"""
from __future__ import annotations

import asyncio
from typing import Any

from ember.errors import raise_for_code
from ember.client.connection import Address, Connection
from ember.protocol.ember.wire import ApiKey, Response


class BrokerClient:
    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    @classmethod
    async def connect(cls, address: Address, request_timeout_ms: int) -> "BrokerClient":
        """Connect to ``address`` (raises BrokerNotAvailable when nobody answers)."""
        connection = await asyncio.to_thread(Connection, address, request_timeout_ms=request_timeout_ms,
                                             connect_timeout_ms=request_timeout_ms)
        return cls(connection)

    @property
    def closed(self) -> bool:
        return self._connection.closed

    async def call(self, api_key: ApiKey, body: dict[str, Any], timeout_s: float | None = None) -> Response:
        """Send a request and await its response; a request-level error code raises."""
        response = await asyncio.wrap_future(self._connection.request(api_key, body, timeout_s=timeout_s))
        raise_for_code(int(response.body.get("error_code", 0)), str(response.body.get("error_message", "")))
        return response

    def close(self) -> None:
        self._connection.close()
