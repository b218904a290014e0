"""``BrokerServer`` is the network loop of both protocols; each protocol's server says how a SASL
listener authenticates, and a server without that refuses a SASL listener at once."""
from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest

from ember.net.server import BrokerServer
from ember.protocol.ember.listener import EmberServer
from ember.security.listener import ListenerSecurity
from ember.security.protocol import SecurityProtocol
from ember.security.sasl.credential_store import CredentialStore
from ember.security.sasl.server import SaslServerSettings
from ember.wire.frame import Request
from ember.wire.reply import Reply


async def _dispatch(request: Request) -> Reply | None:
    return None


def _sasl_listener() -> ListenerSecurity:
    settings = SaslServerSettings(("SCRAM-SHA-256",), cast(CredentialStore, object()))
    return ListenerSecurity("SASL", SecurityProtocol.SASL_PLAINTEXT, sasl=settings)


def test_a_server_without_a_sasl_exchange_refuses_a_sasl_listener_when_built():
    with pytest.raises(TypeError, match="cannot serve the SASL listener SASL"):
        BrokerServer(_dispatch, "127.0.0.1", 0, 1 << 20, 60_000, security=_sasl_listener())


def test_the_ember_protocol_server_answers_sasl_with_its_own_exchange():
    server: Any = EmberServer(_dispatch, "127.0.0.1", 0, 1 << 20, 60_000, security=_sasl_listener())
    assert server.authenticate is not None
    assert BrokerServer(_dispatch, "127.0.0.1", 0, 1 << 20, 60_000).security.sasl is None


@pytest.mark.parametrize("opening, named", [
    (b"GET / HTTP/1.0\r\nHost: x\r\n\r\n", "an HTTP request (GET ...) on listener EMBER, which speaks the ember protocol"),
    (b"srvr", "a ZooKeeper four-letter command (srvr) on listener EMBER"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "a TLS handshake on PLAINTEXT listener EMBER: the client uses TLS"),
])
def test_a_connection_opening_with_another_protocol_is_closed_with_a_line_naming_it(opening, named, caplog):
    """Not "frame of 1195725856 bytes exceeds the limit (raise max.message.bytes on the topic)":
    a browser, a ZooKeeper probe or a TLS client on the wrong port is named as what it is."""
    async def exchange() -> bytes:
        server = BrokerServer(_dispatch, "127.0.0.1", 0, 1 << 20, 60_000)
        await server.bind()
        await server.start_serving()
        assert server._server is not None
        port = server._server.sockets[0].getsockname()[1]
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(opening)
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            return answer
        finally:
            await server.close()

    caplog.set_level(logging.INFO, logger="ember.net.server")
    assert asyncio.run(exchange()) == b""
    lines = [r.getMessage() for r in caplog.records if "closing connection" in r.getMessage()]
    assert len(lines) == 1 and named in lines[0], lines
    assert "max.message.bytes" not in lines[0]
