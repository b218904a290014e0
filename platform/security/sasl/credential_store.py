"""Users' SCRAM credentials in ZooKeeper (Kafka's ``/config/users/<user>``), cached by each broker.

A broker reads a user's znode the first time someone authenticates as that user and keeps it,
with a ZooKeeper watch (``get`` on an existing node, ``exists`` on a missing one) that drops the
entry when the node changes, appears or goes: the next authentication reads it again. So adding
a user, changing a password or removing a user takes effect on every broker as soon as
ZooKeeper delivers the watch (milliseconds), without polling. A new ZooKeeper session (watches
lost) empties the cache. Writers (``ember users``, AlterUserScramCredentials) update a node by
compare-and-set on its version.
"""
from __future__ import annotations

import json
import logging
import threading
from typing import Iterable, Mapping, Optional

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from ember.cluster import zk_paths
from ember.cluster.zk_session import ZkSession
from ember.security.sasl.scram import SCRAM_MECHANISMS, ScramCredential

log = logging.getLogger(__name__)

Credentials = dict[str, ScramCredential]
_MISSING = object()
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


def _encode(credentials: Mapping[str, ScramCredential], others: Mapping[str, str]) -> bytes:
    config = {**others, **{mechanism: credential.to_kafka() for mechanism, credential in credentials.items()}}
    return json.dumps({"version": 1, "config": config}, sort_keys=True).encode()


class CredentialStore:
    def __init__(self, session: ZkSession) -> None:
        self.session = session
        self._cache: dict[str, Credentials] = {}
        self._lock = threading.Lock()
        session.on_new_session(self._clear)

    # -- reading (brokers) -------------------------------------------------------------------

    def credential(self, user: str, mechanism: str) -> Optional[ScramCredential]:
        """``user``'s credential for ``mechanism`` (None: no such user or none for that mechanism).
        Blocking (a ZooKeeper read on a cache miss): call it off the event loop."""
        with self._lock:
            cached = self._cache.get(user, _MISSING)
            if cached is _MISSING:
                cached = self._cache[user] = self._load(user)
        return cached.get(mechanism)   # type: ignore[union-attr]

    def _load(self, user: str) -> Credentials:
        path = zk_paths.user(user)
        client = self.session.client
        for _ in range(_CAS_ATTEMPTS):
            try:
                data, _ = client.get(path, watch=self._changed)
                return _decode(data, user)
            except NoNodeError:
                if client.exists(path, watch=self._changed) is None:
                    return {}
        raise RuntimeError(f"user {user!r}'s znode kept appearing and vanishing")

    def _changed(self, event: object) -> None:
        path = str(getattr(event, "path", ""))
        with self._lock:
            self._cache.pop(zk_paths.user_name(path.rsplit("/", 1)[-1]), None)

    def _clear(self) -> None:
        with self._lock:
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
