"""SASL on a real cluster (``LocalCluster(secure=True, sasl=True)``, what ``ember cluster up
--secure`` starts): 2 brokers, every listener SASL_SSL with SCRAM, PLAIN enabled on the KAFKA
listener only. Clients that authenticate work (ember's and confluent-kafka, replication between
brokers authenticated as User:broker); every other client is refused with a clear, typed error:
no credentials, a wrong password, an unknown user (shown the same salt by every broker, as a
real user is), a removed user (on every broker, within seconds), PLAIN where it is not enabled, a client that
stalls mid-authentication. An old Kafka
client's SaslHandshake v0 (bare SASL tokens) authenticates too. Users added with
``ember users`` or Kafka's ``kafka-configs`` authenticate at once, and ACLs (on, as in ``cluster up
--secure``: admin and broker are super users) see them as ``User:<name>``; no password reaches a
broker log, Spark's log (its JVM log4j2 at INFO, and ember's Python loggers at DEBUG), a Spark
plan or a query's progress."""
from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time

import pytest
import scramp
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError
from confluent_kafka import Producer as KafkaProducer
from kafka_helpers import WAIT_S, run_tool
from kafka_wire import KafkaWire
from kio.schema.list_offsets.v6.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest
from sasl_helpers import create, grant, kafka_config, login, tls_context

from ember.client import Admin, Consumer, Producer, TopicPartition
from ember.errors import ErrorCode, SaslAuthenticationFailed, TopicAuthorizationFailed, UnsupportedSaslMechanism
from ember.launcher.local import LocalCluster
from ember.net.connection import Connection
from ember.security.authorizer.model import Operation
from ember.security.client import ClientSecurity
from ember.wire.api_keys import ApiKey
from ember.wire.frame import FRAME_LENGTH, encode_request
from spark_logs import spark_log_file

pytestmark = pytest.mark.integration

PASSWORDS = {"carol": "carol-password-1", "dave": "dave-password-2", "erin": "erin-password-3"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> LocalCluster:
    data = tmp_path_factory.mktemp("sasl-cluster")
    config = {"listener.name.kafka.sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
              "sasl.handshake.timeout.ms": "2000"}
    with LocalCluster(data, broker_count=2, secure=True, sasl=True, broker_config=config) as started:
        started.tls.write_client_configs(started.bootstrap, started.kafka_bootstrap, started.scram)
        yield started




def authenticates(cluster: LocalCluster, broker_id: int, user: str, password: str) -> bool:
    broker = cluster.brokers[broker_id]
    security = ClientSecurity.from_options(login(cluster, user, password))
    try:
        Connection((broker.host, broker.port), security=security, connect_timeout_ms=10_000).close()
        return True
    except SaslAuthenticationFailed:
        return False


def ember_cli(cluster: LocalCluster, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "ember.cli", *args, "--bootstrap", cluster.bootstrap,
                           "--command-config", str(cluster.tls.directory / "client.properties")],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr
    return done




def kafka_produce(config: dict[str, object], topic: str, values: list[bytes]) -> None:
    """Produce with confluent-kafka and check every delivery report."""
    failures: list[object] = []
    producer = KafkaProducer({**config, "acks": "all"})
    for value in values:
        producer.produce(topic, value, on_delivery=lambda error, _message: error and failures.append(error))
    assert producer.flush(WAIT_S) == 0 and not failures


def kafka_error(config: dict[str, object]) -> KafkaError:
    """The first error a confluent-kafka producer with ``config`` reports while connecting (and
    asking for metadata)."""
    errors: list[KafkaError] = []
    producer = KafkaProducer({**config, "error_cb": errors.append})
    producer.produce("sasl-probe", b"makes the client ask for metadata")
    deadline = time.monotonic() + WAIT_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.5)
    assert errors, "the client connected without an error"
    return errors[0]


