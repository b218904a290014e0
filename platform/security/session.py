"""Who is on the other end of a connection: the broker keeps one :class:`Session` per connection.

The server sets it once the connection is established (after the TLS handshake) in a context
variable of the connection's task, so any handler can ask :func:`current_session` without the
session being threaded through every call. Principals follow Kafka: ``User:ANONYMOUS`` on a
plaintext listener or without a client certificate, and with a client certificate its subject
as an RFC 2253 distinguished name (``ssl.principal.mapping.rules=DEFAULT``), e.g.
``User:CN=ember-client,O=ember``. SASL will set the principal it authenticates.
"""
from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Optional

from ember.security.protocol import SecurityProtocol

ANONYMOUS = "User:ANONYMOUS"


@dataclass(frozen=True)
class Session:
    principal: str
    listener: str
    security_protocol: SecurityProtocol
    #: The client's address as the broker sees it (Kafka's ACLs match on this host).
    host: str
    port: int
    #: The negotiated TLS version on a TLS connection.
    tls_version: Optional[str] = None

    @property
    def peer(self) -> str:
        return f"{self.host}:{self.port}"


_current: contextvars.ContextVar[Optional[Session]] = contextvars.ContextVar("ember_session", default=None)


def current_session() -> Optional[Session]:
    """The session of the connection whose request is being handled (None outside a request)."""
    return _current.get()


def enter_session(session: Session) -> None:
    """Make ``session`` the current one for the calling task (a connection's)."""
    _current.set(session)


def certificate_principal(der: Optional[bytes]) -> str:
    """Kafka's default principal for a TLS peer: its certificate's subject, or ANONYMOUS without one."""
    if not der:
        return ANONYMOUS
    from cryptography import x509  # ~8 MB of modules a broker without TLS client certificates never needs

    return "User:" + x509.load_der_x509_certificate(der).subject.rfc4514_string()
