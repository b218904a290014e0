"""Routes decoded requests to API handlers and turns every failure into a typed error response.

Handlers raise ``ember.errors`` exceptions for request-level failures and read fields through
``ember.wire.fields``, so malformed field values (missing keys, wrong types, out-of-range
numbers) are INVALID_REQUEST; unknown API keys or versions become UNSUPPORTED_VERSION. Any other
exception is a broker bug: UNKNOWN_SERVER_ERROR, logged with its trace. A handler returns None
when the protocol wants no response (acks=0).
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping

from ember.errors import ErrorCode, UnsupportedVersion
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Request
from ember.wire.reply import CloseConnection, Reply, error_fields

Handler = Callable[[Request], Awaitable[Reply | None]]

SUPPORTED_VERSION = 0


class Dispatcher:
    def __init__(self, *families: Mapping[ApiKey, Handler]) -> None:
        self.handlers: dict[int, Handler] = {ApiKey.API_VERSIONS: self.api_versions}
        for family in families:
            self.handlers.update(family.items())

    async def __call__(self, request: Request) -> Reply | None:
        handler = self.handlers.get(request.api_key)
        try:
            if handler is None:
                name = ApiKey(request.api_key).name if request.api_key in ApiKey._value2member_map_ \
                    else f"api key {request.api_key}"
                raise UnsupportedVersion(f"this broker does not implement {name}")
            if request.api_version != SUPPORTED_VERSION:
                raise UnsupportedVersion(f"{ApiKey(request.api_key).name} version {request.api_version} "
                                         f"is not supported (only {SUPPORTED_VERSION})")
            return await handler(request)
        except CloseConnection:
            raise
        except Exception as exc:
            return Reply(error_fields(exc))

    async def api_versions(self, _request: Request) -> Reply:
        apis: list[dict[str, Any]] = [{"api_key": int(key), "min_version": SUPPORTED_VERSION,
                                       "max_version": SUPPORTED_VERSION} for key in sorted(self.handlers)]
        return Reply({"error_code": int(ErrorCode.NONE), "apis": apis})
