"""Request metrics of one listener, taken in one place: the server's connection loop.

Per request: a count, the error codes of its response (the request-level ``error_code`` and
each entry's, e.g. per partition, as Kafka counts them), and two times: local (the handler,
including acks=all and long-poll waits) and total (until the response is written). Response send
time is their difference (``_sum`` minus ``_sum``), so it gets no histogram of its own: every
histogram is a dozen lines per API in every scrape. The work is a few dict lookups and
``inc``/``observe`` calls per request, whatever it carries.
"""
from __future__ import annotations

import time
from typing import Any, Iterator

from ember.errors import ErrorCode
from ember.ingest.protocol import ApiKey
from ember.ingest.reply import Reply
from ember.metrics.broker_metrics import BrokerMetrics


def request_name(api_key: int) -> str:
    """Kafka's spelling of an API name (``ListOffsets``), as its ``request`` label has it."""
    if api_key not in ApiKey._value2member_map_:
        return f"Unknown{api_key}"
    return "".join(word.capitalize() for word in ApiKey(api_key).name.split("_"))


def error_name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else f"UNKNOWN_{code}"


def error_codes(body: dict[str, Any]) -> Iterator[int]:
    """Non-zero error codes of a response: its own and those of the entries of its lists."""
    code = body.get("error_code", 0)
    if code:
        yield code
    for value in body.values():
        if isinstance(value, list):
            for entry in value:
                if isinstance(entry, dict):
                    code = entry.get("error_code", 0)
                    if code:
                        yield code


class RequestObserver:
    """Counts and times the requests of one listener (``ember`` now; a Kafka listener gets its own)."""

    def __init__(self, metrics: BrokerMetrics, listener: str) -> None:
        self.metrics = metrics
        self.listener = listener
        self.in_flight = metrics.requests_in_flight.labels(listener)
        self._families: dict[int, tuple[Any, Any, Any]] = {}
        self._errors: dict[tuple[int, int], Any] = {}

    def start(self, api_key: int) -> "RequestTimer":
        return RequestTimer(self, api_key)

    def family(self, api_key: int) -> tuple[Any, Any, Any]:
        """(requests, total, local) children of one API, resolved once."""
        family = self._families.get(api_key)
        if family is None:
            labels = (self.listener, request_name(api_key))
            m = self.metrics
            family = self._families[api_key] = (m.requests.labels(*labels), m.total_time.labels(*labels),
                                                m.local_time.labels(*labels))
        return family

    def count_errors(self, api_key: int, body: dict[str, Any]) -> None:
        for code in error_codes(body):
            child = self._errors.get((api_key, code))
            if child is None:
                child = self._errors[(api_key, code)] = self.metrics.errors.labels(
                    self.listener, request_name(api_key), error_name(code))
            child.inc()


class RequestTimer:
    """One request on its way through the server: ``handled`` when the handler returned, ``done``
    (always, also when the connection broke) after the response was written."""

    __slots__ = ("observer", "api_key", "started", "handled_at")

    def __init__(self, observer: RequestObserver, api_key: int) -> None:
        self.observer = observer
        self.api_key = api_key
        self.handled_at = 0.0
        observer.in_flight.inc()
        self.started = time.perf_counter()

    def handled(self, reply: Reply | None) -> None:
        self.handled_at = time.perf_counter()
        if reply is not None:
            self.observer.count_errors(self.api_key, reply.body)

    def done(self) -> None:
        self.observer.in_flight.dec()
        requests, total, local = self.observer.family(self.api_key)
        requests.inc()
        if not self.handled_at:
            return   # the handler closed the connection (failed acks=0 produce) or was cancelled
        total.observe(time.perf_counter() - self.started)
        local.observe(self.handled_at - self.started)
