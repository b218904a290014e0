"""TLS configuration, checked before anything listens: Kafka's names (``listener.security.protocol.map``,
``ssl.*`` and ``listener.name.<name>.ssl.*``, ``inter.broker.listener.name``), PEM files and inline
PEM (KIP-651), encrypted keys, client keywords (kafka-python's names) and the Spark options; every
mistake is an InvalidConfig saying what to set, and no secret ever appears in a message or repr."""
from __future__ import annotations

import pickle

import pytest

from ember.errors import InvalidConfig
from ember.ingest.broker_config import BrokerConfig
from ember.ingest.listeners import ListenerConfig
from ember.security.certificates import LOCAL_HOSTS, CertificateAuthority
from ember.security.client import ClientSecurity, options_from_properties
from ember.security.protocol import SecurityProtocol
from ember.security.session import certificate_principal
from ember.sources.options import OptionError, reader_options
from ember.wire.config_def import read_properties

SECRET = "s3cret-key-password"
LISTEN = ("127.0.0.1", 9092)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> CertificateAuthority:
    authority = CertificateAuthority.create(tmp_path_factory.mktemp("pki"))
    authority.issue("broker", "ember-broker", LOCAL_HOSTS)
    authority.issue("locked", "ember-broker", LOCAL_HOSTS, password=SECRET)
    return authority


def test_every_listener_needs_an_entry_once_the_protocol_map_is_set():
    with pytest.raises(InvalidConfig, match="no entry for listener.*KAFKA.*KAFKA:SSL"):
        ListenerConfig.resolve(LISTEN, "KAFKA://127.0.0.1:9093", None, "EMBER:SSL")
    config = ListenerConfig.resolve(LISTEN, "KAFKA://127.0.0.1:9093", None, "EMBER:SSL,KAFKA:PLAINTEXT,OTHER:SSL")
    assert config.protocol("EMBER") is SecurityProtocol.SSL and config.protocol("KAFKA") is SecurityProtocol.PLAINTEXT


def test_without_a_map_listeners_are_plaintext_unless_named_after_a_protocol():
    config = ListenerConfig.resolve(LISTEN, "KAFKA://127.0.0.1:9093,SSL://127.0.0.1:9094", None)
    assert [config.protocol(n) for n in ("EMBER", "KAFKA", "SSL")] == [
        SecurityProtocol.PLAINTEXT, SecurityProtocol.PLAINTEXT, SecurityProtocol.SSL]


def test_the_inter_broker_listener_speaks_embers_protocol_and_must_exist():
    config = ListenerConfig.resolve(LISTEN, "KAFKA://127.0.0.1:9093,REPLICATION://10.0.0.1:9094", None,
                                    "EMBER:SSL,KAFKA:SSL,REPLICATION:PLAINTEXT", "replication")
    assert [b.name for b in config.ember_protocol] == ["EMBER", "REPLICATION"]
    assert [b.name for b in config.kafka] == ["KAFKA"]
    with pytest.raises(InvalidConfig, match="inter.broker.listener.name=INTERNAL names no listener"):
        ListenerConfig.resolve(LISTEN, None, None, None, "INTERNAL")


def test_per_listener_settings_override_the_broker_wide_ones_for_that_listener_only():
    config = BrokerConfig.from_properties({"ssl.client.auth": "requested", "ssl.keystore.location": "/k.pem",
                                           "listener.name.kafka.ssl.client.auth": "required"})
    assert config.tls_settings("KAFKA").client_auth == "required"
    assert config.tls_settings("EMBER").client_auth == "requested"
    assert config.tls_settings("KAFKA").keystore_location == "/k.pem"


@pytest.mark.parametrize("properties, problem", [
    ({}, "has no certificate: set ssl.keystore.location"),
    ({"ssl.keystore.location": "{broker}", "ssl.client.auth": "required"}, "needs the CA certificates.*ssl.truststore"),
    ({"ssl.keystore.location": "/nowhere.pem"}, "no such file /nowhere.pem"),
    ({"ssl.keystore.location": "{locked}"}, "the private key is encrypted: set its password"),
    ({"ssl.keystore.location": "{locked}", "ssl.key.password": "wrong"}, "password must match"),
    ({"ssl.keystore.certificate.chain": "{chain}"}, "needs ssl.keystore.key"),
])
def test_incomplete_tls_settings_say_what_to_set(pki, properties, problem):
    values = {k: v.format(broker=pki.directory / "broker-keystore.pem", locked=pki.directory / "locked-keystore.pem",
                          chain=(pki.directory / "broker.pem").read_text()) for k, v in properties.items()}
    with pytest.raises(InvalidConfig, match=problem) as refused:
        BrokerConfig.from_properties(values).tls_settings("EMBER").server_context()
    assert "wrong" not in str(refused.value)


