"""The nemesis's session expiry is real: a ZooKeeper session owned by another client is closed
(its ephemeral node goes, its owner sees the session lost), using the password ZooKeeper derives
from the session id."""
from __future__ import annotations

import threading

import pytest
from kazoo.client import KazooClient, KazooState

from ember.launcher.zookeeper_server import ZooKeeperServer, free_port

from .nemesis import EXPIRE_ATTEMPTS, expire_session, session_password

pytestmark = pytest.mark.integration


def test_expire_session_closes_a_session_another_client_owns(tmp_path) -> None:
    server = ZooKeeperServer(tmp_path / "zk", free_port())
    server.start()
    owner = KazooClient(hosts=server.connect_string, timeout=10)
    try:
        owner.start(timeout=10)
        owner.create("/registration", b"", ephemeral=True)
        session_id, password = owner.client_id
        assert session_password(session_id) == password
        lost = threading.Event()
        owner.add_listener(lambda state: lost.set() if state == KazooState.LOST else None)
        # The owner reconnects at once when its session moves; if it gets in between our connect
        # and close it wins the session back, so expire again (bounded), as the nemesis does.
        for _ in range(EXPIRE_ATTEMPTS):
            expire_session(server.connect_string, session_id)
            if lost.wait(10):
                break
        assert lost.is_set(), "the owner never saw its session expire"
        observer = KazooClient(hosts=server.connect_string, timeout=10)
        observer.start(timeout=10)
        try:
            assert observer.exists("/registration") is None
        finally:
            observer.stop()
            observer.close()
    finally:
        owner.stop()
        owner.close()
        server.stop()
