"""SASL settings without a broker: Kafka's config names and JAAS values are parsed the way Kafka
reads them, credentials match Kafka's ScramFormatter, and no password reaches a repr or a message."""
from __future__ import annotations

import base64

import pytest
import scramp

from ember.errors import InvalidConfig, UnacceptableCredential
from ember.ingest.broker_config import BrokerConfig
from ember.ingest.listeners import ListenerConfig
from ember.security.client import ClientSecurity, options_from_properties
from ember.security.protocol import SecurityProtocol
from ember.security.sasl.config import inter_broker_login
from ember.security.sasl.jaas import login_config, parse_jaas
from ember.security.sasl.scram import ScramCredential, credential_from_salted, make_credential, password_matches, salted_password

SECRET = "s3cret \"quoted\" ;pass"
LISTEN = ("127.0.0.1", 9092)


def test_sasl_protocols_are_served_per_listener():
    config = ListenerConfig.resolve(LISTEN, "KAFKA://127.0.0.1:9093", None, "EMBER:SASL_SSL,KAFKA:SASL_PLAINTEXT")
    assert config.protocol("EMBER") is SecurityProtocol.SASL_SSL and config.protocol("KAFKA").uses_sasl
    assert config.protocol("EMBER").uses_tls and not config.protocol("KAFKA").uses_tls


def test_enabled_mechanisms_default_to_scram_and_may_be_set_per_listener():
    config = BrokerConfig.from_properties({"listener.name.kafka.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"})
    assert config.listener_value("EMBER", "sasl.enabled.mechanisms") == "SCRAM-SHA-512,SCRAM-SHA-256"
    assert config.listener_value("KAFKA", "sasl.enabled.mechanisms") == "PLAIN,SCRAM-SHA-256"
    with pytest.raises(InvalidConfig, match="GSSAPI is not supported"):
        BrokerConfig.from_properties({"listener.name.kafka.gssapi.sasl.jaas.config": "x"})


def test_reauthentication_is_off_by_default_and_may_be_set_per_listener():
    assert BrokerConfig.from_properties({}).listener_value("KAFKA", "connections.max.reauth.ms") == 0
    config = BrokerConfig.from_properties({"connections.max.reauth.ms": "3600000",
                                           "listener.name.kafka.connections.max.reauth.ms": "60000"})
    assert config.listener_value("EMBER", "connections.max.reauth.ms") == 3600000
    assert config.listener_value("KAFKA", "connections.max.reauth.ms") == 60000
    with pytest.raises(InvalidConfig, match="connections.max.reauth.ms"):
        BrokerConfig.from_properties({"listener.name.kafka.connections.max.reauth.ms": "-1"})
    # Kafka's per-mechanism form (listener.name.<l>.<mechanism>.connections.max.reauth.ms) is honoured.
    config = BrokerConfig.from_properties({"listener.name.kafka.scram-sha-256.connections.max.reauth.ms": "1000"})
    assert config.listener_value("KAFKA", "SCRAM-SHA-256.connections.max.reauth.ms") == 1000
    assert config.listener_value("KAFKA", "connections.max.reauth.ms") == 0


def test_a_jaas_login_is_parsed_with_quotes_and_escapes_and_never_shown():
    login = parse_jaas(login_config("alice", SECRET), "sasl.jaas.config")
    assert (login.username, login.password, login.is_plain) == ("alice", SECRET, False)
    assert SECRET not in repr(login)
    plain = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required username=bob '
                       'password="x";', "sasl.jaas.config")
    assert plain.is_plain and plain.username == "bob"
    with pytest.raises(InvalidConfig) as refused:
        parse_jaas(f'org.apache.kafka.common.security.scram.ScramLoginModule required password="{SECRET}"', "x")
    assert "not shown" in str(refused.value) and "s3cret" not in str(refused.value)
    with pytest.raises(InvalidConfig, match="Krb5LoginModule is not supported"):
        parse_jaas("com.sun.security.auth.module.Krb5LoginModule required;", "x")


def test_the_inter_broker_login_must_match_the_mechanism_and_name_a_user():
    with pytest.raises(InvalidConfig, match="set listener.name.ember.scram-sha-512.sasl.jaas.config"):
        inter_broker_login(None, "EMBER", "SCRAM-SHA-512")
    with pytest.raises(InvalidConfig, match="does not serve sasl.mechanism.inter.broker.protocol=PLAIN"):
        inter_broker_login(login_config("broker", "x"), "EMBER", "PLAIN")


def test_a_credential_is_kafkas_and_verifies_with_scramp_and_plain():
    salt = b"kafka-salt-16byte"
    credential = make_credential("SCRAM-SHA-256", SECRET, 4096, salt)
    # Kafka's form round-trips, and scramp derives the same keys from the same salt.
    assert ScramCredential.from_kafka(credential.to_kafka()) == credential
    assert f"salt={base64.b64encode(salt).decode()}," in credential.to_kafka()
    _, stored, server, _ = scramp.ScramMechanism("SCRAM-SHA-256").make_auth_info(SECRET, 4096, salt)
    assert (stored, server) == (credential.stored_key, credential.server_key)
    # What AlterUserScramCredentials carries (salted password) gives the same credential.
    assert credential_from_salted("SCRAM-SHA-256", salted_password("SCRAM-SHA-256", SECRET, salt, 4096),
                                  salt, 4096) == credential
    assert password_matches("SCRAM-SHA-256", credential, SECRET)
    assert not password_matches("SCRAM-SHA-256", credential, SECRET + "x")
    assert SECRET not in repr(credential) and "stored" not in repr(credential)
    with pytest.raises(UnacceptableCredential, match="salt of 8 bytes"):   # scramp needs 12 at least
        credential_from_salted("SCRAM-SHA-256", b"x" * 64, b"12345678", 4096)


def test_client_sasl_keywords_are_checked_and_the_password_stays_out_of_reprs():
    security = ClientSecurity.from_options({"security_protocol": "SASL_PLAINTEXT", "sasl_plain_username": "alice",
                                            "sasl_plain_password": SECRET})
    assert security.sasl_login() == ("SCRAM-SHA-512", "alice", SECRET) and SECRET not in repr(security)
    with pytest.raises(InvalidConfig, match="needs sasl_plain_username and sasl_plain_password"):
        ClientSecurity.from_options({"security_protocol": "SASL_SSL"})
    with pytest.raises(InvalidConfig, match="set security_protocol='SASL_SSL'"):
        ClientSecurity.from_options({"sasl_plain_username": "alice", "sasl_plain_password": SECRET})


def test_java_properties_give_the_login_through_sasl_jaas_config():
    options = options_from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                                       "sasl.jaas.config": login_config("alice", SECRET)}, "client.properties")
    assert ClientSecurity.from_options(options).sasl_login() == ("SCRAM-SHA-256", "alice", SECRET)


def test_describe_configs_marks_the_jaas_login_sensitive_and_leaves_its_value_out():
    config = BrokerConfig.from_properties({"sasl.jaas.config": login_config("broker", SECRET),
                                           "ssl.key.password": SECRET})
    entries = {e.name: e for e in config.describe()}
    for name in ("sasl.jaas.config", "ssl.key.password"):
        assert entries[name].sensitive and entries[name].value is None
    assert SECRET not in repr(config) and SECRET not in str(config.describe())
