"""Describe and alter users' SCRAM credentials: Kafka's DescribeUserScramCredentials (50) and
AlterUserScramCredentials (51), shared by both protocols (``kafka-configs --entity-type users``,
``ember users``).

An upsertion carries the salt, the iteration count and the *salted* password (the client derives
it, so the password itself never travels); the broker derives StoredKey and ServerKey and writes
the credential to ZooKeeper. Per-user results carry Kafka's error codes: RESOURCE_NOT_FOUND for an
unknown user or credential, UNSUPPORTED_SASL_MECHANISM, UNACCEPTABLE_CREDENTIAL (iterations out of
4096..16384, empty name), DUPLICATE_RESOURCE for the same credential upserted and deleted at once.
Calls block on ZooKeeper: run them off the event loop.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

from ember.errors import EmberError, ResourceNotFound, UnacceptableCredential, UnsupportedSaslMechanism
from ember.security.sasl.credential_store import CredentialStore
from ember.security.sasl.scram import MECHANISM_TYPES, ScramCredential, credential_from_salted

#: Kafka's DUPLICATE_RESOURCE (not an ember error class: only these APIs use it).
DUPLICATE_RESOURCE = 92
_MECHANISM_NAMES = {number: name for name, number in MECHANISM_TYPES.items()}


@dataclass(frozen=True)
class Upsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:
        return f"Upsertion({self.name!r}, mechanism={self.mechanism}, iterations={self.iterations})"


def _result(user: str, error: Optional[EmberError] = None, code: int = 0) -> dict[str, Any]:
    if error is not None:
        return {"user": user, "error_code": int(error.code), "error_message": str(error)}
    return {"user": user, "error_code": code, "error_message": None}


def _mechanism(number: int) -> str:
    name = _MECHANISM_NAMES.get(number)
    if name is None:
        raise UnsupportedSaslMechanism(f"unknown SCRAM mechanism {number}: use 1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512)")
    return name


class ScramAdmin:
    def __init__(self, store: CredentialStore) -> None:
        self.store = store

    def describe(self, users: Optional[list[str]]) -> list[dict[str, Any]]:
        """{user, error_code, error_message, credential_infos: [{mechanism, iterations}]} per user
        asked for (every user with credentials when ``users`` is None or empty)."""
        known = self.store.users()
        results = []
        for user in dict.fromkeys(users) if users else known:
            if user not in known:
                results.append({**_result(user, ResourceNotFound(
                    f"Attempt to describe a user credential that does not exist: {user}")), "credential_infos": []})
                continue
            results.append({**_result(user), "credential_infos": [
                {"mechanism": MECHANISM_TYPES[m], "iterations": i} for m, i in known[user]]})
        return results

    def alter(self, upsertions: Iterable[Upsertion], deletions: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
        """{user, error_code, error_message} per user named; each user's changes apply together or not at all."""
        upserts: dict[str, dict[str, ScramCredential]] = {}
        deletes: dict[str, list[str]] = {}
        failed: dict[str, dict[str, Any]] = {}
        for name, number in deletions:
            try:
                deletes.setdefault(name, []).append(_mechanism(number))
            except EmberError as exc:
                failed.setdefault(name, _result(name, exc))
        for upsertion in upsertions:
            name = upsertion.name
            try:
                if not name:
                    raise UnacceptableCredential("the user name must not be empty")
                mechanism = _mechanism(upsertion.mechanism)
                if mechanism in deletes.get(name, ()):
                    failed.setdefault(name, _result(name, code=DUPLICATE_RESOURCE) | {
                        "error_message": f"{mechanism} of user {name} is both upserted and deleted"})
                    continue
                upserts.setdefault(name, {})[mechanism] = credential_from_salted(
                    mechanism, upsertion.salted_password, upsertion.salt, upsertion.iterations)
            except EmberError as exc:
                failed.setdefault(name, _result(name, exc))
        results = []
        known = self.store.users() if deletes else {}
        for name in dict.fromkeys([*deletes, *upserts]):
            if name in failed:
                results.append(failed.pop(name))
                continue
            have = {mechanism for mechanism, _ in known.get(name, ())}
            missing = [m for m in deletes.get(name, ()) if m not in have]
            if missing:
                results.append(_result(name, ResourceNotFound(
                    f"Attempt to delete a user credential that does not exist: {name} {', '.join(missing)}")))
                continue
            self.store.alter(name, upserts.get(name, {}), deletes.get(name, ()))
            results.append(_result(name))
        return results + list(failed.values())
