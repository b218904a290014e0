"""How a client secures its connections, from kafka-python's keyword names.

Producer, Consumer and Admin take ``security_protocol`` ("PLAINTEXT", "SSL",
"SASL_PLAINTEXT" or "SASL_SSL"), ``ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``,
``ssl_password``, ``ssl_check_hostname`` (default True), ``ssl_context`` (a ready
:class:`ssl.SSLContext`, used as given), ``sasl_mechanism`` (default SCRAM-SHA-512),
``sasl_plain_username`` and ``sasl_plain_password``; :class:`ClientSecurity` holds them,
picklable (Spark ships it to executors) and without the passwords in its repr. ``settings_from``
says the settings came from Kafka client properties (the CLI's files, Spark options) and where: hints
then name the property to set there (``security.protocol=SSL``), not the Python keyword.
"""
from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, TypedDict

from ember.errors import InvalidConfig
from ember.security.protocol import SecurityProtocol, parse_protocol
from ember.security.sasl.jaas import parse_jaas
from ember.security.sasl.scram import SCRAM_SHA_512, check_mechanism
from ember.security.tls import client_context


class SecurityOptions(TypedDict, total=False):
    """The security keywords every client takes (kafka-python's names)."""
    security_protocol: str
    ssl_context: ssl.SSLContext
    ssl_cafile: str
    ssl_certfile: str
    ssl_keyfile: str
    ssl_password: str
    ssl_check_hostname: bool
    sasl_mechanism: str
    sasl_plain_username: str
    sasl_plain_password: str
    settings_from: str



#: ember's default; kafka-python's is PLAIN, which brokers enable only when listed (development).
DEFAULT_SASL_MECHANISM = SCRAM_SHA_512

OPTION_NAMES = tuple(SecurityOptions.__annotations__)


@dataclass(frozen=True)
class ClientSecurity:
    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    cafile: Optional[str] = None
    certfile: Optional[str] = None
    keyfile: Optional[str] = None
    password: Optional[str] = field(default=None, repr=False)
    check_hostname: bool = True
    context: Optional[ssl.SSLContext] = field(default=None, repr=False, compare=False)
    sasl_mechanism: Optional[str] = None
    sasl_username: Optional[str] = None
    sasl_password: Optional[str] = field(default=None, repr=False)
    settings_from: Optional[str] = field(default=None, compare=False)   # see the module docstring

    @classmethod
    def from_options(cls, options: Mapping[str, Any], owner: str = "client") -> "ClientSecurity":
        """Validate the security keywords given to ``owner`` (unknown names raise TypeError, as
        for any unexpected keyword)."""
        unknown = sorted(set(options) - set(OPTION_NAMES))
        if unknown:
            raise TypeError(f"{owner}() got unexpected keyword argument(s) {', '.join(unknown)}")
        protocol = parse_protocol(options.get("security_protocol", "PLAINTEXT"), "security_protocol")
        given = sorted(name for name in OPTION_NAMES
                       if name.startswith("ssl_") and name != "ssl_check_hostname" and options.get(name) is not None)
        sasl_given = _given_sasl(options)
        where = options.get("settings_from") or _PROPERTY_CALLERS.get(owner)
        if not protocol.uses_tls and given:
            with_sasl = bool(sasl_given) or protocol.uses_sasl
            raise _protocol_mismatch(where, protocol, given + sasl_given, ("SASL_SSL" if with_sasl else "SSL",),
                                     "connect with TLS" + (" and authenticate with SASL" if with_sasl else ""))
        mechanism, username, password = _sasl_options(protocol, options, where)
        security = cls(protocol, options.get("ssl_cafile"), options.get("ssl_certfile"), options.get("ssl_keyfile"),
                       options.get("ssl_password"), bool(options.get("ssl_check_hostname", True)),
                       options.get("ssl_context"), mechanism, username, password, where)
        if protocol.uses_tls:
            security.ssl_context()   # bad files or a wrong password fail here, not at the first connection
        return security

    @property
    def uses_tls(self) -> bool:
        return self.protocol.uses_tls

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.uses_sasl

    def options(self) -> SecurityOptions:
        """Back to client keywords (what the Spark source hands the clients it creates)."""
        result = SecurityOptions(security_protocol=self.protocol.value, ssl_check_hostname=self.check_hostname)
        for name, value in (("ssl_cafile", self.cafile), ("ssl_certfile", self.certfile),
                            ("ssl_keyfile", self.keyfile), ("ssl_password", self.password),
                            ("ssl_context", self.context), ("sasl_mechanism", self.sasl_mechanism),
                            ("sasl_plain_username", self.sasl_username),
                            ("sasl_plain_password", self.sasl_password), ("settings_from", self.settings_from)):
            if value is not None:
                result[name] = value   # type: ignore[literal-required]
        return result

    def setting(self, keyword: str, value: object = None) -> str:
        """How a hint tells this client's user to set ``keyword`` (to ``value``): the Kafka property
        (``security.protocol=SSL``) when the settings came from properties, else the keyword
        (``security_protocol='SSL'``)."""
        if self.settings_from is None:
            return keyword if value is None else f"{keyword}={value!r}"
        if keyword == "ssl_check_hostname" and value is False:
            return "ssl.endpoint.identification.algorithm= (empty)"
        name = _PROPERTY_NAMES.get(keyword, keyword)
        return name if value is None else f"{name}={value}"

    def sasl_login(self) -> tuple[str, str, str]:
        """(mechanism, username, password) of a SASL client."""
        assert self.sasl_mechanism and self.sasl_username is not None and self.sasl_password is not None
        return self.sasl_mechanism, self.sasl_username, self.sasl_password

    def ssl_context(self) -> ssl.SSLContext:
        """The context connections are wrapped with (``ssl_context`` when given)."""
        if self.context is not None:
            return self.context
        return client_context(cafile=self.cafile, certfile=self.certfile, keyfile=self.keyfile,
                              password=self.password, check_hostname=self.check_hostname,
                              what="ssl_cafile/ssl_certfile/ssl_keyfile")

    def __getstate__(self) -> dict[str, Any]:
        # A context cannot be pickled; executors rebuild it from the files.
        if self.context is not None:
            raise TypeError("a ClientSecurity with ssl_context cannot be pickled; give ssl_cafile etc. instead")
        return self.__dict__.copy()


