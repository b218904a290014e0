"""Broker APIs over the raw wire protocol against a shared 3-broker cluster (real ZooKeeper,
real broker processes). Also home of :class:`RawClient`, the minimal protocol client the
broker tests use (the fault tests import it)."""
from __future__ import annotations

import os
import socket
import struct
from pathlib import Path
from typing import Any, Sequence

import pytest

from blocking_connection import BlockingConnection
from ember.errors import ErrorCode
from ember.launcher.local import LocalCluster
from ember.record import build_batch, to_table
from ember.wire.api_keys import ApiKey
from ember.wire.frame import FRAME_LENGTH, Response, decode_response, encode_request
from waiting import eventually

pytestmark = pytest.mark.integration

WAIT_S = 30.0


class RawClient(BlockingConnection):
    """One blocking connection speaking the framed protocol; every socket read is bounded."""

    def __init__(self, address: str, timeout_s: float = WAIT_S) -> None:
        super().__init__(address, timeout_s)

    def send(self, api_key: int, body: dict[str, Any], payload: Sequence[bytes] = ()) -> int:
        correlation_id = self.next_correlation_id()
        self.sock.sendall(b"".join(encode_request(api_key, 0, correlation_id, body, payload)))
        return correlation_id

    def receive(self) -> Response:
        (size,) = FRAME_LENGTH.unpack(self.exactly(FRAME_LENGTH.size))
        return decode_response(self.exactly(size))

    def call(self, api_key: int, body: dict[str, Any], payload: Sequence[bytes] = ()) -> Response:
        correlation_id = self.send(api_key, body, payload)
        response = self.receive()
        assert response.correlation_id == correlation_id
        return response


def create_topic(client: RawClient, name: str, partitions: int = 1, replication_factor: int = 1,
                 config: dict[str, str] | None = None) -> dict[str, Any]:
    body = {"topics": [{"topic": name, "partitions": partitions, "replication_factor": replication_factor,
                        "config": config or {}}]}
    return client.call(ApiKey.CREATE_TOPICS, body).body["topics"][0]


def leader_address(cluster: LocalCluster, name: str, partition: int = 0) -> str:
    """The address of the partition's leader, once metadata names one and it serves the partition."""
    def find() -> str | None:
        for broker in cluster.brokers.values():
            if broker.pid is None:
                continue
            with RawClient(broker.address) as client:
                topics = client.call(ApiKey.METADATA, {"topics": [name]}).body["topics"]
            parts = {p["partition"]: p for p in topics[0]["partitions"]}
            if partition in parts and parts[partition]["leader"] >= 0:
                address = cluster.brokers[parts[partition]["leader"]].address
                with RawClient(address) as leader:
                    body = {"partitions": [{"topic": name, "partition": partition, "timestamp": -1}]}
                    if leader.call(ApiKey.LIST_OFFSETS, body).body["partitions"][0]["error_code"] == 0:
                        return address
        return None
    return eventually(find, what=f"a ready leader for {name}-{partition}")


def produce(client: RawClient, topic: str, batch: bytes, partition: int = 0, acks: int = 1) -> dict[str, Any]:
    body = {"acks": acks, "timeout_ms": 10000,
            "partitions": [{"topic": topic, "partition": partition, "size": len(batch)}]}
    return client.call(ApiKey.PRODUCE, body, [batch]).body["partitions"][0]


def fetch_body(topic: str, offset: int, partition: int = 0, max_wait_ms: int = 0,
               min_bytes: int = 1) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": 1 << 20,
            "partitions": [{"topic": topic, "partition": partition, "fetch_offset": offset,
                            "max_bytes": 1 << 20}]}


def fetch_values(client: RawClient, topic: str, offset: int = 0, partition: int = 0) -> list[bytes]:
    """Every value from ``offset`` to the high watermark, decoded only here in the test."""
    values: list[bytes] = []
    while True:
        response = client.call(ApiKey.FETCH, fetch_body(topic, offset, partition))
        entry = response.body["partitions"][0]
        assert entry["error_code"] == 0, entry
        if entry["size"] == 0:
            return values
        table = to_table(bytes(response.payload))
        rows = [r for r in table.to_pylist() if r["offset"] >= offset]
        values += [r["value"] for r in rows]
        offset = rows[-1]["offset"] + 1


def partition_dirs(cluster: LocalCluster, topic: str) -> list[Path]:
    return [path for b in cluster.brokers.values() for path in b.data_dir.glob(f"{topic}-*")]


@pytest.fixture
def bootstrap_client(shared_cluster: LocalCluster):
    with RawClient(next(iter(shared_cluster.brokers.values())).address) as client:
        yield client


