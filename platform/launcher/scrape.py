"""The client side of a broker's metrics endpoint: fetch ``/metrics`` or a health check.

Used by ``ember top``, ``ember cluster status`` and the tests; every call is bounded by ``timeout_s``.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from ember.server.health import Readiness

LabelSet = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Samples:
    """One scrape: ``{sample name: {sorted label pairs: value}}``."""
    values: dict[str, dict[LabelSet, float]]

    def get(self, name: str, **labels: str) -> float | None:
        """The sample ``name`` whose labels include ``labels`` (the first if several match)."""
        for key, value in self.values.get(name, {}).items():
            if all((k, v) in key for k, v in labels.items()):
                return value
        return None

    def total(self, name: str, **labels: str) -> float:
        """Sum of every ``name`` sample whose labels include ``labels``."""
        return sum(value for key, value in self.values.get(name, {}).items()
                   if all((k, v) in key for k, v in labels.items()))

    def series(self, name: str) -> dict[LabelSet, float]:
        return self.values.get(name, {})


def http_get(host: str, port: int, path: str, timeout_s: float) -> tuple[int, bytes]:
    """(status, body) of ``GET http://host:port/path``; raises OSError when nobody answers."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:   # 503 from /readyz is an answer, not a failure
        return exc.code, exc.read()


def scrape(host: str, port: int, timeout_s: float = 5.0) -> Samples:
    _, body = http_get(host, port, "/metrics", timeout_s)
    values: dict[str, dict[LabelSet, float]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            values.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return Samples(values)


def readiness(host: str, port: int, timeout_s: float = 2.0) -> Readiness | None:
    """The broker's readiness, None when its endpoint does not answer."""
    try:
        _, body = http_get(host, port, "/readyz", timeout_s)
        return Readiness.from_json(json.loads(body))
    except (OSError, ValueError, KeyError):
        return None
