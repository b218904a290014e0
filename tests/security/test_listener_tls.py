"""A TLS listener in process (one :class:`BrokerServer`, a stub dispatcher, real sockets and real
certificates): the handshake, the session's principal, file regions sent through TLS, and what
each kind of refusal looks like on both ends: a typed client error, one broker log line."""
from __future__ import annotations

import asyncio
import os
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from ember.errors import BrokerNotAvailable, SslAuthenticationFailed
from ember.launcher.zookeeper_server import free_port
from ember.net.connection import Connection
from ember.net.server import BrokerServer
from ember.security.certificates import LOCAL_HOSTS, CertificateAuthority
from ember.security.client import ClientSecurity
from ember.security.listener import ListenerSecurity
from ember.security.protocol import SecurityProtocol
from ember.security.session import ANONYMOUS, current_session
from ember.security.tls import TlsSettings
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Request
from ember.wire.reply import FileRegion, Reply

BOUND_S = 15.0
LARGE = 6 * 1024 * 1024 + 12345   # several MB, not a multiple of the server's chunk size


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> CertificateAuthority:
    authority = CertificateAuthority.create(tmp_path_factory.mktemp("pki"))
    authority.issue("server", "ember-broker", LOCAL_HOSTS)
    authority.issue("client", "ember-client")
    return authority


class Listener:
    """A BrokerServer on its own event loop thread; its dispatcher records each request's session
    and answers FETCH with a file region of ``region_file``."""

    def __init__(self, security: ListenerSecurity, region_file: Path) -> None:
        self.port = free_port()
        self.sessions: list = []
        self.region_file = region_file
        self.loop = asyncio.new_event_loop()
        self.server = BrokerServer(self.dispatch, "127.0.0.1", self.port, 64 << 20, 60_000, None, security)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(BOUND_S)

    async def _start(self) -> None:
        await self.server.bind()
        await self.server.start_serving()

    async def dispatch(self, request: Request) -> Reply:
        self.sessions.append(current_session())
        if request.api_key == ApiKey.FETCH:
            return Reply({"error_code": 0}, [FileRegion(open(self.region_file, "rb"), 7, LARGE)])
        return Reply({"error_code": 0})

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(BOUND_S)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(BOUND_S)


@pytest.fixture(scope="module")
def region_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("segment") / "00000000000000000000.log"
    path.write_bytes(os.urandom(LARGE + 100))
    return path


def _listener(pki: CertificateAuthority, region_file: Path, client_auth: str, timeout_ms: int = 10000) -> Listener:
    settings = TlsSettings("EMBER", keystore_location=str(pki.directory / "server-keystore.pem"),
                           truststore_location=str(pki.cert_path), client_auth=client_auth,
                           handshake_timeout_ms=timeout_ms)
    return Listener(ListenerSecurity("EMBER", SecurityProtocol.SSL, settings.server_context(), timeout_ms / 1000),
                    region_file)


@pytest.fixture
def mutual_tls(pki, region_file) -> Iterator[Listener]:
    listener = _listener(pki, region_file, "required", timeout_ms=500)
    yield listener
    listener.close()


