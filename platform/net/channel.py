"""The byte stream under a :class:`~ember.net.connection.Connection`: plain TCP, or TLS.

TLS runs over memory BIOs (:meth:`ssl.SSLContext.wrap_bio`) guarded by one lock, because a
connection reads on its reader thread while other threads send, and one OpenSSL connection must
not be used by two threads at once; the TCP socket itself stays as the plain channel uses it.
Refusals become :class:`~ember.errors.SslAuthenticationFailed` saying what to set: an untrusted
certificate, a plaintext listener (the broker closes the handshake), a TLS listener reached in
plain text, or a client certificate the broker requires or refuses (TLS 1.3 tells a client
that only after the handshake, by closing the connection). An address that is some other service
(an HTTP server such as a broker's metrics endpoint, a Kafka-protocol listener, ZooKeeper) becomes
:class:`NotAnEmberListener` naming what it is (:func:`identify_foreign_service`).
"""
from __future__ import annotations

import select
import socket
import ssl
import struct
import threading
import time
from typing import Sequence

from ember.errors import BrokerNotAvailable, EmberError, NetworkError, SslAuthenticationFailed
from ember.record.header import Buffer
from ember.security.client import ClientSecurity

Address = tuple[str, int]

_RAW_CHUNK = 256 * 1024
#: How long a diagnosis waits for a broker to close a fresh TLS connection it refuses.
_REFUSAL_WAIT_S = 2.0
#: How long each probe of :func:`identify_foreign_service` waits for an answer.
FOREIGN_PROBE_WAIT_S = 1.0
#: Kafka's ApiVersions v0 request (correlation id 0x454d4252, client id "ember-probe").
_KAFKA_PROBE_CORRELATION = 0x454D4252
_KAFKA_PROBE_BODY = struct.pack(">hhih", 18, 0, _KAFKA_PROBE_CORRELATION, 11) + b"ember-probe"
_KAFKA_PROBE = struct.pack(">i", len(_KAFKA_PROBE_BODY)) + _KAFKA_PROBE_BODY
_WHERE = "`ember cluster status --data DIR` lists the bootstrap addresses (its \"bootstrap:\" line)"


class NotAnEmberListener(NetworkError):
    """The address answers, but as some other service (HTTP, Kafka's protocol, ZooKeeper), not as an
    ember listener: retrying cannot help."""
    retriable = False


