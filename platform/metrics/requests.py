"""Request metrics per listener, taken in one place: the server's connection loop.

Per request: a count, the error codes of its response (the request-level ``error_code`` and
each entry's, e.g. per partition, as Kafka counts them), and two times: local (the handler,
including acks=all and long-poll waits) and total (until the response is written). Response send
time is their difference (``_sum`` minus ``_sum``), so it gets no histogram of its own: every
histogram is a dozen lines per API in every scrape.

Requests are served and scrapes are rendered on the broker's event loop, one thread, so the
bookkeeping is plain integers and lists without locks (prometheus-client's own counters take a
lock per increment): a request costs a few dict lookups, a ``bisect`` and some additions, and
:meth:`RequestMetrics.collect` turns the numbers into prometheus-client metric families.
"""
from __future__ import annotations

import time
from bisect import bisect_left
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from ember.errors import ErrorCode
from ember.metrics.broker_metrics import LATENCY_BUCKETS
from ember.wire.api_keys import ApiKey

if TYPE_CHECKING:
    from prometheus_client import Metric

    from ember.wire.reply import FramePieces, Reply


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


class LatencyHistogram:
    """Counts per latency bucket (``LATENCY_BUCKETS``, then +Inf) and their sum."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.sum += seconds

    def cumulative(self) -> list[tuple[str, float]]:
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*(floatToGoString(b) for b in LATENCY_BUCKETS), "+Inf"), self.counts):
            running += count
            buckets.append((bound, running))
        return buckets


class ApiStats:
    __slots__ = ("requests", "total", "local")

    def __init__(self) -> None:
        self.requests = 0
        self.total = LatencyHistogram()
        self.local = LatencyHistogram()


class RequestObserver:
    """Counts and times the requests of one listener (``EMBER``, and each Kafka listener)."""

    def __init__(self, listener: str) -> None:
        self.listener = listener
        self.in_flight = 0
        self.apis: dict[int, ApiStats] = {}
        self.errors: dict[tuple[int, int], int] = {}

    def start(self, api_key: int) -> "RequestTimer":
        return RequestTimer(self, api_key)

    def api(self, api_key: int) -> ApiStats:
        stats = self.apis.get(api_key)
        if stats is None:
            stats = self.apis[api_key] = ApiStats()
        return stats

    def count_errors(self, api_key: int, codes: Iterable[int]) -> None:
        """Count a response's non-zero error codes (the Kafka listener's dispatcher calls this
        with the codes of the response it built; ember's through :meth:`RequestTimer.handled`)."""
        for code in codes:
            self.errors[(api_key, code)] = self.errors.get((api_key, code), 0) + 1


class RequestTimer:
    """One request on its way through the server: ``handled`` when the handler returned, ``done``
    (always, also when the connection broke) after the response was written."""

    __slots__ = ("observer", "api_key", "started", "handled_at")

    def __init__(self, observer: RequestObserver, api_key: int) -> None:
        self.observer = observer
        self.api_key = api_key
        self.handled_at = 0.0
        observer.in_flight += 1
        self.started = time.perf_counter()

    def handled(self, reply: "Reply | bytes | FramePieces | None") -> None:
        """The handler returned ``reply``: an ember reply's error codes are counted; a Kafka
        listener's reply is already encoded (its dispatcher counted its errors)."""
        self.handled_at = time.perf_counter()
        if reply is not None and not isinstance(reply, (bytes, tuple)):
            self.observer.count_errors(self.api_key, error_codes(reply.body))

    def done(self) -> None:
        self.observer.in_flight -= 1
        stats = self.observer.api(self.api_key)
        stats.requests += 1
        if not self.handled_at:
            return   # the handler closed the connection (failed acks=0 produce) or was cancelled
        stats.total.observe(time.perf_counter() - self.started)
        stats.local.observe(self.handled_at - self.started)


class RequestMetrics(Collector):
    """The request metric families of every listener (call only on the event loop)."""

    def __init__(self) -> None:
        self.listeners: dict[str, RequestObserver] = {}

    def listener(self, name: str) -> RequestObserver:
        observer = self.listeners.get(name)
        if observer is None:
            observer = self.listeners[name] = RequestObserver(name)
        return observer

    def collect(self) -> Iterator["Metric"]:
        request = ["listener", "request"]
        requests = CounterMetricFamily("ember_network_requestmetrics_requests", "Requests handled.", labels=request)
        errors = CounterMetricFamily("ember_network_requestmetrics_errors",
                                     "Error codes answered (request-level and per partition/entry), by code.",
                                     labels=[*request, "error"])
        total = HistogramMetricFamily("ember_network_requestmetrics_totaltime_seconds",
                                      "From a request read to its response written.", labels=request)
        local = HistogramMetricFamily("ember_network_requestmetrics_localtime_seconds",
                                      "In the request's handler, including waits for replication and long polls.",
                                      labels=request)
        in_flight = GaugeMetricFamily("ember_network_requestchannel_requestsinflight",
                                      "Requests read and not answered yet.", labels=["listener"])
        for name, observer in sorted(self.listeners.items()):
            in_flight.add_metric([name], observer.in_flight)
            for api_key, stats in sorted(observer.apis.items()):
                labels = [name, request_name(api_key)]
                requests.add_metric(labels, stats.requests)
                total.add_metric(labels, stats.total.cumulative(), stats.total.sum)
                local.add_metric(labels, stats.local.cumulative(), stats.local.sum)
            for (api_key, code), count in sorted(observer.errors.items()):
                errors.add_metric([name, request_name(api_key), error_name(code)], count)
        yield from (requests, errors, total, local, in_flight)