# -- tests --------------------------------------------------------------------------------------

def test_api_versions_lists_every_api(bootstrap_client):
    body = bootstrap_client.call(ApiKey.API_VERSIONS, {}).body
    keys = {api["api_key"] for api in body["apis"]}
    assert {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA, ApiKey.CREATE_TOPICS,
            ApiKey.DELETE_TOPICS, ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS,
            ApiKey.INIT_PRODUCER_ID, ApiKey.API_VERSIONS} <= keys


def test_produce_fetch_round_trip_and_list_offsets(shared_cluster, bootstrap_client, topic_name):
    assert create_topic(bootstrap_client, topic_name, partitions=2, replication_factor=2)["error_code"] == 0
    with RawClient(leader_address(shared_cluster, topic_name)) as leader:
        first = produce(leader, topic_name, build_batch([(b"k1", b"a", 1000), (b"k2", b"b", 1000)]))
        second = produce(leader, topic_name, build_batch([(None, b"c", 5000)]), acks=-1)
        assert (first["error_code"], first["base_offset"]) == (0, 0)
        assert (second["error_code"], second["base_offset"]) == (0, 2)
        assert fetch_values(leader, topic_name) == [b"a", b"b", b"c"]
        assert fetch_values(leader, topic_name, offset=1) == [b"b", b"c"]

        def offset(ts: int) -> int:
            body = {"partitions": [{"topic": topic_name, "partition": 0, "timestamp": ts}]}
            entry = leader.call(ApiKey.LIST_OFFSETS, body).body["partitions"][0]
            assert entry["error_code"] == 0, entry
            return entry["offset"]
        assert (offset(-2), offset(-1), offset(3000), offset(9000)) == (0, 3, 2, -1)


def test_pipelined_requests_are_answered_in_order(shared_cluster, bootstrap_client, topic_name):
    create_topic(bootstrap_client, topic_name)
    with RawClient(leader_address(shared_cluster, topic_name)) as leader:
        batches = [build_batch([(None, f"v{i}".encode())]) for i in range(5)]
        ids = [leader.send(ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 10000, "partitions": [
            {"topic": topic_name, "partition": 0, "size": len(b)}]}, [b]) for b in batches]
        ids.append(leader.send(ApiKey.METADATA, {"topics": [topic_name]}))
        ids.append(leader.send(ApiKey.FETCH, fetch_body(topic_name, 0)))
        responses = [leader.receive() for _ in ids]
        assert [r.correlation_id for r in responses] == ids
        assert [r.body["partitions"][0]["base_offset"] for r in responses[:5]] == [0, 1, 2, 3, 4]
        assert responses[-1].body["partitions"][0]["size"] > 0


def test_acks_zero_sends_no_response(shared_cluster, bootstrap_client, topic_name):
    create_topic(bootstrap_client, topic_name)
    with RawClient(leader_address(shared_cluster, topic_name)) as leader:
        batch = build_batch([(None, b"silent")])
        leader.send(ApiKey.PRODUCE, {"acks": 0, "partitions": [
            {"topic": topic_name, "partition": 0, "size": len(batch)}]}, [batch])
        follow_up = leader.send(ApiKey.METADATA, {"topics": [topic_name]})
        assert leader.receive().correlation_id == follow_up
        assert fetch_values(leader, topic_name) == [b"silent"]


@pytest.mark.parametrize("garbage", [
    struct.pack(">I", 60) + os.urandom(60),                # a frame of random bytes (a random length
                                                           # prefix may announce a legal, unsent frame)
    struct.pack(">I", 6) + b"\x00" * 6,                    # frame shorter than a request header
    struct.pack(">I", 30) + struct.pack(">hhiI", 3, 0, 1, 18) + b"{not json at all}!",
    struct.pack(">I", 0x7FFFFFFF),                         # announces more than socket.request.max.bytes
], ids=["random", "short", "bad-json", "oversized"])
def test_bad_frames_close_only_that_connection(shared_cluster, garbage):
    address = next(iter(shared_cluster.brokers.values())).address
    with RawClient(address) as healthy, RawClient(address) as bad:
        bad.sock.sendall(garbage)
        assert eventually(bad.is_closed_by_peer, what="the broker to close the bad connection")
        assert healthy.call(ApiKey.API_VERSIONS, {}).body["error_code"] == 0
    with RawClient(address) as fresh:
        assert fresh.call(ApiKey.API_VERSIONS, {}).body["error_code"] == 0


