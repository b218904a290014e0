"""SASL on ember's protocol: Kafka's two steps as ember APIs (docs/protocol.md).

``SASL_HANDSHAKE`` (17) ``{"mechanism"}`` → ``{"error_code", "mechanisms"}``; then
``SASL_AUTHENTICATE`` (36) with the client's SASL bytes as the payload → the server's bytes as the
payload, until the mechanism completes. Before that, only ApiVersions is served: any other request
gets SASL_AUTHENTICATION_FAILED saying what to configure, and the connection closes (Kafka closes
without a word; ember's own clients deserve the reason). After authentication both APIs answer
ILLEGAL_SASL_STATE (no re-authentication).
"""
from __future__ import annotations

from typing import Awaitable, Callable

from ember.errors import EmberError, IllegalSaslState, SaslAuthenticationFailed
from ember.protocol.ember.dispatcher import Handler
from ember.protocol.ember.reply import OK, Reply, error_fields
from ember.protocol.ember.wire import ApiKey, Request
from ember.security.sasl_server import SaslServer
from ember.security.session import current_session


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
        return Reply(dict(OK), [token])
    name = ApiKey(request.api_key).name if request.api_key in ApiKey._value2member_map_ else str(request.api_key)
    session = current_session()
    protocol = session.security_protocol.value if session is not None else "SASL"
    sasl.close_reason = f"{name} sent before SASL authentication"
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
                               f"either the listener has no SASL or the client has already authenticated")
