"""Requests from the transaction machinery to other brokers over ember's protocol (markers to
leaders; verification, partitions and groups added at coordinators): one connection per broker on its
inter-broker listener, kept between requests and dropped when it fails.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from ember.cluster.metadata_cache import MetadataCache
from ember.errors import BrokerNotAvailable, EmberError, NetworkError, RequestTimedOut, error_for_code
from ember.ingest.broker_client import BrokerClient, InterBroker
from ember.ingest.transactions.state import Partition
from ember.wire.api_keys import ApiKey

Results = dict[Partition, Optional[Exception]]


class Peers:
    def __init__(self, cache: MetadataCache, inter_broker: InterBroker, request_timeout_ms: int = 30000) -> None:
        self.cache = cache
        self.inter_broker = inter_broker
        self.request_timeout_ms = request_timeout_ms
        self._clients: dict[int, BrokerClient] = {}

    async def call(self, broker_id: int, api_key: ApiKey, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """Send ``body`` to ``broker_id``; the response's body, or the request-level error (no
        connection: BROKER_NOT_AVAILABLE; both retriable)."""
        try:
            client = await self._client(broker_id)
            response = await client.call(api_key, body, timeout_s=self.request_timeout_ms / 1000)
        except (NetworkError, RequestTimedOut):
            # the connection failed (an error code in a response, CONCURRENT_TRANSACTIONS at every
            # transaction version 2 boundary, keeps it: other requests share it)
            self._drop(broker_id)
            raise
        except (OSError, TimeoutError) as exc:
            self._drop(broker_id)
            raise BrokerNotAvailable(f"broker {broker_id}: {exc}") from exc
        return response.body

    async def partition_call(self, broker_id: int, api_key: ApiKey, body: Mapping[str, Any],
                             partitions: list[Partition]) -> Results:
        """Send ``body`` to ``broker_id``; each partition's answer from the response's
        ``partitions`` (a retriable request-level failure, or no connection, is every partition's
        answer; a partition left unanswered gets an error too)."""
        try:
            answer = await self.call(broker_id, api_key, body)
        except EmberError as exc:
            if exc.retriable:
                return {p: exc for p in partitions}
            raise
        answers = {(str(a["topic"]), int(a["partition"])): _error(a) for a in answer.get("partitions", [])}
        return {p: answers.get(p, BrokerNotAvailable(f"broker {broker_id} did not answer for {p[0]}-{p[1]}"))
                for p in partitions}

    async def _client(self, broker_id: int) -> BrokerClient:
        client = self._clients.get(broker_id)
        if client is not None and not client.closed:
            return client
        address = self.inter_broker.address(self.cache.brokers().get(broker_id))
        if address is None:
            raise BrokerNotAvailable(f"broker {broker_id} is not live")
        client = await self.inter_broker.connect(address, self.request_timeout_ms)
        self._clients[broker_id] = client
        return client

    def _drop(self, broker_id: int) -> None:
        client = self._clients.pop(broker_id, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        for broker_id in list(self._clients):
            self._drop(broker_id)


def _error(answer: Mapping[str, Any]) -> Optional[Exception]:
    code = int(answer.get("error_code", 0))
    return error_for_code(code, str(answer.get("error_message") or "")) if code else None
