"""ACLs on a secure cluster (what ``ember cluster up --secure`` starts: TLS everywhere, client
certificates required, the authorizer on with the broker and admin certificates as super users).
Each test issues client certificates of its own (principals ``User:CN=<name>,O=ember``) from the
cluster's CA, so the tests share one cluster without sharing ACLs. Refusals are checked for
ember's clients and for a Kafka client (confluent-kafka over SSL) with Kafka's error codes; ACLs
are added through ember's Admin, ``ember acls`` and Kafka's own ``kafka-acls``."""
from __future__ import annotations

import ssl
import time
import uuid

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient as KafkaAdminClient
from confluent_kafka.admin import NewPartitions, NewTopic
from kafka.admin import KafkaAdminClient as KafkaPythonAdmin
from kafka_helpers import WAIT_S, run_tool
from kafka_wire import KafkaWire
from kio.schema.list_offsets.v6.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic

from ember.cli import main as ember_cli
from ember.client import Admin, Consumer, Producer, TopicPartition
from ember.client.metadata import MetadataClient
from ember.errors import ClusterAuthorizationFailed, ErrorCode, GroupAuthorizationFailed, TopicAuthorizationFailed
from ember.launcher.cluster_tls import ClusterTls, certificate_file_principal
from ember.launcher.local import LocalCluster
from ember.security.authorizer.model import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from ember.security.certificates import CertificateAuthority
from ember.security.client import ClientSecurity

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> LocalCluster:
    with LocalCluster(tmp_path_factory.mktemp("acl-cluster"), broker_count=2, secure=True) as started:
        yield started


class User:
    """A client certificate of its own and the ember / librdkafka options that present it."""

    def __init__(self, cluster: LocalCluster) -> None:
        tls = cluster.tls
        assert tls is not None
        self.name = f"u{uuid.uuid4().hex[:8]}"
        issued = CertificateAuthority.load(tls.directory).issue(self.name, self.name)
        self.principal = certificate_file_principal(issued.cert)
        self.options = {**cluster.client_options, "ssl_certfile": str(issued.cert), "ssl_keyfile": str(issued.key)}
        self.kafka = {"bootstrap.servers": cluster.kafka_bootstrap, "security.protocol": "ssl",
                      "ssl.ca.location": str(tls.ca), "ssl.certificate.location": str(issued.cert),
                      "ssl.key.location": str(issued.key)}


@pytest.fixture
def user(cluster) -> User:
    return User(cluster)


def admin(cluster: LocalCluster) -> Admin:
    """The super user (the client certificate ``cluster up --secure`` hands out)."""
    return Admin(cluster.bootstrap, **cluster.client_options)


def allow(principal: str, operation: Operation, name: str, resource_type: ResourceType = ResourceType.TOPIC,
          pattern: PatternType = PatternType.LITERAL, permission: Permission = Permission.ALLOW) -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, pattern), AccessControlEntry(principal, "*", operation,
                                                                                        permission))


def grant(cluster: LocalCluster, *bindings: AclBinding) -> None:
    with admin(cluster) as a:
        a.create_acls(bindings)


def create(cluster: LocalCluster, topic: str, replication_factor: int = 2) -> None:
    with admin(cluster) as a:
        a.create_topic(topic, partitions=1, replication_factor=replication_factor)


def produce(user: User, cluster: LocalCluster, topic: str, count: int = 3, acks: object = 1) -> None:
    with Producer(cluster.bootstrap, acks=acks, max_block_ms=10000, request_timeout_ms=10000,
                  **user.options) as producer:
        for future in [producer.send(topic, f"v{i}".encode()) for i in range(count)]:
            future.get(timeout=WAIT_S)


def fetch(user: User, cluster: LocalCluster, topic: str) -> list:
    consumer = Consumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest", **user.options)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + WAIT_S
        got: list = []
        while not got and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += records
        return got
    finally:
        consumer.close()


def until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S}s: {what}"
        time.sleep(0.2)


def test_a_user_without_acls_is_refused_and_write_lets_it_produce_but_not_fetch(cluster, user, topic_name):
    create(cluster, topic_name)
    with pytest.raises(TopicAuthorizationFailed, match=f"{user.principal}.*ember acls add"):
        produce(user, cluster, topic_name)
    until(lambda: any(f"refused: principal {user.principal} from host 127.0.0.1 may not Describe Topic:{topic_name}"
                      in b.log_path.read_text() for b in cluster.brokers.values()), "the refusal is logged")
    grant(cluster, allow(user.principal, Operation.WRITE, topic_name))
    produce(user, cluster, topic_name)
    with pytest.raises(TopicAuthorizationFailed, match="Read"):
        fetch(user, cluster, topic_name)
    grant(cluster, allow(user.principal, Operation.READ, topic_name))
    assert [r.value for r in fetch(user, cluster, topic_name)][:3] == [b"v0", b"v1", b"v2"]