def test_ember_clients_authenticate_and_brokers_replicate_over_sasl_ssl(cluster, topic_name):
    with Admin(cluster.bootstrap, **cluster.client_options) as admin:
        admin.create_topic(topic_name, partitions=2, replication_factor=2)
    with Producer(cluster.bootstrap, acks="all", **cluster.client_options) as producer:
        for future in [producer.send(topic_name, f"v{i}".encode(), partition=i % 2) for i in range(20)]:
            future.get(timeout=WAIT_S)
    with Admin(cluster.bootstrap, **cluster.client_options) as admin:
        partitions = admin.describe_topic(topic_name).partitions
    # acks=all answered with both replicas in sync: the followers fetched as User:broker over SASL_SSL.
    assert all(sorted(p.isr) == [1, 2] for p in partitions)
    consumer = Consumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest", **cluster.client_options)
    try:
        consumer.assign([TopicPartition(topic_name, p) for p in range(2)])
        got: list = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < 20 and time.monotonic() < deadline:
            got += [r.value for records in consumer.poll(timeout_ms=500).values() for r in records]
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))


@pytest.mark.parametrize("user, password, refusal", [
    ("admin", "wrong-password", "failed \\(mechanism SCRAM-SHA-512, user 'admin'\\).*invalid credentials"),
    ("nobody", "whatever", "failed \\(mechanism SCRAM-SHA-512, user 'nobody'\\).*invalid credentials"),
])
def test_a_wrong_password_or_an_unknown_user_is_refused(cluster, user, password, refusal):
    with pytest.raises(SaslAuthenticationFailed, match=refusal):
        Admin(cluster.bootstrap, request_timeout_ms=10_000, **login(cluster, user, password)).list_topics()


def test_a_tls_client_without_sasl_credentials_is_refused_with_what_to_set(cluster):
    tls_only = {**cluster.tls.client_security().options()}
    with pytest.raises(SaslAuthenticationFailed, match="requires SASL authentication before any request: set "
                                                       "security_protocol='SASL_SSL'"):
        Admin(cluster.bootstrap, request_timeout_ms=10_000, **tls_only).list_topics()


def test_plain_works_only_on_the_listener_that_enables_it(cluster, topic_name):
    create(cluster, topic_name)
    admin_password = cluster.scram.password("admin")
    kafka_produce(kafka_config(cluster, "admin", admin_password, "PLAIN"), topic_name, [b"over plain"])
    with pytest.raises(UnsupportedSaslMechanism, match="does not enable SASL mechanism PLAIN; it enables "
                                                      "SCRAM-SHA-512, SCRAM-SHA-256"):
        Admin(cluster.bootstrap, request_timeout_ms=10_000,
              **login(cluster, "admin", admin_password, "PLAIN")).list_topics()


def test_confluent_kafka_round_trips_with_scram_and_is_refused_without_it(cluster, topic_name):
    create(cluster, topic_name)
    config = kafka_config(cluster, "admin", cluster.scram.password("admin"))
    kafka_produce(config, topic_name, [f"r{i}".encode() for i in range(10)])
    consumer = KafkaConsumer({**config, "group.id": "sasl-group", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic_name])
        values: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while len(values) < 10 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert sorted(values) == sorted(f"r{i}".encode() for i in range(10))

    wrong = kafka_error(kafka_config(cluster, "admin", "wrong-password"))
    assert wrong.code() == KafkaError._AUTHENTICATION and "invalid credentials" in wrong.str()
    unknown = kafka_error(kafka_config(cluster, "nobody", "whatever"))
    assert unknown.code() == KafkaError._AUTHENTICATION
    # TLS without SASL: ApiVersions is answered, the first other request closes the connection (as
    # Kafka does), so nothing is ever delivered.
    failures: list[KafkaError] = []
    no_sasl = KafkaProducer({**kafka_config(cluster, "", "", protocol="SSL"), "message.timeout.ms": 5000})
    no_sasl.produce(topic_name, b"never", on_delivery=lambda error, _message: failures.append(error))
    no_sasl.flush(WAIT_S)
    assert failures and failures[0] is not None
    logs = "".join(b.log_path.read_text() for b in cluster.brokers.values())
    assert "sent before SASL authentication" in logs


