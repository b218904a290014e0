"""Jobs take security settings from a client properties file (``--command-config`` or
``$EMBER_CLIENT_CONFIG``), never from the command line, and stop with a clear error before Spark
starts when the file is missing or holds a setting the clients cannot use."""
from __future__ import annotations

from pathlib import Path

import pytest

from _common import JobError
from ember.security.certificates import CertificateAuthority
from stream_to_delta import parse_args, source_options

BASE = ["--bootstrap", "127.0.0.1:1", "--topic", "t", "--table", "tbl", "--checkpoint", "ckpt"]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_security_properties_of_the_command_config_become_source_options(tmp_path: Path) -> None:
    ca = CertificateAuthority.create(tmp_path / "tls").cert_path
    config = write(tmp_path / "client.properties",
                   f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={ca}\n"
                   "client.id=not-a-security-setting\n")
    options = source_options(parse_args([*BASE, "--command-config", str(config)]))
    assert options["security.protocol"] == "SSL" and options["ssl.truststore.location"] == str(ca)
    assert "client.id" not in options and options["bootstrap"] == "127.0.0.1:1"


def test_the_command_config_defaults_to_the_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("EMBER_CLIENT_CONFIG", str(write(tmp_path / "c.properties", "security.protocol=SSL\n")))
    assert source_options(parse_args(BASE))["security.protocol"] == "SSL"


def test_without_a_command_config_the_job_reads_in_plain_text(monkeypatch) -> None:
    monkeypatch.delenv("EMBER_CLIENT_CONFIG", raising=False)
    assert not any(name.startswith(("security.", "ssl.", "sasl.")) for name in source_options(parse_args(BASE)))


def test_a_missing_command_config_stops_the_job_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(JobError, match="no such file"):
        source_options(parse_args([*BASE, "--command-config", str(tmp_path / "absent.properties")]))


def test_a_setting_the_clients_cannot_use_stops_the_job_before_spark(tmp_path: Path) -> None:
    config = write(tmp_path / "c.properties", "security.protocol=SSL\nssl.keystore.type=JKS\n")
    with pytest.raises(JobError, match="only PEM"):
        source_options(parse_args([*BASE, "--command-config", str(config)]))
