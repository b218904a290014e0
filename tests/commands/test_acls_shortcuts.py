"""``ember acls add --producer/--consumer``: kafka-acls' shortcuts grant every operation a producer
or a consumer needs at once (the ACLs are checked as the command hands them to the Admin client,
with no broker)."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

import ember.commands.acls as acls_command
from ember.cli import main as ember_cli
from ember.security.authorizer.model import AclBinding


class _RecordingAdmin:
    created: list[AclBinding] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> "_RecordingAdmin":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def create_acls(self, bindings: list[AclBinding]) -> None:
        _RecordingAdmin.created = list(bindings)


@pytest.fixture(autouse=True)
def recording_admin(monkeypatch: pytest.MonkeyPatch) -> None:
    _RecordingAdmin.created = []
    monkeypatch.setattr(acls_command, "Admin", _RecordingAdmin)


def _add(*args: str) -> list[str]:
    assert ember_cli(["acls", "add", "--allow-principal", "User:alice", *args]) == 0
    return sorted(str(b) for b in _RecordingAdmin.created)


def test_producer_grants_write_describe_and_create_on_each_topic() -> None:
    assert _add("--producer", "--topic", "orders", "--topic", "audit") == sorted(
        f"Allow User:alice {op} from host * on Topic:LITERAL:{topic}"
        for topic in ("orders", "audit") for op in ("Write", "Describe", "Create"))


def test_producer_with_transactional_id_and_idempotent() -> None:
    assert _add("--producer", "--idempotent", "--topic", "t", "--transactional-id", "tx",
                "--resource-pattern-type", "prefixed") == sorted([
        "Allow User:alice IdempotentWrite from host * on Cluster:LITERAL:kafka-cluster",
        "Allow User:alice Write from host * on TransactionalId:PREFIXED:tx",
        "Allow User:alice Describe from host * on TransactionalId:PREFIXED:tx",
        *(f"Allow User:alice {op} from host * on Topic:PREFIXED:t" for op in ("Write", "Describe", "Create"))])


def test_consumer_grants_read_and_describe_on_the_topic_and_read_on_the_group() -> None:
    assert _add("--consumer", "--topic", "orders", "--group", "billing") == sorted([
        "Allow User:alice Read from host * on Topic:LITERAL:orders",
        "Allow User:alice Describe from host * on Topic:LITERAL:orders",
        "Allow User:alice Read from host * on Group:LITERAL:billing"])


def test_producer_and_consumer_together_grant_describe_once() -> None:
    assert _add("--producer", "--consumer", "--topic", "orders", "--group", "g") == sorted(
        [f"Allow User:alice {op} from host * on Topic:LITERAL:orders" for op in ("Write", "Describe", "Create", "Read")]
        + ["Allow User:alice Read from host * on Group:LITERAL:g"])


@pytest.mark.parametrize("args, complaint", [
    (["--consumer", "--topic", "t"], "--consumer you must give a --group"),
    (["--producer"], "you must give a --topic"),
    (["--idempotent", "--topic", "t"], "--idempotent is only available with --producer"),
    (["--producer", "--topic", "t", "--operation", "Read"], "give no --operation"),
    (["--consumer", "--topic", "t", "--group", "g", "--transactional-id", "x"], "--transactional-id goes with"),
])
def test_kafka_acls_rules_for_the_shortcuts(capsys: pytest.CaptureFixture[str],
                                            args: list[str], complaint: str) -> None:
    assert ember_cli(["acls", "add", "--allow-principal", "User:alice", *args]) == 1
    assert complaint in capsys.readouterr().err
    assert _RecordingAdmin.created == []


def test_the_shortcuts_are_in_the_help() -> None:
    out = subprocess.run([sys.executable, "-m", "ember.cli", "acls", "add", "--help"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "COLUMNS": "400"})
    assert "--producer" in out.stdout and "--consumer" in out.stdout and "Write, Describe and Create" in out.stdout