def test_a_user_added_with_ember_users_authenticates_and_once_removed_is_refused_on_every_broker(cluster, tmp_path):
    password_file = tmp_path / "carol.password"
    password_file.write_text(PASSWORDS["carol"] + "\n")
    added = ember_cli(cluster, "users", "add", "carol", "--password-file", str(password_file))
    assert PASSWORDS["carol"] not in added.stdout + added.stderr
    assert "carol\tSCRAM-SHA-256 (iterations=4096), SCRAM-SHA-512 (iterations=4096)" in \
        ember_cli(cluster, "users", "list").stdout
    assert all(authenticates(cluster, b, "carol", PASSWORDS["carol"]) for b in cluster.brokers)

    ember_cli(cluster, "users", "remove", "carol")
    deadline = time.monotonic() + 10
    refused: set[int] = set()
    while refused != set(cluster.brokers) and time.monotonic() < deadline:
        refused |= {b for b in cluster.brokers if not authenticates(cluster, b, "carol", PASSWORDS["carol"])}
    assert refused == set(cluster.brokers)


def test_a_scram_user_added_with_kafka_configs_authenticates(cluster, topic_name):
    properties = str(cluster.tls.directory / "client.properties")
    run_tool("kafka.admin.ConfigCommand", "--bootstrap-server", cluster.kafka_bootstrap, "--command-config", properties,
             "--alter", "--add-config", f"SCRAM-SHA-256=[iterations=8192,password={PASSWORDS['dave']}]",
             "--entity-type", "users", "--entity-name", "dave")
    described = run_tool("kafka.admin.ConfigCommand", "--bootstrap-server", cluster.kafka_bootstrap,
                         "--command-config", properties, "--describe", "--entity-type", "users", "--entity-name", "dave")
    assert "SCRAM credential configs for user-principal 'dave' are SCRAM-SHA-256=iterations=8192" in described.stdout
    create(cluster, topic_name)
    dave = login(cluster, "dave", PASSWORDS["dave"], "SCRAM-SHA-256")
    # The ACLs see the SASL user: dave may not write until granted.
    with pytest.raises(TopicAuthorizationFailed, match="principal User:dave is not authorized to (Describe|Write)"):
        with Producer(cluster.bootstrap, retries=0, **dave) as producer:
            producer.send(topic_name, b"refused", partition=0).get(timeout=WAIT_S)
    # The same refusal for a Kafka client authenticated as dave with SASL_SSL.
    refused: list[KafkaError] = []
    producer = KafkaProducer({**kafka_config(cluster, "dave", PASSWORDS["dave"], "SCRAM-SHA-256"),
                              "message.timeout.ms": 10000})
    producer.produce(topic_name, b"refused", on_delivery=lambda error, _message: refused.append(error))
    producer.flush(WAIT_S)
    assert [e.code() for e in refused if e is not None] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], refused
    grant(cluster, "User:dave", topic_name, Operation.WRITE)
    kafka_produce(kafka_config(cluster, "dave", PASSWORDS["dave"], "SCRAM-SHA-256"), topic_name, [b"from dave"])
    assert authenticates(cluster, 1, "dave", PASSWORDS["dave"]) is False   # SCRAM-SHA-512: not created
    with Admin(cluster.bootstrap, **dave) as admin:
        assert topic_name in admin.list_topics()


def test_an_old_client_authenticates_with_saslhandshake_v0_and_bare_scram_tokens(cluster, topic_name):
    create(cluster, topic_name)
    address = cluster.kafka_bootstrap.split(",")[0]
    with scram_v0_wire(cluster, address, "admin", cluster.scram.password("admin")) as wire:
        metadata = wire.call(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=topic_name),),
                                             allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    assert metadata.topics[0].error_code == 0


def scram_v0_wire(cluster: LocalCluster, address: str, user: str, password: str) -> KafkaWire:
    """A raw Kafka connection over TLS, authenticated as an old client does: SaslHandshake v0,
    then bare SCRAM-SHA-256 tokens."""
    wire = KafkaWire(address)
    wire.sock = tls_context(cluster).wrap_socket(wire.sock, server_hostname=address.rsplit(":", 1)[0])
    assert wire.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code == 0   # v0

    def exchange(token: str) -> str:
        wire.send_raw(FRAME_LENGTH.pack(len(token)) + token.encode())
        (size,) = FRAME_LENGTH.unpack(wire.exactly(FRAME_LENGTH.size))
        return wire.exactly(size).decode()

    client = scramp.ScramClient(["SCRAM-SHA-256"], user, password)
    client.set_server_first(exchange(client.get_client_first()))
    client.set_server_final(exchange(client.get_client_final()))   # checks the broker's signature
    return wire


