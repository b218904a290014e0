"""A secure cluster (``LocalCluster(secure=True)``, what ``ember cluster up --secure`` starts): 3
broker processes with every listener on TLS and client certificates required, replicating to
each other and talking to ZooKeeper over TLS (its only port is TLS). ember's clients, confluent-kafka,
Kafka's Java console producer and the Spark source all work with the client certificate; a
plaintext client, a client without its certificate and a client trusting another CA are refused
with typed errors; no key or password reaches a broker log; a renewed broker certificate takes
effect as brokers restart one at a time. The KAFKA listener serves its own certificate, whose key
is encrypted (``listener.name.kafka.ssl.*``)."""
from __future__ import annotations

import os
import socket
import ssl
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from kafka_helpers import WAIT_S, run_tool

from ember.cli import main
from ember.client import Admin, Consumer, Producer, TopicPartition
from ember.errors import SslAuthenticationFailed
from ember.launcher.cluster_tls import ClusterTls
from ember.launcher.local import LocalCluster
from ember.security.certificates import LOCAL_HOSTS, CertificateAuthority

pytestmark = pytest.mark.integration

KEY_PASSWORD = "kafka-listener-key-password"
SPARK_SECRET = "spark-option-secret"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> LocalCluster:
    data = tmp_path_factory.mktemp("secure-cluster")
    tls = ClusterTls.create(data / "tls")
    kafka = CertificateAuthority.load(tls.directory).issue("kafka-listener", "ember-broker", LOCAL_HOSTS,
                                                           password=KEY_PASSWORD)
    config = {"listener.name.kafka.ssl.keystore.location": str(kafka.keystore),
              "listener.name.kafka.ssl.key.password": KEY_PASSWORD}
    with LocalCluster(data, broker_count=3, secure=True, broker_config=config) as started:
        yield started


def security(cluster: LocalCluster, **changes: object) -> dict[str, object]:
    return {**cluster.client_options, **changes}


def create(cluster: LocalCluster, topic: str, partitions: int = 3) -> None:
    with Admin(cluster.bootstrap, **cluster.client_options) as admin:
        admin.create_topic(topic, partitions=partitions, replication_factor=3)


def read(cluster: LocalCluster, topic: str, partitions: int, count: int, **options: object) -> list:
    consumer = Consumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest", **cluster.client_options,
                        **options)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        got: list = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += records
        return got
    finally:
        consumer.close()


def test_ember_clients_round_trip_over_tls_and_every_replica_follows_over_tls(cluster, topic_name):
    create(cluster, topic_name)
    sent = {f"k{i}".encode(): f"v{i}".encode() for i in range(300)}
    with Producer(cluster.bootstrap, acks="all", **cluster.client_options) as producer:
        for future in [producer.send(topic_name, value, key=key) for key, value in sent.items()]:
            future.get(timeout=WAIT_S)
    group = Consumer(topic_name, bootstrap_servers=cluster.bootstrap, group_id="tls-group",
                     auto_offset_reset="earliest", enable_auto_commit=False, **cluster.client_options)
    try:
        got: dict[bytes, bytes] = {}
        deadline = time.monotonic() + WAIT_S
        while len(got) < len(sent) and time.monotonic() < deadline:
            got.update((r.key, r.value) for records in group.poll(timeout_ms=500).values() for r in records)
        group.commit()
        assert got == sent
        assert sum(group.committed(TopicPartition(topic_name, p)) or 0 for p in range(3)) == len(sent)
    finally:
        group.close()
    with Admin(cluster.bootstrap, **cluster.client_options) as admin:
        partitions = admin.describe_topic(topic_name).partitions
    # acks=all was acknowledged with every replica in sync: the followers fetched over TLS.
    assert all(sorted(p.isr) == [1, 2, 3] for p in partitions)
    assert sum(p.high_watermark for p in partitions) == len(sent)


def test_a_fetch_of_several_megabytes_over_tls_returns_the_exact_bytes(cluster, topic_name):
    create(cluster, topic_name, partitions=1)
    values = [os.urandom(200_000) for _ in range(40)]   # 8 MB, fetched in one response
    with Producer(cluster.bootstrap, acks="all", max_request_size=4 << 20, **cluster.client_options) as producer:
        for future in [producer.send(topic_name, v, partition=0) for v in values]:
            future.get(timeout=WAIT_S)
    got = read(cluster, topic_name, 1, len(values), fetch_max_bytes=16 << 20, max_partition_fetch_bytes=16 << 20)
    assert [r.value for r in got] == values


def test_a_plaintext_client_is_refused_with_a_typed_error(cluster):
    with pytest.raises(SslAuthenticationFailed, match="requires TLS; set security_protocol='SSL'"):
        Admin(cluster.bootstrap, request_timeout_ms=10_000).list_topics()


def test_a_cli_command_without_the_client_configuration_is_told_to_pass_it(cluster, capsys, monkeypatch):
    monkeypatch.delenv("EMBER_CLIENT_CONFIG", raising=False)
    assert main(["topics", "list", "--bootstrap", cluster.bootstrap]) == 1
    err = capsys.readouterr().err
    assert "SslAuthenticationFailed" in err and "--command-config FILE or export EMBER_CLIENT_CONFIG=FILE" in err, err


def test_a_client_without_its_certificate_is_refused(cluster):
    no_certificate = security(cluster)
    del no_certificate["ssl_certfile"], no_certificate["ssl_keyfile"]
    with pytest.raises(SslAuthenticationFailed, match="requires a client certificate"):
        Admin(cluster.bootstrap, request_timeout_ms=10_000, **no_certificate).list_topics()


