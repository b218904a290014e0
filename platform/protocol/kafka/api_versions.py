"""ApiVersions: exactly the APIs and versions this listener serves (the dispatcher's table)."""
from __future__ import annotations

from typing import Any, Callable

from ember.protocol.kafka.codec import KafkaRequest, build, response_class
from ember.protocol.kafka.dispatcher import Api
from ember.wire.api_keys import ApiKey
from ember.wire.reply import OK

Supported = Callable[[], list[tuple[int, int, int]]]


class ApiVersionsHandler:
    def __init__(self, supported: Supported) -> None:
        self.supported = supported

    def apis(self) -> dict[int, Api]:
        return {ApiKey.API_VERSIONS: Api(0, 4, self.api_versions)}

    async def api_versions(self, request: KafkaRequest) -> Any:
        keys = [{"api_key": key, "min_version": low, "max_version": high} for key, low, high in self.supported()]
        return build(response_class(ApiKey.API_VERSIONS, request.api_version), {**OK, "api_keys": keys})
