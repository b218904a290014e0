"""SASL authentication on ember's protocol: a new connection's, before its reader thread starts,
and a re-authentication on a connection in use (:func:`exchange` over the connection's requests).

SASL_HANDSHAKE names the mechanism, then SASL_AUTHENTICATE carries the mechanism's tokens as
payloads until it completes (docs/protocol.md); the last answer carries the session lifetime
(Kafka's ``connections.max.reauth.ms``, 0: none). Every wait is bounded by the connect timeout.
A refusal is :class:`~ember.errors.SaslAuthenticationFailed` naming the broker, the mechanism
and the user and saying what to check; the password never appears in any message.
"""
from __future__ import annotations

import select
import time
from typing import Any, Callable

from ember.errors import BrokerNotAvailable, ErrorCode, SaslAuthenticationFailed, UnsupportedSaslMechanism, error_for_code
from ember.net.channel import Address, PlainChannel
from ember.security.client import ClientSecurity
from ember.security.sasl.client import SaslClient
from ember.wire.api_keys import ApiKey
from ember.wire.frame import FRAME_LENGTH, Response, check_frame_size, decode_response, encode_request

_CHUNK = 64 * 1024
#: A SASL answer is small; anything bigger is not an answer to it.
_MAX_FRAME = 1 << 20

#: Sends one request and waits for its response: ``call(api_key, body, payload)``.
Call = Callable[[ApiKey, dict[str, Any], bytes], Response]


def authenticate(channel: PlainChannel, address: Address, security: ClientSecurity, timeout_s: float) -> int:
    """Authenticate ``channel`` (just connected to ``address``) as ``security`` says; the session
    lifetime in milliseconds (0: the session lasts as long as the connection)."""
    name = f"{address[0]}:{address[1]}"
    return exchange(_Exchange(channel, name, time.monotonic() + timeout_s).call, name, security)


def exchange(call: Call, name: str, security: ClientSecurity) -> int:
    """SaslHandshake then SaslAuthenticate steps through ``call`` with broker ``name``; the
    session lifetime it announces (ms, 0: none). Raises SaslAuthenticationFailed on a refusal."""
    mechanism, username, password = security.sasl_login()
    response = call(ApiKey.SASL_HANDSHAKE, {"mechanism": mechanism}, b"")
    code = int(response.body.get("error_code", 0))
    if code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
        raise UnsupportedSaslMechanism(
            f"broker {name}'s listener does not enable SASL mechanism {mechanism}; it enables "
            f"{', '.join(response.body.get('mechanisms', []))}: set {security.setting('sasl_mechanism')} to one of them")
    if code == ErrorCode.ILLEGAL_SASL_STATE:
        raise SaslAuthenticationFailed(
            f"broker {name}'s listener does not use SASL: set "
            f"{security.setting('security_protocol', 'SSL' if security.uses_tls else 'PLAINTEXT')} "
            f"(or connect to its SASL listener)")
    if code != ErrorCode.NONE:
        raise error_for_code(code, str(response.body.get("error_message", "")))
    client = SaslClient(mechanism, username, password)
    token: bytes | None = client.first()
    while token is not None:
        response = call(ApiKey.SASL_AUTHENTICATE, {}, token)
        code = int(response.body.get("error_code", 0))
        if code != ErrorCode.NONE:
            raise SaslAuthenticationFailed(
                f"SASL authentication with broker {name} failed (mechanism {mechanism}, user {username!r}): "
                f"{response.body.get('error_message', ErrorCode(code).name)}; check the user name and password, and "
                f"that the user has {mechanism} credentials (ember users list; ember users add; docs/security.md#sasl)")
        token = client.respond(bytes(response.payload))
    return int(response.body.get("session_lifetime_ms", 0))


class _Exchange:
    """Blocking request/response on a channel no other thread uses yet."""

    def __init__(self, channel: PlainChannel, name: str, deadline: float) -> None:
        self.channel, self.name, self.deadline = channel, name, deadline
        self._poller = select.poll()
        self._poller.register(channel.sock, select.POLLIN)
        self._correlation = 0

    def call(self, api_key: ApiKey, body: dict[str, Any], payload: bytes = b"") -> Response:
        self._correlation += 1
        self.channel.send(encode_request(api_key, 0, self._correlation, body, [payload] if payload else []))
        buffer, chunk = bytearray(), memoryview(bytearray(_CHUNK))
        while True:
            if len(buffer) >= FRAME_LENGTH.size:
                (size,) = FRAME_LENGTH.unpack_from(buffer)
                check_frame_size(size, _MAX_FRAME)
                if len(buffer) >= FRAME_LENGTH.size + size:
                    return decode_response(bytes(buffer[FRAME_LENGTH.size:FRAME_LENGTH.size + size]))
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerNotAvailable(f"broker {self.name} did not answer {api_key.name} in time; closed the "
                                         f"connection")
            if not self.channel.buffered() and not self._poller.poll(remaining * 1000):
                continue
            count = self.channel.recv_into(chunk)
            if count == 0:
                raise ConnectionResetError(f"broker {self.name} closed the connection during {api_key.name}")
            if count:
                buffer += chunk[:count]
