"""After the faults: wait (bounded) for the cluster to settle, then read what it holds — the high
watermarks, the group's committed offsets, and every replica's log read from its segment files
with :func:`ember.log.reader.read_offset_range` (not through a broker)."""
from __future__ import annotations

import signal
import time
from typing import Optional

import pyarrow as pa

from ember.client import Admin, Consumer, TopicPartition
from ember.client.admin import PartitionDescription
from ember.errors import EmberError
from ember.launcher.local import LocalCluster
from ember.log.reader import read_offset_range
from ember.record.schema import DECODED_SCHEMA

from .history import FinalState, History


def wait_settled(bootstrap: str, topic: str, brokers: set[int], history: History,
                 bound_s: float) -> dict[int, PartitionDescription]:
    """Partitions once each has a leader, every broker in its ISR and its high watermark at its
    log end (nothing in flight), both known (not -1: the leader answered); a settle that misses
    ``bound_s`` is a liveness violation, and the last description seen is returned."""
    started = time.monotonic()
    last: dict[int, PartitionDescription] = {}
    with Admin(bootstrap, request_timeout_ms=5000) as admin:
        while True:
            try:
                last = {p.partition: p for p in admin.describe_topic(topic).partitions}
            except EmberError:
                pass
            # -1: the leader's ListOffsets failed (describe_topic's offsets of a partition it could not ask)
            if last and all(p.leader >= 0 and set(p.isr) == brokers and p.high_watermark == p.log_end_offset >= 0
                            for p in last.values()):
                history.timing("cluster settles (full ISR, high watermark at log end)",
                               time.monotonic() - started, bound_s)
                return last
            if time.monotonic() - started > bound_s:
                history.timing("cluster settles (full ISR, high watermark at log end)", None, bound_s)
                return last
            time.sleep(0.5)


def committed_offsets(bootstrap: str, topic: str, group: str, partitions: int) -> dict[int, Optional[int]]:
    """The group's committed offset per partition (None where nothing is committed)."""
    consumer = Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        consumer.close()


def stop_cluster(cluster: LocalCluster, history: History, shutdown_s: float) -> None:
    """Stop every broker with SIGTERM (each must exit within ``shutdown_s``), then ZooKeeper."""
    for broker_id in sorted(cluster.brokers):
        started = time.monotonic()
        cluster.kill_broker(broker_id, signal.SIGTERM, timeout_s=shutdown_s)
        took = time.monotonic() - started
        history.timing(f"broker {broker_id} shutdown on SIGTERM at the end", took if took < shutdown_s else None,
                       shutdown_s)
    cluster.stop()


def read_replicas(cluster: LocalCluster, topic: str, high_watermarks: dict[int, int]) -> dict[int, dict[int, pa.Table]]:
    """Every broker's records of every partition below its high watermark, from the files."""
    replicas: dict[int, dict[int, pa.Table]] = {}
    for partition, hw in high_watermarks.items():
        for broker_id, broker in sorted(cluster.brokers.items()):
            directory = broker.data_dir / f"{topic}-{partition}"
            try:
                table = pa.Table.from_batches(list(read_offset_range(directory, 0, hw)), schema=DECODED_SCHEMA)
            except EmberError as exc:   # a replica missing records below the high watermark
                table = pa.table({"error": [f"{type(exc).__name__}: {exc}"]})
            replicas.setdefault(partition, {})[broker_id] = table
    return replicas


def final_state(replicas: dict[int, dict[int, pa.Table]], high_watermarks: dict[int, int],
                committed: dict[int, Optional[int]]) -> FinalState:
    """The final state with the first broker's copy as "the log" (the checker compares the rest)."""
    logs = {}
    for partition, by_broker in replicas.items():
        table = by_broker[min(by_broker)]
        logs[partition] = table.column("value").to_pylist() if "value" in table.column_names else []
    return FinalState(high_watermarks, logs, replicas, committed)
