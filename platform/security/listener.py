"""A listener's security and the start of each of its connections.

:func:`establish` runs first on every accepted connection: on a TLS listener it upgrades the
stream with :meth:`asyncio.StreamWriter.start_tls` (the handshake bounded by
``ssl.handshake.timeout.ms``) and turns a failed handshake into one log line naming the likely
cause, closing only that connection. It returns the connection's :class:`Session`.
"""
from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from typing import Optional

from ember.security.protocol import SecurityProtocol
from ember.security.sasl.server import SaslServerSettings
from ember.security.session import ANONYMOUS, Session, certificate_principal

log = logging.getLogger(__name__)

#: OpenSSL reasons that mean the peer did not speak TLS at all.
_NOT_TLS = ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNSUPPORTED_PROTOCOL", "RECORD_LAYER_FAILURE",
            "PACKET_LENGTH_TOO_LONG", "UNKNOWN_PROTOCOL")


@dataclass(frozen=True)
class ListenerSecurity:
    """What one listener enforces; ``context`` is its TLS server context (None: plaintext),
    ``sasl`` what clients must authenticate with (None: no SASL)."""
    listener: str
    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    context: Optional[ssl.SSLContext] = None
    handshake_timeout_s: float = 10.0
    sasl: Optional[SaslServerSettings] = None

    @property
    def uses_tls(self) -> bool:
        return self.context is not None


async def establish(security: ListenerSecurity, writer: asyncio.StreamWriter, peer: object) -> Optional[Session]:
    """The session of a new connection, after its TLS handshake; None when the handshake failed
    (logged, connection closed)."""
    host, port = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) and len(peer) >= 2 else (str(peer), 0)
    if security.context is None:
        return Session(ANONYMOUS, security.listener, security.protocol, host, port)
    try:
        await writer.start_tls(security.context, ssl_handshake_timeout=security.handshake_timeout_s)
    except (OSError, asyncio.TimeoutError) as exc:
        log.info("closing connection from %s:%d on TLS listener %s: %s", host, port, security.listener,
                 _handshake_failure(exc, security.handshake_timeout_s))
        writer.transport.abort()
        return None
    tls = writer.get_extra_info("ssl_object")
    der = tls.getpeercert(binary_form=True) if tls is not None else None
    return Session(certificate_principal(der), security.listener, security.protocol, host, port,
                   tls.version() if tls is not None else None)


def _handshake_failure(exc: BaseException, timeout_s: float) -> str:
    """What went wrong, in one line, without a traceback."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS handshake failed: the client's certificate is not trusted ({exc.verify_message})"
    if isinstance(exc, ssl.SSLError):
        reason = str(exc.reason or exc)
        if reason in _NOT_TLS:
            return f"not a TLS client ({reason}): a plaintext client on this TLS listener?"
        if reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
            return "TLS handshake failed: the client presented no certificate (ssl.client.auth=required)"
        if reason == "TLSV1_ALERT_UNKNOWN_CA":
            return "TLS handshake failed: the client does not trust this listener's certificate (unknown CA)"
        return f"TLS handshake failed ({reason})"
    if isinstance(exc, (ConnectionAbortedError, asyncio.TimeoutError)):
        return f"no TLS handshake within ssl.handshake.timeout.ms={timeout_s * 1000:.0f}"
    return f"the client closed the connection during the TLS handshake ({type(exc).__name__})"
