"""A broker's named listeners, configured the Kafka way.

``listeners=EMBER://127.0.0.1:9092,KAFKA://127.0.0.1:9093`` binds one server per name;
``advertised.listeners`` (same syntax, defaults to ``listeners``) says what clients are told: it
goes into the broker's ZooKeeper registration, and Metadata / FindCoordinator answer each client
with the addresses of the listener it connected to. The listener named ``EMBER`` speaks ember's
protocol (its clients and the Spark source use it; ``ember broker start --listen`` sets it), and
so does the one ``inter.broker.listener.name`` names (default EMBER: follower fetches and other
broker-to-broker requests go there); every other listener speaks Kafka's protocol.

Each listener has a security protocol, Kafka's ``listener.security.protocol.map``
(``EMBER:SSL,KAFKA:SSL,REPLICATION:PLAINTEXT``); without the map a listener is PLAINTEXT unless
it is named after a protocol (``SSL://...``), as in Kafka. With the map, every listener must be
in it, so none is left in plain text by omission.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ember.errors import InvalidConfig
from ember.security.protocol import SecurityProtocol, default_protocol, parse_protocol_map

EMBER_LISTENER = "EMBER"
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
    """Where a broker binds (``bind``) and what it advertises (``advertised``), by listener name,
    each listener's security protocol and the inter-broker listener's name."""
    bind: tuple[Listener, ...]
    advertised: tuple[Listener, ...]
    protocols: dict[str, SecurityProtocol] = field(default_factory=dict, hash=False)
    inter_broker: str = EMBER_LISTENER

    @classmethod
    def resolve(cls, listen: tuple[str, int] | None, listeners: str | None,
                advertised_listeners: str | None, protocol_map: str | None = None,
                inter_broker_listener: str | None = None) -> "ListenerConfig":
        """``listen`` (``--listen``) is the EMBER listener; ``listeners`` adds the others;
        ``protocol_map`` is ``listener.security.protocol.map``, ``inter_broker_listener``
        ``inter.broker.listener.name``."""
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
        inter_broker = (inter_broker_listener or EMBER_LISTENER).strip().upper()
        if inter_broker not in by_name:
            raise InvalidConfig(f"inter.broker.listener.name={inter_broker} names no listener; listeners has "
                                f"{', '.join(by_name)}")
        return cls(tuple(bind), resolved, _protocols(list(by_name), protocol_map), inter_broker)

    @property
    def ember(self) -> Listener:
        return next(b for b in self.bind if b.name == EMBER_LISTENER)

    @property
    def ember_protocol(self) -> list[Listener]:
        """The listeners speaking ember's protocol: EMBER, then the inter-broker listener."""
        return [self.ember] + [b for b in self.bind if b.name == self.inter_broker != EMBER_LISTENER]

    @property
    def kafka(self) -> list[Listener]:
        return [b for b in self.bind if b.name not in (EMBER_LISTENER, self.inter_broker)]

    def protocol(self, name: str) -> SecurityProtocol:
        return self.protocols.get(name, SecurityProtocol.PLAINTEXT)

    def advertised_address(self, name: str) -> tuple[str, int]:
        listener = next(a for a in self.advertised if a.name == name)
        return listener.host, listener.port


def _protocols(names: list[str], protocol_map: str | None) -> dict[str, SecurityProtocol]:
    if not protocol_map:
        return {name: default_protocol(name) for name in names}
    mapped = parse_protocol_map(protocol_map)
    missing = [name for name in names if name not in mapped]
    if missing:
        raise InvalidConfig(f"listener.security.protocol.map has no entry for listener(s) {', '.join(missing)}; "
                            f"add e.g. {missing[0]}:SSL or {missing[0]}:PLAINTEXT")
    return {name: mapped[name] for name in names}
