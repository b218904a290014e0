"""ApiVersions: exactly the APIs and versions this listener serves (the dispatcher's table), and
the feature levels: ``transaction.version`` finalized at 2, so Kafka 4 clients run transactions
by KIP-890 part 2 (an epoch bump at every EndTxn, partitions added by their leaders). The levels
are the same on every broker and never change, so their epoch is a constant."""
from __future__ import annotations

from typing import Any, Callable

from ember.protocol.kafka.codec import KafkaRequest, build, response_class
from ember.protocol.kafka.dispatcher import Api
from ember.wire.api_keys import ApiKey
from ember.wire.reply import OK

Supported = Callable[[], list[tuple[int, int, int]]]

#: Feature name -> (lowest supported, highest supported, finalized level).
FEATURES = {"transaction.version": (0, 2, 2)}
#: Clients take finalized levels only from an epoch above the last they saw (-1: none).
FINALIZED_FEATURES_EPOCH = 1
#: Before v4, supported features whose lowest level is 0 are left out (Kafka's rule).
ZERO_MIN_FEATURES_SINCE = 4


class ApiVersionsHandler:
    def __init__(self, supported: Supported) -> None:
        self.supported = supported

    def apis(self) -> dict[int, Api]:
        return {ApiKey.API_VERSIONS: Api(0, 4, self.api_versions)}

    async def api_versions(self, request: KafkaRequest) -> Any:
        keys = [{"api_key": key, "min_version": low, "max_version": high} for key, low, high in self.supported()]
        supported = [{"name": name, "min_version": low, "max_version": high}
                     for name, (low, high, _) in FEATURES.items()
                     if low > 0 or request.api_version >= ZERO_MIN_FEATURES_SINCE]
        finalized = [{"name": name, "min_version_level": level, "max_version_level": level}
                     for name, (_, _, level) in FEATURES.items()]
        return build(response_class(ApiKey.API_VERSIONS, request.api_version),
                     {**OK, "api_keys": keys, "supported_features": supported,
                      "finalized_features_epoch": FINALIZED_FEATURES_EPOCH, "finalized_features": finalized})