def test_list_offsets_answered_as_it_arrives_after_sasl_is_authorized_as_the_authenticated_user(cluster, topic_name,
                                                                                                 tmp_path):
    """After a SASL login, earliest/latest ListOffsets are answered as they arrive (ember.net.immediate)
    and checked against the authenticated principal, not the connection's TLS one: a user without
    ACLs is refused, the admin (a super user) answered."""
    create(cluster, topic_name)
    password_file = tmp_path / "dave.password"
    password_file.write_text(PASSWORDS["dave"] + "\n")
    ember_cli(cluster, "users", "add", "dave", "--password-file", str(password_file))
    deadline = time.monotonic() + WAIT_S
    while not all(authenticates(cluster, b, "dave", PASSWORDS["dave"]) for b in cluster.brokers):
        assert time.monotonic() < deadline, "dave was not known to every broker in time"
        time.sleep(0.2)
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(name=topic_name, partitions=(
        ListOffsetsPartition(partition_index=0, timestamp=-2), ListOffsetsPartition(partition_index=0, timestamp=-1))),))

    def codes(user: str, password: str) -> set[int]:
        found: set[int] = set()
        for address in cluster.kafka_bootstrap.split(","):
            with scram_v0_wire(cluster, address, user, password) as wire:
                for _ in range(3):
                    found |= {p.error_code.value for t in wire.call(request).topics for p in t.partitions}
        return found
    assert codes("dave", PASSWORDS["dave"]) == {ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    assert codes("admin", cluster.scram.password("admin")) == {ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER}


def test_a_made_up_user_gets_the_same_salt_from_every_broker_like_a_real_user(cluster):
    """Salts are what SCRAM shows before the proof: a made-up user's must not differ between
    brokers (nor restarts) when a real user's does not, or comparing them tells who exists."""
    def salts(user: str) -> set[str]:
        seen = set()
        for broker in cluster.brokers.values():
            host = broker.kafka_address.rsplit(":", 1)[0]
            with KafkaWire(broker.kafka_address) as wire:
                wire.sock = tls_context(cluster).wrap_socket(wire.sock, server_hostname=host)
                assert wire.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512")).error_code == 0
                client = scramp.ScramClient(["SCRAM-SHA-512"], user, "any password")
                wire.send_raw(FRAME_LENGTH.pack(len(token := client.get_client_first())) + token.encode())
                (size,) = FRAME_LENGTH.unpack(wire.exactly(FRAME_LENGTH.size))
                server_first = dict(part.split("=", 1) for part in wire.exactly(size).decode().split(","))
                seen.add(f"{server_first['s']},{server_first['i']}")
        return seen

    assert len(cluster.brokers) == 2
    assert len(salts("admin")) == 1
    assert len(salts("nobody-at-all")) == 1
    assert salts("nobody-at-all") != salts("someone-else")



def test_a_client_that_stalls_mid_authentication_is_closed(cluster):
    broker = cluster.brokers[1]
    with socket.create_connection((broker.host, broker.port), timeout=WAIT_S) as raw, \
            tls_context(cluster).wrap_socket(raw, server_hostname=broker.host) as tls:
        tls.sendall(b"".join(encode_request(ApiKey.SASL_HANDSHAKE, 0, 1, {"mechanism": "SCRAM-SHA-512"})))
        answer = tls.makefile("rb")
        (size,) = FRAME_LENGTH.unpack(answer.read(FRAME_LENGTH.size))
        assert len(answer.read(size)) == size
        # ... and never sends its first SASL token: closed after sasl.handshake.timeout.ms, not left open.
        tls.settimeout(WAIT_S)
        assert tls.recv(1) == b""
    deadline = time.monotonic() + WAIT_S
    while "authenticating took longer than sasl.handshake.timeout.ms=2000" not in broker.log_path.read_text():
        assert time.monotonic() < deadline, "the broker did not say why it closed the stalled connection"
        time.sleep(0.1)


def test_no_password_reaches_a_broker_log(cluster):
    logs = "".join(b.log_path.read_text() for b in cluster.brokers.values())
    secrets = [cluster.scram.password("admin"), cluster.scram.password("broker"), *PASSWORDS.values()]
    assert not any(secret in logs for secret in secrets)
    assert "SASL authentication failed (SCRAM-SHA-512, user 'admin': wrong password)" in logs
    assert "Traceback" not in logs


@pytest.mark.spark
def test_the_spark_source_reads_with_scram_and_neither_its_plan_nor_spark_logs_show_the_password(
        spark, cluster, topic_name, tmp_path, caplog):
    create(cluster, topic_name)
    with Admin(cluster.bootstrap, **cluster.client_options) as admin:
        admin.set_user_password("erin", PASSWORDS["erin"])
    grant(cluster, "User:erin", topic_name, Operation.READ)   # implies Describe: all the source needs
    with Producer(cluster.bootstrap, acks="all", **cluster.client_options) as producer:
        for future in [producer.send(topic_name, f"s{i}".encode()) for i in range(5)]:
            future.get(timeout=WAIT_S)
    tls = cluster.tls
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="erin" '
            f'password="{PASSWORDS["erin"]}";')
    caplog.set_level(logging.DEBUG, logger="ember")
    with spark_log_file(spark, tmp_path / "spark.log") as spark_log:
        frame = (spark.read.format("ember").option("bootstrap", cluster.bootstrap).option("topic", topic_name)
                 .option("security.protocol", "SASL_SSL").option("sasl.mechanism", "SCRAM-SHA-512")
                 .option("sasl.jaas.config", jaas).option("ssl.cafile", str(tls.ca))
                 .option("ssl.certfile", str(tls.client.cert)).option("ssl.keyfile", str(tls.client.key)).load())
        assert sorted(bytes(r.value) for r in frame.select("value").collect()) == [f"s{i}".encode() for i in range(5)]
        plan = frame._jdf.queryExecution().toString()
    assert PASSWORDS["erin"] not in plan
    logged = spark_log.read_text()
    assert "DAGScheduler" in logged and "BatchScan ember" in plan    # Spark logged the read's job; the plan shows it
    assert PASSWORDS["erin"] not in logged and PASSWORDS["erin"] not in caplog.text


