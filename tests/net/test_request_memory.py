"""Bytes of requests in flight are bounded (``queued.max.request.bytes``, docs/protocol.md "Hostile
input"): many connections each sending a large frame at once do not make the broker hold all of
them; each frame waits for room before it is read. Measured as the broker process's peak RSS."""
from __future__ import annotations

import re
import socket
import threading
from pathlib import Path
from typing import Callable

import pytest

from ember.launcher.local import LocalCluster
from ember.wire.api_keys import ApiKey
from ember.wire.frame import encode_request

pytestmark = pytest.mark.integration

CONNECTIONS = 12
FRAME_MB = 24


def _memory_mb(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    return {k: int(v) // 1024 for k, v in re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M)}


def _send_all(address: tuple[str, int], frame: bytes) -> list[str]:
    """Send ``frame`` on CONNECTIONS connections at once; how each ended (answered or closed)."""
    outcomes: list[str] = []

    def one() -> None:
        with socket.create_connection(address, timeout=120) as sock:
            sock.sendall(frame)
            head = sock.recv(4)
            outcomes.append("answered" if len(head) == 4 else "closed")

    threads = [threading.Thread(target=one) for _ in range(CONNECTIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    return outcomes


def _kafka_frame(size: int) -> bytes:
    """An ApiVersions v0 request (header v1, no body fields) padded to ``size`` bytes."""
    body = (18).to_bytes(2, "big") + (0).to_bytes(2, "big") + (7).to_bytes(4, "big") + (-1).to_bytes(2, "big", signed=True)
    return size.to_bytes(4, "big") + body + bytes(size - len(body))


@pytest.mark.parametrize("listener", ["ember", "kafka"])
def test_many_connections_sending_large_frames_at_once_do_not_add_up_in_memory(
        make_cluster: Callable[..., LocalCluster], listener: str) -> None:
    cluster = make_cluster(1, {"queued.max.request.bytes": str(32 << 20)})
    broker = cluster.brokers[1]
    assert broker.pid is not None
    size = FRAME_MB << 20
    if listener == "ember":
        frame = b"".join(encode_request(ApiKey.API_VERSIONS, 0, 7, {}, [bytes(size)]))
        address = (broker.host, broker.port)
    else:
        frame = _kafka_frame(size)
        host, port = cluster.kafka_bootstrap.split(",")[0].rsplit(":", 1)
        address = (host, int(port))
    before = _memory_mb(broker.pid)
    outcomes = _send_all(address, frame)
    after = _memory_mb(broker.pid)
    assert len(outcomes) == CONNECTIONS and "closed" not in outcomes     # every frame was served, in turn
    # All frames at once would be CONNECTIONS x 24 MiB = 288 MiB (twice that while a frame is copied out of the
    # read buffer); the budget (32 MiB) lets one 24 MiB frame in at a time.
    grown = after["VmHWM"] - before["VmRSS"]
    assert grown < 4 * FRAME_MB + 32, f"broker memory grew by {grown} MB ({before} -> {after})"