def test_joining_a_group_needs_read_on_the_group(cluster, user, topic_name):
    create(cluster, topic_name)
    grant(cluster, allow(user.principal, Operation.READ, topic_name))
    consumer = Consumer(topic_name, bootstrap_servers=cluster.bootstrap, group_id=f"g-{topic_name}",
                        auto_offset_reset="earliest", **user.options)
    try:
        with pytest.raises(GroupAuthorizationFailed, match=f"Group:g-{topic_name}"):
            consumer.poll(timeout_ms=5000)
    finally:
        consumer.close()


def test_metadata_hides_topics_the_user_may_not_describe(cluster, user, topic_name):
    hidden, visible = topic_name + "-hidden", topic_name + "-visible"
    create(cluster, hidden)
    create(cluster, visible)
    grant(cluster, allow(user.principal, Operation.DESCRIBE, visible))
    with Admin(cluster.bootstrap, **user.options) as own:
        topics = own.list_topics()
    assert visible in topics and hidden not in topics
    with admin(cluster) as a:
        assert {hidden, visible} <= set(a.list_topics())


def test_creating_topics_needs_create_and_prefixed_acls_match_only_their_prefix(cluster, user):
    prefix = f"{user.name}-"
    with Admin(cluster.bootstrap, **user.options) as own:
        with pytest.raises(TopicAuthorizationFailed, match="Create"):
            own.create_topic(prefix + "a")
        grant(cluster, allow(user.principal, Operation.CREATE, prefix, pattern=PatternType.PREFIXED))
        own.create_topic(prefix + "a")
        with pytest.raises(TopicAuthorizationFailed, match="Create"):
            own.create_topic(user.name + "x")


def test_reassigning_needs_alter_on_the_cluster(cluster, user, topic_name):
    create(cluster, topic_name, replication_factor=1)
    grant(cluster, allow(user.principal, Operation.ALL, topic_name))
    with Admin(cluster.bootstrap, **user.options) as own:
        with pytest.raises(ClusterAuthorizationFailed, match="Alter Cluster:kafka-cluster"):
            own.reassign_partitions({TopicPartition(topic_name, 0): [1]})


def test_deny_beats_allow(cluster, user, topic_name):
    create(cluster, topic_name)
    grant(cluster, allow(user.principal, Operation.ALL, topic_name),
          allow(user.principal, Operation.READ, topic_name, permission=Permission.DENY))
    produce(user, cluster, topic_name)
    with pytest.raises(TopicAuthorizationFailed, match="Read"):
        fetch(user, cluster, topic_name)


def test_an_acl_added_or_removed_takes_effect_on_every_broker(cluster, user, topic_name):
    create(cluster, topic_name)
    metadata = MetadataClient(cluster.bootstrap, security=ClientSecurity.from_options(user.options, "test"))
    try:
        def seen_by_every_broker() -> set[bool]:
            return {topic_name in metadata.refresh(None, broker_id=b) for b in cluster.brokers}
        metadata.refresh([])      # learn the brokers
        assert seen_by_every_broker() == {False}
        grant(cluster, allow(user.principal, Operation.DESCRIBE, topic_name))
        until(lambda: seen_by_every_broker() == {True}, "every broker shows the topic once Describe is granted")
        with admin(cluster) as a:
            removed = a.delete_acls([AclBindingFilter(ResourceType.TOPIC, topic_name, PatternType.LITERAL,
                                                      user.principal)])
        assert [b.entry.operation for b in removed] == [Operation.DESCRIBE]
        until(lambda: seen_by_every_broker() == {False}, "every broker hides the topic once the ACL is removed")
    finally:
        metadata.close()


def test_super_users_do_everything_and_replication_works_with_the_authorizer_on(cluster, topic_name):
    create(cluster, topic_name)
    super_user = type("Super", (), {"options": cluster.client_options})()
    produce(super_user, cluster, topic_name, acks="all")
    assert len(fetch(super_user, cluster, topic_name)) >= 3
    with admin(cluster) as a:
        until(lambda: sorted(a.describe_topic(topic_name).partitions[0].isr) == [1, 2], "both replicas in the ISR")
        a.alter_configs(topic_name, {"retention.ms": 3600000})
        a.delete_topic(topic_name)


