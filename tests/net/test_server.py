"""``BrokerServer`` is the network loop of both protocols; each protocol's server says how a SASL
listener authenticates, and a server without that refuses a SASL listener at once."""
from __future__ import annotations

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
