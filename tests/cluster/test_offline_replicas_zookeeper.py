"""Offline replicas against a real ZooKeeper (no broker processes): a broker's report in
``/brokers/offline_replicas/<id>`` makes the controller move leadership of exactly those
partitions to another ISR member and drop the replica from their ISR (fenced by the controller
epoch); a cleared report leaves the state alone (the leader re-adds a caught-up replica)."""
from __future__ import annotations

import time
from typing import Any, Callable, Iterator

import pytest

from ember.cluster.controller import Controller
from ember.cluster.metadata_cache import MetadataCache
from ember.cluster.offline_replicas import OfflineReplicaWriter, read_offline_replicas
from ember.cluster.records import BrokerInfo, OfflineReplica
from ember.cluster.registration import BrokerRegistration
from ember.cluster.topic_admin import TopicAdmin
from ember.ingest.broker_config import BrokerConfig, TopicConfigPolicy
from ember.zk import zk_paths
from ember.zk.zk_session import ZkSession

pytestmark = pytest.mark.integration


def eventually(check: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (result := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return result


class Node:
    """A broker's ZooKeeper side only: session, registration, cache, controller, report writer."""

    def __init__(self, connect: str, broker_id: int) -> None:
        self.session = ZkSession(connect, 2000)
        self.session.start()
        self.cache = MetadataCache(self.session)
        self.cache.start()
        BrokerRegistration(self.session, BrokerInfo(broker_id, "127.0.0.1", 9000 + broker_id), 2000).register()
        self.controller = Controller(self.session, self.cache, broker_id)
        self.controller.start()
        self.admin = TopicAdmin(self.session, TopicConfigPolicy(BrokerConfig.from_properties({})))
        self.offline = OfflineReplicaWriter(self.session, broker_id)

    def close(self) -> None:
        self.controller.close()
        self.session.close()


@pytest.fixture
def nodes(zookeeper) -> Iterator[dict[int, Node]]:
    started = {i: Node(zookeeper.connect_string, i) for i in (1, 2, 3)}
    yield started
    for node in started.values():
        try:
            node.close()
        except Exception:
            pass
    cleanup = ZkSession(zookeeper.connect_string, 2000)
    cleanup.start()
    cleanup.client.delete(zk_paths.TOPICS, recursive=True)
    cleanup.client.delete(zk_paths.OFFLINE_REPLICAS, recursive=True)
    cleanup.close()


def test_the_controller_moves_offline_replicas_out_of_leadership_and_the_isr(nodes, topic_name):
    eventually(lambda: any(node.controller.active for node in nodes.values()))
    admin = nodes[1].admin
    record = admin.create_topic(topic_name, 3, 3, {})
    cache = nodes[1].cache
    meta = eventually(lambda: (m := cache.topic(topic_name)) and len(m.states) == 3 and m)
    leader0 = meta.states[0].leader
    others = {p: meta.states[p] for p in (1, 2)}

    # the leader of partition 0 loses that log: leadership moves, the ISR shrinks; others stay
    nodes[leader0].offline.write([OfflineReplica(topic_name, 0, record.topic_id)])
    state = eventually(lambda: (s := cache.topic(topic_name).states[0]).leader != leader0 and s, timeout_s=10)
    assert state.leader in meta.states[0].isr and state.leader_epoch == meta.states[0].leader_epoch + 1
    assert leader0 not in state.isr and sorted(state.isr) == sorted(b for b in meta.states[0].isr if b != leader0)
    assert state.controller_epoch == next(n.controller.epoch for n in nodes.values() if n.controller.active)
    for p, before in others.items():
        after = cache.topic(topic_name).states[p]
        assert (after.leader, after.leader_epoch, after.isr) == (before.leader, before.leader_epoch, before.isr)

    # a follower's report only shrinks the ISR; a report of another topic id is ignored
    follower1 = next(b for b in meta.partitions[1] if b != meta.states[1].leader)
    nodes[follower1].offline.write([OfflineReplica(topic_name, 1, record.topic_id),
                                    OfflineReplica(topic_name, 2, "an-older-topic-id")])
    state1 = eventually(lambda: (s := cache.topic(topic_name).states[1]) and follower1 not in s.isr and s,
                        timeout_s=10)
    assert (state1.leader, state1.leader_epoch) == (others[1].leader, others[1].leader_epoch)
    time.sleep(0.3)
    assert cache.topic(topic_name).states[2].isr == others[2].isr
    assert read_offline_replicas(nodes[1].session.client)[follower1] == (
        OfflineReplica(topic_name, 1, record.topic_id), OfflineReplica(topic_name, 2, "an-older-topic-id"))

    # cleared reports delete the znodes; the controller does not re-add anyone (the leader does)
    nodes[leader0].offline.write([])
    nodes[follower1].offline.write([])
    assert read_offline_replicas(nodes[1].session.client) == {}
    assert nodes[1].session.client.exists(zk_paths.offline_replicas(leader0)) is None
    time.sleep(0.3)
    assert cache.topic(topic_name).states[0].isr == state.isr
