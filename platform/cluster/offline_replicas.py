"""Offline replicas in ZooKeeper: how a broker tells the controller that a disk failure took the
log of some of its replicas offline (Kafka's log-dir event notification, KIP-112, per partition).

Each broker with offline logs keeps a persistent ``/brokers/offline_replicas/<id>`` znode listing
them (:class:`ember.cluster.records.OfflineReplicas`); the znode is deleted while it has none, so
a broker that restarted and reopened its logs clears it at start-up. The controller watches the
znodes and treats a listed replica as not live for its partition (``election.partition_live``):
leadership moves to another ISR member and the replica leaves the ISR. The node is persistent so a
broker that loses its session, or dies, leaves the report in place until it reopens the log.
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from ember.cluster.records import OfflineReplica, OfflineReplicas
from ember.zk import zk_paths
from ember.zk.zk_session import ZkSession

log = logging.getLogger(__name__)

#: Bound of each ZooKeeper call of the writer: a broker whose ZooKeeper is unreachable retries later.
WRITE_TIMEOUT_S = 10.0


class OfflineReplicaWriter:
    """Writes this broker's offline replicas (blocking, each call bounded: run it on a thread)."""

    def __init__(self, session: ZkSession, broker_id: int, timeout_s: float = WRITE_TIMEOUT_S) -> None:
        self.session = session
        self.broker_id = broker_id
        self.timeout_s = timeout_s

    def on_new_session(self, callback: Callable[[], None]) -> None:
        self.session.on_new_session(callback)

    def write(self, replicas: Iterable[OfflineReplica]) -> None:
        """Make the znode list exactly ``replicas`` (delete it when there are none). Raises
        KazooException (including a timeout) when ZooKeeper did not take it."""
        client = self.session.client
        path = zk_paths.offline_replicas(self.broker_id)
        listed = tuple(sorted(set(replicas)))
        if not listed:
            try:
                client.delete_async(path).get(timeout=self.timeout_s)
            except NoNodeError:
                pass
            return
        data = OfflineReplicas(self.broker_id, listed).to_bytes()
        while True:
            try:
                client.set_async(path, data).get(timeout=self.timeout_s)
                return
            except NoNodeError:
                pass
            try:
                client.create_async(path, data, makepath=True).get(timeout=self.timeout_s)
                return
            except NodeExistsError:
                continue   # created meanwhile (a write of this broker's previous session): set it


def read_offline_replicas(client: KazooClient) -> dict[int, tuple[OfflineReplica, ...]]:
    """Every broker's reported offline replicas (broker id → replicas), read from ZooKeeper."""
    try:
        children = client.get_children(zk_paths.OFFLINE_REPLICAS)
    except NoNodeError:
        return {}
    reports: dict[int, tuple[OfflineReplica, ...]] = {}
    for child in children:
        try:
            data, _ = client.get(f"{zk_paths.OFFLINE_REPLICAS}/{child}")
            reports[int(child)] = OfflineReplicas.from_bytes(data).replicas
        except NoNodeError:
            continue
        except (ValueError, KeyError, TypeError) as exc:
            log.error("ignoring malformed %s/%s: %s", zk_paths.OFFLINE_REPLICAS, child, exc)
    return reports
