"""Routes decoded Kafka requests to their handlers and answers what it cannot route.

Every API has the version range ApiVersions advertises (:mod:`ember.protocol.kafka.api_versions`); a request
for another API or version gets UNSUPPORTED_VERSION and the connection stays open: ApiVersions gets
Kafka's own fallback (a v0 response listing what is supported, so the client retries with a version
both know), any other request a response header and the error code, since its body cannot be
shaped without a schema. A handler returns None when Kafka wants no response (acks=0). A handler
failing unexpectedly is logged and closes the connection (the client reconnects and retries);
expected failures are error codes inside the responses the handlers build.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping

from ember.errors import ErrorCode
from ember.protocol.kafka.codec import (
    KafkaRequest,
    build,
    encode_error_only,
    encode_response,
    encode_response_pieces,
    error_codes,
    frame_v0,
    response_class,
)
from ember.protocol.kafka.repeated_requests import RepeatedRequests
from ember.wire.api_keys import ApiKey
from ember.wire.reply import CloseConnection, FramePieces

if TYPE_CHECKING:
    from ember.metrics.requests import RequestObserver

log = logging.getLogger(__name__)

Handler = Callable[[KafkaRequest], Awaitable[Any | None]]


@dataclass(frozen=True)
class Api:
    min_version: int
    max_version: int
    handler: Handler
    #: The response built at once, or None when ``handler`` must answer (it waits, reads a file):
    #: an API that has it is answered as its request arrives on an idle connection
    #: (:mod:`ember.net.immediate`), the same response ``handler`` would build.
    now: Callable[[KafkaRequest], Any | None] | None = None


class KafkaDispatcher:
    def __init__(self, *families: Mapping[int, Api], observer: "RequestObserver | None" = None) -> None:
        self.apis: dict[int, Api] = {}
        for family in families:
            self.apis.update(family)
        #: With metrics on: counts the error codes of every response built here (the server
        #: only sees encoded bytes).
        self.observer = observer
        self._repeated = RepeatedRequests(self.serves)

    def supported(self) -> list[tuple[int, int, int]]:
        """(api key, min version, max version) of every API, as ApiVersions lists them."""
        return [(key, api.min_version, api.max_version) for key, api in sorted(self.apis.items())]

    def serves(self, api_key: int, api_version: int) -> bool:
        api = self.apis.get(api_key)
        return api is not None and api.min_version <= api_version <= api.max_version

    def answer_now(self, frame: memoryview) -> bytes | None:
        """The whole response frame to a request whose API answers at once (:attr:`Api.now`) and
        which it can answer now; None otherwise, and for anything unusual (an unsupported version,
        a malformed frame): the connection's task handles the frame again and answers that."""
        api = self.apis.get(int.from_bytes(frame[:2], "big"))
        if api is None or api.now is None:
            return None
        request = self._repeated.decode(frame)
        if request.body is None:
            return None
        response = api.now(request)
        if response is None:
            return None
        if self.observer is not None:
            self.observer.count_errors(request.api_key, error_codes(response))
        pieces = encode_response_pieces(request.correlation_id, response)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)   # type: ignore[return-value]

    async def __call__(self, request: KafkaRequest) -> bytes | FramePieces | None:
        if not self.serves(request.api_key, request.api_version):
            return self._unsupported(request)
        api = self.apis[request.api_key]
        try:
            response = await api.handler(request)
        except CloseConnection:
            raise
        except Exception as exc:
            log.exception("%s v%d from %r failed", _name(request.api_key), request.api_version, request.client_id)
            raise CloseConnection(f"{_name(request.api_key)} failed: {type(exc).__name__}: {exc}") from None
        if response is None:
            return None
        if isinstance(response, bytes):   # a body encoded by hand (Produce v0-2)
            self._count(request.api_key, ErrorCode.UNSUPPORTED_VERSION)
            return frame_v0(request.correlation_id, response)
        if self.observer is not None:
            self.observer.count_errors(request.api_key, error_codes(response))
        try:
            pieces = encode_response_pieces(request.correlation_id, response)
        except Exception as exc:          # a handler built a value its version cannot carry: a broker bug
            log.exception("%s v%d response cannot be encoded", _name(request.api_key), request.api_version)
            raise CloseConnection(f"{_name(request.api_key)} response cannot be encoded: {exc}") from None
        return pieces[0] if len(pieces) == 1 and isinstance(pieces[0], bytes) else tuple(pieces)

    def _count(self, api_key: int, code: int) -> None:
        if self.observer is not None:
            self.observer.count_errors(api_key, (code,))

    def _unsupported(self, request: KafkaRequest) -> bytes:
        log.info("answering UNSUPPORTED_VERSION to %s v%d from %r", _name(request.api_key),
                 request.api_version, request.client_id)
        self._count(request.api_key, ErrorCode.UNSUPPORTED_VERSION)
        if request.api_key == ApiKey.API_VERSIONS:
            response = build(response_class(ApiKey.API_VERSIONS, 0), {
                "error_code": ErrorCode.UNSUPPORTED_VERSION,
                "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in self.supported()]})
            return encode_response(request.correlation_id, response)
        return encode_error_only(request.correlation_id, ErrorCode.UNSUPPORTED_VERSION)


def _name(api_key: int) -> str:
    return ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else f"api key {api_key}"
