"""The broker's ephemeral ``/brokers/ids/<id>`` registration: the cluster's notion of "alive"."""
from __future__ import annotations

import logging
import threading
import time

from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from ember.cluster.records import BrokerInfo
from ember.errors import EmberError
from ember.zk import zk_paths
from ember.zk.zk_session import ZkSession

log = logging.getLogger(__name__)


class BrokerIdInUse(EmberError):
    """Another live broker is registered with this broker id."""
    hint = "give every broker a distinct --id, or wait for the old process's session to expire"


class BrokerRegistration:
    """Registers the broker, and registers it again whenever ZooKeeper replaces the session."""

    def __init__(self, session: ZkSession, info: BrokerInfo, session_timeout_ms: int) -> None:
        self.session = session
        self.info = info
        self.path = zk_paths.broker(info.id)
        self._wait_s = 2 * session_timeout_ms / 1000.0 + 2.0
        self._closed = False
        session.on_new_session(self._reregister)

    def register(self) -> None:
        """Create the ephemeral node. A node left by a previous process of this broker (killed
        before its session expired) is waited out: it vanishes within the session timeout."""
        client = self.session.client
        deadline = time.monotonic() + self._wait_s
        while True:
            try:
                client.create(self.path, self.info.to_bytes(), ephemeral=True, makepath=True)
                log.info("registered broker %d at %s:%d", self.info.id, self.info.host, self.info.port)
                return
            except NodeExistsError:
                gone = threading.Event()
                stat = client.exists(self.path, watch=lambda _event, gone=gone: gone.set())
                if stat is None:
                    continue
                if stat.ephemeralOwner == self.session.session_id:
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BrokerIdInUse(f"{self.path} stays owned by ZooKeeper session "
                                        f"{stat.ephemeralOwner:#x}") from None
                log.info("waiting for the stale registration %s to expire", self.path)
                gone.wait(remaining)

    def _reregister(self) -> None:
        if self._closed:
            return
        try:
            self.register()
        except EmberError:
            log.exception("could not re-register broker %d", self.info.id)

    def deregister(self, timeout_s: float) -> None:
        """Delete the registration so the controller moves leadership away now, not at session
        expiry. Gives up after ``timeout_s`` (ZooKeeper unreachable): the session's end does it."""
        self._closed = True
        try:
            self.session.client.delete_async(self.path).get(timeout=timeout_s)
        except NoNodeError:
            pass
        except KazooTimeoutError:
            log.warning("could not deregister broker %d within %.1fs (ZooKeeper unreachable); its session's "
                        "expiry removes the registration", self.info.id, timeout_s)
