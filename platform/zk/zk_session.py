"""A kazoo client rooted at the ``/ember`` chroot that tells its users when a session is new.

ZooKeeper drops every ephemeral node (broker registration, controller) when a session expires.
kazoo reconnects by itself with a fresh session; :class:`ZkSession` runs the registered
``on_new_session`` callbacks then, on their own thread, because kazoo forbids blocking calls
inside its connection listener.

Reconnecting is retried at least every second (``RECONNECT_MAX_DELAY_S``): ZooKeeper restores its
sessions when it restarts and gives each its whole timeout again, so a prompt reconnect keeps the
session (and the broker's registration) however long the server was down. kazoo's default back-off
doubles up to an hour, which let sessions expire after short outages and every broker fail over at
once.

With :class:`ZooKeeperTls` (Kafka's ``zookeeper.ssl.*`` settings, PEM) the session runs over TLS
to ZooKeeper's ``secureClientPort``, presenting the broker's certificate.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, RolledBackError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from ember.errors import EmberError
from ember.zk import zk_paths

log = logging.getLogger(__name__)

RECONNECT_MAX_DELAY_S = 1.0


class ZooKeeperConnectionError(EmberError):
    """ZooKeeper could not be reached."""
    retriable = True
    hint = "check --zookeeper HOST:PORT and that ZooKeeper is running"


@dataclass(frozen=True)
class ZooKeeperTls:
    """TLS to ZooKeeper: the CA file that signed its certificate (None: the system's), this
    broker's PEM keystore (key + chain) when ZooKeeper wants client certificates."""
    truststore: Optional[str] = None
    keystore: Optional[str] = None
    password: Optional[str] = field(default=None, repr=False)
    check_hostname: bool = True

    def kazoo_options(self) -> dict[str, Any]:
        return {"use_ssl": True, "ca": self.truststore, "certfile": self.keystore, "keyfile": self.keystore,
                "keyfile_password": self.password, "verify_certs": True, "check_hostname": self.check_hostname}


class ZkSession:
    """Owns the kazoo client; ``client`` paths are relative to the chroot."""

    def __init__(self, connect: str, session_timeout_ms: int, tls: ZooKeeperTls | None = None) -> None:
        self.connect = connect
        self.tls = tls
        self.client = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000.0,
                                  connection_retry=KazooRetry(max_tries=-1, max_delay=RECONNECT_MAX_DELAY_S),
                                  **(tls.kazoo_options() if tls else {}))
        self._callbacks: list[Callable[[], None]] = []
        self._session_lost = False
        self.client.add_listener(self._on_state)

    def start(self, timeout_s: float = 15.0) -> None:
        try:
            self.client.start(timeout=timeout_s)
        except KazooTimeoutError:
            over = " over TLS (check zookeeper.ssl.* and that the port is ZooKeeper's secureClientPort)" \
                if self.tls else ""
            raise ZooKeeperConnectionError(f"no ZooKeeper answered at {self.connect}{over} "
                                           f"within {timeout_s:.0f}s") from None
        self.client.ensure_path(zk_paths.CHROOT)
        self.client.chroot = zk_paths.CHROOT
        for path in (zk_paths.BROKER_IDS, zk_paths.TOPICS):
            self.client.ensure_path(path)

    def on_new_session(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` (on a worker thread) each time a lost session is replaced."""
        self._callbacks.append(callback)

    @property
    def session_id(self) -> int:
        return self.client.client_id[0] if self.client.client_id else 0

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            log.warning("ZooKeeper session lost; ephemeral nodes are gone until it is re-established")
            self._session_lost = True
        elif state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection suspended; reconnecting")
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            log.info("ZooKeeper session re-established")
            for callback in self._callbacks:
                threading.Thread(target=callback, name="zk-new-session", daemon=True).start()

    def close(self, timeout_s: float = 10.0) -> None:
        """End the session; returns within ``timeout_s`` even if ZooKeeper is unreachable (kazoo's
        stop then waits out its reconnect back-off, on a daemon thread left behind)."""
        self.client.remove_listener(self._on_state)

        def stop() -> None:
            try:
                self.client.stop()
            finally:
                self.client.close()

        stopper = threading.Thread(target=stop, name="zk-session-close", daemon=True)
        stopper.start()
        stopper.join(timeout_s)
        if stopper.is_alive():
            log.warning("ZooKeeper session did not close within %.1fs; leaving it to expire", timeout_s)


def multi_failure(results: Sequence[object]) -> Exception | None:
    """The op that failed a ZooKeeper multi (``transaction().commit()``), None if it succeeded:
    the ops before the failing one only report RolledBackError, so they are not the cause."""
    return next((r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)), None)


def ensure_cluster_id(session: ZkSession, proposed: str) -> str:
    """The cluster's id, creating it with ``proposed`` if this is the cluster's first broker."""
    try:
        session.client.create(zk_paths.CLUSTER_ID, proposed.encode(), makepath=True)
        return proposed
    except NodeExistsError:
        data, _ = session.client.get(zk_paths.CLUSTER_ID)
        return data.decode()
