"""SASL re-authentication (Kafka's KIP-368, ``connections.max.reauth.ms``) on a real secure cluster.

Sessions last 3 s here: Kafka clients (librdkafka) and ember's own re-authenticate on their open
connections and keep working across several lifetimes; a removed user's open connection is cut
off at its next re-authentication; a client that does not re-authenticate is disconnected at its
first request after expiry; a re-authentication as someone else closes the connection.
"""
from __future__ import annotations

import datetime
import socket
import ssl
import time

import pytest
import scramp
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError
from confluent_kafka import Producer as KafkaProducer
from kafka_helpers import WAIT_S
from kafka_wire import KafkaWire
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from sasl_helpers import create, grant, kafka_config, login, tls_context

from ember.client import Admin, Consumer, Producer, TopicPartition
from ember.errors import ErrorCode, SaslAuthenticationFailed
from ember.launcher.local import LocalCluster
from ember.security.authorizer.model import Operation
from ember.wire.api_keys import ApiKey
from ember.wire.frame import FRAME_LENGTH, Response, decode_response, encode_request
from waiting import eventually

pytestmark = pytest.mark.integration

LIFETIME_MS = 3000
#: How long the clients keep working: several session lifetimes.
RUN_S = 10.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> LocalCluster:
    data = tmp_path_factory.mktemp("sasl-reauth-cluster")
    with LocalCluster(data, broker_count=2, secure=True, sasl=True,
                      broker_config={"connections.max.reauth.ms": str(LIFETIME_MS)}) as started:
        yield started


def broker_logs(cluster: LocalCluster) -> str:
    return "".join(b.log_path.read_text() for b in cluster.brokers.values())


def reauthentications(cluster: LocalCluster, principal: str, mechanism: str, listener: str) -> int:
    """How many re-authentications the brokers logged (ember.security.sasl.server, INFO)."""
    return broker_logs(cluster).count(f"re-authenticated as {principal} with {mechanism} on listener {listener}")


def wait_for_log(cluster: LocalCluster, text: str) -> None:
    eventually(lambda: text in broker_logs(cluster), f"a broker to log {text!r}")


def add_user(cluster: LocalCluster, user: str, password: str, topic: str) -> None:
    with Admin(cluster.bootstrap, **cluster.client_options) as admin:
        admin.set_user_password(user, password)
    grant(cluster, f"User:{user}", topic, Operation.WRITE, Operation.DESCRIBE)


def authenticated_wire(cluster: LocalCluster, user: str, password: str) -> tuple[KafkaWire, datetime.timedelta]:
    """A raw Kafka connection authenticated with SaslHandshake v1 / SaslAuthenticate v1, and the
    session lifetime the broker announced."""
    address = cluster.kafka_bootstrap.split(",")[0]
    wire = KafkaWire(address)
    wire.sock = tls_context(cluster).wrap_socket(wire.sock, server_hostname=address.rsplit(":", 1)[0])
    code, lifetime = scram_exchange(wire, user, password)
    assert code == ErrorCode.NONE
    return wire, lifetime


def scram_exchange(wire: KafkaWire, user: str, password: str) -> tuple[int, datetime.timedelta]:
    """SCRAM-SHA-256 over SaslHandshake v1 + SaslAuthenticate v1: (error code, session lifetime)."""
    assert wire.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code == ErrorCode.NONE
    client = scramp.ScramClient(["SCRAM-SHA-256"], user, password)
    first = wire.call(SaslAuthenticateRequest(auth_bytes=client.get_client_first().encode()))
    assert first.error_code == ErrorCode.NONE, first.error_message
    client.set_server_first(first.auth_bytes.decode())
    final = wire.call(SaslAuthenticateRequest(auth_bytes=client.get_client_final().encode()))
    if final.error_code == ErrorCode.NONE:
        client.set_server_final(final.auth_bytes.decode())   # checks the broker's signature
    return final.error_code, final.session_lifetime


