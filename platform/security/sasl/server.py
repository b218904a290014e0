"""The broker's side of SASL: one :class:`SaslServer` per connection on a SASL listener.

Both protocols drive it the same way (Kafka's SaslHandshake then SaslAuthenticate, which ember's
protocol copies): :meth:`SaslServer.handshake` picks the mechanism, :meth:`SaslServer.authenticate`
runs one step of it. SCRAM-SHA-256/512 run on :mod:`scramp`'s server state machine against the
credentials in ZooKeeper (:class:`~ember.security.sasl.credential_store.CredentialStore`); PLAIN
checks the password against the user's SCRAM credential. An unknown user gets a made-up salt (the
same on every broker and after restarts: keyed by a cluster-wide key) and fails at the proof,
like a wrong password, so the exchange does not tell which users exist; both
get Kafka's message. On success the connection's session takes the principal ``User:<name>``.
With Kafka's ``connections.max.reauth.ms`` (KIP-368) the authentication lasts that long: the
client re-authenticates on the same connection with a new :class:`SaslServer`
(:meth:`SaslServer.reauthentication`), which must end with the same principal and mechanism, so a
removed user or a changed password cuts off connections already open.
Steps run on a worker thread (a ZooKeeper read on a cache miss, PBKDF2 for PLAIN), never on the
broker's event loop.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import Mapping, Optional, Protocol

from ember.errors import ErrorCode, IllegalSaslState, RequestTimedOut, SaslAuthenticationFailed
from ember.security.sasl.config import FAILED_AUTHENTICATION_DELAY_MS
from ember.security.sasl.credential_store import CredentialStore
from ember.security.sasl.scram import PLAIN, SCRAM_MECHANISMS, SCRAM_SHA_512, ScramCredential, password_matches
from ember.security.session import Session, current_session, enter_session

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SaslServerSettings:
    """What one SASL listener accepts."""
    mechanisms: tuple[str, ...]
    store: CredentialStore = field(repr=False)
    #: The whole authentication must be over by then (ember's ``sasl.handshake.timeout.ms``).
    timeout_ms: int = 10000
    #: Largest frame before authentication (Kafka's ``sasl.server.max.receive.size``).
    max_receive_size: int = 524288
    #: How long an authentication lasts before the client must re-authenticate (Kafka's
    #: ``connections.max.reauth.ms``; 0: for the connection's life) ...
    reauth_ms: int = 0
    #: ... unless set for the mechanism (``listener.name.<l>.<mechanism>.connections.max.reauth.ms``).
    mechanism_reauth_ms: Mapping[str, int] = field(default_factory=dict)
    #: How long the answer to a failed authentication, and the close after it, wait (Kafka's
    #: ``connection.failed.authentication.delay.ms``): a client retrying bad credentials in a loop
    #: costs the broker one exchange per this period at most.
    failed_authentication_delay_ms: int = FAILED_AUTHENTICATION_DELAY_MS

    def reauth_ms_for(self, mechanism: Optional[str]) -> int:
        return self.mechanism_reauth_ms.get(mechanism or "", self.reauth_ms)


def failure_message(mechanism: str) -> str:
    """Kafka's own message for bad credentials (the same for an unknown user)."""
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


class _Mechanism(Protocol):
    user: Optional[str]
    complete: bool

    def step(self, token: bytes) -> bytes:
        """The server's answer to ``token``; raises SaslAuthenticationFailed."""


class _Scram:
    def __init__(self, name: str, settings: SaslServerSettings) -> None:
        self.name, self.settings = name, settings
        self.user: Optional[str] = None
        self.complete = False
        self._known = True
        import scramp  # here, not at start-up: ~2 MB a broker without SCRAM never needs

        self._server = scramp.ScramMechanism(name).make_server(self._auth_info)

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        self.user = user
        credential = self.settings.store.credential(user, self.name)
        if credential is None:
            self._known = False
            credential = self._decoy(user)
        return credential.auth_info()

    def _decoy(self, user: str) -> ScramCredential:
        seed = hmac.new(self.settings.store.decoy_key(), f"{self.name}\0{user}".encode(), hashlib.sha256).digest()
        return ScramCredential(seed[:24], secrets.token_bytes(64), secrets.token_bytes(64), 4096)

    def step(self, token: bytes) -> bytes:
        import scramp

        try:
            if self._server.stage is None:
                self._server.set_client_first(token.decode())
                return self._server.get_server_first().encode()
            self._server.set_client_final(token.decode())
            answer = self._server.get_server_final().encode()
        except (scramp.ScramException, UnicodeDecodeError) as exc:
            reason = "unknown user" if not self._known else _scram_reason(exc)
            raise SaslAuthenticationFailed(failure_message(self.name)) from _Reason(reason)
        except RequestTimedOut as exc:   # the user's credentials could not be read
            raise SaslAuthenticationFailed(failure_message(self.name)) from _Reason(str(exc))
        if not self._known:   # a proof cannot match a made-up credential; never reached in practice
            raise SaslAuthenticationFailed(failure_message(self.name)) from _Reason("unknown user")
        self.complete = True
        return answer


