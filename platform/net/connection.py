"""Client network layer: one pipelined TCP connection per broker.

A :class:`Connection` writes requests under a lock from any thread and a reader thread matches
responses to :class:`concurrent.futures.Future` objects by correlation id, so a producer can keep
several produce requests in flight on one socket and a consumer can long-poll without blocking
others. Threads instead of asyncio: the callers (producer sender, consumer ``poll``) are plain
threads, and handing every request across an event-loop boundary would cost more than it saves.

A request that outlives its timeout closes the connection (responses come in order, so a lost one
leaves the stream unusable) and every pending request fails with a retriable error. The
:class:`ConnectionPool` reconnects on demand with exponential backoff. The bytes travel over a
plain or TLS channel (:mod:`ember.net.channel`) as the client's ``security_protocol`` says,
authenticated with SASL first on SASL_* (:mod:`ember.net.sasl`). When the broker announces a
session lifetime (Kafka's ``connections.max.reauth.ms``), the first request sent past 85% of it
re-authenticates on the same connection first, holding ``_send_lock`` so nothing else is sent in
between (requests in flight are answered meanwhile); a refused re-authentication (user removed,
password changed) fails the connection with SaslAuthenticationFailed. A connection idle past the
lifetime re-authenticates the same way before its next request, which the broker allows.

Two locks, never nested the other way round: ``_send_lock`` keeps frames whole on the socket and
``_state_lock`` guards the pending table and the closed state. Failing a connection takes only
``_state_lock`` and shuts the socket down (which wakes a sender blocked in ``sendmsg``), so it can
run from the sending thread, the reader thread or ``close()`` without waiting for a send. The
reader thread releases the file descriptor once no send can still use it.
"""
from __future__ import annotations

import itertools
import logging
import select
import socket
import ssl
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Iterable, Mapping, Sequence

from ember.errors import BrokerNotAvailable, EmberError, NetworkError, RequestTimedOut
from ember.net.channel import Address, diagnose_refusal, identify_foreign_service, open_channel
from ember.net.sasl import authenticate, exchange
from ember.record.header import Buffer
from ember.security.client import ClientSecurity
from ember.wire.api_keys import ApiKey
from ember.wire.frame import (
    DEFAULT_MAX_FRAME_BYTES,
    FRAME_LENGTH,
    Response,
    check_frame_size,
    decode_response,
    encode_request,
)

log = logging.getLogger(__name__)

_READ_CHUNK = 256 * 1024
_POLL_INTERVAL_S = 0.1
#: Share of the broker's session lifetime after which the client re-authenticates (Kafka's
#: clients pick 85-95%).
_REAUTH_AT = 0.85
#: How long the first request on a fresh plaintext connection waits unanswered before the client
#: checks, once and in the background, whether the address is another service (an HTTP server
#: waits silently for headers an ember frame never ends): a newcomer's wrong port fails in seconds.
_SILENCE_PROBE_AFTER_S = 1.0
#: Requests a broker answers at once (no long poll, no wait for replicas or a rebalance): only
#: their silence is probed, so a consumer's first long-polling Fetch never makes a probe.
_PROMPT_APIS = frozenset({ApiKey.METADATA, ApiKey.API_VERSIONS, ApiKey.FIND_COORDINATOR, ApiKey.LIST_OFFSETS,
                          ApiKey.DESCRIBE_CONFIGS, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS, ApiKey.OFFSET_FETCH,
                          ApiKey.DESCRIBE_ACLS, ApiKey.DESCRIBE_CLUSTER, ApiKey.LIST_PARTITION_REASSIGNMENTS,
                          ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ApiKey.INIT_PRODUCER_ID})


