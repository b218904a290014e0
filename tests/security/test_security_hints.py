"""TLS/SASL hints fit the caller: a Python user is told the keyword (``security_protocol='SSL'``), a
CLI user (``--command-config``) or the Spark source the property (``security.protocol=SSL``); a
client with SASL settings is told SASL_SSL, not SSL; a message that already points at
docs/security.md#sasl does not get the pointer a second time."""
from __future__ import annotations

import pytest

from ember.errors import SaslAuthenticationFailed
from ember.security.client import ClientSecurity

LOGIN = {"sasl_plain_username": "alice", "sasl_plain_password": "secret"}


@pytest.mark.parametrize("owner, options, expected", [
    ("Producer", {"ssl_cafile": "/ca.pem"},
     "ssl_cafile set but security_protocol is PLAINTEXT: set security_protocol='SSL' to connect with TLS"),
    ("ember", {"ssl_cafile": "/ca.pem"},
     "ssl.truststore.location set but security.protocol is PLAINTEXT: set security.protocol=SSL in the "
     "--command-config file to connect with TLS"),
    ("ember source", {"ssl_cafile": "/ca.pem"},
     "ssl.truststore.location set but security.protocol is PLAINTEXT: set security.protocol=SSL in the "
     "source options to connect with TLS"),
    ("Producer", {"ssl_cafile": "/ca.pem", **LOGIN},
     "ssl_cafile, sasl_plain_password, sasl_plain_username set but security_protocol is PLAINTEXT: set "
     "security_protocol='SASL_SSL' to connect with TLS and authenticate with SASL"),
    ("ember", {"ssl_cafile": "/ca.pem", **LOGIN},
     "sasl.jaas.config, ssl.truststore.location set but security.protocol is PLAINTEXT: set "
     "security.protocol=SASL_SSL in the --command-config file to connect with TLS and authenticate with SASL"),
    ("Admin", {"security_protocol": "SSL", **LOGIN},
     "sasl_plain_password, sasl_plain_username set but security_protocol is SSL: set "
     "security_protocol='SASL_SSL' to authenticate with SASL"),
    ("ember", LOGIN,
     "sasl.jaas.config set but security.protocol is PLAINTEXT: set security.protocol=SASL_SSL (or SASL_PLAINTEXT) "
     "in the --command-config file to authenticate with SASL"),
    ("ember", {"security_protocol": "SASL_SSL"},
     "security.protocol=SASL_SSL needs a login: set sasl.jaas.config (or sasl.plain.username and "
     "sasl.plain.password) in the --command-config file"),
])
def test_a_protocol_mismatch_names_the_setting_as_the_caller_writes_it(owner, options, expected):
    with pytest.raises(Exception) as refused:
        ClientSecurity.from_options(options, owner)
    assert str(refused.value) == expected


def test_the_sasl_docs_pointer_is_not_repeated():
    message = ("SASL authentication failed: check the user name and password (ember users list; ember users add; "
               "docs/security.md#sasl)")
    assert str(SaslAuthenticationFailed(message)).count("docs/security.md#sasl") == 1
    assert str(SaslAuthenticationFailed("requires SASL authentication (docs/security.md#sasl)")).count(
        "security.md#sasl") == 1
    assert str(SaslAuthenticationFailed()).count("docs/security.md#sasl") == 1    # the default message still has it


def test_setting_spells_keywords_for_python_and_properties_for_property_files():
    python, cli = ClientSecurity(), ClientSecurity(settings_from="the --command-config file")
    assert python.setting("security_protocol", "SSL") == "security_protocol='SSL'"
    assert cli.setting("security_protocol", "SSL") == "security.protocol=SSL"
    assert (python.setting("ssl_cafile"), cli.setting("ssl_cafile")) == ("ssl_cafile", "ssl.truststore.location")
    assert python.setting("ssl_check_hostname", False) == "ssl_check_hostname=False"
    assert cli.setting("ssl_check_hostname", False) == "ssl.endpoint.identification.algorithm= (empty)"
    # the spelling travels with the settings to the clients built from them (the Spark source's)
    assert ClientSecurity.from_options(ClientSecurity.from_options({}, "ember source").options(), "Producer") \
        .setting("ssl_cafile") == "ssl.truststore.location"
