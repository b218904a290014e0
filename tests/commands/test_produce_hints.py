"""``ember produce``'s errors name the fix that applies: ``--partition`` beyond the topic's
partitions suggests ``ember topics alter TOPIC --partitions N`` (not ``topics create``); a record
larger than the producer's max_request_size says that limit was hit and how to raise it, which
``--max-request-size`` now can; TLS settings in a ``--command-config`` file without
``security.protocol`` are told the property to set there, not a Python keyword."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ember.client import Admin
from ember.launcher.local import LocalCluster

TIMEOUT_S = 60


def ember(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ember.cli", *args], input=stdin, capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def test_a_partition_beyond_the_topics_suggests_topics_alter(shared_cluster: LocalCluster, topic_name: str) -> None:
    with Admin(shared_cluster.bootstrap) as admin:
        admin.create_topic(topic_name, partitions=2)
    out = ember("produce", topic_name, "--bootstrap", shared_cluster.bootstrap, "--partition", "99", stdin="x\n")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out
    assert f"`ember topics alter {topic_name} --partitions 100 --bootstrap {shared_cluster.bootstrap}`" in out.stderr
    assert "has 2 partitions" in out.stderr and "topics create" not in out.stderr


def test_a_record_over_max_request_size_names_that_limit_and_the_flag_raises_it(shared_cluster: LocalCluster,
                                                                               topic_name: str) -> None:
    with Admin(shared_cluster.bootstrap) as admin:
        admin.create_topic(topic_name, config={"max.message.bytes": "3000000"})
    record = "x" * 2_000_000 + "\n"
    out = ember("produce", topic_name, "--bootstrap", shared_cluster.bootstrap, stdin=record)
    assert out.returncode == 1, out
    assert "more than this producer's max_request_size (1048576 bytes)" in out.stderr, out.stderr
    assert "--max-request-size BYTES" in out.stderr
    assert out.stderr.count("max.message.bytes on the topic") == 1    # no hint appended after the message
    out = ember("produce", topic_name, "--bootstrap", shared_cluster.bootstrap, "--max-request-size", "2100000",
                stdin=record)
    assert out.returncode == 0, out
    assert "1 record sent" in out.stderr


def test_tls_settings_without_security_protocol_name_the_property_to_set(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text(f"ssl.truststore.location={tmp_path / 'ca.pem'}\n")
    out = ember("produce", "t", "--bootstrap", "127.0.0.1:1", "--command-config", str(config), stdin="x\n")
    assert out.returncode == 1, out
    assert "set security.protocol=SSL in the --command-config file" in out.stderr, out.stderr
    assert "security_protocol" not in out.stderr


def test_connection_hints_name_properties_for_cli_users(shared_cluster: LocalCluster, tmp_path: Path) -> None:
    """TLS and SASL mismatches found while connecting (ember.net.channel, ember.net.sasl) tell a CLI user
    the property to set in the --command-config file, not the Python keyword."""
    tls = tmp_path / "tls.properties"
    tls.write_text("security.protocol=SSL\n")
    sasl = tmp_path / "sasl.properties"
    sasl.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config="
                    "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"u\" password=\"p\";\n")
    for config, expected in ((tls, "set security.protocol=PLAINTEXT or connect to the broker's SSL listener"),
                             (sasl, "does not use SASL: set security.protocol=PLAINTEXT")):
        out = ember("topics", "list", "--bootstrap", shared_cluster.bootstrap, "--command-config", str(config))
        assert out.returncode == 1, out
        assert expected in out.stderr and "security_protocol" not in out.stderr, out.stderr