def parse_bootstrap(servers: str | Iterable[str]) -> list[Address]:
    """``"host:port,host:port"`` (or a list of such) as ``[(host, port), ...]``."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    addresses = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not HOST:PORT")
        addresses.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not addresses:
        raise ValueError("bootstrap_servers is empty; pass HOST:PORT[,HOST:PORT...]")
    return addresses


class _Pending:
    __slots__ = ("future", "deadline", "api_key", "sent_at")

    def __init__(self, future: Future[Any], deadline: float, api_key: int) -> None:
        self.future, self.deadline, self.api_key = future, deadline, api_key
        self.sent_at = time.monotonic()


class Connection:
    """A connected socket to one broker with pipelined, correlation-matched requests."""

    def __init__(self, address: Address, *, request_timeout_ms: int = 30000, connect_timeout_ms: int = 10000,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, security: ClientSecurity = ClientSecurity(),
                 ssl_context: ssl.SSLContext | None = None) -> None:
        """``ssl_context``: the client's TLS context (built once per pool from ``security``);
        raises BrokerNotAvailable when nobody answers, SslAuthenticationFailed when TLS fails."""
        self.address = address
        self.request_timeout_s = request_timeout_ms / 1000
        self.connect_timeout_s = connect_timeout_ms / 1000
        self.max_frame_bytes = max_frame_bytes
        self.security = security
        self._context = ssl_context if ssl_context is not None or not security.uses_tls else security.ssl_context()
        self._correlation = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._send_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._closed: EmberError | None = None
        self._answered = False
        #: Whether the silence of a fresh connection was probed (:meth:`_probe_silence`).
        self._silence_probed = False
        #: When (monotonic) to re-authenticate; None: the session does not expire.
        self._renew_at: float | None = None
        #: A re-authentication is in progress (it holds ``_send_lock``).
        self._renewing = False
        self._channel = open_channel(address, security, self._context, self.connect_timeout_s)
        if security.uses_sasl:
            self._authenticate()
        self._sock = self._channel.sock
        # Sends block at most a request timeout (a stopped broker must not hang the sender forever).
        self._sock.settimeout(self.request_timeout_s)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._reader = threading.Thread(target=self._read_loop, name=f"ember-conn-{self.name}", daemon=True)
        self._reader.start()

    @property
    def name(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def request(self, api_key: int, body: Mapping[str, Any], payload: Sequence[Buffer] = (), *,
                expect_response: bool = True, timeout_s: float | None = None,
                may_renew: bool = True) -> "Future[Response]":
        """Send a request; the future resolves to the :class:`Response` (or to ``None`` at once
        when ``expect_response`` is false, as for acks=0 produce requests). ``may_renew=False``: never
        re-authenticate first (a caller on an event loop, which must not wait for the SASL answers)."""
        future: Future[Any] = Future()
        deadline = time.monotonic() + (self.request_timeout_s if timeout_s is None else timeout_s)
        self._acquire_send_lock(deadline)
        try:
            renewal_error = self._reauthenticate() if may_renew and self._renewal_due() else None
            send_error = None if renewal_error is not None else \
                self._send(future, api_key, body, payload, expect_response, deadline)
        finally:
            self._send_lock.release()
        if renewal_error is not None:   # failed outside the send lock, as below
            self._fail(renewal_error)
            raise type(renewal_error)(str(renewal_error))
        if send_error is not None:
            # Outside the send lock: diagnosing a refusal probes the broker (bounded, seconds), and
            # failing runs the pending requests' callbacks, which may send.
            failure = self._closed or self._refusal() or NetworkError(
                f"sending to broker {self.name} failed: {send_error}")
            self._fail(failure)
            raise type(failure)(str(failure))
        if not expect_response:
            future.set_result(None)
        return future

    def _acquire_send_lock(self, deadline: float) -> None:
        """Take ``_send_lock`` by the request's ``deadline``, else RequestTimedOut (its holders write
        one frame, bounded by the socket timeout, or re-authenticate, bounded by that exchange's
        deadline). The reader thread (a response's callback sending) never waits for a
        re-authentication: that exchange waits for answers only the reader reads, so the
        callback's request fails at once with a retriable NetworkError instead."""
        on_reader = self._renew_at is not None and threading.current_thread() is self._reader
        while not self._send_lock.acquire(timeout=_POLL_INTERVAL_S / 2 if on_reader
                                          else max(deadline - time.monotonic(), 0.0)):
            if on_reader and self._renewing:
                raise NetworkError(f"connection to broker {self.name} is re-authenticating (SASL); "
                                   f"a request sent from a response callback meanwhile must be retried")
            if time.monotonic() >= deadline:
                raise RequestTimedOut(f"request to broker {self.name} could not be sent within its timeout: "
                                      f"other requests kept the connection busy; retry")

    def _send(self, future: Future[Any], api_key: int, body: Mapping[str, Any], payload: Sequence[Buffer],
              expect_response: bool, deadline: float) -> OSError | None:
        """Write one request (the caller holds ``_send_lock``); the send's error, if any."""
        with self._state_lock:
            if self._closed is not None:
                raise type(self._closed)(str(self._closed))
            correlation_id = next(self._correlation)
            if expect_response:
                self._pending[correlation_id] = _Pending(future, deadline, api_key)
        try:
            self._channel.send(encode_request(api_key, 0, correlation_id, body, payload))
            return None
        except OSError as exc:
            with self._state_lock:
                self._pending.pop(correlation_id, None)
            return exc

    @property
    def renewal_due(self) -> bool:
        """Whether the next request re-authenticates first (waiting for the answers to those in
        flight: an event loop sends it from a worker thread then)."""
        return self._renew_at is not None and time.monotonic() >= self._renew_at

    def _renewal_due(self) -> bool:
        """:attr:`renewal_due`, never on the reader thread (a response's callback sending): it
        could not read the answers it would wait for."""
        return self.renewal_due and threading.current_thread() is not self._reader

    def _session_started(self, started: float, lifetime_ms: int) -> None:
        """Schedule the re-authentication of a session that began at ``started`` (its exchange's start)."""
        self._renew_at = started + lifetime_ms / 1000 * _REAUTH_AT if lifetime_ms > 0 else None

    def _reauthenticate(self) -> EmberError | None:
        """Re-authenticate through the reader thread (the caller holds ``_send_lock``); the error
        that must fail the connection, if any. Bounded by the connect timeout past the deadline of
        the requests in flight (the broker answers them first)."""
        started = time.monotonic()
        with self._state_lock:   # the broker answers in order: the exchange waits behind these
            queued = max((p.deadline for p in self._pending.values()), default=started)
        deadline = max(queued, started) + self.connect_timeout_s

        def call(api_key: ApiKey, body: dict[str, Any], payload: bytes) -> Response:
            future: Future[Response] = Future()
            error = self._send(future, api_key, body, [payload] if payload else [], True, deadline)
            if error is not None:
                raise NetworkError(f"re-authenticating with broker {self.name} failed: {error}")
            return future.result(timeout=max(deadline - time.monotonic(), 0.0))

        self._renewing = True
        try:
            lifetime_ms = exchange(call, self.name, self.security)
        except FutureTimeout:
            return RequestTimedOut(f"broker {self.name} did not answer the SASL re-authentication within "
                                   f"{deadline - started:.0f} s; closed the connection")
        except EmberError as exc:
            return exc
        finally:
            self._renewing = False
        self._session_started(started, lifetime_ms)
        log.debug("re-authenticated with broker %s (session lifetime %d ms)", self.name, lifetime_ms)
        return None

    def close(self, error: EmberError | None = None) -> None:
        """Close the socket and fail every pending request."""
        self._fail(error or NetworkError(f"connection to broker {self.name} was closed"))

    # -- internals ---------------------------------------------------------------------------

    def _fail(self, error: EmberError) -> None:
        """Mark the connection closed, wake every thread using the socket, fail pending requests.

        Takes only ``_state_lock``: callers may hold ``_send_lock`` (a send that failed)."""
        with self._state_lock:
            first = self._closed is None
            if first:
                self._closed = error
            pending, self._pending = self._pending, {}
        if first:
            self._channel.shutdown()
        for entry in pending.values():
            if not entry.future.done():
                entry.future.set_exception(type(error)(str(error)))

    def _expire(self) -> None:
        now = time.monotonic()
        for entry in list(self._pending.values()):
            if entry.deadline < now:
                self._fail(RequestTimedOut(f"broker {self.name} did not answer within the request timeout "
                                           f"(api key {entry.api_key}); closed the connection"))
                return

    def _read_loop(self) -> None:
        poller = select.poll()
        poller.register(self._sock, select.POLLIN)
        buf = bytearray(_READ_CHUNK)
        start = end = 0
        try:
            while self._closed is None:
                if end - start >= FRAME_LENGTH.size:
                    size = FRAME_LENGTH.unpack_from(buf, start)[0]
                    check_frame_size(size, self.max_frame_bytes)
                    total = FRAME_LENGTH.size + size
                    if end - start >= total:
                        self._dispatch(memoryview(buf)[start + FRAME_LENGTH.size:start + total])
                        start += total
                        continue
                    if total > len(buf) - start:
                        # Grow or compact so the whole frame fits; big fetch responses get their own buffer.
                        bigger = bytearray(max(total, _READ_CHUNK))
                        bigger[:end - start] = buf[start:end]
                        buf, start, end = bigger, 0, end - start
                elif start == end:
                    start = end = 0
                    if len(buf) > _READ_CHUNK:
                        buf = bytearray(_READ_CHUNK)
                elif len(buf) - start < FRAME_LENGTH.size:
                    buf[:end - start] = buf[start:end]
                    start, end = 0, end - start
                if not self._channel.buffered() and not poller.poll(_POLL_INTERVAL_S * 1000):
                    self._expire()
                    self._probe_silence()
                    continue
                count = self._channel.recv_into(memoryview(buf)[end:])
                if count is None:
                    continue
                if count == 0:
                    raise ConnectionError("broker closed the connection")
                end += count
        except (OSError, ValueError) as exc:
            if self._closed is None:
                self._fail(self._refusal() or NetworkError(f"connection to broker {self.name} lost: {exc}"))
        except EmberError as exc:
            self._fail(NetworkError(f"bad frame from broker {self.name}: {exc}"))
        finally:
            self._release_socket()

    def _authenticate(self) -> None:
        """SASL before anything else; the channel is closed when it fails."""
        started = time.monotonic()
        try:
            lifetime_ms = authenticate(self._channel, self.address, self.security, self.connect_timeout_s)
        except OSError as exc:
            self._channel.close()
            raise self._refusal() or NetworkError(f"connection to broker {self.name} lost during SASL "
                                                  f"authentication: {exc}") from None
        except BaseException:
            self._channel.close()
            raise
        self._session_started(started, lifetime_ms)

    def _probe_silence(self) -> None:
        """Once per plaintext connection that has not answered anything yet: when a request a broker
        answers at once has waited :data:`_SILENCE_PROBE_AFTER_S`, check in a background thread (not
        to delay reading a slow broker's answer) whether the address is an HTTP server (the one
        service that stays silent), and fail the connection with what it is. A real broker closes
        the probe (an oversized frame), and the request keeps waiting."""
        if self._answered or self._silence_probed or self._context is not None or self.security.uses_sasl:
            return
        now = time.monotonic()
        with self._state_lock:
            if not any(now - entry.sent_at >= _SILENCE_PROBE_AFTER_S and entry.api_key in _PROMPT_APIS
                       for entry in self._pending.values()):
                return
        self._silence_probed = True

        def probe() -> None:
            error = identify_foreign_service(self.address, only_http=True)
            if error is not None and not self._answered:
                self._fail(error)

        threading.Thread(target=probe, name=f"ember-probe-{self.name}", daemon=True).start()

    def _refusal(self) -> EmberError | None:
        """A security mismatch, when the broker closed this connection before answering anything
        (a broker refusing a client certificate closes it right after the handshake, maybe before
        the first request is sent)."""
        if self._answered:
            return None
        return diagnose_refusal(self.address, self.security, self._context, self.connect_timeout_s)

    def _release_socket(self) -> None:
        """Close the descriptor once the connection is failed and no send holds the socket.

        The socket is shut down by then, so a send still in progress returns at once."""
        if self._closed is None:
            self._fail(NetworkError(f"connection to broker {self.name} stopped reading"))
        with self._send_lock:
            self._channel.close()

    def _dispatch(self, frame: memoryview) -> None:
        response = decode_response(frame)
        self._answered = True
        if response.payload:
            # The read buffer is reused; the payload must outlive it.
            response.payload = memoryview(bytes(response.payload))
        with self._state_lock:
            entry = self._pending.pop(response.correlation_id, None)
        if entry is None and self._closed is None:
            log.warning("broker %s sent an unexpected correlation id %d", self.name, response.correlation_id)
        if entry is None:
            return
        if not entry.future.done():
            entry.future.set_result(response)


class ConnectionPool:
    """Connections by broker address, reconnected on demand with exponential backoff."""

    def __init__(self, *, request_timeout_ms: int = 30000, reconnect_backoff_ms: int = 50,
                 reconnect_backoff_max_ms: int = 1000, security: ClientSecurity = ClientSecurity()) -> None:
        self.request_timeout_ms = request_timeout_ms
        self.security = security
        self._context = security.ssl_context() if security.uses_tls else None
        self._backoff_s = reconnect_backoff_ms / 1000
        self._backoff_max_s = reconnect_backoff_max_ms / 1000
        self._connections: dict[Address, Connection] = {}
        self._failures: dict[Address, tuple[int, float]] = {}   # address -> (attempts, retry_at)
        self._lock = threading.Lock()

    def get(self, address: Address) -> Connection:
        """An open connection to ``address``; raises BrokerNotAvailable while backing off."""
        conn = self._connections.get(address)
        if conn is not None and not conn.closed:
            return conn
        with self._lock:
            conn = self._connections.get(address)
            if conn is not None and not conn.closed:
                return conn
            attempts, retry_at = self._failures.get(address, (0, 0.0))
            now = time.monotonic()
            if now < retry_at:
                raise BrokerNotAvailable(f"broker {address[0]}:{address[1]} is unreachable; retrying in "
                                         f"{(retry_at - now) * 1000:.0f} ms")
            try:
                conn = Connection(address, request_timeout_ms=self.request_timeout_ms, security=self.security,
                                  ssl_context=self._context)
            except BrokerNotAvailable:
                delay = min(self._backoff_s * 2 ** attempts, self._backoff_max_s)
                self._failures[address] = (attempts + 1, now + delay)
                raise
            self._failures.pop(address, None)
            self._connections[address] = conn
            return conn

    def is_ready(self, address: Address) -> bool:
        """Whether ``get`` would not be refused by backoff right now."""
        conn = self._connections.get(address)
        return (conn is not None and not conn.closed) or time.monotonic() >= self._failures.get(address, (0, 0.0))[1]

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, {}
        for conn in connections.values():
            conn.close()