def _scram_reason(exc: BaseException) -> str:
    text = str(exc.args[0] if exc.args else exc)
    return "wrong password" if "client keys don't match" in text else text


class _Plain:
    """RFC 4616: ``[authzid] NUL authcid NUL passwd`` in one message."""

    def __init__(self, settings: SaslServerSettings) -> None:
        self.settings = settings
        self.user: Optional[str] = None
        self.complete = False

    def step(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens") from _Reason("malformed")
        authzid, user, password = (p.decode(errors="replace") for p in parts)
        self.user = user
        if authzid and authzid != user:
            raise SaslAuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                           "different from username") from _Reason("authorization id differs")
        for mechanism in (SCRAM_SHA_512, *SCRAM_MECHANISMS):
            try:
                credential = self.settings.store.credential(user, mechanism)
            except RequestTimedOut as exc:
                raise SaslAuthenticationFailed("Authentication failed: Invalid username or password") \
                    from _Reason(str(exc))
            if credential is not None:
                if password_matches(mechanism, credential, password):
                    self.complete = True
                    return b""
                break
        else:   # no such user: spend what checking a password costs, so timing does not tell
            password_matches(SCRAM_SHA_512, _DECOY, password)
        raise SaslAuthenticationFailed("Authentication failed: Invalid username or password") \
            from _Reason("unknown user or wrong password")


#: What a PLAIN login of an unknown user is checked against (Kafka's default 4096 iterations).
_DECOY = ScramCredential(b"\0" * 24, b"\0" * 64, b"\0" * 64, 4096)


class _Reason(Exception):
    """Why an authentication failed, for the broker log only (the client gets Kafka's message)."""


@dataclass(frozen=True)
class RawSaslToken:
    """A SASL token sent without a request header: Kafka's SaslHandshake v0 has the client send its
    tokens as bare length-prefixed frames (the server answers the same way)."""
    token: bytes
    api_key: int = 36   # counted as SaslAuthenticate
    correlation_id: int = 0


