"""A broker's named listeners, configured the Kafka way.

``listeners=EMBER://127.0.0.1:9092,KAFKA://127.0.0.1:9093`` binds one server per name;
``advertised.listeners`` (same syntax, defaults to ``listeners``) says what clients are told: it
goes into the broker's ZooKeeper registration, and Metadata / FindCoordinator answer each client
with the addresses of the listener it connected to. The listener named ``EMBER`` speaks ember's
protocol (its clients, follower fetches and the Spark source use it; ``ember broker start
--listen`` sets it); every other listener speaks Kafka's protocol, in plaintext.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ember.errors import InvalidConfig

EMBER_LISTENER = "EMBER"
#: Kafka's security-protocol names: a listener named so would promise TLS or SASL.
_SECURED = {"SSL", "SASL_SSL", "SASL_PLAINTEXT"}
_ENTRY = re.compile(r"(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[0-9a-fA-F:.]*\]|[^:/\[\]]*):(?P<port>\d+)")
_ANY_HOST = ("", "0.0.0.0", "::", "[::]")


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> "Listener":
        match = _ENTRY.fullmatch(text.strip())
        if match is None:
            raise InvalidConfig(f"listener {text!r}: expected NAME://HOST:PORT, e.g. KAFKA://127.0.0.1:9093")
        name, port = match["name"].upper(), int(match["port"])
        if port > 65535:
            raise InvalidConfig(f"listener {text!r}: port {port} is out of range")
        if name in _SECURED:
            raise InvalidConfig(f"listener {text!r}: only plaintext listeners are supported; name it e.g. KAFKA")
        return cls(name, match["host"].strip("[]"), port)


def parse_listeners(value: str | None, what: str) -> list[Listener]:
    """``NAME://HOST:PORT,...`` as listeners with distinct names (``what`` names the setting)."""
    listeners = [Listener.parse(part) for part in (value or "").split(",") if part.strip()]
    names = [listener.name for listener in listeners]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InvalidConfig(f"{what}: listener name(s) {', '.join(repeated)} appear more than once")
    return listeners


@dataclass(frozen=True)
class ListenerConfig:
    """Where a broker binds (``bind``) and what it advertises (``advertised``), by listener name."""
    bind: tuple[Listener, ...]
    advertised: tuple[Listener, ...]

    @classmethod
    def resolve(cls, listen: tuple[str, int] | None, listeners: str | None,
                advertised_listeners: str | None) -> "ListenerConfig":
        """``listen`` (``--listen``) is the EMBER listener; ``listeners`` adds the others."""
        bind = parse_listeners(listeners, "listeners")
        if listen is not None:
            ember = Listener(EMBER_LISTENER, *listen)
            given = next((b for b in bind if b.name == EMBER_LISTENER), None)
            if given is not None and given != ember:
                raise InvalidConfig(f"--listen {listen[0]}:{listen[1]} and listeners {given} disagree; give one")
            bind = [ember] + [b for b in bind if b.name != EMBER_LISTENER]
        if not any(b.name == EMBER_LISTENER for b in bind):
            raise InvalidConfig("no EMBER listener: give --listen HOST:PORT or listeners=EMBER://HOST:PORT,... "
                                "(ember's clients and follower fetches use it)")
        by_name = {b.name: b for b in bind}
        advertised = {a.name: a for a in parse_listeners(advertised_listeners, "advertised.listeners")}
        unknown = sorted(set(advertised) - set(by_name))
        if unknown:
            raise InvalidConfig(f"advertised.listeners names {', '.join(unknown)}, which listeners does not bind")
        resolved = tuple(advertised.get(name, listener) for name, listener in by_name.items())
        for listener in resolved:
            if listener.host in _ANY_HOST:
                raise InvalidConfig(f"listener {listener} cannot be advertised: clients need a host name; "
                                    f"set advertised.listeners={listener.name}://HOST:{listener.port}")
        return cls(tuple(bind), resolved)

    @property
    def ember(self) -> Listener:
        return next(b for b in self.bind if b.name == EMBER_LISTENER)

    @property
    def kafka(self) -> list[Listener]:
        return [b for b in self.bind if b.name != EMBER_LISTENER]

    def advertised_address(self, name: str) -> tuple[str, int]:
        listener = next(a for a in self.advertised if a.name == name)
        return listener.host, listener.port