def logged(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    """Whether the broker logs ``text`` within BOUND_S (its loop logs after the client saw the close)."""
    deadline = time.monotonic() + BOUND_S
    while text not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
    return text in caplog.text


def client(pki: CertificateAuthority, certificate: bool = True) -> ClientSecurity:
    return ClientSecurity.from_options({
        "security_protocol": "SSL", "ssl_cafile": str(pki.cert_path),
        **({"ssl_certfile": str(pki.directory / "client.pem"), "ssl_keyfile": str(pki.directory / "client-key.pem")}
           if certificate else {})})


def test_a_client_certificate_becomes_the_sessions_principal_and_large_file_regions_arrive_intact(
        pki, region_file, mutual_tls):
    conn = Connection(("127.0.0.1", mutual_tls.port), security=client(pki), request_timeout_ms=int(BOUND_S * 1000))
    try:
        response = conn.request(ApiKey.FETCH, {}).result(BOUND_S)
    finally:
        conn.close()
    assert bytes(response.payload) == region_file.read_bytes()[7:7 + LARGE]
    (session,) = mutual_tls.sessions
    assert session.principal == "User:CN=ember-client,O=ember"
    assert session.security_protocol is SecurityProtocol.SSL and session.tls_version in ("TLSv1.2", "TLSv1.3")


def test_without_client_auth_a_tls_client_is_anonymous(pki, region_file):
    listener = _listener(pki, region_file, "none")
    try:
        conn = Connection(("127.0.0.1", listener.port), security=client(pki, certificate=False))
        conn.request(ApiKey.API_VERSIONS, {}).result(BOUND_S)
        conn.close()
    finally:
        listener.close()
    assert [s.principal for s in listener.sessions] == [ANONYMOUS]


def test_a_plaintext_client_on_a_tls_listener_gets_a_typed_error_and_the_broker_one_line(mutual_tls, caplog):
    caplog.set_level("INFO", logger="ember.security.listener")
    conn = Connection(("127.0.0.1", mutual_tls.port), request_timeout_ms=int(BOUND_S * 1000))
    with pytest.raises(SslAuthenticationFailed, match="requires TLS; set security_protocol='SSL'"):
        conn.request(ApiKey.API_VERSIONS, {}).result(BOUND_S)
    assert logged(caplog, "a plaintext client on this TLS listener?")
    assert "Traceback" not in caplog.text and not mutual_tls.sessions


def test_a_required_client_certificate_that_is_missing_is_a_typed_error(pki, mutual_tls, caplog):
    caplog.set_level("INFO", logger="ember.security.listener")
    conn = Connection(("127.0.0.1", mutual_tls.port), security=client(pki, certificate=False),
                      request_timeout_ms=int(BOUND_S * 1000))
    with pytest.raises(SslAuthenticationFailed, match="requires a client certificate"):
        conn.request(ApiKey.API_VERSIONS, {}).result(BOUND_S)
    assert logged(caplog, "the client presented no certificate (ssl.client.auth=required)")
    assert not mutual_tls.sessions


def test_a_silent_connection_is_closed_after_the_handshake_timeout(mutual_tls, caplog):
    caplog.set_level("INFO", logger="ember.security.listener")
    with socket.create_connection(("127.0.0.1", mutual_tls.port), timeout=BOUND_S) as sock:
        assert sock.recv(1) == b""   # closed by the broker (the read is bounded by BOUND_S)
    assert logged(caplog, "no TLS handshake within ssl.handshake.timeout.ms=500")


def test_a_tls_client_on_a_plaintext_listener_is_told_the_listener_is_plaintext(pki, region_file):
    plain = Listener(ListenerSecurity("EMBER"), region_file)
    try:
        with pytest.raises(SslAuthenticationFailed, match="listener is probably plaintext"):
            Connection(("127.0.0.1", plain.port), security=client(pki), connect_timeout_ms=int(BOUND_S * 1000))
    finally:
        plain.close()


def test_a_broker_certificate_from_another_ca_is_not_trusted(pki, mutual_tls, tmp_path):
    other = CertificateAuthority.create(tmp_path)
    security = ClientSecurity.from_options({"security_protocol": "SSL", "ssl_cafile": str(other.cert_path)})
    with pytest.raises(SslAuthenticationFailed, match="certificate is not trusted.*set ssl_cafile"):
        Connection(("127.0.0.1", mutual_tls.port), security=security)


def test_the_broker_certificate_must_name_the_host_unless_the_check_is_off(pki, tmp_path, region_file):
    pki.issue("elsewhere", "elsewhere", ("broker.example",))
    settings = TlsSettings("EMBER", keystore_location=str(pki.directory / "elsewhere-keystore.pem"))
    listener = Listener(ListenerSecurity("EMBER", SecurityProtocol.SSL, settings.server_context()), region_file)
    try:
        with pytest.raises(SslAuthenticationFailed, match="does not name the host '127.0.0.1'"):
            Connection(("127.0.0.1", listener.port), security=client(pki, certificate=False))
        unchecked = ClientSecurity.from_options({"security_protocol": "SSL", "ssl_cafile": str(pki.cert_path),
                                                 "ssl_check_hostname": False})
        conn = Connection(("127.0.0.1", listener.port), security=unchecked)
        conn.request(ApiKey.API_VERSIONS, {}).result(BOUND_S)
        conn.close()
    finally:
        listener.close()


def test_ssl_enabled_protocols_limits_the_versions_served(pki, region_file):
    tls12 = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    tls12.load_verify_locations(str(pki.cert_path))
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    for protocols, accepted in (("TLSv1.2,TLSv1.3", True), ("TLSv1.3", False)):
        settings = TlsSettings("EMBER", keystore_location=str(pki.directory / "server-keystore.pem"),
                               enabled_protocols=protocols)
        listener = Listener(ListenerSecurity("EMBER", SecurityProtocol.SSL, settings.server_context()), region_file)
        try:
            with socket.create_connection(("127.0.0.1", listener.port), timeout=BOUND_S) as raw:
                try:
                    tls12.wrap_socket(raw, server_hostname="127.0.0.1").close()
                    handshake = True
                except ssl.SSLError:
                    handshake = False
        finally:
            listener.close()
        assert handshake is accepted, protocols


def test_a_broker_that_never_answers_the_handshake_is_unavailable_not_refused(pki):
    """A paused or overloaded broker is retried like any silent one, not reported as a TLS mismatch."""
    with socket.create_server(("127.0.0.1", 0)) as silent:   # the kernel accepts; nobody answers
        with pytest.raises(BrokerNotAvailable, match="did not finish a TLS handshake in time"):
            Connection(silent.getsockname()[:2], security=client(pki), connect_timeout_ms=500)
