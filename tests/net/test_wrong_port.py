"""A newcomer's wrong port (issue "A newcomer's first hour", item 5): a client pointed at a broker's
metrics endpoint, at its Kafka listener, at ZooKeeper or at any HTTP server fails within seconds
with :class:`NotAnEmberListener` saying what the address is and where the bootstrap addresses are
listed, instead of waiting ~25 s or saying only "broker closed the connection". A real broker's
listener is never mistaken for one of them."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterator

import pytest

from ember.client.metadata import MetadataClient
from ember.launcher.local import LocalCluster
from ember.net.channel import NotAnEmberListener, identify_foreign_service

#: "within a few seconds": one second of silence, then probes of about a second at most.
BOUND_S = 6.0
WHERE = "`ember cluster status --data DIR` lists the bootstrap addresses"


def _refresh_error(bootstrap: str) -> tuple[BaseException, float]:
    client = MetadataClient(bootstrap, request_timeout_ms=30000)
    started = time.monotonic()
    try:
        with pytest.raises(Exception) as info:
            client.refresh()
    finally:
        client.pool.close()
    return info.value, time.monotonic() - started


@pytest.fixture
def http_server() -> Iterator[str]:
    """A plain local HTTP server (it reads a request line, so an ember frame leaves it waiting)."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello\n")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_plain_http_server_is_named_within_seconds(http_server: str) -> None:
    error, elapsed = _refresh_error(http_server)
    assert isinstance(error, NotAnEmberListener), error
    assert f"{http_server} is an HTTP server" in str(error) and WHERE in str(error)
    assert elapsed < BOUND_S
    assert not error.retriable


@pytest.mark.integration
def test_a_brokers_metrics_port_is_named_within_seconds(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(brokers=1, metrics=True)
    address = cluster.metrics_addresses[1]
    error, elapsed = _refresh_error(address)
    assert isinstance(error, NotAnEmberListener), error
    assert str(error).startswith(f"{address} is an HTTP server (a broker's metrics endpoint?), not an ember "
                                 f"listener; {WHERE}"), error
    assert elapsed < BOUND_S
    # ... and the CLI says so too, in a few seconds, with a non-zero exit.
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "ember.cli", "topics", "list", "--bootstrap", address],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0, out
    assert f"NotAnEmberListener: {address} is an HTTP server" in out.stderr, out
    assert time.monotonic() - started < BOUND_S + 5   # + the interpreter's start-up
    # The broker's own listener is not mistaken for one of them.
    assert identify_foreign_service((cluster.brokers[1].host, cluster.brokers[1].port)) is None


@pytest.mark.integration
def test_a_kafka_listener_is_named_at_once(shared_cluster: LocalCluster) -> None:
    address = shared_cluster.brokers[1].kafka_address
    assert address is not None
    error, elapsed = _refresh_error(address)
    assert isinstance(error, NotAnEmberListener), error
    assert f"{address} is a Kafka-protocol listener (a broker's KAFKA listener, for Kafka clients)" in str(error)
    assert WHERE in str(error)
    assert elapsed < BOUND_S


@pytest.mark.integration
def test_zookeeper_is_named_at_once(shared_cluster: LocalCluster) -> None:
    address = shared_cluster.zk_connect
    error, elapsed = _refresh_error(address)
    assert isinstance(error, NotAnEmberListener), error
    assert f"{address} is a ZooKeeper server" in str(error) and WHERE in str(error)
    assert elapsed < BOUND_S


@pytest.mark.integration
def test_a_real_broker_is_none_of_them(shared_cluster: LocalCluster) -> None:
    broker = shared_cluster.brokers[1]
    assert identify_foreign_service((broker.host, broker.port)) is None
    client = MetadataClient(broker.address)
    try:
        client.refresh()
        assert client.brokers
    finally:
        client.pool.close()
