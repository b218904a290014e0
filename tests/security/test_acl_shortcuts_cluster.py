"""On a secure cluster, a newcomer's producer and consumer each need one grant: the refusal names
the ``ember acls add --producer``/``--consumer`` command, and running that command (as the refusal
spells it) is enough to produce, and to consume in a group."""
from __future__ import annotations

import re
import shlex
import time

import pytest
from test_acl_cluster import User, cluster, create, produce, user  # noqa: F401  (the secure cluster and its users)

from ember.cli import main as ember_cli
from ember.client import Consumer
from ember.errors import EmberError, GroupAuthorizationFailed, TopicAuthorizationFailed
from ember.launcher.cluster_tls import ClusterTls
from ember.launcher.local import LocalCluster

pytestmark = pytest.mark.integration


def run_the_grant_it_names(secure: LocalCluster, refused: EmberError, role: str, **placeholders: str) -> None:
    """Run the ``ember acls add --<role>`` command a refusal names, as the cluster's super user."""
    command = [c for c in re.findall(r"`(ember acls add [^`]*)`", str(refused)) if f" --{role} " in c]
    assert len(command) == 1, refused
    words = [placeholders.get(w, w) for w in shlex.split(command[0])[1:]]
    tls = secure.tls
    assert isinstance(tls, ClusterTls)
    config = str(tls.write_client_configs(secure.bootstrap, secure.kafka_bootstrap)["java"])
    assert ember_cli([*words, "--bootstrap", secure.bootstrap, "--command-config", config]) == 0


def consume_in_group(client: User, secure: LocalCluster, topic: str, group: str) -> list:
    consumer = Consumer(topic, bootstrap_servers=secure.bootstrap, group_id=group, auto_offset_reset="earliest",
                        **client.options)
    try:
        deadline = time.monotonic() + 30
        got: list = []
        while len(got) < 3 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += records
        return got
    finally:
        consumer.close()


def test_one_producer_grant_and_one_consumer_grant_suffice(cluster, user, topic_name):  # noqa: F811
    create(cluster, topic_name)
    with pytest.raises(TopicAuthorizationFailed, match="Write, Describe and Create") as refused:
        produce(user, cluster, topic_name)
    run_the_grant_it_names(cluster, refused.value, "producer")
    produce(user, cluster, topic_name)
    group = f"g-{topic_name}"
    with pytest.raises(GroupAuthorizationFailed, match="Read and Describe on its topics and Read on the group"
                       ) as denied:
        consume_in_group(user, cluster, topic_name, group)
    run_the_grant_it_names(cluster, denied.value, "consumer", TOPIC=topic_name)
    assert [r.value for r in consume_in_group(user, cluster, topic_name, group)] == [b"v0", b"v1", b"v2"]
