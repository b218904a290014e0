"""Kafka's security protocols, per listener (``listener.security.protocol.map``) and per client
(``security_protocol``).

PLAINTEXT and SSL carry no identity beyond a TLS client certificate; SASL_PLAINTEXT and SASL_SSL
make every client authenticate (SCRAM or PLAIN, :mod:`ember.security.sasl.server`) before any
other request, SASL_SSL over TLS.
"""
from __future__ import annotations

from enum import Enum

from ember.errors import InvalidConfig


class SecurityProtocol(str, Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


SUPPORTED = tuple(SecurityProtocol)


def parse_protocol(value: str, what: str) -> SecurityProtocol:
    """``value`` as a protocol; ``what`` names the setting in the error."""
    name = str(value).strip().upper()
    try:
        protocol = SecurityProtocol(name)
    except ValueError:
        raise InvalidConfig(f"{what}: unknown security protocol {value!r}; use "
                            f"{', '.join(p.value for p in SUPPORTED)}") from None
    return protocol


def parse_protocol_map(text: str, what: str = "listener.security.protocol.map") -> dict[str, SecurityProtocol]:
    """``NAME:PROTOCOL,...`` (Kafka's ``listener.security.protocol.map``) as {NAME: protocol}."""
    result: dict[str, SecurityProtocol] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, protocol = entry.partition(":")
        name = name.strip().upper()
        if not sep or not name:
            raise InvalidConfig(f"{what}: expected NAME:PROTOCOL entries, e.g. EMBER:SSL,KAFKA:SSL; got {entry!r}")
        if name in result:
            raise InvalidConfig(f"{what}: listener {name} appears more than once")
        result[name] = parse_protocol(protocol, f"{what} entry {entry!r}")
    return result


def default_protocol(listener: str) -> SecurityProtocol:
    """A listener's protocol when no map is set: Kafka's default map names listeners after their
    protocol (a listener called SSL is SSL); every other name is PLAINTEXT."""
    name = listener.upper()
    return parse_protocol(name, f"listener {name}") if name in SecurityProtocol.__members__ \
        else SecurityProtocol.PLAINTEXT
