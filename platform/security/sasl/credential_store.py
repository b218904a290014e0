"""Users' SCRAM credentials in ZooKeeper (Kafka's ``/config/users/<user>``), cached by each broker.

A broker reads a user's znode the first time someone authenticates as that user and keeps it,
with a ZooKeeper watch that drops the entry when the node changes or goes: the next
authentication reads it again. A user that does not exist is neither cached nor watched (its
next login reads ZooKeeper again), so clients making up names cost no memory. So adding
a user, changing a password or removing a user takes effect on every broker as soon as
ZooKeeper delivers the watch (milliseconds), without polling. A new ZooKeeper session (watches
lost) empties the cache. Writers (``ember users``, AlterUserScramCredentials) update a node by
compare-and-set on its version.
"""
from __future__ import annotations

import json
import logging
import secrets
import threading
from typing import Any, Callable, Iterable, Mapping, Optional

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.handlers.threading import KazooTimeoutError

from ember.errors import RequestTimedOut
from ember.security.sasl.scram import SCRAM_MECHANISMS, ScramCredential
from ember.zk import zk_paths
from ember.zk.zk_session import ZkSession

log = logging.getLogger(__name__)

Credentials = dict[str, ScramCredential]
#: How long a login waits for ZooKeeper to return a user's credentials.
ZK_READ_TIMEOUT_S = 5.0
#: Compare-and-set retries before a write gives up (another writer kept winning).
_CAS_ATTEMPTS = 20


def _decode(data: bytes, user: str) -> Credentials:
    try:
        config = json.loads(data)["config"]
        return {mechanism: ScramCredential.from_kafka(config[mechanism])
                for mechanism in SCRAM_MECHANISMS if mechanism in config}
    except (ValueError, KeyError, TypeError) as exc:
        log.error("the SCRAM credentials of user %r in ZooKeeper are malformed (%s); nobody can "
                  "authenticate as that user until they are set again", user, exc)
        return {}


def _bounded(call: Callable[[], Any], what: str) -> Any:
    """The result of the kazoo async ``call`` within :data:`ZK_READ_TIMEOUT_S`. ZooKeeper slow or
    unreachable (connection lost, session expired) is RequestTimedOut, so the login fails typed;
    NoNodeError and NodeExistsError are answers and pass through."""
    try:
        return call().get(timeout=ZK_READ_TIMEOUT_S)
    except (NoNodeError, NodeExistsError):
        raise
    except KazooTimeoutError:
        raise RequestTimedOut(f"ZooKeeper did not return {what} within {ZK_READ_TIMEOUT_S:.0f}s") from None
    except KazooException as exc:
        raise RequestTimedOut(f"ZooKeeper could not return {what} ({type(exc).__name__}); retry") from None


def _encode(credentials: Mapping[str, ScramCredential], others: Mapping[str, str]) -> bytes:
    config = {**others, **{mechanism: credential.to_kafka() for mechanism, credential in credentials.items()}}
    return json.dumps({"version": 1, "config": config}, sort_keys=True).encode()


class CredentialStore:
    def __init__(self, session: ZkSession) -> None:
        self.session = session
        self._cache: dict[str, Credentials] = {}
        #: Bumped by every watch and new session: a read that started before it is not cached.
        self._epoch = 0
        self._lock = threading.Lock()
        self._decoy_key: Optional[bytes] = None
        session.on_new_session(self._clear)

    # -- reading (brokers) -------------------------------------------------------------------

    def credential(self, user: str, mechanism: str) -> Optional[ScramCredential]:
        """``user``'s credential for ``mechanism`` (None: no such user or none for that mechanism).
        Blocking (a ZooKeeper read on a cache miss, bounded by :data:`ZK_READ_TIMEOUT_S`, else
        RequestTimedOut): call it off the event loop. The read runs outside the lock, so one slow
        read never holds up the logins of users already cached, nor the watch callbacks."""
        with self._lock:
            cached = self._cache.get(user)
            epoch = self._epoch
        if cached is None:
            cached = self._load(user)
            if cached:   # only users that exist are kept: made-up names cost no memory and no watch
                with self._lock:
                    if self._epoch == epoch:   # no watch fired meanwhile: the read is current
                        self._cache[user] = cached
        return cached.get(mechanism)

    def _load(self, user: str) -> Credentials:
        """The user's credentials, watching an existing node (a missing one is not watched)."""
        try:
            data, _ = _bounded(lambda: self.session.client.get_async(zk_paths.user(user), watch=self._changed),
                               f"user {user!r}'s credentials")
        except NoNodeError:
            return {}
        return _decode(data, user)

    def decoy_key(self) -> bytes:
        """The cluster's key for made-up SCRAM salts, created in ZooKeeper by the first broker
        that needs it: every broker, listener and restart gives a user that does not exist the
        same salt, as a real user's salt stays the same, so comparing answers tells nothing.
        Blocking and bounded like :meth:`credential`."""
        if self._decoy_key is None:
            client, path = self.session.client, zk_paths.SCRAM_DECOY_KEY
            try:
                _bounded(lambda: client.create_async(path, secrets.token_bytes(32), makepath=True),
                         "the SCRAM decoy key")
            except NodeExistsError:
                pass
            self._decoy_key, _ = _bounded(lambda: client.get_async(path), "the SCRAM decoy key")
        return self._decoy_key

    def _changed(self, event: object) -> None:
        path = str(getattr(event, "path", ""))
        with self._lock:
            self._epoch += 1
            self._cache.pop(zk_paths.user_name(path.rsplit("/", 1)[-1]), None)

    def _clear(self) -> None:
        with self._lock:
            self._epoch += 1
            self._cache.clear()

    # -- writing and listing (tools) ---------------------------------------------------------

    def users(self) -> dict[str, list[tuple[str, int]]]:
        """Every user with credentials: {user: [(mechanism, iterations), ...]}."""
        client = self.session.client
        try:
            nodes = client.get_children(zk_paths.CONFIG_USERS)
        except NoNodeError:
            return {}
        result = {}
        for node in sorted(nodes):
            name = zk_paths.user_name(node)
            try:
                data, _ = client.get(zk_paths.user(name))
            except NoNodeError:
                continue
            credentials = _decode(data, name)
            if credentials:
                result[name] = [(m, c.iterations) for m, c in sorted(credentials.items())]
        return result

    def alter(self, user: str, upsert: Mapping[str, ScramCredential], delete: Iterable[str] = ()) -> None:
        """Set ``upsert`` and remove ``delete`` mechanisms of ``user`` in one compare-and-set; the
        node goes once it holds no credential."""
        client, path = self.session.client, zk_paths.user(user)
        for _ in range(_CAS_ATTEMPTS):
            try:
                data, stat = client.get(path)
                config = json.loads(data).get("config", {})
            except NoNodeError:
                if not upsert:
                    return
                client.ensure_path(zk_paths.CONFIG_USERS)
                try:
                    client.create(path, _encode(upsert, {}))
                    return
                except NodeExistsError:
                    continue
            others = {k: v for k, v in config.items() if k not in set(upsert) | set(delete)}
            try:
                if others or upsert:
                    client.set(path, _encode(upsert, others), version=stat.version)
                else:
                    client.delete(path, version=stat.version)
                return
            except (BadVersionError, NoNodeError, NotEmptyError):
                continue
        raise RuntimeError(f"could not update user {user!r}: the node kept changing")
