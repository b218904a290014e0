import socket
import threading

import pytest
from kazoo.client import KazooClient

from ember.launcher.zookeeper_server import ZooKeeperServer, _ephemeral_ports, free_port, is_healthy


@pytest.mark.integration
def test_zookeeper_starts_serves_and_stops(tmp_path):
    server = ZooKeeperServer(tmp_path / "zk", free_port())
    server.start()
    try:
        client = KazooClient(hosts=server.connect_string, timeout=10)
        client.start(timeout=10)
        client.ensure_path("/ember/probe")
        assert client.get_children("/ember") == ["probe"]
        client.stop()
    finally:
        server.stop()
    assert not is_healthy(server.host, server.port)


@pytest.mark.integration
def test_two_zookeepers_side_by_side(tmp_path):
    first = ZooKeeperServer(tmp_path / "a", free_port())
    second = ZooKeeperServer(tmp_path / "b", free_port())
    first.start()
    try:
        second.start()
        try:
            assert first.port != second.port
            assert is_healthy(first.host, first.port) and is_healthy(second.host, second.port)
        finally:
            second.stop()
    finally:
        first.stop()


def test_free_ports_lie_below_the_ephemeral_range_and_are_never_given_twice():
    """Outgoing connections take their local ports from the ephemeral range; a server port from
    there can be taken between the pick and the bind (seen as EADDRINUSE in CI)."""
    low, _ = _ephemeral_ports()
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(port < low for port in ports)


@pytest.mark.parametrize("answer, healthy", [
    (b"This ZooKeeper instance is not currently serving requests\n", False),
    (b"imok", False),
    (b"Zookeeper version: 3.8.0-1, built on 2024-06-16\nMode: standalone\n", True),
])
def test_a_zookeeper_is_healthy_only_once_it_serves_requests(answer, healthy):
    """ZooKeeper binds its port (and answers ``ruok``) before it has loaded its database; a
    launcher that called that started handed out a server whose first session could time out."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def answer_once() -> None:
            conn, _ = listener.accept()
            with conn:
                assert conn.recv(4) == b"srvr"
                conn.sendall(answer)

        server = threading.Thread(target=answer_once, daemon=True)
        server.start()
        assert is_healthy("127.0.0.1", port) is healthy
        server.join(timeout=5)