def _given_sasl(options: Mapping[str, Any]) -> list[str]:
    return sorted(name for name in OPTION_NAMES if name.startswith("sasl_") and options.get(name) is not None)


def _sasl_options(protocol: SecurityProtocol, options: Mapping[str, Any],
                  where: Optional[str]) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """(mechanism, username, password), all None unless ``protocol`` is SASL_*; ``where``: the
    ``settings_from`` that errors name."""
    given = _given_sasl(options)
    if not protocol.uses_sasl:
        if given:
            raise _protocol_mismatch(where, protocol, given,
                                     ("SASL_SSL",) if protocol.uses_tls else ("SASL_SSL", "SASL_PLAINTEXT"),
                                     "authenticate with SASL")
        return None, None, None
    mechanism = check_mechanism(str(options.get("sasl_mechanism") or DEFAULT_SASL_MECHANISM).upper(),
                                "sasl_mechanism")
    username, password = options.get("sasl_plain_username"), options.get("sasl_plain_password")
    if not username or password is None:
        raise InvalidConfig(
            f"security_protocol={protocol.value} needs sasl_plain_username and sasl_plain_password "
            f"(or sasl.jaas.config in a properties file)" if where is None else
            f"security.protocol={protocol.value} needs a login: set sasl.jaas.config (or sasl.plain.username and "
            f"sasl.plain.password) in {where}")
    return mechanism, str(username), str(password)


#: Callers whose security settings are client properties (dotted names, ``ClientSecurity.from_options``'
#: ``owner``), and where those are set (their ``settings_from`` when not given).
_PROPERTY_CALLERS = {"ember": "the --command-config file", "ember source": "the source options"}
#: How a hint spells a keyword for them (Java's names, as Kafka's tools' property files have them).
_PROPERTY_NAMES = {"ssl_cafile": "ssl.truststore.location", "ssl_certfile": "ssl.keystore.location",
                   "ssl_keyfile": "ssl.keyfile", "ssl_password": "ssl.key.password", "ssl_context": "ssl_context",
                   "sasl_mechanism": "sasl.mechanism", "sasl_plain_username": "sasl.jaas.config",
                   "sasl_plain_password": "sasl.jaas.config", "security_protocol": "security.protocol",
                   "ssl_check_hostname": "ssl.endpoint.identification.algorithm"}


