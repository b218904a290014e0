"""Two log directories per broker (``log.dirs``), on a real 2-broker cluster: new partitions are
spread over both; a broker restarted with its second directory unusable (a file where the
directory should be, as a disk that does not mount leaves it) still starts, serves the partitions
of its good directory, and reports those of the failed one offline, so the controller keeps
their leadership on the other broker and out of this one's reach; no acknowledged record is
lost, producing goes on, and once the directory is back a restart brings every replica back
into the ISR. (A file instead of the directory fails the broker's lock even as root, unlike
``chmod 000``.)"""
from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from replication_helpers import FAST, create_topic, partition_meta

from ember.client import Admin, Consumer, Producer, TopicPartition
from ember.errors import PreferredLeaderNotAvailable
from ember.launcher.local import LocalCluster
from ember.launcher.scrape import readiness, scrape
from waiting import eventually

pytestmark = pytest.mark.integration

PARTITIONS = 4
KAFKA_STORAGE_ERROR = 56
RECORDS = 30


def partitions_in(directory: Path, topic: str) -> set[int]:
    return {int(p.parent.name.rpartition("-")[2]) for p in directory.glob(f"{topic}-*/partition.metadata")}


def produce(cluster: LocalCluster, topic: str, prefix: str, acked: dict[int, list[bytes]]) -> None:
    """acks=all records to every partition, each acknowledged before it counts."""
    with Producer(cluster.bootstrap, acks="all", enable_idempotence=True, linger_ms=1, delivery_timeout_ms=30000,
                  request_timeout_ms=10000, retry_backoff_ms=50, metadata_max_age_ms=1000) as producer:
        values = [(p, f"{prefix}-{p}-{i}".encode()) for p in range(PARTITIONS) for i in range(RECORDS)]
        futures = [(p, value, producer.send(topic, value, partition=p)) for p, value in values]
        for partition, value, future in futures:
            future.get(timeout=40)
            acked.setdefault(partition, []).append(value)


def consume(cluster: LocalCluster, topic: str, count: int) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    with Consumer(topic, bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        deadline = time.monotonic() + 60
        while sum(map(len, out.values())) < count and time.monotonic() < deadline:
            for tp, records in consumer.poll(500).items():
                out.setdefault(tp.partition, []).extend(r.value for r in records)
    return out


def describe_log_dirs(cluster: LocalCluster, broker_id: int, topic: str) -> dict[str, tuple[int, set[int]]]:
    """Kafka's DescribeLogDirs at one broker: {log dir: (error code, partitions of ``topic`` in it)}."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        (answer,) = admin.describe_log_dirs(brokers=[broker_id])
    finally:
        admin.close()
    return {d["log_dir"]: (d["error_code"], {p["partition_index"] for t in d["topics"] if t["name"] == topic
                                             for p in t["partitions"]}) for d in answer["log_dirs"]}


def state(cluster: LocalCluster, topic: str, partition: int) -> tuple[int, set[int]] | None:
    meta = partition_meta(cluster, topic, partition)
    return (meta["leader"], set(meta["isr"])) if meta else None


def test_a_broker_with_a_failed_log_dir_serves_the_other_and_reports_its_replicas_offline(
        tmp_path: Path, topic_name: str) -> None:
    cluster = LocalCluster(tmp_path / "cluster", broker_count=2, broker_config=dict(FAST), metrics=True,
                           log_dirs_per_broker=2)
    try:
        cluster.start()
        run_scenario(cluster, topic_name)
    finally:
        cluster.stop()


def run_scenario(cluster: LocalCluster, topic: str) -> None:
    create_topic(cluster.bootstrap, topic, partitions=PARTITIONS, min_insync=1, replication_factor=2)
    everything = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    with Admin(cluster.bootstrap) as admin:
        # broker 1 preferred (and leader) everywhere, so what it may lead later is all that differs
        admin.reassign_partitions({tp: [1, 2] for tp in everything})
        eventually(lambda: all(partition_meta(cluster, topic, p)["replicas"] == [1, 2] for p in range(PARTITIONS)),
                   "broker 1 preferred everywhere")
        eventually(lambda: admin.elect_leaders(everything) is not None and
                   all(state(cluster, topic, p) == (1, {1, 2}) for p in range(PARTITIONS)), "broker 1 leading")

    # new partitions were spread over both directories of each broker
    for broker in cluster.brokers.values():
        first, second = (partitions_in(d, topic) for d in broker.log_dirs)
        assert first and second and first | second == set(range(PARTITIONS)) and not first & second, \
            (broker.broker_id, first, second)
    good_dir, failed_dir = cluster.brokers[1].log_dirs
    good, failed = partitions_in(good_dir, topic), partitions_in(failed_dir, topic)

    acked: dict[int, list[bytes]] = {}
    produce(cluster, topic, "before", acked)

    # broker 1 restarts with its second directory gone: a file where the directory should be
    cluster.kill_broker(1, signal.SIGTERM)
    saved = failed_dir.with_name(failed_dir.name + ".saved")
    failed_dir.rename(saved)
    failed_dir.write_text("the disk did not mount")
    cluster.restart_broker(1)

    broker = cluster.brokers[1]
    assert broker.metrics_port is not None

    def settled() -> bool:
        with Admin(cluster.bootstrap) as admin:
            results = {r.partition: r for r in admin.elect_leaders(everything)}
        states = {p: state(cluster, topic, p) for p in range(PARTITIONS)}
        return all(states[p] == (1, {1, 2}) for p in good) and \
            all(states[p] == (2, {2}) and isinstance(results[p].error, PreferredLeaderNotAvailable) for p in failed)
    eventually(settled, "broker 1 leading its good directory's partitions, broker 2 the others")

    ready = readiness(broker.host, broker.metrics_port)
    assert ready is not None and not ready.ready
    assert any("offline log directory" in r and all(f"{topic}-{p}" in r for p in failed) for r in ready.reasons), ready
    samples = scrape(broker.host, broker.metrics_port)
    assert samples.get("ember_log_logmanager_offlinelogdirectorycount") == 1
    assert samples.get("ember_log_logmanager_logdirectoryoffline", log_directory=str(failed_dir)) == 1
    assert samples.get("ember_log_logmanager_logdirectoryoffline", log_directory=str(good_dir)) == 0
    assert (samples.get("ember_log_logdir_free_bytes", log_directory=str(good_dir)) or 0) > 0
    assert samples.get("ember_log_logdir_free_bytes", log_directory=str(failed_dir)) is None
    assert not any((good_dir / f"{topic}-{p}").exists() for p in failed), "recreated empty in the good directory"
    assert describe_log_dirs(cluster, 1, topic) == {str(good_dir): (0, good), str(failed_dir): (KAFKA_STORAGE_ERROR, set())}

    produce(cluster, topic, "after", acked)
    total = sum(map(len, acked.values()))
    assert consume(cluster, topic, total) == acked

    # the disk is back: a restart brings every replica back into the ISR
    cluster.kill_broker(1, signal.SIGTERM)
    failed_dir.unlink()
    saved.rename(failed_dir)
    cluster.restart_broker(1)
    eventually(lambda: all(state(cluster, topic, p) in ((1, {1, 2}), (2, {1, 2})) for p in range(PARTITIONS)),
               "every replica of broker 1 back in the ISR")
    eventually(lambda: (r := readiness(broker.host, broker.metrics_port)) is not None and r.ready, "broker 1 ready")
