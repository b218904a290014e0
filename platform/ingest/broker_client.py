"""Requests one broker sends another (follower fetches, leader-epoch queries), from asyncio.

Wraps the client :class:`~ember.net.connection.Connection` (pipelined, correlation-matched,
its own reader thread) so replica fetchers reuse the client network layer instead of a second
protocol implementation: connecting runs on a thread, responses arrive as awaitable futures.
:class:`InterBroker` says where and how: each broker's ``inter.broker.listener.name`` listener,
with this broker's TLS client settings for it.
"""
from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, field
from typing import Any, Mapping

from ember.cluster.records import BrokerInfo
from ember.ingest.listeners import EMBER_LISTENER
from ember.net.channel import Address
from ember.net.connection import Connection
from ember.security.client import ClientSecurity
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Response, response_error


class BrokerClient:
    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    @property
    def closed(self) -> bool:
        return self._connection.closed

    async def call(self, api_key: ApiKey, body: Mapping[str, Any], timeout_s: float | None = None) -> Response:
        """Send a request and await its response; a request-level error code raises. A request
        that first re-authenticates (``connections.max.reauth.ms``) is sent from a worker thread,
        so waiting for the SASL answers never holds up the broker's event loop."""
        renew = self._connection.renewal_due     # decided once: on the loop it must never renew
        send = functools.partial(self._connection.request, api_key, body, timeout_s=timeout_s, may_renew=renew)
        sent = await asyncio.to_thread(send) if renew else send()
        response = await asyncio.wrap_future(sent)
        error = response_error(response.body)
        if error is not None:
            raise error
        return response

    def close(self) -> None:
        self._connection.close()


@dataclass(frozen=True)
class InterBroker:
    """How this broker reaches the others: the listener ``listener`` of each, secured as ``security``."""
    listener: str = EMBER_LISTENER
    security: ClientSecurity = field(default_factory=ClientSecurity)

    def address(self, info: BrokerInfo | None) -> Address | None:
        """Where ``info``'s broker serves the inter-broker listener (None: unknown broker)."""
        return info.endpoint(self.listener) if info is not None else None

    async def connect(self, address: Address, request_timeout_ms: int) -> BrokerClient:
        """Connect to ``address`` (raises BrokerNotAvailable when nobody answers,
        SslAuthenticationFailed when TLS cannot be set up)."""
        connection = await asyncio.to_thread(Connection, address, request_timeout_ms=request_timeout_ms,
                                             connect_timeout_ms=request_timeout_ms, security=self.security)
        return BrokerClient(connection)
