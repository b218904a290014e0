"""ACLs of ember's transactional Producer on a secure cluster (TLS, the authorizer on): the
transactional id needs Write (FindCoordinator Describe, implied), refusal being fatal; a group's
offsets need Read on the group, refusal being abortable; Kafka's rules, checked by the broker core
for both listeners."""
from __future__ import annotations

import time
import uuid

import pytest

from ember.client import Admin, Consumer, OffsetAndMetadata, Producer, TopicPartition
from ember.errors import GroupAuthorizationFailed, TransactionalIdAuthorizationFailed
from ember.launcher.cluster_tls import certificate_file_principal
from ember.launcher.local import LocalCluster
from ember.security.authorizer.model import (
    AccessControlEntry,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from ember.security.certificates import CertificateAuthority

pytestmark = pytest.mark.integration

WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> LocalCluster:
    with LocalCluster(tmp_path_factory.mktemp("txn-acl-cluster"), broker_count=2, secure=True) as started:
        yield started


def user_options(cluster: LocalCluster) -> tuple[str, dict]:
    """A principal of its own (a client certificate from the cluster's CA) and its client options."""
    assert cluster.tls is not None
    name = f"u{uuid.uuid4().hex[:8]}"
    issued = CertificateAuthority.load(cluster.tls.directory).issue(name, name)
    return certificate_file_principal(issued.cert), {**cluster.client_options, "ssl_certfile": str(issued.cert),
                                                     "ssl_keyfile": str(issued.key)}


def grant(cluster: LocalCluster, principal: str, operation: Operation, resource_type: ResourceType, name: str) -> None:
    with Admin(cluster.bootstrap, **cluster.client_options) as admin:
        admin.create_acls([AclBinding(ResourcePattern(resource_type, name, PatternType.LITERAL),
                                      AccessControlEntry(principal, "*", operation, Permission.ALLOW))])


def initialized(cluster: LocalCluster, transactional_id: str, options: dict) -> Producer:
    """A transactional producer once its ACLs reached every broker (they follow within seconds)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        producer = Producer(cluster.bootstrap, transactional_id=transactional_id, max_block_ms=10000, **options)
        try:
            producer.init_transactions()
            return producer
        except TransactionalIdAuthorizationFailed:
            producer.close(5)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_transactional_id_and_group_acls(cluster, topic_name):
    principal, options = user_options(cluster)
    transactional_id, group = f"tx-{topic_name}", f"g-{topic_name}"
    with Admin(cluster.bootstrap, **cluster.client_options) as admin:
        admin.create_topic(topic_name, partitions=1, replication_factor=2)
    grant(cluster, principal, Operation.WRITE, ResourceType.TOPIC, topic_name)
    refused = Producer(cluster.bootstrap, transactional_id=transactional_id, max_block_ms=10000, **options)
    try:
        with pytest.raises(TransactionalIdAuthorizationFailed, match=transactional_id):
            refused.init_transactions()
        with pytest.raises(TransactionalIdAuthorizationFailed):      # fatal
            refused.begin_transaction()
    finally:
        refused.close(5)

    grant(cluster, principal, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
    with initialized(cluster, transactional_id, options) as producer:
        producer.begin_transaction()
        producer.send(topic_name, b"aborted", partition=0)
        with pytest.raises(GroupAuthorizationFailed, match=group):   # no Read on the group: abortable
            producer.send_offsets_to_transaction({TopicPartition(topic_name, 0): OffsetAndMetadata(1)}, group)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic_name, b"committed", partition=0)
        producer.commit_transaction()

    with Consumer(bootstrap_servers=cluster.bootstrap, isolation_level="read_committed", auto_offset_reset="earliest",
                  **cluster.client_options) as consumer:
        tp = TopicPartition(topic_name, 0)
        consumer.assign([tp])
        values: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while not values and time.monotonic() < deadline:
            values += [r.value for r in consumer.poll(timeout_ms=500).get(tp, [])]
    assert values == [b"committed"]
