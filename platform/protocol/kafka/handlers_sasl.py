"""SaslHandshake (17) and SaslAuthenticate (36) as Kafka serves them.

On a SASL listener the server routes every request to :func:`authenticate` until the client has
authenticated: ApiVersions is answered, SaslHandshake picks the mechanism (an unknown one gets
UNSUPPORTED_SASL_MECHANISM with the enabled list, then the connection closes), SaslAuthenticate
runs the mechanism's steps (a failure gets SASL_AUTHENTICATION_FAILED with Kafka's message, then
the connection closes), and any other request closes the connection unanswered, as Kafka's
SaslServerAuthenticator does. After SaslHandshake v0 (clients older than Kafka 1.0) the tokens
travel as bare length-prefixed frames instead of SaslAuthenticate, and a failure just closes the
connection, as in Kafka. With ``connections.max.reauth.ms`` (KIP-368) SaslAuthenticate v1+ announces
the session lifetime and a SaslHandshake after authentication starts a re-authentication (served
here again; v0 clients cannot re-authenticate, so their sessions do not expire, as in Kafka).
Otherwise, after authentication or on a listener without SASL, both APIs answer ILLEGAL_SASL_STATE.
Describe/AlterUserScramCredentials manage the credentials (:mod:`ember.security.sasl.scram_admin`).
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from ember.errors import EmberError, ErrorCode
from ember.ingest.core import BrokerCore
from ember.protocol.kafka.codec import FRAME_LENGTH, KafkaRequest, build, encode_response, response_class
from ember.protocol.kafka.dispatcher import Api
from ember.security.authorizer.model import Operation
from ember.security.sasl.scram_admin import Upsertion
from ember.security.sasl.server import RawSaslToken, SaslServer
from ember.wire.api_keys import ApiKey
from ember.wire.reply import CloseConnection, error_fields

#: Kafka's DescribeClientQuotas (ember's protocol has no such API).
DESCRIBE_CLIENT_QUOTAS = 48
HANDSHAKE_VERSIONS = (0, 1)
AUTHENTICATE_VERSIONS = (0, 2)


async def authenticate(request: KafkaRequest | RawSaslToken, sasl: SaslServer,
                       dispatch: Callable[[KafkaRequest], Awaitable[bytes | None]]) -> bytes | None:
    """The answer to ``request`` on a SASL listener while ``sasl`` is not complete."""
    if isinstance(request, RawSaslToken):   # after SaslHandshake v0: bare tokens both ways
        try:
            token = await sasl.authenticate(request.token, expiring=False)
        except EmberError as exc:   # v0 has no way to say why: the connection just closes, as in Kafka
            raise CloseConnection(sasl.close_reason or str(exc)) from None
        return FRAME_LENGTH.pack(len(token)) + token
    key = request.api_key
    if key == ApiKey.API_VERSIONS or (key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
                                      and request.body is None):
        return await dispatch(request)   # ApiVersions, or a version not served: UNSUPPORTED_VERSION
    if key == ApiKey.SASL_HANDSHAKE:
        if sasl.renews is not None and request.api_version == 0:
            sasl.close_reason = "SaslHandshake v0 cannot re-authenticate (Kafka needs v1)"
            return _encode(request, {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []})
        code = sasl.handshake(request.body.mechanism)
        sasl.raw = request.api_version == 0 and code == ErrorCode.NONE
        return _encode(request, {"error_code": code, "mechanisms": list(sasl.settings.mechanisms)})
    if key == ApiKey.SASL_AUTHENTICATE:
        try:
            token = await sasl.authenticate(bytes(request.body.auth_bytes), expiring=request.api_version >= 1)
        except EmberError as exc:
            return _encode(request, {"error_code": exc.code, "error_message": str(exc), "auth_bytes": b""})
        return _encode(request, {"error_code": ErrorCode.NONE, "error_message": None, "auth_bytes": token,
                                 "session_lifetime": sasl.session_lifetime_ms})
    name = ApiKey(key).name if key in ApiKey._value2member_map_ else f"api key {key}"
    if sasl.renews is not None:
        raise CloseConnection(f"{name} v{request.api_version} {sasl.interrupted}")
    raise CloseConnection(f"{name} v{request.api_version} {sasl.interrupted}; Kafka clients "
                          f"need security.protocol=SASL_SSL or SASL_PLAINTEXT and sasl.mechanism here")


def _encode(request: KafkaRequest, values: dict[str, Any]) -> bytes:
    return encode_response(request.correlation_id, build(response_class(request.api_key, request.api_version), values))


class SaslHandlers:
    """The two APIs outside an authentication (listed by ApiVersions on every listener, as in Kafka)."""

    def apis(self) -> dict[int, Api]:
        return {ApiKey.SASL_HANDSHAKE: Api(*HANDSHAKE_VERSIONS, self.handshake),
                ApiKey.SASL_AUTHENTICATE: Api(*AUTHENTICATE_VERSIONS, self.authenticate)}

    async def handshake(self, request: KafkaRequest) -> Any:
        return build(response_class(request.api_key, request.api_version),
                     {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []})

    async def authenticate(self, request: KafkaRequest) -> Any:
        return build(response_class(request.api_key, request.api_version), {
            "error_code": ErrorCode.ILLEGAL_SASL_STATE, "auth_bytes": b"",
            "error_message": "SaslAuthenticate on a connection that is not authenticating: the listener has no "
                             "SASL, or the client has already authenticated (re-authentication needs connections.max.reauth.ms)"})


class ScramCredentialHandlers:
    """DescribeUserScramCredentials and AlterUserScramCredentials (``kafka-configs --entity-type
    users``), and DescribeClientQuotas, which ``kafka-configs --describe --entity-type users`` asks
    first: ember has no client quotas, so it lists none."""

    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    def apis(self) -> dict[int, Api]:
        return {ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: Api(0, 0, self.describe),
                ApiKey.ALTER_USER_SCRAM_CREDENTIALS: Api(0, 0, self.alter),
                DESCRIBE_CLIENT_QUOTAS: Api(0, 1, self.describe_quotas)}

    async def describe_quotas(self, request: KafkaRequest) -> Any:
        return build(response_class(request.api_key, request.api_version),
                     {"error_code": ErrorCode.NONE, "error_message": None, "entries": []})

    async def describe(self, request: KafkaRequest) -> Any:
        """Kafka asks Describe on the cluster."""
        cls = response_class(request.api_key, request.api_version)
        try:
            self.core.access.check_cluster(Operation.DESCRIBE)
        except EmberError as exc:
            return build(cls, {**error_fields(exc), "results": []})
        users = [u.name for u in request.body.users] if request.body.users else None
        results = await asyncio.to_thread(self.core.scram.describe, users)
        return build(cls, {"error_code": ErrorCode.NONE, "error_message": None, "results": results})

    async def alter(self, request: KafkaRequest) -> Any:
        """Kafka asks Alter on the cluster; a refusal is every user's result."""
        body = request.body
        cls = response_class(request.api_key, request.api_version)
        upsertions = [Upsertion(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
                      for u in body.upsertions]
        deletions = [(d.name, d.mechanism) for d in body.deletions]
        try:
            self.core.access.check_cluster(Operation.ALTER)
        except EmberError as exc:
            users = dict.fromkeys([name for name, _ in deletions] + [u.name for u in upsertions])
            return build(cls, {"results": [{"user": user, **error_fields(exc)} for user in users]})
        results = await asyncio.to_thread(self.core.scram.alter, upsertions, deletions)
        return build(cls, {"results": results})
