"""One broker's metrics endpoint: its registry, collectors, probes and HTTP routes.

``GET /metrics``: Prometheus text (or OpenMetrics, as the scraper asks); ``GET /livez``: 200
while the event loop answers; ``GET /readyz``: 200 when ready, 503 with the reasons otherwise
(``ember.server.health``). Started right after the data directory is locked, so liveness and
"not ready: starting up" are visible during a long log recovery; closed last on shutdown.
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Mapping

from prometheus_client.exposition import choose_encoder

from ember.metrics.broker_metrics import BrokerMetrics
from ember.metrics.endpoint import HttpEndpoint
from ember.metrics.probes import Probes
from ember.metrics.requests import RequestMetrics
from ember.server.cleaner_metrics import LogCleanerCollector
from ember.server.lag import GroupLagCollector
from ember.server.state import BrokerStateCollector

if TYPE_CHECKING:
    from ember.ingest.log_cleaner import LogCleaner
    from ember.ingest.partition import Partition
    from ember.server.broker import Broker

log = logging.getLogger(__name__)

LAG_TIMEOUT_S = 3.0
JSON = "application/json"


class MetricsService:
    def __init__(self, broker: "Broker", host: str, port: int) -> None:
        self.broker = broker
        self.metrics = BrokerMetrics()
        #: Request counts and times, one observer per listener (the broker hands them to its servers).
        self.request_metrics = request_metrics = RequestMetrics()
        self.state = BrokerStateCollector(broker)
        self.lag = GroupLagCollector(broker.groups, broker.cache, self._partitions, LAG_TIMEOUT_S,
                                     broker.inter_broker)
        self.metrics.register(request_metrics)
        self.metrics.register(self.state)
        self.metrics.register(self.lag)
        self.probes = Probes(self.metrics, broker.session)
        self.endpoint = HttpEndpoint(host, port, {"/metrics": self._metrics, "/livez": self._live,
                                                  "/readyz": self._ready})

    def watch_cleaner(self, cleaner: "LogCleaner") -> None:
        """Serve the log cleaner's metrics (it starts after the endpoint)."""
        self.metrics.register(LogCleanerCollector(cleaner))

    def _partitions(self) -> Mapping[tuple[str, int], "Partition"]:
        return self.broker.replicas.partitions if self.broker.replicas is not None else {}

    async def start(self) -> None:
        await self.endpoint.start()
        self.probes.start()

    async def close(self) -> None:
        await self.probes.close()
        await self.endpoint.close()
        self.lag.close()

    async def _metrics(self, headers: Mapping[str, str]) -> tuple[int, str, bytes]:
        try:
            await asyncio.wait_for(self.lag.refresh(), 2 * LAG_TIMEOUT_S)
        except Exception as exc:   # lag is one family among many: serve the rest, last lag values
            log.warning("consumer group lag not refreshed for this scrape: %s", exc)
        encoder, content_type = choose_encoder(headers.get("accept", ""))
        return 200, content_type, encoder(self.metrics.registry)

    async def _live(self, _headers: Mapping[str, str]) -> tuple[int, str, bytes]:
        return 200, JSON, b'{"live": true}\n'

    async def _ready(self, _headers: Mapping[str, str]) -> tuple[int, str, bytes]:
        readiness = self.state.readiness()
        return (200 if readiness.ready else 503), JSON, json.dumps(readiness.to_json()).encode() + b"\n"