def test_unknown_api_key_and_version_get_unsupported_version(bootstrap_client):
    assert bootstrap_client.call(77, {}).body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    bootstrap_client.sock.sendall(b"".join(encode_request(ApiKey.METADATA, 9, 500, {})))
    response = bootstrap_client.receive()
    assert (response.correlation_id, response.body["error_code"]) == (500, ErrorCode.UNSUPPORTED_VERSION)
    # The connection stays usable.
    assert bootstrap_client.call(ApiKey.API_VERSIONS, {}).body["error_code"] == 0


def test_unknown_topic_errors(bootstrap_client, topic_name):
    meta = bootstrap_client.call(ApiKey.METADATA, {"topics": [topic_name]}).body["topics"][0]
    assert meta["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    produced = produce(bootstrap_client, topic_name, build_batch([(None, b"x")]))
    assert produced["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert "ember topics create" in produced["error_message"]
    fetched = bootstrap_client.call(ApiKey.FETCH, fetch_body(topic_name, 0)).body["partitions"][0]
    assert fetched["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    described = bootstrap_client.call(ApiKey.DESCRIBE_CONFIGS, {"topics": [topic_name]}).body["topics"][0]
    assert described["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    deleted = bootstrap_client.call(ApiKey.DELETE_TOPICS, {"topics": [topic_name]}).body["topics"][0]
    assert deleted["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_malformed_fields_get_invalid_request(bootstrap_client):
    body = bootstrap_client.call(ApiKey.PRODUCE, {"acks": 1, "partitions": [{"topic": "x"}]}).body
    assert body["error_code"] == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("topic, partitions, rf, config, code", [
    ("bad name!", 1, 1, {}, ErrorCode.INVALID_TOPIC),
    ("..", 1, 1, {}, ErrorCode.INVALID_TOPIC),
    (None, 0, 1, {}, ErrorCode.INVALID_PARTITIONS),
    (None, 1, 0, {}, ErrorCode.INVALID_REPLICATION_FACTOR),
    (None, 1, 4, {}, ErrorCode.INVALID_REPLICATION_FACTOR),
    (None, 1, 1, {"retention.ms": "soon"}, ErrorCode.INVALID_CONFIG),
    (None, 1, 1, {"no.such.config": "1"}, ErrorCode.INVALID_CONFIG),
    (None, 1, 1, {"cleanup.policy": "compact,shred"}, ErrorCode.INVALID_CONFIG),
])
def test_create_topic_rejects_invalid_requests(bootstrap_client, topic_name, topic, partitions, rf,
                                               config, code):
    result = create_topic(bootstrap_client, topic or topic_name, partitions, rf, config)
    assert result["error_code"] == code, result
    assert result["error_message"]
    if code == ErrorCode.INVALID_REPLICATION_FACTOR and rf > 1:
        assert "3 live broker" in result["error_message"]
    meta = bootstrap_client.call(ApiKey.METADATA, {"topics": [topic_name]}).body["topics"][0]
    assert meta["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_create_describe_alter_delete_topic(shared_cluster, bootstrap_client, topic_name):
    created = create_topic(bootstrap_client, topic_name, partitions=3, replication_factor=2,
                           config={"retention.ms": "3600000"})
    assert created["error_code"] == 0
    assert create_topic(bootstrap_client, topic_name)["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS

    meta = bootstrap_client.call(ApiKey.METADATA, {"topics": [topic_name]}).body
    partitions = meta["topics"][0]["partitions"]
    assert sorted(p["partition"] for p in partitions) == [0, 1, 2]
    assert all(len(p["replicas"]) == 2 and p["leader"] in p["replicas"] for p in partitions)
    assert len({p["leader"] for p in partitions}) == 3          # leaders spread over the brokers
    assert {b["id"] for b in meta["brokers"]} == {1, 2, 3}
    eventually(lambda: len(partition_dirs(shared_cluster, topic_name)) == 6, what="6 replica directories")

    def configs() -> dict[str, dict[str, Any]]:
        body = bootstrap_client.call(ApiKey.DESCRIBE_CONFIGS, {"topics": [topic_name]}).body["topics"][0]
        assert body["error_code"] == 0
        return {c["name"]: c for c in body["configs"]}
    described = configs()
    assert (described["retention.ms"]["value"], described["retention.ms"]["default"]) == ("3600000", False)
    assert (described["segment.bytes"]["value"], described["segment.bytes"]["default"]) == ("1073741824", True)
    assert described["segment.bytes"]["doc"]

    altered = bootstrap_client.call(ApiKey.ALTER_CONFIGS, {"topic": topic_name, "set": {"segment.bytes": "1048576"},
                                                           "delete": ["retention.ms"]}).body
    assert altered["error_code"] == 0
    described = configs()
    assert (described["segment.bytes"]["value"], described["segment.bytes"]["default"]) == ("1048576", False)
    assert described["retention.ms"]["default"] is True
    bad = bootstrap_client.call(ApiKey.ALTER_CONFIGS, {"topic": topic_name, "set": {"segment.bytes": "-5"}}).body
    assert bad["error_code"] == ErrorCode.INVALID_CONFIG and "segment.bytes" in bad["error_message"]
    assert configs()["segment.bytes"]["value"] == "1048576"

    with RawClient(leader_address(shared_cluster, topic_name)) as leader:
        assert produce(leader, topic_name, build_batch([(None, b"doomed")]))["error_code"] == 0
    deleted = bootstrap_client.call(ApiKey.DELETE_TOPICS, {"topics": [topic_name]}).body["topics"][0]
    assert deleted["error_code"] == 0
    eventually(lambda: not partition_dirs(shared_cluster, topic_name), what="partition directories removed")
    for broker in shared_cluster.brokers.values():
        with RawClient(broker.address) as client:
            meta = client.call(ApiKey.METADATA, {"topics": [topic_name]}).body["topics"][0]
            assert meta["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_long_poll_fetch_wakes_on_append(shared_cluster, bootstrap_client, topic_name):
    create_topic(bootstrap_client, topic_name)
    address = leader_address(shared_cluster, topic_name)
    with RawClient(address, timeout_s=60) as consumer, RawClient(address) as producer:
        # Far longer than the test may take: only an append can answer it with data.
        consumer.send(ApiKey.FETCH, fetch_body(topic_name, 0, max_wait_ms=45000))
        consumer.sock.settimeout(0.5)
        with pytest.raises(socket.timeout):
            consumer.sock.recv(1, socket.MSG_PEEK)      # parked, not answered empty
        consumer.sock.settimeout(60)
        assert produce(producer, topic_name, build_batch([(None, b"wake")]))["error_code"] == 0
        response = consumer.receive()
        assert response.body["partitions"][0]["size"] > 0
        assert [r["value"] for r in to_table(bytes(response.payload)).to_pylist()] == [b"wake"]


def test_fetch_out_of_range_and_not_leader(shared_cluster, bootstrap_client, topic_name):
    create_topic(bootstrap_client, topic_name, replication_factor=2)
    address = leader_address(shared_cluster, topic_name)
    with RawClient(address) as leader:
        entry = leader.call(ApiKey.FETCH, fetch_body(topic_name, 99)).body["partitions"][0]
        assert entry["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
    follower = next(b for b in shared_cluster.brokers.values() if b.address != address)
    with RawClient(follower.address) as other:
        produced = produce(other, topic_name, build_batch([(None, b"x")]))
        assert produced["error_code"] in (ErrorCode.NOT_LEADER_OR_FOLLOWER,)


def test_init_producer_id_is_unique_across_brokers(shared_cluster):
    ids = set()
    for broker in shared_cluster.brokers.values():
        with RawClient(broker.address) as client:
            for _ in range(3):
                body = client.call(ApiKey.INIT_PRODUCER_ID, {}).body
                assert body["error_code"] == 0 and body["producer_epoch"] == 0
                ids.add(body["producer_id"])
    assert len(ids) == 9


def test_idempotent_retry_returns_original_offset(shared_cluster, bootstrap_client, topic_name):
    create_topic(bootstrap_client, topic_name)
    producer_id = bootstrap_client.call(ApiKey.INIT_PRODUCER_ID, {}).body["producer_id"]
    batch = build_batch([(None, b"once")], producer_id=producer_id, producer_epoch=0, base_sequence=0)
    with RawClient(leader_address(shared_cluster, topic_name)) as leader:
        assert produce(leader, topic_name, build_batch([(None, b"first")]))["base_offset"] == 0
        assert produce(leader, topic_name, batch)["base_offset"] == 1
        assert produce(leader, topic_name, batch)["base_offset"] == 1
        assert fetch_values(leader, topic_name) == [b"first", b"once"]


def test_min_insync_replicas_larger_than_isr_rejects_acks_all(shared_cluster, bootstrap_client, topic_name):
    create_topic(bootstrap_client, topic_name, replication_factor=2, config={"min.insync.replicas": "3"})
    with RawClient(leader_address(shared_cluster, topic_name)) as leader:
        batch = build_batch([(None, b"x")])
        assert produce(leader, topic_name, batch, acks=-1)["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
        assert produce(leader, topic_name, batch, acks=1)["error_code"] == 0
        assert produce(leader, topic_name, batch, acks=2)["error_code"] == ErrorCode.INVALID_REQUIRED_ACKS