@pytest.mark.spark
def test_the_stream_to_delta_job_reads_with_the_printed_client_properties_and_prints_no_password(
        spark, cluster, topic_name, tmp_path, monkeypatch):
    from stream_to_delta import parse_args, start_stream

    create(cluster, topic_name)
    with Producer(cluster.bootstrap, acks="all", **cluster.client_options) as producer:
        for future in [producer.send(topic_name, f"j{i}".encode()) for i in range(8)]:
            future.get(timeout=WAIT_S)
    properties = cluster.tls.directory / "client.properties"   # SASL_SSL, the admin's login (cluster up --secure)
    assert "sasl.jaas.config" in properties.read_text()
    monkeypatch.setenv("EMBER_CLIENT_CONFIG", str(properties))
    table = tmp_path / "table"
    with spark_log_file(spark, tmp_path / "spark.log") as spark_log:
        query = start_stream(spark, parse_args(["--bootstrap", cluster.bootstrap, "--topic", topic_name,
                                                "--table", str(table), "--checkpoint", str(tmp_path / "checkpoint"),
                                                "--trigger", "availableNow"]))
        query.awaitTermination(180)
    logged = spark_log.read_text()
    assert "MicroBatchExecution" in logged and cluster.scram.password("admin") not in logged
    assert query.exception() is None, query.exception()
    assert sorted(bytes(r.value) for r in spark.read.format("delta").load(str(table)).collect()) == sorted(
        f"j{i}".encode() for i in range(8))
    shown = json.dumps(query.recentProgress, default=str) + query._jsq.explainInternal(True)
    assert cluster.scram.password("admin") not in shown
