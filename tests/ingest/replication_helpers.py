"""Helpers of the replication tests: raw protocol calls, partition state, on-disk contents."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable

from ember.client import Admin, Consumer
from ember.errors import EmberError, InvalidReplicationFactor
from ember.launcher.local import LocalCluster
from ember.log.reader import read_offset_range
from ember.net.connection import Connection, parse_bootstrap
from ember.record import build_batch
from ember.wire.api_keys import ApiKey
from waiting import eventually

WAIT_S = 60.0
#: Dead brokers leave ZooKeeper within 2 s; followers retry a not-yet-ready leader after 200 ms.
FAST = {"zookeeper.session.timeout.ms": "2000", "replica.fetch.backoff.ms": "200"}


def call(address: str, api_key: ApiKey, body: dict[str, Any], payload: tuple[bytes, ...] = (),
         timeout_s: float = 20.0) -> dict[str, Any]:
    """One request on a fresh connection; the response body."""
    connection = Connection(parse_bootstrap(address)[0], request_timeout_ms=int(timeout_s * 1000))
    try:
        return connection.request(api_key, body, payload).result(timeout_s).body
    finally:
        connection.close()


def partition_meta(cluster: LocalCluster, topic: str, partition: int = 0,
                   ask: Iterable[int] | None = None) -> dict[str, Any] | None:
    """Leader, leader epoch, replicas and ISR as the first answering broker (of ``ask``, default
    every running one) shows them."""
    for broker_id in cluster.brokers if ask is None else ask:
        broker = cluster.brokers[broker_id]
        if broker.pid is None:
            continue
        try:
            topics = call(broker.address, ApiKey.METADATA, {"topics": [topic]}, timeout_s=5)["topics"]
        except (EmberError, TimeoutError):
            continue
        parts = {p["partition"]: p for p in topics[0]["partitions"]}
        return parts.get(partition)
    return None


def wait_for_isr(cluster: LocalCluster, topic: str, isr: set[int], partition: int = 0,
                 ask: Iterable[int] | None = None) -> dict[str, Any]:
    """Metadata once the ISR is ``isr`` and the leader serves the partition to consumers."""
    def check() -> dict[str, Any] | None:
        meta = partition_meta(cluster, topic, partition, ask)
        if not meta or meta["leader"] < 0 or set(meta["isr"]) != isr:
            return None
        return meta if high_watermark(cluster.brokers[meta["leader"]].address, topic, partition) is not None else None
    return eventually(check, f"ISR of {topic}-{partition} to become {sorted(isr)}")


def high_watermark(address: str, topic: str, partition: int = 0) -> int | None:
    """The high watermark a consumer sees at ``address`` (ListOffsets latest), None on an error."""
    body = {"partitions": [{"topic": topic, "partition": partition, "timestamp": -1}]}
    try:
        item = call(address, ApiKey.LIST_OFFSETS, body, timeout_s=5)["partitions"][0]
    except (EmberError, TimeoutError):
        return None
    return item["offset"] if item["error_code"] == 0 else None


def produce(address: str, topic: str, values: list[bytes], acks: int, partition: int = 0) -> dict[str, Any]:
    return produce_batch(address, topic, build_batch([(None, v) for v in values]), acks, partition)


def produce_batch(address: str, topic: str, batch: bytes, acks: int, partition: int = 0) -> dict[str, Any]:
    """One raw batch to ``address`` (no client retries): the partition's produce result."""
    body = {"acks": acks, "timeout_ms": 10000,
            "partitions": [{"topic": topic, "partition": partition, "size": len(batch)}]}
    return call(address, ApiKey.PRODUCE, body, (batch,))["partitions"][0]


def create_topic(bootstrap: str, topic: str, partitions: int = 1, min_insync: int = 2,
                 replication_factor: int = 3, timeout_s: float = 15.0, **config: str) -> None:
    """Create ``topic``; a broker whose ZooKeeper session was renewed on a loaded machine may be
    unregistered for a moment after the cluster started, so too few live brokers is retried
    (bounded by ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    with Admin(bootstrap) as admin:
        while True:
            try:
                admin.create_topic(topic, partitions=partitions, replication_factor=replication_factor,
                                   config={"min.insync.replicas": str(min_insync), **config})
                return
            except InvalidReplicationFactor:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def consume_values(bootstrap: str, topic: str, count: int, timeout_s: float = 60) -> list[tuple[int, bytes]]:
    """(offset, value) of the first ``count`` records of partition 0, in the order consumed."""
    out: list[tuple[int, bytes]] = []
    with Consumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        deadline = time.monotonic() + timeout_s
        while len(out) < count and time.monotonic() < deadline:
            for records in consumer.poll(500).values():
                out += [(r.offset, r.value) for r in records]
    return out


def disk_values(cluster: LocalCluster, broker_id: int, topic: str, end: int, partition: int = 0) -> list[bytes]:
    """Values of offsets [0, end) in one broker's partition directory, read from the files."""
    directory = cluster.brokers[broker_id].data_dir / f"{topic}-{partition}"
    return [v for batch in read_offset_range(directory, 0, end) for v in batch.column("value").to_pylist()]


class BackgroundLoop:
    """Calls ``tick`` every ``interval_s`` on a daemon thread for the length of a with-block."""

    interval_s = 0.05

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.tick()

    def tick(self) -> None:
        raise NotImplementedError


class HighWatermarkWatch(BackgroundLoop):
    """Samples (leader, high watermark) as consumers see it (ListOffsets latest at the current
    leader) on a thread, so a test can check it never went back across failovers."""

    def __init__(self, cluster: LocalCluster, topic: str, partition: int = 0) -> None:
        super().__init__()
        self.cluster, self.topic, self.partition = cluster, topic, partition
        self.samples: list[tuple[int, int]] = []

    def sampled(self, leader: Callable[[int], bool]) -> bool:
        return any(leader(sampled_leader) for sampled_leader, _ in self.samples)

    @property
    def high_watermarks(self) -> list[int]:
        return [hw for _, hw in self.samples]

    def tick(self) -> None:
        meta = partition_meta(self.cluster, self.topic, self.partition)
        if meta and meta["leader"] >= 0:
            leader = meta["leader"]
            sample = high_watermark(self.cluster.brokers[leader].address, self.topic, self.partition)
            if sample is not None:   # None: the leader is moving or down
                self.samples.append((leader, sample))
