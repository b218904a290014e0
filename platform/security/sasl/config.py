"""A broker's SASL settings, Kafka's names.

``sasl.enabled.mechanisms`` (per listener: ``listener.name.<l>.sasl.enabled.mechanisms``) says
what a SASL listener accepts, ``connections.max.reauth.ms`` (per listener too) how long its
authentications last; ``sasl.mechanism.inter.broker.protocol`` and the JAAS login of the
inter-broker listener (``listener.name.<l>.<mechanism>.sasl.jaas.config``, else
``sasl.jaas.config``) say how this broker authenticates to the others.
"""
from __future__ import annotations

import re
from typing import Any

from ember.errors import InvalidConfig
from ember.security.sasl.jaas import JaasLogin, parse_jaas
from ember.security.sasl.scram import SCRAM_SHA_256, SCRAM_SHA_512, check_mechanism, parse_mechanisms
from ember.wire.config_def import ConfigDef

DEFAULT_MECHANISMS = f"{SCRAM_SHA_512},{SCRAM_SHA_256}"
#: Kafka's default ``connection.failed.authentication.delay.ms``.
FAILED_AUTHENTICATION_DELAY_MS = 100

SASL_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in (
    ConfigDef("sasl.enabled.mechanisms", "string", DEFAULT_MECHANISMS, "SASL mechanisms a SASL listener accepts: "
              "SCRAM-SHA-512, SCRAM-SHA-256, PLAIN (development only: the password crosses the network, so only "
              "over SASL_SSL). Kafka's default is GSSAPI, which ember does not serve."),
    ConfigDef("sasl.mechanism.inter.broker.protocol", "string", SCRAM_SHA_512, "SASL mechanism brokers authenticate "
              "to each other with when the inter-broker listener is SASL_*."),
    ConfigDef("sasl.jaas.config", "string", None, "JAAS login of this broker towards the other brokers "
              "(ScramLoginModule or PlainLoginModule with username and password), when no "
              "listener.name.<l>.<mechanism>.sasl.jaas.config is set.", nullable=True, secret=True),
    ConfigDef("sasl.handshake.timeout.ms", "int", 10000, "How long a client on a SASL listener has, from its "
              "connection (after TLS), to authenticate before the connection is closed (ember's setting).",
              minimum=1, maximum=(1 << 31) - 1),
    ConfigDef("sasl.server.max.receive.size", "int", 524288, "Largest request accepted before authentication.",
              minimum=1024, maximum=(1 << 31) - 1),
    ConfigDef("connections.max.reauth.ms", "long", 0, "On a SASL listener, how long an authentication lasts: "
              "clients are told this session lifetime and must re-authenticate on the connection before it ends, "
              "or its next request (other than ApiVersions and re-authentication) closes it; so a removed user or "
              "a changed password also cuts off connections already open. 0: sessions last as long as the "
              "connection (KIP-368).", minimum=0, maximum=(1 << 63) - 1),
    ConfigDef("connection.failed.authentication.delay.ms", "int", FAILED_AUTHENTICATION_DELAY_MS,
              "How long the broker waits before it answers a failed authentication and closes the connection, "
              "so a client retrying bad credentials in a loop cannot make it spend its CPU (and log) on them "
              "(Kafka's; must be less than connections.max.idle.ms).", minimum=0, maximum=(1 << 31) - 1),
)}

#: Settings that may be given per listener as ``listener.name.<l>.<setting>``.
PER_LISTENER = ("sasl.enabled.mechanisms", "connections.max.reauth.ms")
_MECHANISM_JAAS = re.compile(r"(?P<mechanism>[a-z0-9-]+)\.sasl\.jaas\.config", re.I)
#: Kafka's per-mechanism lifetime: ``listener.name.<l>.<mechanism>.connections.max.reauth.ms``.
_MECHANISM_REAUTH = re.compile(r"(?P<mechanism>[a-z0-9-]+)\.connections\.max\.reauth\.ms", re.I)


def listener_setting(setting: str, raw: Any) -> tuple[str, Any] | None:
    """A ``listener.name.<l>.<setting>`` SASL override as (key, parsed value); None when not SASL."""
    if setting in PER_LISTENER:
        return setting, SASL_CONFIGS[setting].parse(raw)
    match = _MECHANISM_JAAS.fullmatch(setting)
    if match is not None:
        mechanism = check_mechanism(match["mechanism"].upper(), f"listener.name.*.{setting}")
        return f"{mechanism}.sasl.jaas.config", str(raw)
    match = _MECHANISM_REAUTH.fullmatch(setting)
    if match is not None:
        mechanism = check_mechanism(match["mechanism"].upper(), f"listener.name.*.{setting}")
        return f"{mechanism}.connections.max.reauth.ms", SASL_CONFIGS["connections.max.reauth.ms"].parse(raw)
    return None


def enabled_mechanisms(value: str, listener: str) -> tuple[str, ...]:
    return parse_mechanisms(value, f"sasl.enabled.mechanisms of listener {listener}")


def inter_broker_login(jaas: str | None, listener: str, mechanism: str) -> JaasLogin:
    """The inter-broker login, which must name a user and password and match ``mechanism``'s family."""
    what = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config (or sasl.jaas.config)"
    if not jaas:
        raise InvalidConfig(f"the inter-broker listener {listener} uses SASL: set {what} to this broker's login, "
                            f"e.g. org.apache.kafka.common.security.scram.ScramLoginModule required "
                            f"username=\"broker\" password=\"...\";")
    login = parse_jaas(jaas, what)
    if login.is_plain != (mechanism == "PLAIN"):
        raise InvalidConfig(f"{what}: {login.module} does not serve sasl.mechanism.inter.broker.protocol={mechanism}")
    if not login.username or not login.password:
        raise InvalidConfig(f"{what}: the login needs username and password options")
    return login
