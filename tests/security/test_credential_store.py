"""CredentialStore alone (a stand-in kazoo client): a login never waits on ZooKeeper longer than
its bound (or fails typed when ZooKeeper is unreachable), one slow read holds up nobody else's
login, and names that are no user are neither cached nor watched (clients making up names cost
the broker nothing); a PLAIN login as nobody costs a password check like a real user's; a
session lasts its mechanism's connections.max.reauth.ms and a renewal cannot opt out of expiry."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from kazoo.exceptions import ConnectionLoss, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from ember.errors import RequestTimedOut, SaslAuthenticationFailed
from ember.security.sasl import credential_store, server
from ember.security.sasl.credential_store import CredentialStore, _encode
from ember.security.sasl.scram import SCRAM_SHA_512, ScramCredential
from ember.zk import zk_paths


class _Answer:
    def __init__(self, data: bytes | None, release: threading.Event | None = None) -> None:
        self.data, self.release = data, release

    def get(self, timeout: float) -> tuple[bytes, object]:
        if self.release is not None and not self.release.wait(timeout):
            raise KazooTimeoutError()
        if self.data is None:
            raise NoNodeError()
        return self.data, None


class _Client:
    """Users' znodes; ``slow`` users answer only once their event is set."""

    def __init__(self, nodes: dict[str, bytes], slow: dict[str, threading.Event] | None = None) -> None:
        self.nodes, self.slow, self.reads, self.watched = nodes, slow or {}, [], []

    def get_async(self, path: str, watch=None) -> _Answer:
        user = zk_paths.user_name(path.rsplit("/", 1)[-1])
        self.reads.append(user)
        if user in self.nodes:
            self.watched.append(user)
        return _Answer(self.nodes.get(user), self.slow.get(user))


CREDENTIAL = ScramCredential(b"s" * 16, b"k" * 64, b"v" * 64, 4096)


def store(client: _Client) -> CredentialStore:
    return CredentialStore(SimpleNamespace(client=client, on_new_session=lambda callback: None))   # type: ignore[arg-type]


def test_a_user_is_read_once_and_a_name_that_is_no_user_is_never_cached_or_watched():
    client = _Client({"alice": _encode({SCRAM_SHA_512: CREDENTIAL}, {})})
    credentials = store(client)
    assert credentials.credential("alice", SCRAM_SHA_512) == CREDENTIAL
    assert credentials.credential("alice", SCRAM_SHA_512) == CREDENTIAL
    for name in ("made-up-1", "made-up-1", "made-up-2"):
        assert credentials.credential(name, SCRAM_SHA_512) is None
    assert client.reads == ["alice", "made-up-1", "made-up-1", "made-up-2"] and client.watched == ["alice"]


def test_a_read_zookeeper_never_answers_fails_within_its_bound(monkeypatch):
    monkeypatch.setattr(credential_store, "ZK_READ_TIMEOUT_S", 0.2)
    credentials = store(_Client({}, slow={"bob": threading.Event()}))
    with pytest.raises(RequestTimedOut, match="credentials within"):
        credentials.credential("bob", SCRAM_SHA_512)


def test_a_slow_read_holds_up_no_other_login():
    release = threading.Event()
    client = _Client({"alice": _encode({SCRAM_SHA_512: CREDENTIAL}, {}),
                      "slow": _encode({SCRAM_SHA_512: CREDENTIAL}, {})}, slow={"slow": release})
    credentials = store(client)
    credentials.credential("alice", SCRAM_SHA_512)            # cached
    stuck = threading.Thread(target=credentials.credential, args=("slow", SCRAM_SHA_512), daemon=True)
    stuck.start()
    try:
        done = threading.Event()
        threading.Thread(target=lambda: (credentials.credential("alice", SCRAM_SHA_512), done.set()),
                         daemon=True).start()
        assert done.wait(5), "a cached user's login waited for another user's ZooKeeper read"
    finally:
        release.set()
        stuck.join(5)


def test_a_plain_login_as_nobody_checks_a_password_as_a_real_user_does(monkeypatch):
    """So the time a refusal takes does not tell which users exist."""
    checked: list[str] = []
    monkeypatch.setattr(server, "password_matches",
                        lambda mechanism, credential, password: checked.append(password) or False)
    settings = server.SaslServerSettings(("PLAIN",), store(_Client({})))
    with pytest.raises(SaslAuthenticationFailed):
        server._Plain(settings).step(b"\0nobody\0guess")
    assert checked == ["guess"]


def test_a_login_while_zookeeper_is_unreachable_fails_as_bad_credentials_not_as_a_server_error():
    class _Unreachable:
        def get_async(self, path: str, *args: object, **kwargs: object) -> _Answer:
            raise ConnectionLoss()

        create_async = get_async

    credentials = store(_Unreachable())      # type: ignore[arg-type]
    with pytest.raises(RequestTimedOut, match="could not return user 'alice'.*ConnectionLoss"):
        credentials.credential("alice", SCRAM_SHA_512)
    with pytest.raises(RequestTimedOut, match="decoy key.*ConnectionLoss"):
        credentials.decoy_key()
    scram = server._Scram(SCRAM_SHA_512, server.SaslServerSettings((SCRAM_SHA_512,), credentials))
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
        scram.step(b"n,,n=alice,r=abcdefghijklmnop")


def test_a_session_lasts_its_mechanisms_lifetime_and_a_renewal_cannot_opt_out_of_expiry():
    import asyncio

    from ember.security.sasl.scram import PLAIN, make_credential

    credentials = store(_Client({"alice": _encode({SCRAM_SHA_512: make_credential(SCRAM_SHA_512, "pw")}, {})}))
    settings = server.SaslServerSettings((PLAIN, SCRAM_SHA_512), credentials, reauth_ms=0,
                                         mechanism_reauth_ms={PLAIN: 60_000})

    def login(sasl: server.SaslServer, expiring: bool) -> server.SaslServer:
        assert sasl.handshake(PLAIN) == 0
        asyncio.run(sasl.authenticate(b"\0alice\0pw", expiring=expiring))
        assert sasl.complete
        return sasl

    first = login(server.SaslServer(settings), expiring=True)
    assert first.session_lifetime_ms == 60_000 and first.expires_at is not None   # PLAIN's own setting
    # A renewal whose last step is a v0 SaslAuthenticate (which cannot announce a lifetime) still expires.
    renewed = login(first.reauthentication(), expiring=False)
    assert renewed.expires_at is not None and renewed.principal == "User:alice"
    # A first login with v0 is exempt, as in Kafka; SCRAM here has no lifetime (the listener's 0).
    assert login(server.SaslServer(settings), expiring=False).expires_at is None
    assert server.SaslServer(settings).settings.reauth_ms_for(SCRAM_SHA_512) == 0
