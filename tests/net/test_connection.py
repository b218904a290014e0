"""Connection liveness: a failed send, a silent broker and close() each end every request in bounded time.

A real loopback socket plays the broker; nothing is mocked."""
from __future__ import annotations

import socket
import threading
from concurrent.futures import Future

import pytest

from ember.errors import NetworkError, RequestTimedOut
from ember.net.connection import Connection
from ember.wire.api_keys import ApiKey

BOUND_S = 10.0


@pytest.fixture
def silent_broker():
    """A listening socket that accepts connections and never answers (nor reads)."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()
    stop.set()
    thread.join(BOUND_S)
    for sock in accepted:
        sock.close()
    server.close()


def in_thread(fn) -> Future:
    """Run ``fn`` on a daemon thread; the future holds its result or exception."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:   # noqa: BLE001 - handed to the test
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future


def test_a_send_that_fails_raises_and_fails_pending_requests_instead_of_deadlocking(silent_broker):
    conn = Connection(silent_broker, request_timeout_ms=60_000)
    pending = conn.request(ApiKey.METADATA, {})
    conn._sock.shutdown(socket.SHUT_WR)   # the next send gets EPIPE, as after a broker's death

    attempt = in_thread(lambda: conn.request(ApiKey.METADATA, {}))
    with pytest.raises(NetworkError, match="sending to broker"):
        attempt.result(timeout=BOUND_S)
    with pytest.raises(NetworkError):
        pending.result(timeout=BOUND_S)
    assert conn.closed
    with pytest.raises(NetworkError):
        conn.request(ApiKey.METADATA, {})
    assert in_thread(conn.close).result(timeout=BOUND_S) is None


def test_a_request_the_broker_never_answers_fails_after_its_timeout(silent_broker):
    conn = Connection(silent_broker, request_timeout_ms=300)
    with pytest.raises(RequestTimedOut):
        conn.request(ApiKey.METADATA, {}).result(timeout=BOUND_S)
    assert conn.closed


def test_close_fails_pending_requests_while_another_thread_is_blocked_sending(silent_broker):
    conn = Connection(silent_broker, request_timeout_ms=60_000)
    pending = conn.request(ApiKey.METADATA, {})
    # The broker reads nothing: a large enough request fills both socket buffers and blocks in sendmsg.
    blocked = in_thread(lambda: conn.request(ApiKey.PRODUCE, {}, [bytes(64 * 1024 * 1024)]))
    assert not blocked.done()
    in_thread(conn.close).result(timeout=BOUND_S)
    with pytest.raises(NetworkError):
        blocked.result(timeout=BOUND_S)
    with pytest.raises(NetworkError):
        pending.result(timeout=BOUND_S)


def test_a_callback_sending_while_the_connection_re_authenticates_fails_fast_instead_of_stalling_it(silent_broker):
    """A re-authentication (``connections.max.reauth.ms``) holds the send lock while it waits for
    answers that only the reader thread reads; a response callback sending on the reader thread
    meanwhile must not wait for that lock (the exchange would then time out and kill the
    connection): it fails at once with a retriable error."""
    import time

    conn = Connection(silent_broker, request_timeout_ms=60_000)
    conn._renew_at = time.monotonic() + 3600      # an expiring SASL session (no renewal due yet)
    renewing, release = threading.Event(), threading.Event()

    def re_authenticate() -> None:     # as Connection._reauthenticate: lock held, answers awaited
        with conn._send_lock:
            conn._renewing = True
            renewing.set()
            release.wait(BOUND_S)
            conn._renewing = False
    holder = in_thread(re_authenticate)
    assert renewing.wait(BOUND_S)

    def callback_send() -> None:
        conn._reader = threading.current_thread()    # a response callback runs on the reader thread
        conn.request(ApiKey.METADATA, {})
    with pytest.raises(NetworkError, match="re-authenticating") as raised:
        in_thread(callback_send).result(timeout=BOUND_S)
    assert raised.value.retriable and not conn.closed
    release.set()
    holder.result(timeout=BOUND_S)
    conn.close()
