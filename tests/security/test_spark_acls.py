"""The ACLs the Spark source needs, on a secure cluster with ACLs on (``LocalCluster(secure=True,
sasl=True)``, what ``ember cluster up --secure`` starts): only what a Kafka consumer needs, Read
and Describe on the topic (no DescribeConfigs), as Spark's Kafka source. A topic the reader may
not Describe is refused as "not authorized to Describe ... (or it does not exist)", the same
words whether it exists or not, never "does not exist" under an authorization error."""
from __future__ import annotations

import pytest
from kafka_helpers import WAIT_S

from ember.client import Admin, Producer
from ember.errors import ErrorCode, TopicAuthorizationFailed
from ember.launcher.local import LocalCluster
from ember.security.authorizer.model import AccessControlEntry, AclBinding, Operation, Permission, ResourcePattern, ResourceType

pytestmark = pytest.mark.integration

READER, PASSWORD = "rita", "rita-password-1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> LocalCluster:
    with LocalCluster(tmp_path_factory.mktemp("spark-acls"), broker_count=1, secure=True, sasl=True) as started:
        with Admin(started.bootstrap, **started.client_options) as admin:
            admin.set_user_password(READER, PASSWORD)
        yield started


def as_admin(cluster: LocalCluster) -> Admin:
    return Admin(cluster.bootstrap, **cluster.client_options)


def reader_login(cluster: LocalCluster) -> dict[str, object]:
    return {**cluster.client_options, "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": READER,
            "sasl_plain_password": PASSWORD}


def spark_read(spark, cluster: LocalCluster, topic: str):
    tls = cluster.tls
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{READER}" password="{PASSWORD}";')
    return (spark.read.format("ember").option("bootstrap", cluster.bootstrap).option("topic", topic)
            .option("security.protocol", "SASL_SSL").option("sasl.mechanism", "SCRAM-SHA-512")
            .option("sasl.jaas.config", jaas).option("ssl.cafile", str(tls.ca))
            .option("ssl.certfile", str(tls.client.cert)).option("ssl.keyfile", str(tls.client.key)).load())


@pytest.mark.spark
def test_a_reader_with_only_read_and_describe_on_the_topic_reads_it_with_the_spark_source(spark, cluster, topic_name):
    with as_admin(cluster) as admin:
        admin.create_topic(topic_name, partitions=2, replication_factor=1)
        admin.create_acls([AclBinding(ResourcePattern(ResourceType.TOPIC, topic_name),
                                      AccessControlEntry(f"User:{READER}", "*", operation, Permission.ALLOW))
                           for operation in (Operation.READ, Operation.DESCRIBE)])   # `acls add --consumer`'s topic part
    with Producer(cluster.bootstrap, acks="all", **cluster.client_options) as producer:
        for future in [producer.send(topic_name, f"r{i}".encode(), partition=i % 2) for i in range(6)]:
            future.get(timeout=WAIT_S)
    frame = spark_read(spark, cluster, topic_name)
    assert sorted(bytes(r.value) for r in frame.select("value").collect()) == [f"r{i}".encode() for i in range(6)]


@pytest.mark.spark
def test_a_writer_with_only_write_on_the_topic_writes_with_the_spark_sink(spark, cluster, topic_name):
    """Write implies Describe; the sink's idempotent producer (InitProducerId) needs IdempotentWrite
    on the cluster or Write on some topic (Kafka 3+), so Write on the topic is all it needs."""
    with as_admin(cluster) as admin:
        admin.create_topic(topic_name, partitions=2, replication_factor=1)
        admin.create_acls([AclBinding(ResourcePattern(ResourceType.TOPIC, topic_name),
                                      AccessControlEntry(f"User:{READER}", "*", Operation.WRITE, Permission.ALLOW))])
    tls = cluster.tls
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{READER}" password="{PASSWORD}";')
    (spark.createDataFrame([(f"k{i}", f"w{i}") for i in range(6)], "key string, value string")
     .write.format("ember").mode("append").option("bootstrap", cluster.bootstrap).option("topic", topic_name)
     .option("security.protocol", "SASL_SSL").option("sasl.mechanism", "SCRAM-SHA-512")
     .option("sasl.jaas.config", jaas).option("ssl.cafile", str(tls.ca))
     .option("ssl.certfile", str(tls.client.cert)).option("ssl.keyfile", str(tls.client.key)).save())
    with as_admin(cluster) as admin:
        assert sum(p.high_watermark for p in admin.describe_topic(topic_name).partitions) == 6


def test_a_topic_the_principal_may_not_describe_is_refused_as_not_authorized_whether_it_exists_or_not(
        cluster, topic_name):
    with as_admin(cluster) as admin:
        admin.create_topic(topic_name, partitions=1, replication_factor=1)     # no ACL for the reader
    missing = f"{topic_name}-missing"
    messages = {}
    with Admin(cluster.bootstrap, **reader_login(cluster)) as reader:
        for name in (topic_name, missing):
            with pytest.raises(TopicAuthorizationFailed) as refused:
                reader.describe_topic(name, configs=False)
            messages[name] = str(refused.value).replace(name, "TOPIC")
            assert f"not authorized to Describe Topic:{name} (or it does not exist)" in str(refused.value)
            assert "--consumer --topic" in str(refused.value)     # the grant a reader needs
    assert messages[topic_name] == messages[missing]                 # reveals nothing


@pytest.mark.spark
def test_the_spark_source_on_a_topic_it_may_not_describe_says_not_authorized(spark, cluster, topic_name):
    with as_admin(cluster) as admin:
        admin.create_topic(topic_name, partitions=1, replication_factor=1)
    with pytest.raises(Exception) as refused:
        spark_read(spark, cluster, topic_name).collect()
    assert f"not authorized to Describe Topic:{topic_name} (or it does not exist)" in str(refused.value)
    assert f"topic {topic_name!r} does not exist" not in str(refused.value)


def test_the_client_side_text_of_a_refused_topic_without_a_broker_message_does_not_claim_it_is_missing():
    from ember.client.admin import _topic_error_text  # here: the module's other tests run without it

    text = _topic_error_text("secret", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    assert text.startswith("not authorized to Describe topic 'secret' (or it does not exist); ")
    assert "--operation Describe --topic secret`" in text
    assert _topic_error_text("secret", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) == "topic 'secret' does not exist"