def metadata(wire: KafkaWire, topic: str) -> int:
    response = wire.call(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                                         allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return response.topics[0].error_code


def test_confluent_kafka_re_authenticates_and_produces_and_consumes_across_session_lifetimes(cluster, topic_name):
    create(cluster, topic_name)
    before = reauthentications(cluster, "User:admin", "SCRAM-SHA-256", "KAFKA")
    config = kafka_config(cluster, "admin", cluster.scram.password("admin"))
    errors: list[KafkaError] = []
    failures: list[KafkaError] = []
    producer = KafkaProducer({**config, "acks": "all", "error_cb": errors.append})
    consumer = KafkaConsumer({**config, "group.id": "reauth-group", "auto.offset.reset": "earliest",
                              "error_cb": errors.append})
    sent: list[bytes] = []
    received: list[bytes] = []
    try:
        consumer.subscribe([topic_name])
        end = time.monotonic() + RUN_S
        while time.monotonic() < end:
            sent.append(f"m{len(sent)}".encode())
            producer.produce(topic_name, sent[-1], on_delivery=lambda error, _m: error and failures.append(error))
            producer.poll(0)
            message = consumer.poll(0.3)
            if message is not None and message.error() is None:
                received.append(message.value())
        assert producer.flush(WAIT_S) == 0
        deadline = time.monotonic() + WAIT_S
        while len(received) < len(sent) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                received.append(message.value())
    finally:
        consumer.close()
    assert not failures and not errors, (failures, errors)
    assert sorted(received) == sorted(sent)
    assert reauthentications(cluster, "User:admin", "SCRAM-SHA-256", "KAFKA") > before


def test_ember_clients_re_authenticate_and_keep_working_across_session_lifetimes(cluster, topic_name):
    with Admin(cluster.bootstrap, **cluster.client_options) as admin:
        admin.create_topic(topic_name, partitions=2, replication_factor=2)
    before = reauthentications(cluster, "User:admin", "SCRAM-SHA-512", "EMBER")
    brokers_before = reauthentications(cluster, "User:broker", "SCRAM-SHA-512", "EMBER")
    sent: list[bytes] = []
    received: list[bytes] = []
    consumer = Consumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest", **cluster.client_options)
    try:
        consumer.assign([TopicPartition(topic_name, p) for p in range(2)])
        with Producer(cluster.bootstrap, acks="all", **cluster.client_options) as producer, \
                Admin(cluster.bootstrap, **cluster.client_options) as admin:
            end = time.monotonic() + RUN_S
            while time.monotonic() < end:
                sent.append(f"e{len(sent)}".encode())
                producer.send(topic_name, sent[-1], partition=len(sent) % 2).get(timeout=WAIT_S)
                received += [r.value for records in consumer.poll(timeout_ms=300).values() for r in records]
                assert topic_name in admin.list_topics()
        deadline = time.monotonic() + WAIT_S
        while len(received) < len(sent) and time.monotonic() < deadline:
            received += [r.value for records in consumer.poll(timeout_ms=500).values() for r in records]
    finally:
        consumer.close()
    assert sorted(received) == sorted(sent)
    assert reauthentications(cluster, "User:admin", "SCRAM-SHA-512", "EMBER") > before
    # acks=all with RF=2 kept being answered: the followers' fetchers re-authenticate too.
    assert reauthentications(cluster, "User:broker", "SCRAM-SHA-512", "EMBER") > brokers_before


def test_a_removed_users_open_connections_are_cut_off_at_their_next_re_authentication(cluster, topic_name):
    create(cluster, topic_name)
    password = "frank-password-1"
    add_user(cluster, "frank", password, topic_name)
    errors: list[KafkaError] = []
    kafka = KafkaProducer({**kafka_config(cluster, "frank", password), "error_cb": errors.append,
                           "message.timeout.ms": 5000})
    kafka.produce(topic_name, b"before removal")
    assert kafka.flush(WAIT_S) == 0
    ember = Producer(cluster.bootstrap, acks="all", retries=0, **login(cluster, "frank", password))
    try:
        ember.send(topic_name, b"before removal", partition=0).get(timeout=WAIT_S)
        with Admin(cluster.bootstrap, **cluster.client_options) as admin:
            admin.delete_user("frank")
        deadline = time.monotonic() + WAIT_S
        while not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            assert time.monotonic() < deadline, f"frank's Kafka connection stayed authenticated: {errors}"
            kafka.produce(topic_name, b"after removal", on_delivery=lambda *_: None)
            kafka.poll(0.5)
        with pytest.raises(SaslAuthenticationFailed, match="user 'frank'"):
            while time.monotonic() < deadline:
                ember.send(topic_name, b"after removal", partition=0).get(timeout=WAIT_S)
                time.sleep(0.2)
    finally:
        ember.close()
        kafka.purge()   # what frank could no longer deliver
        kafka.flush(WAIT_S)
    wait_for_log(cluster, "SASL authentication failed (SCRAM-SHA-256, user 'frank': unknown user)")


def test_a_client_that_does_not_re_authenticate_is_disconnected_at_its_first_request_after_expiry(
        cluster, topic_name):
    create(cluster, topic_name)
    wire, lifetime = authenticated_wire(cluster, "admin", cluster.scram.password("admin"))
    with wire:
        peer = "{}:{}".format(*wire.sock.getsockname())
        assert lifetime == datetime.timedelta(milliseconds=LIFETIME_MS)
        assert metadata(wire, topic_name) == ErrorCode.NONE
        time.sleep(LIFETIME_MS / 1000 + 0.5)   # let the session expire
        with pytest.raises(ConnectionError):
            metadata(wire, topic_name)
    wait_for_log(cluster, f"on listener KAFKA: peer {peer}, principal User:admin: session expired "
                          f"(connections.max.reauth.ms={LIFETIME_MS}); the client did not re-authenticate")


def test_an_ember_protocol_client_that_does_not_re_authenticate_is_disconnected_after_expiry(cluster):
    broker = cluster.brokers[1]
    with socket.create_connection((broker.host, broker.port), timeout=WAIT_S) as raw, \
            tls_context(cluster).wrap_socket(raw, server_hostname=broker.host) as tls:
        answers = tls.makefile("rb")
        peer = "{}:{}".format(*tls.getsockname())

        def call(api_key: ApiKey, body: dict[str, object], payload: bytes = b"") -> Response:
            tls.sendall(b"".join(encode_request(api_key, 0, 1, body, [payload] if payload else [])))
            (size,) = FRAME_LENGTH.unpack(answers.read(FRAME_LENGTH.size))
            return decode_response(answers.read(size))

        assert call(ApiKey.SASL_HANDSHAKE, {"mechanism": "SCRAM-SHA-512"}).body["error_code"] == ErrorCode.NONE
        client = scramp.ScramClient(["SCRAM-SHA-512"], "admin", cluster.scram.password("admin"))
        client.set_server_first(bytes(call(ApiKey.SASL_AUTHENTICATE, {}, client.get_client_first().encode()).payload)
                                .decode())
        final = call(ApiKey.SASL_AUTHENTICATE, {}, client.get_client_final().encode())
        assert final.body["session_lifetime_ms"] == LIFETIME_MS
        assert call(ApiKey.METADATA, {"topics": []}).body.get("error_code", 0) == ErrorCode.NONE
        time.sleep(LIFETIME_MS / 1000 + 0.5)   # let the session expire
        tls.sendall(b"".join(encode_request(ApiKey.METADATA, 0, 2, {"topics": []})))
        try:
            closed = answers.read(1) == b""
        except (ConnectionResetError, ssl.SSLError):
            closed = True
        assert closed
    wait_for_log(cluster, f"on listener EMBER: peer {peer}, principal User:admin: session expired "
                          f"(connections.max.reauth.ms={LIFETIME_MS}); the client did not re-authenticate")


def test_re_authenticating_as_the_same_user_keeps_the_connection_and_as_another_closes_it(cluster, topic_name):
    create(cluster, topic_name)
    add_user(cluster, "grace", "grace-password-1", topic_name)
    admin_password = cluster.scram.password("admin")
    wire, _ = authenticated_wire(cluster, "admin", admin_password)
    with wire:
        assert scram_exchange(wire, "admin", admin_password)[0] == ErrorCode.NONE
        assert metadata(wire, topic_name) == ErrorCode.NONE
        assert scram_exchange(wire, "grace", "grace-password-1")[0] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert wire.is_closed_by_peer()
    wait_for_log(cluster, "cannot change principals during re-authentication from User:admin to User:grace")