class SaslServer:
    """One connection's authentication: handshake, then steps until complete or failed."""

    def __init__(self, settings: SaslServerSettings, renews: Optional[tuple[str, str]] = None) -> None:
        self.settings = settings
        self.deadline = time.monotonic() + settings.timeout_ms / 1000
        self.mechanism: Optional[str] = None
        self._mechanism: Optional[_Mechanism] = None
        #: (principal, mechanism) of the session this exchange renews (None: the connection's first).
        self.renews = renews
        #: ``User:<name>`` once complete.
        self.principal: Optional[str] = None
        #: When (monotonic) the session ends; None: never (no ``connections.max.reauth.ms``, or a
        #: Kafka client too old to re-authenticate, which Kafka exempts too).
        self.expires_at: Optional[float] = None
        #: Why the connection must close after the current response (None: it stays open).
        self.close_reason: Optional[str] = None
        #: The client sends bare tokens (:class:`RawSaslToken`) after a SaslHandshake v0.
        self.raw = False
        #: The authentication failed (bad credentials, too slow, another principal): the answer and
        #: the close wait ``failed_authentication_delay_ms``, and the broker's log line is rate-limited.
        self.failed = False

    @property
    def complete(self) -> bool:
        return self._mechanism is not None and self._mechanism.complete

    @property
    def user(self) -> Optional[str]:
        """The user the client claims (None before its first token names one)."""
        return self._mechanism.user if self._mechanism is not None else None

    def remaining_ms(self) -> int:
        return max(int((self.deadline - time.monotonic()) * 1000), 1)

    @property
    def interrupted(self) -> str:
        """Why a request other than SASL's closes the connection now, for the broker log."""
        return ("sent during SASL re-authentication (a client sends nothing else until it is over)"
                if self.renews is not None else "sent before SASL authentication")

    @property
    def session_lifetime_ms(self) -> int:
        """What the SaslAuthenticate response announces: 0 unless the session expires."""
        return self.lifetime_ms if self.expires_at is not None else 0

    @property
    def lifetime_ms(self) -> int:
        """``connections.max.reauth.ms`` for this exchange's mechanism (0: sessions do not expire)."""
        return self.settings.reauth_ms_for(self.mechanism)

    def expired(self) -> bool:
        return self.expires_at is not None and time.monotonic() >= self.expires_at

    def reauthentication(self) -> "SaslServer":
        """A new exchange on the same connection, bounded by ``sasl.handshake.timeout.ms`` like the first."""
        assert self.principal is not None and self.mechanism is not None
        return SaslServer(self.settings, renews=(self.principal, self.mechanism))

    def handshake(self, mechanism: str) -> int:
        """The error code of a SaslHandshake asking for ``mechanism``."""
        if self._mechanism is not None:
            self.close_reason = "SaslHandshake sent twice"
            return ErrorCode.ILLEGAL_SASL_STATE
        if self.renews is not None and mechanism != self.renews[1]:
            self.close_reason = (f"the client asked for SASL mechanism {mechanism!r} to re-authenticate; it "
                                 f"authenticated with {self.renews[1]} (the mechanism cannot change)")
            return ErrorCode.ILLEGAL_SASL_STATE
        if mechanism not in self.settings.mechanisms:
            self.close_reason = (f"the client asked for SASL mechanism {mechanism!r}; this listener enables "
                                 f"{', '.join(self.settings.mechanisms)}")
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        self.mechanism = mechanism
        self._mechanism = _Plain(self.settings) if mechanism == PLAIN else _Scram(mechanism, self.settings)
        return ErrorCode.NONE

    async def authenticate(self, token: bytes, expiring: bool = True) -> bytes:
        """One step: the server's token. Raises SaslAuthenticationFailed (logged; the connection
        closes after the response) or IllegalSaslState (no handshake yet). ``expiring``: the
        client can re-authenticate (Kafka: SaslAuthenticate v1 and later), so its session may end."""
        mechanism = self._mechanism
        if mechanism is None or mechanism.complete:
            self.close_reason = "SaslAuthenticate sent " + ("before SaslHandshake" if mechanism is None else "twice")
            raise IllegalSaslState(f"{self.close_reason}; a client authenticates once, after the handshake")
        session = current_session()
        try:
            # bounded by what is left of sasl.handshake.timeout.ms (the step's thread ends on its
            # own: its only wait, a ZooKeeper read, is bounded too)
            answer = await asyncio.wait_for(asyncio.to_thread(mechanism.step, token), self.remaining_ms() / 1000)
        except asyncio.TimeoutError:
            self.failed = True
            self.close_reason = (f"SASL authentication ({self.mechanism}, user {mechanism.user!r}) did not finish "
                                 f"within sasl.handshake.timeout.ms={self.settings.timeout_ms}")
            raise SaslAuthenticationFailed(failure_message(self.mechanism or "")) from None
        except SaslAuthenticationFailed as exc:   # the server logs close_reason as it closes
            reason = exc.__cause__ or exc
            self.failed = True
            self.close_reason = f"SASL authentication failed ({self.mechanism}, user {mechanism.user!r}: {reason})"
            raise
        # mypy keeps ``complete`` narrowed to False from the check above, but step() sets it
        if mechanism.complete:
            self._completed(f"User:{mechanism.user}", expiring, session)   # type: ignore[unreachable]
        return answer

    def _completed(self, principal: str, expiring: bool, session: Optional[Session]) -> None:
        """Take the principal (a re-authentication must keep it) and start the session's clock."""
        previous = self.renews[0] if self.renews is not None else None
        if previous is not None and principal != previous:
            self.failed = True
            self.close_reason = f"cannot change principals during re-authentication from {previous} to {principal}"
            raise SaslAuthenticationFailed(f"Cannot change principals during re-authentication from {previous}: "
                                           f"{principal}")
        self.principal = principal
        # A renewal keeps expiring even if its last step is a v0 SaslAuthenticate (no way out of expiry).
        if self.lifetime_ms > 0 and (expiring or self.renews is not None):
            self.expires_at = time.monotonic() + self.lifetime_ms / 1000
        if session is None:
            return
        enter_session(dataclasses.replace(session, principal=principal))
        if previous is None:
            log.debug("client %s authenticated as %s with %s", session.peer, principal, self.mechanism)
        else:
            log.info("client %s re-authenticated as %s with %s on listener %s (connections.max.reauth.ms=%d)",
                     session.peer, principal, self.mechanism, session.listener, self.lifetime_ms)
