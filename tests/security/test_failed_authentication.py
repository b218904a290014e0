"""A failed SASL authentication, in process on both listeners: its answer (and the close) waits
Kafka's ``connection.failed.authentication.delay.ms`` without holding up other connections, and a
client retrying bad credentials in a loop writes a bounded number of broker log lines."""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Iterator, cast

import pytest
from kafka_wire import KafkaWire
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from blocking_connection import BlockingConnection
from ember.errors import ErrorCode, InvalidConfig
from ember.ingest.broker_config import BrokerConfig
from ember.net.server import BrokerServer
from ember.protocol.ember.listener import EmberServer
from ember.protocol.kafka.api_versions import ApiVersionsHandler
from ember.protocol.kafka.dispatcher import KafkaDispatcher
from ember.protocol.kafka.handlers_sasl import SaslHandlers
from ember.protocol.kafka.listener import KafkaServer
from ember.security import log_limit
from ember.security.listener import ListenerSecurity
from ember.security.protocol import SecurityProtocol
from ember.security.sasl.credential_store import CredentialStore
from ember.security.sasl.server import SaslServerSettings
from ember.wire.api_keys import ApiKey
from ember.wire.frame import FRAME_LENGTH, Response, decode_response, encode_request
from ember.wire.reply import Reply

WAIT_S = 30.0
DELAY_MS = 600
WRONG = b"\0bob\0wrong password"


class _NoUsers:
    """A credential store without users: every PLAIN login fails as an unknown user."""

    def credential(self, user: str, mechanism: str) -> None:
        return None

    def decoy_key(self) -> bytes:
        return b"k" * 32


async def _ember_dispatch(request: Any) -> Reply | None:
    return Reply({"error_code": 0, "api_keys": []})


def _security(listener: str, delay_ms: int) -> ListenerSecurity:
    settings = SaslServerSettings(("PLAIN",), cast(CredentialStore, _NoUsers()), failed_authentication_delay_ms=delay_ms)
    return ListenerSecurity(listener, SecurityProtocol.SASL_PLAINTEXT, sasl=settings)


def _ember_server(delay_ms: int) -> BrokerServer:
    return EmberServer(_ember_dispatch, "127.0.0.1", 0, 1 << 20, 60_000, security=_security("EMBER", delay_ms))


def _kafka_server(delay_ms: int) -> BrokerServer:
    dispatcher = KafkaDispatcher(SaslHandlers().apis())
    dispatcher.apis.update(ApiVersionsHandler(dispatcher.supported).apis())
    return KafkaServer(dispatcher, "127.0.0.1", 0, 1 << 20, 60_000, security=_security("KAFKA", delay_ms))


@pytest.fixture
def serve() -> Iterator[Any]:
    """Runs servers on an event loop of their own thread; yields a function that starts one and
    returns its address."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    servers: list[BrokerServer] = []

    async def start(server: BrokerServer) -> str:
        await server.bind()
        await server.start_serving()
        return "127.0.0.1:%d" % server._server.sockets[0].getsockname()[1]   # type: ignore[union-attr]

    def serve(server: BrokerServer) -> str:
        servers.append(server)
        return asyncio.run_coroutine_threadsafe(start(server), loop).result(WAIT_S)

    yield serve
    for server in servers:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(WAIT_S)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(WAIT_S)
    loop.close()


class _EmberWire(BlockingConnection):
    def __init__(self, address: str) -> None:
        super().__init__(address, WAIT_S)

    def send(self, api_key: ApiKey, body: dict[str, Any], payload: bytes = b"") -> None:
        frame = encode_request(api_key, 0, self.next_correlation_id(), body, [payload] if payload else [])
        self.sock.sendall(b"".join(bytes(part) for part in frame))

    def receive(self) -> Response:
        (size,) = FRAME_LENGTH.unpack(self.exactly(FRAME_LENGTH.size))
        return decode_response(self.exactly(size))

    def call(self, api_key: ApiKey, body: dict[str, Any], payload: bytes = b"") -> Response:
        self.send(api_key, body, payload)
        return self.receive()


def test_a_failed_authentication_on_the_ember_listener_is_answered_after_the_delay_while_others_are_served(serve):
    address = serve(_ember_server(DELAY_MS))
    with _EmberWire(address) as failing, _EmberWire(address) as other:
        assert failing.call(ApiKey.SASL_HANDSHAKE, {"mechanism": "PLAIN"}).body["error_code"] == 0
        sent = time.monotonic()
        failing.send(ApiKey.SASL_AUTHENTICATE, {}, WRONG)
        assert other.call(ApiKey.API_VERSIONS, {}).body["error_code"] == 0   # served during the delay ...
        other_answered = time.monotonic()
        answer = failing.receive()
        answered = time.monotonic()
        assert answer.body["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert answered - sent >= 0.8 * DELAY_MS / 1000
        assert other_answered < answered                                    # ... before the failure's answer
        assert failing.is_closed_by_peer()


def test_a_failed_authentication_on_the_kafka_listener_is_answered_after_the_delay_while_others_are_served(serve):
    address = serve(_kafka_server(DELAY_MS))
    with KafkaWire(address) as failing, KafkaWire(address) as other:
        assert failing.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.NONE
        sent = time.monotonic()
        _, frame = failing.frame(SaslAuthenticateRequest(auth_bytes=WRONG))
        failing.send_raw(frame)
        versions = other.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        assert versions.error_code == ErrorCode.NONE                        # served during the delay ...
        other_answered = time.monotonic()
        failing.receive()
        answered = time.monotonic()
        assert answered - sent >= 0.8 * DELAY_MS / 1000
        assert other_answered < answered                                    # ... before the failure's answer
        assert failing.is_closed_by_peer()


def test_a_zero_delay_answers_a_failed_authentication_at_once(serve):
    address = serve(_ember_server(0))
    with _EmberWire(address) as failing:
        failing.call(ApiKey.SASL_HANDSHAKE, {"mechanism": "PLAIN"})
        answer = failing.call(ApiKey.SASL_AUTHENTICATE, {}, WRONG)
        assert answer.body["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert failing.is_closed_by_peer()


class _Clock:
    """Stands in for ``time`` in :mod:`ember.security.log_limit` (the event loop keeps the real one)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def _fail(address: str, user: bytes) -> None:
    with _EmberWire(address) as wire:
        wire.call(ApiKey.SASL_HANDSHAKE, {"mechanism": "PLAIN"})
        assert wire.call(ApiKey.SASL_AUTHENTICATE, {}, b"\0" + user + b"\0wrong").body["error_code"] == \
            ErrorCode.SASL_AUTHENTICATION_FAILED
        assert wire.is_closed_by_peer()   # the server has logged (or not) before it closed


