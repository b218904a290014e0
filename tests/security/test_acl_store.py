"""The ACL store against a real ZooKeeper (no brokers): concurrent writers from several sessions
lose nothing (compare-and-set), every session's cache follows adds and removes by watch, and the
znodes are Kafka's layout."""
from __future__ import annotations

import json
import threading
from typing import Any, Iterator

import pytest

from ember.security.authorizer.authorizer import Authorizer
from ember.security.authorizer.model import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourcePattern,
    ResourceType,
)
from ember.security.authorizer.store import AclStore
from ember.zk.zk_session import ZkSession
from waiting import eventually

pytestmark = pytest.mark.integration

ORDERS = ResourcePattern(ResourceType.TOPIC, "orders")


@pytest.fixture
def brokers(zookeeper) -> Iterator[list[tuple[AclStore, Authorizer]]]:
    """Three brokers' ZooKeeper side: a session, an authorizer and the store feeding it."""
    started = []
    for _ in range(3):
        session = ZkSession(zookeeper.connect_string, 4000)
        session.start()
        authorizer = Authorizer()
        store = AclStore(session, authorizer.replace)
        store.start()
        started.append((store, authorizer))
    yield started
    for store, _ in started:
        store.remove(AclBindingFilter())
        store.session.close()


def read(user: int) -> AclBinding:
    return AclBinding(ORDERS, AccessControlEntry(f"User:u{user}", "*", Operation.READ, Permission.ALLOW))


def test_concurrent_adds_to_one_resource_from_several_brokers_are_all_kept(brokers):
    threads = [threading.Thread(target=store.add, args=([read(10 * n + i) for i in range(5)],))
               for n, (store, _) in enumerate(brokers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    expected = {read(10 * n + i) for n in range(3) for i in range(5)}
    for store, _ in brokers:
        eventually(lambda: set(store.bindings()) == expected)
    data, _ = brokers[0][0].session.client.get("/kafka-acl/Topic/orders")
    assert json.loads(data)["version"] == 1 and len(json.loads(data)["acls"]) == 15


def test_every_brokers_authorizer_follows_adds_and_removes(brokers):
    eu = Resource(ResourceType.TOPIC, "sales-eu")
    prefixed = AclBinding(ResourcePattern(ResourceType.TOPIC, "sales-", PatternType.PREFIXED),
                          AccessControlEntry("User:etl", "*", Operation.WRITE, Permission.ALLOW))
    brokers[0][0].add([prefixed])
    assert brokers[0][0].session.client.exists("/kafka-acl-extended/prefixed/Topic/sales-")
    for _, authorizer in brokers:
        eventually(lambda: authorizer.authorize("User:etl", "127.0.0.1", Operation.WRITE, eu))
    removed = brokers[1][0].remove(AclBindingFilter(principal="User:etl"))
    assert removed == [prefixed]
    for _, authorizer in brokers:
        eventually(lambda: not authorizer.authorize("User:etl", "127.0.0.1", Operation.WRITE, eu))
    assert not brokers[0][0].session.client.exists("/kafka-acl-extended/prefixed/Topic/sales-")


def test_a_removal_reads_only_the_resources_whose_cached_acls_match(brokers):
    """DeleteAcls costs ZooKeeper round trips for the resources it changes, not for every
    resource with ACLs (Kafka's behaviour too): a cluster with many ACLs stays quick to edit."""
    store = brokers[0][0]
    others = [AclBinding(ResourcePattern(ResourceType.TOPIC, f"t{i}"),
                         AccessControlEntry("User:reader", "*", Operation.READ, Permission.ALLOW)) for i in range(40)]
    target = AclBinding(ResourcePattern(ResourceType.GROUP, "etl"),
                        AccessControlEntry("User:etl", "*", Operation.READ, Permission.ALLOW))
    store.add([*others, target])
    client, reads = store.session.client, []
    real_get_async = client.get_async

    def counting_get_async(path: str, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is threading.main_thread():   # not the watches' re-reads
            reads.append(path)
        return real_get_async(path, *args, **kwargs)
    client.get_async = counting_get_async     # type: ignore[method-assign]
    try:
        assert store.remove(AclBindingFilter(principal="User:etl")) == [target]
    finally:
        client.get_async = real_get_async     # type: ignore[method-assign]
    assert reads == ["/kafka-acl/Group/etl"]
    assert set(store.bindings()) == set(others)