@pytest.mark.parametrize("protocols", ["TLSv1.1", "TLSv1,TLSv1.2", "SSLv3"])
def test_insecure_tls_versions_are_refused(protocols):
    with pytest.raises(InvalidConfig, match="TLSv1.2 and TLSv1.3 only"):
        BrokerConfig.from_properties({"listener.name.kafka.ssl.enabled.protocols": protocols})


def test_an_encrypted_key_loads_with_its_password_and_the_password_is_never_shown(pki):
    config = BrokerConfig.from_properties({"ssl.keystore.location": str(pki.directory / "locked-keystore.pem"),
                                           "ssl.key.password": SECRET})
    config.tls_settings("EMBER").server_context()
    assert SECRET not in repr(config) and SECRET not in repr(config.tls_settings("EMBER"))
    security = ClientSecurity(SecurityProtocol.SSL, password=SECRET)
    assert SECRET not in repr(security)


def test_inline_pem_written_on_one_line_as_in_a_properties_file_serves(pki):
    def one_line(name: str) -> str:
        return " ".join((pki.directory / name).read_text().split())
    config = BrokerConfig.from_properties({"ssl.keystore.certificate.chain": one_line("broker.pem"),
                                           "ssl.keystore.key": one_line("broker-key.pem"),
                                           "ssl.truststore.certificates": one_line("ca.pem"),
                                           "ssl.client.auth": "required"})
    context = config.tls_settings("EMBER").server_context()
    assert context.verify_mode.name == "CERT_REQUIRED"


def test_properties_files_continue_values_on_lines_ending_in_a_backslash(tmp_path):
    path = tmp_path / "broker.properties"
    path.write_text("ssl.keystore.certificate.chain=-----BEGIN CERTIFICATE----- \\\n    MIIB \\\n"
                    "    AAAA -----END CERTIFICATE-----\nssl.client.auth=required\n")
    assert read_properties(path) == {
        "ssl.keystore.certificate.chain": "-----BEGIN CERTIFICATE----- MIIB AAAA -----END CERTIFICATE-----",
        "ssl.client.auth": "required"}


def test_a_certificate_principal_is_its_subject_as_kafka_writes_it(pki):
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding
    cert = x509.load_pem_x509_certificate((pki.directory / "broker.pem").read_bytes())
    assert certificate_principal(cert.public_bytes(Encoding.DER)) == "User:CN=ember-broker,O=ember"


def test_client_keywords_are_kafka_pythons_and_tls_files_need_the_ssl_protocol(pki):
    with pytest.raises(InvalidConfig, match="ssl_cafile set but security_protocol is PLAINTEXT"):
        ClientSecurity.from_options({"ssl_cafile": str(pki.cert_path)})
    with pytest.raises(TypeError, match=r"Producer\(\) got unexpected keyword argument\(s\) ssl_ca_file"):
        ClientSecurity.from_options({"ssl_ca_file": "x"}, "Producer")
    with pytest.raises(InvalidConfig, match="no such file"):
        ClientSecurity.from_options({"security_protocol": "SSL", "ssl_cafile": "/nowhere/ca.pem"})


def test_spark_options_take_dotted_kafka_names_and_never_show_the_password(pki):
    options = reader_options({"bootstrap": "h:1", "topic": "t", "security.protocol": "SSL",
                              "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.cert_path),
                              "ssl.certfile": str(pki.directory / "locked.pem"),
                              "ssl.keyfile": str(pki.directory / "locked-key.pem"), "ssl.password": SECRET,
                              "ssl.check.hostname": "false"}, streaming=False)
    assert options.security.protocol is SecurityProtocol.SSL and options.security.cafile == str(pki.cert_path)
    assert options.security.check_hostname is False
    assert SECRET not in repr(options)
    assert pickle.loads(pickle.dumps(options)) == options   # shipped to executors
    with pytest.raises(OptionError, match="unsupported setting 'ssl.truststore.password'"):
        reader_options({"bootstrap": "h:1", "topic": "t", "ssl.truststore.password": "x"}, streaming=False)
    with pytest.raises(OptionError, match="only PEM files"):
        reader_options({"bootstrap": "h:1", "topic": "t", "ssl.keystore.type": "JKS"}, streaming=False)
    assert options_from_properties({"SSL.TRUSTSTORE.LOCATION": "/ca.pem", "bootstrap.servers": "h:1"}, "file") == {
        "ssl_cafile": "/ca.pem"}
