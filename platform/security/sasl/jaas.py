"""Kafka's ``sasl.jaas.config`` values: the login module, its flag and its options.

``org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="...";``
names the mechanism family (SCRAM or PLAIN) and the credentials a client (or a broker, towards the
other brokers) authenticates with. Parse errors never quote the value: it holds a password.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ember.errors import InvalidConfig

SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_MODULES = (SCRAM_MODULE, PLAIN_MODULE)
_HEAD = re.compile(r"\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)\s*", re.I)
_OPTION = re.compile(r'\s*(?P<key>[\w.-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;"]+))\s*')


@dataclass(frozen=True)
class JaasLogin:
    module: str
    options: dict[str, str] = field(repr=False, hash=False)

    @property
    def is_plain(self) -> bool:
        return self.module == PLAIN_MODULE

    @property
    def username(self) -> str:
        return self.options.get("username", "")

    @property
    def password(self) -> str:
        return self.options.get("password", "")

    def __repr__(self) -> str:
        return f"JaasLogin({self.module.rsplit('.', 1)[-1]}, username={self.username!r})"


def parse_jaas(text: str, what: str) -> JaasLogin:
    """One login module entry ending in ``;``; ``what`` names the setting in errors."""
    head = _HEAD.match(text)
    if head is None:
        raise InvalidConfig(f"{what}: expected '<LoginModule> required key=\"value\" ...;' "
                            f"(e.g. {SCRAM_MODULE} required username=\"alice\" password=\"...\";)")
    module = head["module"]
    if module not in _MODULES:
        raise InvalidConfig(f"{what}: login module {module} is not supported; use {' or '.join(_MODULES)}")
    options: dict[str, str] = {}
    position = head.end()
    while position < len(text) and text[position] != ";":
        option = _OPTION.match(text, position)
        if option is None:
            raise InvalidConfig(f"{what}: cannot parse the options after {module} (expected key=\"value\" pairs "
                                f"ending with ';'); the value is not shown because it holds a password")
        value = option["quoted"] if option["quoted"] is not None else option["bare"]
        options[option["key"]] = re.sub(r"\\(.)", r"\1", value)
        position = option.end()
    if text[position:].strip() != ";":
        raise InvalidConfig(f"{what}: the login module entry must end with ';' (and hold only one entry)")
    return JaasLogin(module, options)


def login_config(username: str, password: str, plain: bool = False) -> str:
    """A ``sasl.jaas.config`` value for these credentials (what ``cluster up --secure`` writes)."""
    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{PLAIN_MODULE if plain else SCRAM_MODULE} required username={quoted(username)} password={quoted(password)};"