def test_a_client_trusting_another_ca_is_refused(cluster, tmp_path):
    other = CertificateAuthority.create(tmp_path)
    with pytest.raises(SslAuthenticationFailed, match="certificate is not trusted"):
        Admin(cluster.bootstrap, **security(cluster, ssl_cafile=str(other.cert_path))).list_topics()


def test_confluent_kafka_produces_and_consumes_over_ssl_on_the_kafka_listener(cluster, topic_name):
    create(cluster, topic_name, partitions=2)
    tls = cluster.tls
    config = {"bootstrap.servers": cluster.kafka_bootstrap, "security.protocol": "SSL",
              "ssl.ca.location": str(tls.ca), "ssl.certificate.location": str(tls.client.cert),
              "ssl.key.location": str(tls.client.key)}
    producer = KafkaProducer({**config, "acks": "all", "enable.idempotence": True})
    for i in range(20):
        producer.produce(topic_name, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(WAIT_S) == 0
    consumer = KafkaConsumer({**config, "group.id": "librdkafka-tls", "enable.auto.commit": False})
    try:
        consumer.assign([KafkaTopicPartition(topic_name, p, 0) for p in range(2)])
        got = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < 20 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))


def test_kafkas_console_producer_writes_with_the_printed_client_properties(cluster, topic_name):
    create(cluster, topic_name, partitions=1)
    files = cluster.tls.write_client_configs(cluster.bootstrap, cluster.kafka_bootstrap)
    lines = [f"key-{i}:value {i}" for i in range(5)]
    run_tool("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", cluster.kafka_bootstrap,
             "--topic", topic_name, "--command-config", str(files["java"]),
             "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
             stdin="\n".join(lines) + "\n")
    assert [f"{r.key.decode()}:{r.value.decode()}" for r in read(cluster, topic_name, 1, 5)] == lines


@pytest.mark.spark
def test_the_spark_source_reads_over_tls_and_its_plan_hides_the_password(spark, cluster, topic_name):
    create(cluster, topic_name, partitions=2)
    with Producer(cluster.bootstrap, acks="all", **cluster.client_options) as producer:
        for future in [producer.send(topic_name, f"v{i}".encode(), partition=i % 2) for i in range(10)]:
            future.get(timeout=WAIT_S)
    tls = cluster.tls
    frame = (spark.read.format("ember").option("bootstrap", cluster.bootstrap).option("topic", topic_name)
             .option("security.protocol", "SSL").option("ssl.cafile", str(tls.ca))
             .option("ssl.certfile", str(tls.client.cert)).option("ssl.keyfile", str(tls.client.key))
             .option("ssl.password", SPARK_SECRET).load())
    assert sorted(bytes(r.value) for r in frame.select("value").collect()) == sorted(
        f"v{i}".encode() for i in range(10))
    assert SPARK_SECRET not in frame._jdf.queryExecution().toString()


def test_broker_logs_name_each_refusal_on_one_line_and_hold_no_key_or_password(cluster):
    logs = "".join(b.log_path.read_text() for b in cluster.brokers.values())
    keys = [path.read_text() for path in cluster.tls.directory.glob("*key*.pem")]
    secrets = [line for key in keys for line in key.splitlines() if line and not line.startswith("-----")]
    assert secrets and not any(secret in logs for secret in secrets)
    assert "PRIVATE KEY" not in logs and KEY_PASSWORD not in logs
    assert "a plaintext client on this TLS listener?" in logs
    assert "the client presented no certificate" in logs
    assert "Traceback" not in logs


def test_zookeeper_serves_only_tls_and_the_brokers_use_it(cluster):
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError
    zookeeper = cluster.zookeeper
    config = (zookeeper.data_dir / "zoo.cfg").read_text()
    assert f"secureClientPort={zookeeper.port}" in config and "clientPort=" not in config.replace("secureClientPort", "")
    assert all("over TLS" in b.log_path.read_text() for b in cluster.brokers.values())
    plain = KazooClient(hosts=zookeeper.connect_string, timeout=2)
    try:
        with pytest.raises(KazooTimeoutError):
            plain.start(timeout=3)
    finally:
        plain.stop()
        plain.close()


def _served_certificate(host: str, port: int, ca: Path) -> bytes:
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection((host, port), timeout=WAIT_S) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        return tls.getpeercert(binary_form=True)


def test_a_renewed_broker_certificate_is_served_as_brokers_restart_one_at_a_time(cluster, topic_name):
    create(cluster, topic_name, partitions=3)
    renewed = CertificateAuthority.load(cluster.tls.directory).issue("broker", "ember-broker", LOCAL_HOSTS)
    leaf = renewed.cert.read_text().split("-----END CERTIFICATE-----")[0] + "-----END CERTIFICATE-----\n"
    new_der = ssl.PEM_cert_to_DER_cert(leaf)
    with Producer(cluster.bootstrap, acks="all", **cluster.client_options) as producer:
        for broker in cluster.brokers.values():
            assert _served_certificate(broker.host, broker.port, cluster.tls.ca) != new_der   # read at start-up
            cluster.restart_broker(broker.broker_id)
            assert _served_certificate(broker.host, broker.port, cluster.tls.ca) == new_der
            producer.send(topic_name, f"after {broker.broker_id}".encode()).get(timeout=WAIT_S)
    assert len(read(cluster, topic_name, 3, 3)) == 3