class PlainChannel:
    """A TCP socket: ``sendmsg`` of the caller's buffers, ``recv_into`` the caller's buffer."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def send(self, buffers: Sequence[Buffer]) -> None:
        views = [memoryview(b).cast("B") for b in buffers if len(b)]
        while views:
            sent = self.sock.sendmsg(views[:512])
            while sent:
                if sent >= len(views[0]):
                    sent -= len(views[0])
                    views.pop(0)
                else:
                    views[0] = views[0][sent:]
                    sent = 0

    def buffered(self) -> bool:
        """Whether bytes may be readable without the socket being readable."""
        return False

    def recv_into(self, view: memoryview) -> int | None:
        """Bytes read (0: end of stream; None: nothing yet). Call when the socket is readable."""
        return self.sock.recv_into(view)

    def shutdown(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()


class TlsChannel(PlainChannel):
    """TLS over the socket; the handshake runs in the constructor, within ``timeout_s``."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str | None,
                 timeout_s: float) -> None:
        super().__init__(sock)
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_hostname=server_hostname)
        self._lock = threading.Lock()
        self._poller = select.poll()
        self._poller.register(sock, select.POLLIN)
        self._readable = False
        self._handshake(timeout_s)

    @property
    def version(self) -> str | None:
        return self._tls.version()

    def _handshake(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.sock.sendall(self._outgoing.read())
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise socket.timeout(f"no TLS handshake within {timeout_s:.1f}s") from None
                self.sock.settimeout(remaining)
                data = self.sock.recv(_RAW_CHUNK)
                if not data:
                    raise ConnectionResetError("the broker closed the connection during the TLS handshake") from None
                self._incoming.write(data)
        self.sock.sendall(self._outgoing.read())

    def send(self, buffers: Sequence[Buffer]) -> None:
        data = b"".join(buffers)
        with self._lock:
            self._tls.write(data)
            # Also carries what a read produced (a TLS 1.3 key update), in stream order.
            encrypted = self._outgoing.read()
        self.sock.sendall(encrypted)

    def buffered(self) -> bool:
        return self._readable

    def recv_into(self, view: memoryview) -> int | None:
        while True:
            with self._lock:
                try:
                    count = self._tls.read(len(view), view)
                    self._readable = True   # the record may hold more
                    return count   # type: ignore[return-value]  # into a buffer, read() returns a count; typeshed: bytes
                except ssl.SSLWantReadError:
                    self._readable = False
                except ssl.SSLZeroReturnError:
                    return 0
            if not self._poller.poll(0):
                return None
            data = self.sock.recv(_RAW_CHUNK)
            if not data:
                return 0
            with self._lock:
                self._incoming.write(data)


def _name(address: Address) -> str:
    return f"{address[0]}:{address[1]}"


def open_channel(address: Address, security: ClientSecurity, context: ssl.SSLContext | None,
                 timeout_s: float) -> PlainChannel:
    """Connect (and shake hands) within ``timeout_s``; raises BrokerNotAvailable when nobody
    answers, SslAuthenticationFailed when TLS cannot be set up."""
    try:
        sock = socket.create_connection(address, timeout=timeout_s)
    except OSError as exc:
        raise BrokerNotAvailable(f"cannot connect to broker at {_name(address)}: {exc}") from None
    if context is None:
        return PlainChannel(sock)
    try:
        return TlsChannel(sock, context, address[0], timeout_s)
    except (OSError, EmberError) as exc:
        sock.close()
        raise _handshake_error(address, security, exc) from None


def _handshake_error(address: Address, security: ClientSecurity, exc: BaseException) -> EmberError:
    name = _name(address)
    if isinstance(exc, EmberError):
        return exc
    if isinstance(exc, ssl.SSLCertVerificationError):
        if exc.verify_code in (62, 64):   # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
            return SslAuthenticationFailed(
                f"broker {name}'s certificate does not name the host {address[0]!r} ({exc.verify_message}): "
                f"connect with a name in its certificate, or set {security.setting('ssl_check_hostname', False)}")
        return SslAuthenticationFailed(
            f"broker {name}'s certificate is not trusted ({exc.verify_message}): set {security.setting('ssl_cafile')} to the CA "
            f"certificate that signed it (now: {security.cafile or 'the system CAs'})")
    if isinstance(exc, ssl.SSLError) and "ALERT" in str(exc.reason or ""):
        return SslAuthenticationFailed(
            f"broker {name} refused the TLS handshake ({exc.reason}): it may require a client certificate "
            f"signed by a CA it trusts ({security.setting('ssl_certfile')}, {security.setting('ssl_keyfile')}) "
            f"or other TLS versions")
    if isinstance(exc, ssl.SSLError):
        return SslAuthenticationFailed(f"TLS handshake with broker {name} failed ({exc.reason or exc})")
    if isinstance(exc, TimeoutError):   # a paused or overloaded broker: retried like any silent one
        return BrokerNotAvailable(f"broker {name} did not finish a TLS handshake in time ({exc})")
    # Closed during the handshake: a plaintext listener, unless the broker is just gone.
    if not _reachable(address):
        return BrokerNotAvailable(f"broker {name} went away during the TLS handshake: {exc}")
    return SslAuthenticationFailed(
        f"broker {name} does not complete a TLS handshake ({exc}): its listener is probably plaintext; "
        f"set {security.setting('security_protocol', 'PLAINTEXT')} or connect to the broker's SSL listener")


def _reachable(address: Address) -> bool:
    try:
        socket.create_connection(address, timeout=1.0).close()
        return True
    except OSError:
        return False


def diagnose_refusal(address: Address, security: ClientSecurity, context: ssl.SSLContext | None,
                     timeout_s: float) -> EmberError | None:
    """Why a broker closed a fresh connection before answering anything, when that is a security
    mismatch or another service at the address (:func:`identify_foreign_service`); None when it is
    neither (an ordinary network failure, retried as such)."""
    timeout_s = min(timeout_s, 10.0)
    if context is None:
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        probe.check_hostname, probe.verify_mode = False, ssl.CERT_NONE
        if _speaks_tls(address, probe, min(timeout_s, _REFUSAL_WAIT_S)):   # a TLS server answers at once
            return SslAuthenticationFailed(
                f"broker {_name(address)} closed the connection: its listener requires TLS; set "
                f"{security.setting('security_protocol', 'SASL_SSL' if security.uses_sasl else 'SSL')} and "
                f"{security.setting('ssl_cafile')} to the CA that "
                f"signed the broker's certificate")
        return identify_foreign_service(address, min(timeout_s, FOREIGN_PROBE_WAIT_S))
    try:
        channel = open_channel(address, security, context, timeout_s)
    except SslAuthenticationFailed as exc:
        return exc
    except EmberError:
        return None
    try:
        if _closed_by_peer(channel, min(timeout_s, _REFUSAL_WAIT_S)):
            refused = "refuses the client certificate given" if security.certfile or security.context \
                else "requires a client certificate (ssl.client.auth=required)"
            return SslAuthenticationFailed(
                f"broker {_name(address)} closes TLS connections right after the handshake: it {refused}; "
                f"set {security.setting('ssl_certfile')} and {security.setting('ssl_keyfile')} to a certificate signed "
                f"by a CA in the broker's truststore")
        return None
    finally:
        channel.close()


def _speaks_tls(address: Address, context: ssl.SSLContext, timeout_s: float) -> bool:
    try:
        sock = socket.create_connection(address, timeout=timeout_s)
    except OSError:
        return False
    try:
        TlsChannel(sock, context, None, timeout_s)
        return True
    except ssl.SSLError as exc:   # an alert: a TLS server that refused this probe
        return "ALERT" in str(exc.reason or "")
    except OSError:
        return False
    finally:
        sock.close()


def _closed_by_peer(channel: PlainChannel, wait_s: float) -> bool:
    """Whether the peer closes an idle connection within ``wait_s`` (session tickets are read on)."""
    buffer = memoryview(bytearray(4096))
    poller = select.poll()
    poller.register(channel.sock, select.POLLIN)
    deadline = time.monotonic() + wait_s
    while (remaining := deadline - time.monotonic()) > 0:
        if channel.buffered() or poller.poll(remaining * 1000):
            try:
                if channel.recv_into(buffer) == 0:
                    return True
            except OSError:
                return True
    return False


def identify_foreign_service(address: Address, timeout_s: float = FOREIGN_PROBE_WAIT_S, *,
                             only_http: bool = False) -> NotAnEmberListener | None:
    """What a plaintext address that does not answer like an ember listener is, when it is a
    service a newcomer confuses with one; None when it is none of them (or answers nothing).

    Each probe is a fresh connection, bounded by ``timeout_s``, whose first bytes every other
    service refuses as an oversized frame and closes: an HTTP request (any HTTP server answers
    ``HTTP/1.x``), ZooKeeper's four-letter word ``srvr`` (whitelisted by default; read-only), and
    Kafka's ApiVersions v0 (a Kafka listener answers its fixed-layout response). ``only_http``: the
    first probe alone (for a peer that stays silent: the others close at once)."""
    name = _name(address)
    if probe(address, f"GET / HTTP/1.0\r\nHost: {address[0]}\r\n\r\n".encode(), timeout_s).startswith(b"HTTP/"):
        return NotAnEmberListener(
            f"{name} is an HTTP server (a broker's metrics endpoint?), not an ember listener; {_WHERE}")
    if only_http:
        return None
    reply = probe(address, b"srvr", timeout_s)
    if b"zookeeper" in reply.lower() or b"is not executed" in reply:
        return NotAnEmberListener(
            f"{name} is a ZooKeeper server (the cluster's metadata store, for brokers), not an ember listener; "
            f"{_WHERE}")
    if _is_kafka_api_versions(probe(address, _KAFKA_PROBE, timeout_s)):
        return NotAnEmberListener(
            f"{name} is a Kafka-protocol listener (a broker's KAFKA listener, for Kafka clients), not an ember "
            f"listener; ember's clients and CLI connect to the ember listener: {_WHERE}")
    return None


def probe(address: Address, request: bytes, timeout_s: float, context: ssl.SSLContext | None = None) -> bytes:
    """The first bytes (up to 4 KiB) ``address`` answers ``request`` with within ``timeout_s``
    (over TLS with ``context``); b"" when it closes, answers nothing or cannot be reached."""
    deadline = time.monotonic() + timeout_s
    try:
        with socket.create_connection(address, timeout=timeout_s) as raw, \
                (context.wrap_socket(raw, server_hostname=address[0]) if context else raw) as sock:
            sock.sendall(request)
            received = b""
            while len(received) < 4096 and (remaining := deadline - time.monotonic()) > 0:
                sock.settimeout(remaining)
                chunk = sock.recv(4096 - len(received))
                if not chunk:
                    break
                received += chunk
                if len(received) >= 64:   # enough to tell every service probed apart
                    break
            return received
    except OSError:
        return b""


def _is_kafka_api_versions(reply: bytes) -> bool:
    """Whether ``reply`` starts like Kafka's ApiVersions v0 response to :data:`_KAFKA_PROBE`: size,
    our correlation id, an error code, then api_key/min/max triples that fill the size exactly."""
    if len(reply) < 10:
        return False
    size, correlation_id, _error_code = struct.unpack_from(">iih", reply)
    if correlation_id != _KAFKA_PROBE_CORRELATION:
        return False
    if len(reply) >= 14:
        count = struct.unpack_from(">i", reply, 10)[0]
        return 0 <= count <= 1000 and size == 4 + 2 + 4 + 6 * count
    return size >= 6
