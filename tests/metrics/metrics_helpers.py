"""Helpers of the metrics tests: bounded waits and scraping every broker of a LocalCluster."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

from ember.launcher.local import LocalCluster
from ember.launcher.scrape import Samples, scrape

T = TypeVar("T")
WAIT_S = 60


def wait_for(probe: Callable[[], T], what: str, timeout_s: float = WAIT_S, interval_s: float = 0.2) -> T:
    """``probe()``'s first truthy answer; fails the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what} (last answer {answer!r})")
        time.sleep(interval_s)


def scrape_all(cluster: LocalCluster) -> dict[int, Samples]:
    """Every running broker's samples, by broker id."""
    return {b.broker_id: scrape(b.host, b.metrics_port) for b in cluster.brokers.values()
            if b.pid is not None and b.metrics_port is not None}


def cluster_total(cluster: LocalCluster, name: str, **labels: str) -> float:
    return sum(samples.total(name, **labels) for samples in scrape_all(cluster).values())
