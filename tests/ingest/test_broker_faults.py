"""Broker behaviour across restarts, failures and schedules, on private clusters (real
ZooKeeper, real broker processes killed with signals)."""
from __future__ import annotations

import signal

import pytest
from test_broker_api import RawClient, create_topic, fetch_values, leader_address, partition_dirs, produce

from ember.errors import ErrorCode
from ember.record import build_batch
from ember.wire.api_keys import ApiKey
from waiting import eventually

pytestmark = pytest.mark.integration

#: Dead brokers leave ZooKeeper quickly, so failover tests stay short.
FAST_SESSIONS = {"zookeeper.session.timeout.ms": "2000"}


def metadata(address: str, topic: str) -> dict:
    with RawClient(address) as client:
        return client.call(ApiKey.METADATA, {"topics": [topic]}).body


def test_restart_keeps_data_and_removes_topics_deleted_while_down(make_cluster, topic_name):
    cluster = make_cluster(brokers=2, config=FAST_SESSIONS)
    kept, doomed = topic_name + "-kept", topic_name + "-doomed"
    with RawClient(cluster.brokers[1].address) as client:
        # RF=1: until followers replicate, only the partition's own broker holds its data.
        assert create_topic(client, kept, partitions=2, replication_factor=1)["error_code"] == 0
        assert create_topic(client, doomed, partitions=1, replication_factor=2)["error_code"] == 0
    expected = {}
    for partition in (0, 1):
        with RawClient(leader_address(cluster, kept, partition)) as leader:
            for i in range(3):
                value = f"p{partition}-{i}".encode()
                assert produce(leader, kept, build_batch([(None, value)]), partition)["error_code"] == 0
            expected[partition] = [f"p{partition}-{i}".encode() for i in range(3)]

    # A clean stop (SIGTERM) and a crash (SIGKILL) both keep every acknowledged record.
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for broker_id in (1, 2):
            cluster.kill_broker(broker_id, sig)
            cluster.restart_broker(broker_id)
    for partition in (0, 1):
        with RawClient(leader_address(cluster, kept, partition)) as leader:
            assert fetch_values(leader, kept, partition=partition) == expected[partition]

    # Broker 2 is down while a topic it hosts is deleted: it removes the data when it returns.
    assert partition_dirs(cluster, doomed)
    cluster.kill_broker(2, signal.SIGTERM)
    with RawClient(cluster.brokers[1].address) as client:
        assert client.call(ApiKey.DELETE_TOPICS, {"topics": [doomed]}).body["topics"][0]["error_code"] == 0
    # renamed <topic>-<n>.<uuid>-delete at once, removed in the background
    eventually(lambda: not list(cluster.brokers[1].data_dir.glob(f"{doomed}-*")), what="broker 1 to remove its copy")
    assert list(cluster.brokers[2].data_dir.glob(f"{doomed}-*"))
    cluster.restart_broker(2)
    assert not list(cluster.brokers[2].data_dir.glob(f"{doomed}-0"))       # renamed before the broker serves
    eventually(lambda: not list(cluster.brokers[2].data_dir.glob(f"{doomed}-*")), what="broker 2 to remove its copy")
    assert len(partition_dirs(cluster, kept)) == 2


def test_controller_failover_moves_leadership(make_cluster, topic_name):
    cluster = make_cluster(brokers=3, config=FAST_SESSIONS)
    with RawClient(cluster.brokers[1].address) as client:
        assert create_topic(client, topic_name, partitions=3, replication_factor=3)["error_code"] == 0
    def settled() -> dict | None:
        """Metadata once broker 1's cache has the controller and every partition's leader."""
        body = metadata(cluster.brokers[1].address, topic_name)
        leaders = [p["leader"] for p in body["topics"][0]["partitions"]]
        return body if body["controller_id"] in (1, 2, 3) and len(leaders) == 3 and -1 not in leaders else None
    before = eventually(settled, what="the new topic's leaders in broker 1's metadata")
    controller = before["controller_id"]
    led = {p["partition"]: p for p in before["topics"][0]["partitions"] if p["leader"] == controller}
    assert led, "leaders are spread over all brokers, so the controller leads a partition"

    cluster.kill_broker(controller, signal.SIGKILL)
    survivor = next(b for b in cluster.brokers.values() if b.broker_id != controller)

    def failed_over() -> dict | None:
        body = metadata(survivor.address, topic_name)
        parts = {p["partition"]: p for p in body["topics"][0]["partitions"]}
        moved = all(parts[i]["leader"] not in (controller, -1) for i in led)
        # Each partition's state is its own znode: the survivor's cache learns them one by one.
        shrunk = all(controller not in p["isr"] for p in parts.values())
        ok = body["controller_id"] not in (controller, -1) and moved and shrunk
        return body if ok else None
    after = eventually(failed_over, what="a new controller, new leaders and ISRs without the dead broker")
    assert {b["id"] for b in after["brokers"]} == {1, 2, 3} - {controller}
    for p in after["topics"][0]["partitions"]:
        if p["partition"] in led:
            assert p["leader_epoch"] == led[p["partition"]]["leader_epoch"] + 1
            assert p["leader"] in led[p["partition"]]["isr"]
        assert controller not in p["isr"]

    # The new leader serves the partition.
    moved = next(iter(led))
    with RawClient(leader_address(cluster, topic_name, moved)) as leader:
        assert produce(leader, topic_name, build_batch([(None, b"after")]), moved)["error_code"] == 0


def test_retention_deletes_old_segments_on_schedule(make_cluster, topic_name):
    cluster = make_cluster(brokers=1, config={"log.retention.check.interval.ms": "200"})
    with RawClient(cluster.brokers[1].address) as client:
        created = create_topic(client, topic_name, config={"segment.bytes": "2048", "file.delete.delay.ms": "0"})
        assert created["error_code"] == 0
        with RawClient(leader_address(cluster, topic_name)) as leader:
            for _i in range(6):
                assert produce(leader, topic_name, build_batch([(None, bytes(1500))]))["error_code"] == 0
            directory = cluster.brokers[1].data_dir / f"{topic_name}-0"
            assert len(list(directory.glob("*.log"))) > 1
            body = {"topic": topic_name, "set": {"retention.ms": "1"}}
            assert client.call(ApiKey.ALTER_CONFIGS, body).body["error_code"] == 0

            def earliest() -> int:
                body = {"partitions": [{"topic": topic_name, "partition": 0, "timestamp": -2}]}
                return leader.call(ApiKey.LIST_OFFSETS, body).body["partitions"][0]["offset"]
            eventually(lambda: earliest() == 5, what="retention to delete every sealed segment")
            assert len(list(directory.glob("*.log"))) == 1
            entry = leader.call(ApiKey.FETCH, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "partitions": [
                {"topic": topic_name, "partition": 0, "fetch_offset": 0}]}).body["partitions"][0]
            assert entry["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
            assert fetch_values(leader, topic_name, offset=5) == [bytes(1500)]
