"""SCRAM credentials as Kafka stores them, and the SASL mechanism names ember serves.

A credential is what a server keeps instead of a password (RFC 5802): salt, StoredKey,
ServerKey and the iteration count, written in Kafka's form
``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096``. The keys are
derived as Kafka's ScramFormatter does, so a credential made here verifies against any SCRAM
client and a Kafka-made one (``kafka-configs --add-config SCRAM-SHA-256=[...]``) here; the
exchanges themselves run on :mod:`scramp` (:mod:`ember.security.sasl.server`).
PLAIN has no credential of its own: a PLAIN password is checked by recomputing the user's SCRAM
keys from it (:func:`password_matches`), so no password is ever stored in clear.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

from ember.errors import InvalidConfig, UnacceptableCredential

if TYPE_CHECKING:
    from _hashlib import HASH

SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
PLAIN = "PLAIN"
SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)
MECHANISMS = (*SCRAM_MECHANISMS, PLAIN)
#: Kafka's numbering of SCRAM mechanisms in Describe/AlterUserScramCredentials.
MECHANISM_TYPES = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
#: Kafka's bounds on the iteration count (ScramMechanism.minIterations / maxIterations).
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384
DEFAULT_ITERATIONS = 4096
MIN_SALT_BYTES = 12
#: Mechanisms Kafka knows that ember does not serve.
_UNSUPPORTED = ("GSSAPI", "OAUTHBEARER")


def parse_mechanisms(value: str, what: str) -> tuple[str, ...]:
    """A comma-separated list of mechanism names (``sasl.enabled.mechanisms``), validated."""
    names = tuple(dict.fromkeys(n.strip().upper() for n in str(value).split(",") if n.strip()))
    if not names:
        raise InvalidConfig(f"{what}: no SASL mechanism listed; use {', '.join(MECHANISMS)}")
    for name in names:
        check_mechanism(name, what)
    return names


def check_mechanism(name: str, what: str) -> str:
    if name in _UNSUPPORTED:
        raise InvalidConfig(f"{what}: {name} is not supported by ember; use {', '.join(MECHANISMS)}")
    if name not in MECHANISMS:
        raise InvalidConfig(f"{what}: unknown SASL mechanism {name!r}; use {', '.join(MECHANISMS)}")
    return name


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:   # the keys are as good as a password against a copied database
        return f"ScramCredential(iterations={self.iterations})"

    def to_kafka(self) -> str:
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_kafka(cls, text: str) -> "ScramCredential":
        """Parse Kafka's form; raises ValueError (without quoting the keys) when malformed."""
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                       base64.b64decode(fields["server_key"]), int(fields["iterations"]))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"malformed SCRAM credential ({type(exc).__name__})") from None

    def auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """What :mod:`scramp`'s server asks of its ``auth_fn``."""
        return self.salt, self.stored_key, self.server_key, self.iterations


def check_iterations(iterations: int, mechanism: str) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise UnacceptableCredential(f"{mechanism} iterations must be between {MIN_ITERATIONS} and "
                                     f"{MAX_ITERATIONS} (Kafka's bounds), got {iterations}")


def make_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                    salt: Optional[bytes] = None) -> ScramCredential:
    """A fresh credential (random salt unless given) for ``password``, derived as Kafka does (the
    password's UTF-8 bytes, no SASLprep), so Java clients and ember's agree on every password."""
    check_iterations(iterations, mechanism)
    salt = salt if salt is not None else secrets.token_bytes(24)
    return credential_from_salted(mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)


def _hash(mechanism: str) -> Callable[..., HASH]:   # a hashlib constructor
    return hashlib.sha256 if mechanism == SCRAM_SHA_256 else hashlib.sha512


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword, what Kafka's AlterUserScramCredentials carries instead of the password."""
    return hashlib.pbkdf2_hmac(_hash(mechanism)().name, password.encode(), salt, iterations)


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """The credential an AlterUserScramCredentials upsertion describes (Kafka's ScramFormatter)."""
    check_iterations(iterations, mechanism)
    if len(salt) < MIN_SALT_BYTES:   # Kafka's tools send ~26 bytes; scramp refuses fewer than 12
        raise UnacceptableCredential(f"{mechanism} salt of {len(salt)} bytes is too short (at least {MIN_SALT_BYTES})")
    digest = _hash(mechanism)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    return ScramCredential(salt, digest(client_key).digest(), server_key, iterations)


def password_matches(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (for PLAIN)."""
    salted = salted_password(mechanism, password, credential.salt, credential.iterations)
    expected = credential_from_salted(mechanism, salted, credential.salt, credential.iterations)
    return hmac.compare_digest(expected.stored_key, credential.stored_key)
