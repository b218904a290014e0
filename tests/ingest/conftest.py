"""Fixtures of the in-process broker tests: partitions over real logs, counted into metrics."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest
from ingest_fakes import MakePartition

from ember.ingest.partition import Partition
from ember.log import Log, LogConfig
from ember.metrics.broker_metrics import BrokerMetrics


@pytest.fixture
def metrics() -> BrokerMetrics:
    return BrokerMetrics()


@pytest.fixture
def make_partition(tmp_path: Path, metrics: BrokerMetrics) -> Iterator[MakePartition]:
    """Partitions t-0, t-1, ... of broker ``broker_id`` (default 2) over real logs, ``replicas``
    (default [1, 2]) with ``props`` as topic configs, counted into ``metrics``; pool and logs
    closed at teardown."""
    pool = ThreadPoolExecutor(2, thread_name_prefix="test-log-io")
    logs: list[Log] = []

    def make(*, broker_id: int = 2, replicas: tuple[int, ...] = (1, 2), removing: tuple[int, ...] = (),
             **props: str) -> Partition:
        config = LogConfig.from_properties(props)
        log = Log.open(tmp_path / f"t-{len(logs)}", config)
        logs.append(log)
        partition = Partition("t", len(logs) - 1, "topic-id", log, config, broker_id, pool, metrics.topic("t"))
        partition.assign(list(replicas), list(removing))
        return partition

    yield make
    for log in logs:
        if not log.closed:
            log.close()
    pool.shutdown(wait=True)
