"""``connections.max.idle.ms``: a broker closes connections that stall (idle, half a length prefix,
half a frame, a slow-loris trickle, responses left unread) and ember's clients reconnect
transparently. One private broker with a 1 s limit (real ZooKeeper, real broker process)."""
from __future__ import annotations

import select
import socket
from typing import Iterator

import pytest
from test_broker_api import RawClient, create_topic, fetch_body, leader_address, produce

from ember.client import Admin, Consumer, Producer, TopicPartition
from ember.launcher.local import LocalCluster
from ember.record import build_batch
from ember.wire.api_keys import ApiKey
from ember.wire.frame import FRAME_LENGTH, REQUEST_HEADER, encode_request
from waiting import eventually

pytestmark = pytest.mark.integration

IDLE_MS = 1000
#: Generous next to IDLE_MS: the broker may be slow on a loaded machine; a hang never ends.
CLOSE_WITHIN_S = 20.0


@pytest.fixture
def cluster(make_cluster) -> LocalCluster:
    return make_cluster(brokers=1, config={"connections.max.idle.ms": str(IDLE_MS)})


@pytest.fixture
def address(cluster: LocalCluster) -> str:
    return cluster.brokers[1].address


def closed_by_peer(sock: socket.socket, wait_s: float) -> bool:
    """True once the broker has closed ``sock`` (EOF or reset); waits up to ``wait_s`` for it.
    Only for connections the broker never answers on, so any readable byte means closed."""
    if not select.select([sock], [], [], wait_s)[0]:
        return False
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def broker_log(cluster: LocalCluster) -> str:
    return cluster.brokers[1].log_path.read_text(errors="replace")


def metadata_frame() -> bytes:
    return b"".join(encode_request(ApiKey.METADATA, 0, 1, {"topics": None}))


@pytest.mark.parametrize("sent", [
    b"",                                    # connected, never sent anything
    metadata_frame()[:2],                   # half a length prefix
    metadata_frame()[:FRAME_LENGTH.size + REQUEST_HEADER.size + 3],   # the length, then half the frame
], ids=["nothing", "half-length-prefix", "half-frame"])
def test_a_connection_stalled_before_a_whole_request_is_closed(address, sent):
    with RawClient(address) as stalled:
        stalled.sock.sendall(sent)
        assert closed_by_peer(stalled.sock, CLOSE_WITHIN_S)
    with RawClient(address) as fresh:
        assert fresh.call(ApiKey.API_VERSIONS, {}).body["error_code"] == 0


def test_a_slow_loris_cannot_hold_a_connection_by_trickling_a_frame(address):
    """One byte per tenth of a second: never idle between bytes, yet the frame (10 s of bytes)
    is cut off once reading it has taken connections.max.idle.ms."""
    frame = b"".join(encode_request(ApiKey.METADATA, 0, 1, {"topics": ["x" * 90]}))
    with RawClient(address) as loris:
        sent = 0
        for byte in frame:
            try:
                loris.sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += 1
            if closed_by_peer(loris.sock, 0.1):
                break
        assert sent < len(frame), "the broker read a whole trickled frame instead of closing the connection"


def test_a_client_that_stops_reading_responses_is_closed(cluster, address, topic_name):
    with RawClient(address) as client:
        assert create_topic(client, topic_name)["error_code"] == 0
    leader_address(cluster, topic_name)     # CreateTopics answers before the log opens
    with RawClient(address) as client:
        assert produce(client, topic_name, build_batch([(None, b"v" * (512 * 1024))]))["error_code"] == 0
    requests = 100   # 50 MiB of responses: far more than the socket buffers hold
    with RawClient(address) as reader:
        reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        for _ in range(requests):
            reader.send(ApiKey.FETCH, fetch_body(topic_name, 0))
        eventually(lambda: "writing a response took longer than connections.max.idle.ms" in broker_log(cluster),
                   "the broker to give up writing to a client that does not read", CLOSE_WITHIN_S)
        received = _drain(reader.sock)
    assert received < requests * 512 * 1024, "every response was delivered to a client that never read"


def _drain(sock: socket.socket) -> int:
    """Read what the broker managed to send until it closed the connection (bounded)."""
    sock.settimeout(CLOSE_WITHIN_S)
    total = 0
    try:
        while chunk := sock.recv(1 << 20):
            total += len(chunk)
    except ConnectionResetError:
        pass
    return total


def _idle_closes(cluster: LocalCluster) -> int:
    return broker_log(cluster).count("sending the next request took longer than connections.max.idle.ms")


@pytest.fixture
def clients(cluster: LocalCluster, topic_name: str) -> Iterator[tuple[Producer, Consumer, Admin]]:
    with Admin(cluster.bootstrap) as admin, Producer(cluster.bootstrap, acks="all") as producer, \
            Consumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        admin.create_topic(topic_name, partitions=1)
        consumer.assign([TopicPartition(topic_name, 0)])
        yield producer, consumer, admin


def test_clients_reconnect_after_the_broker_closes_their_idle_connections(cluster, clients, topic_name):
    producer, consumer, admin = clients
    got: list[bytes] = []

    def read(count: int) -> list[bytes]:
        eventually(lambda: got.extend(r.value for rs in consumer.poll(200).values() for r in rs)
                   or len(got) >= count, f"{count} records", CLOSE_WITHIN_S)
        return got

    producer.send(topic_name, b"before").get(CLOSE_WITHIN_S)
    assert read(1) == [b"before"]
    closes = _idle_closes(cluster)
    # Producer, consumer and admin connections all go idle and the broker closes them.
    eventually(lambda: _idle_closes(cluster) >= closes + 3, "the broker to close idle connections", CLOSE_WITHIN_S)
    assert producer.send(topic_name, b"after").get(CLOSE_WITHIN_S).offset == 1
    assert read(2) == [b"before", b"after"]
    assert topic_name in admin.list_topics()


def test_a_long_poll_whose_client_went_away_is_dropped(cluster, address, topic_name):
    """A fetch that may wait a minute for bytes that never come: once its client has closed the
    connection, the broker stops waiting on its behalf and closes its side."""
    gone = "the client went away while its request was being handled"
    with RawClient(address) as client:
        assert create_topic(client, topic_name)["error_code"] == 0
    leader_address(cluster, topic_name)     # its log open: the fetch waits rather than failing at once
    before = broker_log(cluster).count(gone)
    with RawClient(address) as waiting:
        waiting.send(ApiKey.FETCH, fetch_body(topic_name, 0, max_wait_ms=60000, min_bytes=1 << 20))
    eventually(lambda: broker_log(cluster).count(gone) > before,
               "the broker to drop the request of a client that went away", CLOSE_WITHIN_S)


def test_a_long_poll_answers_when_its_client_pipelines_another_request(cluster, address, topic_name):
    """The request behind a long poll would wait for it (replies go out in order): the fetch
    answers with what it has as soon as the next request's bytes arrive, not after its minute."""
    with RawClient(address) as client:
        assert create_topic(client, topic_name)["error_code"] == 0
    with RawClient(leader_address(cluster, topic_name), timeout_s=CLOSE_WITHIN_S) as waiting:
        fetch_id = waiting.send(ApiKey.FETCH, fetch_body(topic_name, 0, max_wait_ms=600_000, min_bytes=1 << 20))
        metadata_id = waiting.send(ApiKey.METADATA, {"topics": [topic_name]})
        fetched, metadata = waiting.receive(), waiting.receive()
    assert (fetched.correlation_id, metadata.correlation_id) == (fetch_id, metadata_id)
    assert fetched.body["error_code"] == 0 and fetched.body["partitions"][0]["size"] == 0