def test_a_client_retrying_a_wrong_password_writes_a_bounded_number_of_log_lines(serve, caplog, monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(log_limit, "time", clock)
    caplog.set_level(logging.INFO, logger="ember.net.server")
    address = serve(_ember_server(0))
    for _ in range(30):
        _fail(address, b"bob")
    _fail(address, b"carol")                 # another user: its own line
    clock.now += 61                          # a minute later, bob's next failure logs again, with the count
    _fail(address, b"bob")
    lines = [r.getMessage() for r in caplog.records if "SASL authentication failed" in r.getMessage()]
    assert len(lines) == 3, lines
    assert "on listener EMBER: SASL authentication failed (PLAIN, user 'bob': unknown user or wrong password)" \
        in lines[0]
    assert "user 'carol'" in lines[1]
    assert lines[2].endswith("(29 more like this not logged since the last one)")
    assert "user 'bob'" in lines[2]


def test_the_delay_must_be_less_than_connections_max_idle_ms_as_in_kafka():
    assert BrokerConfig.from_properties().connection_failed_authentication_delay_ms == 100
    assert BrokerConfig.from_properties({"connection.failed.authentication.delay.ms": "0"}) \
        .connection_failed_authentication_delay_ms == 0
    with pytest.raises(InvalidConfig, match=r"connection.failed.authentication.delay.ms=5000 should always be less "
                                            r"than connections.max.idle.ms=5000"):
        BrokerConfig.from_properties({"connection.failed.authentication.delay.ms": "5000",
                                      "connections.max.idle.ms": "5000"})
    with pytest.raises(InvalidConfig, match="connection.failed.authentication.delay.ms"):
        BrokerConfig.from_properties({"connection.failed.authentication.delay.ms": "-1"})


def test_the_log_limiter_counts_the_lines_it_holds_back(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(log_limit, "time", clock)
    limiter = log_limit.LogLimiter(60.0, max_remembered=2)
    assert limiter.admit("a") == 0
    assert [limiter.admit("a") for _ in range(3)] == [None, None, None]
    clock.now += 60
    assert limiter.admit("a") == 3
    assert limiter.admit("b") == 0
    assert limiter.admit("c") == 0          # a third key: the limiter forgot the others (bounded memory)
    assert limiter.admit("a") == 0
    assert log_limit.suppressed_note(0) == ""


def test_a_client_leaving_during_the_delay_is_logged_as_the_failed_authentication_rate_limited(serve, caplog):
    caplog.set_level(logging.INFO, logger="ember.net.server")
    address = serve(_ember_server(5000))
    for _ in range(2):
        with _EmberWire(address) as wire:
            wire.call(ApiKey.SASL_HANDSHAKE, {"mechanism": "PLAIN"})
            wire.send(ApiKey.SASL_AUTHENTICATE, {}, WRONG)
    deadline = time.monotonic() + WAIT_S     # the server notices within a second (CLIENT_CHECK_S)
    while time.monotonic() < deadline and not any("SASL" in r.getMessage() for r in caplog.records):
        time.sleep(0.05)
    time.sleep(1.5)                          # the second client's leaving too
    lines = [r.getMessage() for r in caplog.records if r.name == "ember.net.server" and "closing" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "SASL authentication failed (PLAIN, user 'bob'" in lines[0]
