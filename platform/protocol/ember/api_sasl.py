"""SASL on ember's protocol: Kafka's two steps as ember APIs (docs/protocol.md).

``SASL_HANDSHAKE`` (17) ``{"mechanism"}`` → ``{"error_code", "mechanisms"}``; then
``SASL_AUTHENTICATE`` (36) with the client's SASL bytes as the payload → the server's bytes as the
payload, until the mechanism completes; the last answer's ``session_lifetime_ms`` is Kafka's
``connections.max.reauth.ms`` (0: the session does not expire), and a SASL_HANDSHAKE after
authentication then starts a re-authentication on the same connection (KIP-368). Before
authentication, only ApiVersions is served: any other request gets SASL_AUTHENTICATION_FAILED
saying what to configure, and the connection closes (Kafka closes without a word; ember's own
clients deserve the reason). Without ``connections.max.reauth.ms``, both APIs answer
ILLEGAL_SASL_STATE after authentication. DESCRIBE/ALTER_USER_SCRAM_CREDENTIALS (50, 51) are
Kafka's APIs of the same numbers, for ``ember users``.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Any, Awaitable, Callable

from ember.errors import EmberError, IllegalSaslState, InvalidRequest, SaslAuthenticationFailed
from ember.protocol.ember.dispatcher import Handler
from ember.security.authorizer.access import Access
from ember.security.authorizer.model import Operation
from ember.security.sasl.scram_admin import ScramAdmin, Upsertion
from ember.security.sasl.server import SaslServer
from ember.security.session import current_session
from ember.wire import fields
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Request
from ember.wire.reply import OK, Reply, error_fields


async def authenticate(request: Request, sasl: SaslServer,
                       dispatch: Callable[[Request], Awaitable[Reply | None]]) -> Reply | None:
    """The answer to ``request`` on a SASL listener while ``sasl`` is not complete."""
    if request.api_key == ApiKey.API_VERSIONS:
        return await dispatch(request)
    if request.api_key == ApiKey.SASL_HANDSHAKE:
        code = sasl.handshake(str(request.body.get("mechanism", "")))
        return Reply({"error_code": int(code), "mechanisms": list(sasl.settings.mechanisms)})
    if request.api_key == ApiKey.SASL_AUTHENTICATE:
        try:
            token = await sasl.authenticate(bytes(request.payload))
        except EmberError as exc:
            return Reply(error_fields(exc))
        return Reply({**OK, "session_lifetime_ms": sasl.session_lifetime_ms}, [token])
    name = ApiKey(request.api_key).name if request.api_key in ApiKey._value2member_map_ else str(request.api_key)
    session = current_session()
    protocol = session.security_protocol.value if session is not None else "SASL"
    sasl.close_reason = f"{name} {sasl.interrupted}"
    return Reply(error_fields(SaslAuthenticationFailed(
        f"this listener ({protocol}) requires SASL authentication before any request: set "
        f"security_protocol={protocol!r}, sasl_mechanism (one of {', '.join(sasl.settings.mechanisms)}), "
        f"sasl_plain_username and sasl_plain_password (docs/security.md#sasl)")))


class SaslApis:
    """The SASL APIs after authentication (they are listed by ApiVersions)."""

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.SASL_HANDSHAKE: self._again, ApiKey.SASL_AUTHENTICATE: self._again}

    async def _again(self, request: Request) -> Reply:
        raise IllegalSaslState(f"{ApiKey(request.api_key).name} on a connection that is not authenticating: "
                               f"either the listener has no SASL or the client has already authenticated "
                               f"(re-authentication needs connections.max.reauth.ms)")


class ScramCredentialApis:
    """Kafka's Describe/AlterUserScramCredentials as ember APIs (``ember users``); salts and salted
    passwords travel as base64 in the JSON body. Like Kafka, they need Describe / Alter on the cluster."""

    def __init__(self, admin: ScramAdmin, access: Access) -> None:
        self.admin, self.access = admin, access

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe,
                ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.alter}

    async def describe(self, request: Request) -> Reply:
        self.access.check_cluster(Operation.DESCRIBE)
        users = fields.strings(request.body, "users", None)
        return Reply({**OK, "results": await asyncio.to_thread(self.admin.describe, users)})

    async def alter(self, request: Request) -> Reply:
        self.access.check_cluster(Operation.ALTER)
        upsertions = [Upsertion(fields.string(u, "name"), fields.integer(u, "mechanism"),
                                fields.integer(u, "iterations"), _b64(u, "salt"), _b64(u, "salted_password"))
                      for u in fields.objects(request.body, "upsertions", [])]
        deletions = [(fields.string(d, "name"), fields.integer(d, "mechanism"))
                     for d in fields.objects(request.body, "deletions", [])]
        return Reply({**OK, "results": await asyncio.to_thread(self.admin.alter, upsertions, deletions)})


def _b64(entry: dict[str, Any], name: str) -> bytes:
    try:
        return base64.b64decode(fields.string(entry, name), validate=True)
    except binascii.Error:
        raise InvalidRequest(f"{name} must be base64") from None