def _protocol_mismatch(where: Optional[str], protocol: SecurityProtocol, given: list[str], needed: tuple[str, ...],
                       purpose: str) -> InvalidConfig:
    """Settings that need another security protocol than the one set, with the fix spelt for the
    caller: ``security_protocol='SASL_SSL'`` for Python, ``security.protocol=SASL_SSL`` in a file."""
    if where is None:
        choices = [repr(p) for p in needed]
        return InvalidConfig(f"{', '.join(given)} set but security_protocol is {protocol.value}: "
                             f"set security_protocol={_either(choices)} to {purpose}")
    names = sorted({_PROPERTY_NAMES.get(g, g) for g in given})
    return InvalidConfig(f"{', '.join(names)} set but security.protocol is {protocol.value}: "
                         f"set security.protocol={_either(list(needed))} in {where} to {purpose}")


def _either(choices: list[str]) -> str:
    return choices[0] + "".join(f" (or {c})" for c in choices[1:])


#: Dotted client property -> client keyword: kafka-python's names with dots (what Spark options
#: and ``--command-config`` files use) and Java's PEM names, so one client.properties serves
#: Kafka's tools, ember's CLI and the Spark source.
_PROPERTY_KEYWORDS = {
    "security.protocol": "security_protocol",
    "ssl.cafile": "ssl_cafile",
    "ssl.truststore.location": "ssl_cafile",
    "ssl.certfile": "ssl_certfile",
    "ssl.keystore.location": "ssl_certfile",
    "ssl.keyfile": "ssl_keyfile",
    "ssl.password": "ssl_password",
    "ssl.key.password": "ssl_password",
    "ssl.check.hostname": "ssl_check_hostname",
    "ssl.endpoint.identification.algorithm": "ssl_check_hostname",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.plain.username": "sasl_plain_username",
    "sasl.plain.password": "sasl_plain_password",
}
#: Java's store types: only PEM files can be read here.
_STORE_TYPES = ("ssl.truststore.type", "ssl.keystore.type")


def options_from_properties(properties: Mapping[str, str], what: str) -> SecurityOptions:
    """The security keywords in client ``properties`` (names case-insensitive); other names than
    ``security.*``, ``ssl.*`` and ``sasl.*`` are left to the caller. ``what`` names the source in errors."""
    result: dict[str, Any] = {}
    for raw_name, value in properties.items():
        name = raw_name.lower()
        if not name.startswith(("ssl.", "security.", "sasl.")):
            continue
        if name == "sasl.jaas.config":
            login = parse_jaas(str(value), f"{what}: {raw_name}")
            result.update(sasl_plain_username=login.username, sasl_plain_password=login.password)
            continue
        if name in _STORE_TYPES:
            if str(value).strip().upper() != "PEM":
                raise InvalidConfig(f"{what}: {raw_name}={value}: only PEM files can be read; convert the store "
                                    f"to PEM (docs/security.md)")
            continue
        keyword = _PROPERTY_KEYWORDS.get(name)
        if keyword is None:
            raise InvalidConfig(f"{what}: unsupported setting {raw_name!r}; supported: "
                                f"{', '.join(sorted(_PROPERTY_KEYWORDS))}, sasl.jaas.config, {', '.join(_STORE_TYPES)} (PEM)")
        result[keyword] = _keyword_value(name, str(value).strip(), what)
    return SecurityOptions(**result)   # type: ignore[typeddict-item]


def _keyword_value(name: str, value: str, what: str) -> Any:
    if name == "ssl.endpoint.identification.algorithm":
        return value.lower() == "https"
    if name == "ssl.check.hostname":
        if value.lower() not in ("true", "false"):
            raise InvalidConfig(f"{what}: ssl.check.hostname must be true or false, not {value!r}")
        return value.lower() == "true"
    return value
