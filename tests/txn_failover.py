"""Choosing the broker to kill in transaction failover tests: the one coordinating a transactional
id, the ones leading a topic's partitions (asked through ember's listener; a unique module name:
test folders share sys.path)."""
from __future__ import annotations

from ember.client.metadata import MetadataClient
from ember.launcher.local import LocalCluster
from ember.wire.api_keys import ApiKey


def coordinator_of(cluster: LocalCluster, transactional_id: str) -> int:
    """The broker coordinating ``transactional_id`` (FindCoordinator, key type 1)."""
    metadata = MetadataClient(cluster.bootstrap)
    try:
        return metadata.request(ApiKey.FIND_COORDINATOR, {"key": transactional_id, "key_type": 1}).body["node_id"]
    finally:
        metadata.close()


def leaders_of(cluster: LocalCluster, topic: str, timeout_s: float = 30.0) -> dict[int, int]:
    """Each partition's leader broker, once every partition of ``topic`` has one."""
    metadata = MetadataClient(cluster.bootstrap)
    try:
        return {p.partition: p.leader for p in metadata.wait_for_topic(topic, timeout_s).partitions}
    finally:
        metadata.close()
