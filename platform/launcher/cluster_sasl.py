"""SCRAM for a local cluster (``ember cluster up --secure``): two users with random passwords,
kept in ``<data>/sasl/credentials.json`` (owner-only): ``admin`` for clients (its login goes into
the client configuration files) and ``broker``, which the brokers authenticate to each other as
(``User:broker``). Every listener becomes SASL_SSL, and both users are ``super.users``.
"""
from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from ember.security.private_files import write_private
from ember.security.sasl.config import DEFAULT_MECHANISMS
from ember.security.sasl.credential_store import CredentialStore
from ember.security.sasl.jaas import login_config
from ember.security.sasl.scram import SCRAM_MECHANISMS, SCRAM_SHA_512, make_credential
from ember.zk.zk_session import ZkSession

ADMIN_USER = "admin"
BROKER_USER = "broker"
MECHANISM = SCRAM_SHA_512


@dataclass(frozen=True)
class ClusterSasl:
    directory: Path

    @property
    def credentials_file(self) -> Path:
        return self.directory / "credentials.json"

    @classmethod
    def create(cls, directory: Path) -> "ClusterSasl":
        """Random passwords for the two users; existing ones are kept (brokers restart with them)."""
        sasl = cls(directory)
        if not sasl.credentials_file.exists():
            write_private(sasl.credentials_file, json.dumps(
                {user: secrets.token_urlsafe(24) for user in (ADMIN_USER, BROKER_USER)}) + "\n")
        return sasl

    def password(self, user: str) -> str:
        return str(json.loads(self.credentials_file.read_text())[user])

    def register_users(self, session: ZkSession) -> None:
        """Write both users' SCRAM credentials to ZooKeeper (before any broker needs them)."""
        store = CredentialStore(session)
        for user in (ADMIN_USER, BROKER_USER):
            password = self.password(user)
            store.alter(user, {mechanism: make_credential(mechanism, password) for mechanism in SCRAM_MECHANISMS})

    def broker_properties(self, listeners: tuple[str, ...]) -> dict[str, str]:
        """Every listener on SASL_SSL (SCRAM), the brokers logging in to each other as ``broker``."""
        return {"listener.security.protocol.map": ",".join(f"{name}:SASL_SSL" for name in listeners),
                "sasl.enabled.mechanisms": DEFAULT_MECHANISMS,
                "sasl.mechanism.inter.broker.protocol": MECHANISM,
                "sasl.jaas.config": login_config(BROKER_USER, self.password(BROKER_USER)),
                # On SASL listeners principals are the SASL users: these two may do everything.
                "super.users": f"User:{BROKER_USER};User:{ADMIN_USER}"}

    def client_options(self) -> dict[str, str]:
        """The SASL keywords of an ember client logging in as ``admin`` (over TLS)."""
        return {"security_protocol": "SASL_SSL", "sasl_mechanism": MECHANISM,
                "sasl_plain_username": ADMIN_USER, "sasl_plain_password": self.password(ADMIN_USER)}

    def java_properties(self) -> dict[str, str]:
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM,
                "sasl.jaas.config": login_config(ADMIN_USER, self.password(ADMIN_USER))}

    def librdkafka_properties(self) -> dict[str, str]:
        return {"security.protocol": "sasl_ssl", "sasl.mechanisms": MECHANISM, "sasl.username": ADMIN_USER,
                "sasl.password": self.password(ADMIN_USER)}