def test_kafka_clients_get_kafkas_authorization_error_codes(cluster, user, topic_name):
    create(cluster, topic_name)
    errors: list[KafkaError] = []
    producer = KafkaProducer({**user.kafka, "message.timeout.ms": 10000,
                              "error_cb": lambda e: errors.append(e)})
    producer.produce(topic_name, b"refused", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(WAIT_S)
    assert any(e is not None and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors), errors

    grant(cluster, allow(user.principal, Operation.READ, topic_name))
    consumer = KafkaConsumer({**user.kafka, "group.id": f"g-{topic_name}", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic_name])
        deadline = time.monotonic() + WAIT_S
        code = None
        while code is None and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is not None:
                code = message.error().code()
        assert code == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def kafka_failure(future) -> int:
    """The Kafka error code a confluent-kafka admin future fails with."""
    with pytest.raises(KafkaException) as failed:
        future.result(WAIT_S)
    return failed.value.args[0].code()


def test_kafka_clients_may_not_fetch_create_or_alter_without_acls_and_plaintext_is_refused(cluster, user, topic_name):
    create(cluster, topic_name)
    group = f"g-{topic_name}"
    # Describe on the topic and Read on the group: only the fetch itself is refused.
    grant(cluster, allow(user.principal, Operation.READ, group, ResourceType.GROUP),
          allow(user.principal, Operation.DESCRIBE, topic_name))
    consumer = KafkaConsumer({**user.kafka, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.assign([KafkaTopicPartition(topic_name, 0, 0)])
        codes: set[int] = set()
        deadline = time.monotonic() + WAIT_S
        while KafkaError.TOPIC_AUTHORIZATION_FAILED not in codes and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is not None:
                codes.add(message.error().code())
        assert KafkaError.TOPIC_AUTHORIZATION_FAILED in codes, codes
    finally:
        consumer.close()
    admin_client = KafkaAdminClient(user.kafka)
    created = admin_client.create_topics([NewTopic(f"{topic_name}-new", 1, 1)], request_timeout=WAIT_S)
    assert kafka_failure(created[f"{topic_name}-new"]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    altered = admin_client.create_partitions([NewPartitions(topic_name, 2)], request_timeout=WAIT_S)
    assert kafka_failure(altered[topic_name]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # A Kafka client speaking plain text to the TLS listener never gets a record through.
    failures: list[KafkaError] = []
    plaintext = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap, "message.timeout.ms": 5000})
    plaintext.produce(topic_name, b"never", on_delivery=lambda error, _message: failures.append(error))
    plaintext.flush(WAIT_S)
    assert failures and failures[0] is not None


def test_describing_every_topics_partitions_names_no_topic_the_user_may_not_describe(cluster, user, topic_name):
    visible, hidden = f"{topic_name}-a", f"{topic_name}-b"
    for topic in (visible, hidden):
        create(cluster, topic)
    grant(cluster, allow(user.principal, Operation.DESCRIBE, visible))
    client = KafkaPythonAdmin(bootstrap_servers=cluster.kafka_bootstrap, security_protocol="SSL",
                              ssl_cafile=str(cluster.tls.ca), ssl_certfile=user.options["ssl_certfile"],
                              ssl_keyfile=user.options["ssl_keyfile"])
    try:
        page = client.describe_topic_partitions([], response_partition_limit=1)   # no names: every topic
    finally:
        client.close()
    # one page holds the visible topic; the cursor to the next page must not name the hidden one
    assert [t["name"] for t in page["topics"]] == [visible] and page["next_cursor"] is None


def test_a_kafka_commit_fails_only_for_topics_the_user_may_not_read(cluster, user, topic_name):
    allowed_topic, refused_topic, group = topic_name, f"{topic_name}-x", f"g-{topic_name}"
    for topic in (allowed_topic, refused_topic):
        create(cluster, topic)
    grant(cluster, allow(user.principal, Operation.READ, allowed_topic),
          allow(user.principal, Operation.READ, group, ResourceType.GROUP))
    consumer = KafkaConsumer({**user.kafka, "group.id": group, "enable.auto.commit": False})
    try:
        offsets = [KafkaTopicPartition(allowed_topic, 0, 0), KafkaTopicPartition(refused_topic, 0, 0)]
        try:
            results = consumer.commit(offsets=offsets, asynchronous=False)
            codes = {tp.topic: tp.error.code() if tp.error else None for tp in results}
        except KafkaException as exc:   # librdkafka may raise the first partition error instead
            codes = {refused_topic: exc.args[0].code()}
    finally:
        consumer.close()
    assert codes.get(refused_topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED, codes
    with admin(cluster) as a:
        committed = {p.partition: p.committed for p in a.describe_group(group).partitions}
    assert committed == {TopicPartition(allowed_topic, 0): 0}


def test_kafka_acls_adds_lists_and_removes(cluster, user, topic_name):
    tls = cluster.tls
    assert isinstance(tls, ClusterTls)
    config = str(tls.write_client_configs(cluster.bootstrap, cluster.kafka_bootstrap)["java"])
    common = ["--bootstrap-server", cluster.kafka_bootstrap.split(",")[0], "--command-config", config]
    run_tool("org.apache.kafka.tools.AclCommand", *common, "--add", "--allow-principal", user.principal,
             "--operation", "Read", "--operation", "Describe", "--topic", topic_name)
    with admin(cluster) as a:
        found = a.describe_acls(AclBindingFilter(ResourceType.TOPIC, topic_name))
    assert {(b.entry.principal, b.entry.operation) for b in found} == \
        {(user.principal, Operation.READ), (user.principal, Operation.DESCRIBE)}
    listed = run_tool("org.apache.kafka.tools.AclCommand", *common, "--list", "--topic", topic_name).stdout
    assert user.principal in listed and "READ" in listed
    run_tool("org.apache.kafka.tools.AclCommand", *common, "--remove", "--force", "--topic", topic_name)
    with admin(cluster) as a:
        assert a.describe_acls(AclBindingFilter(ResourceType.TOPIC, topic_name)) == []


def test_ember_acls_command_adds_lists_and_removes(cluster, user, topic_name, capsys):
    tls = cluster.tls
    assert isinstance(tls, ClusterTls)
    config = str(tls.write_client_configs(cluster.bootstrap, cluster.kafka_bootstrap)["java"])
    common = ["--bootstrap", cluster.bootstrap, "--command-config", config]
    assert ember_cli(["acls", "add", *common, "--allow-principal", user.principal, "--operation", "Write",
                      "--topic", topic_name, "--resource-pattern-type", "prefixed"]) == 0
    assert ember_cli(["acls", "list", *common, "--topic", topic_name]) == 0
    assert f"Allow {user.principal} Write from host * on Topic:PREFIXED:{topic_name}" in capsys.readouterr().out
    assert ember_cli(["acls", "remove", *common, "--topic", topic_name, "--resource-pattern-type", "prefixed"]) == 0
    assert f"removed: Allow {user.principal} Write" in capsys.readouterr().out
    with admin(cluster) as a:
        assert a.describe_acls(AclBindingFilter(ResourceType.TOPIC, topic_name, PatternType.MATCH)) == []



def test_list_offsets_answered_as_it_arrives_is_authorized_as_its_connections_principal(cluster, user, topic_name):
    """Earliest/latest ListOffsets, answered in the transport's callback on an idle connection
    (ember.net.immediate), are checked against the TLS principal of the connection they came on, as
    through its task: refused without DESCRIBE on the topic, answered with it."""
    create(cluster, topic_name)
    produce_as = User(cluster)
    grant(cluster, allow(produce_as.principal, Operation.WRITE, topic_name))
    produce(produce_as, cluster, topic_name, count=4)
    tls = ssl.create_default_context(cafile=user.kafka["ssl.ca.location"])
    tls.load_cert_chain(user.kafka["ssl.certificate.location"], user.kafka["ssl.key.location"])
    tls.check_hostname = False
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(name=topic_name, partitions=(
        ListOffsetsPartition(partition_index=0, timestamp=-2), ListOffsetsPartition(partition_index=0, timestamp=-1))),))

    def answers() -> set[int]:
        codes = set()
        for address in cluster.kafka_bootstrap.split(","):
            with KafkaWire(address) as wire:
                wire.sock = tls.wrap_socket(wire.sock)
                codes |= {p.error_code.value for t in wire.call(request).topics for p in t.partitions}
        return codes
    assert answers() == {ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    grant(cluster, allow(user.principal, Operation.DESCRIBE, topic_name))
    until(lambda: ErrorCode.TOPIC_AUTHORIZATION_FAILED not in answers(), "DESCRIBE reaches every broker")
    assert answers() == {ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER}     # the leader and the other broker
