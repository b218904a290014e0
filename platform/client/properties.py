"""Kafka client properties (``linger.ms=5``, ``compression.type=gzip``, ``ssl.truststore.location=...``)
as keyword arguments of ember's clients, so the ``producer.properties`` a Kafka user already has, and
Kafka's ``--producer-property`` flags, work with ``ember produce`` unchanged.

A client's keyword is the Kafka name in snake_case (docs/clients.md lists them), so the names come
from the client's signature and each value is converted to the keyword's annotated type.
"""
from __future__ import annotations

import inspect
import types
from typing import Any, Callable, Mapping, Union, get_args, get_origin

from ember.errors import InvalidConfig
from ember.security.client import options_from_properties

#: Keywords that are not Kafka properties: Python objects and caller-chosen identities.
_NOT_PROPERTIES = frozenset({"key_serializer", "value_serializer", "producer_id", "producer_epoch"})
_SECURITY_PREFIXES = ("ssl.", "security.", "sasl.")


def client_keywords(properties: Mapping[str, str], client: Callable[..., object], what: str) -> dict[str, Any]:
    """``properties`` as keywords of ``client`` (e.g. ``Producer``); ``what`` names their source in errors.

    Security names (``security.*``, ``ssl.*``, ``sasl.*``) become the security keywords as in a
    ``--command-config`` file; any other name must be one of ``client``'s keywords with dots, else
    InvalidConfig names it and lists the names that are supported."""
    parameters = _property_parameters(client)
    result: dict[str, Any] = dict(options_from_properties(
        {k: v for k, v in properties.items() if k.lower().startswith(_SECURITY_PREFIXES)}, what))
    for raw_name, raw_value in properties.items():
        name = raw_name.strip().lower()
        if name.startswith(_SECURITY_PREFIXES):
            continue
        parameter = parameters.get(name)
        if parameter is None:
            raise InvalidConfig(f"{what}: unsupported property {raw_name!r}; supported: {', '.join(sorted(parameters))}, "
                                f"and security.protocol, ssl.*, sasl.* as in docs/security.md")
        result[parameter.name] = _convert(parameter, str(raw_value).strip(), f"{what}: {raw_name}")
    return result


def _property_parameters(client: Callable[..., object]) -> dict[str, inspect.Parameter]:
    """``client``'s keyword parameters by their Kafka names (``linger_ms`` -> ``linger.ms``)."""
    signature = inspect.signature(client, eval_str=True)
    return {p.name.replace("_", "."): p for p in signature.parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY or p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
            if p.name not in _NOT_PROPERTIES}


def _convert(parameter: inspect.Parameter, value: str, where: str) -> Any:
    """``value`` as the parameter's type: bool (true/false), int, float or str, tried in that order
    among the types its annotation allows (``acks: int | str`` takes 1 and all)."""
    annotation = parameter.annotation
    allowed = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    if bool in allowed:
        if value.lower() not in ("true", "false"):
            raise InvalidConfig(f"{where}={value}: expected true or false")
        return value.lower() == "true"
    for kind in (int, float):
        if kind in allowed:
            try:
                return kind(value)
            except ValueError:
                if str not in allowed:
                    raise InvalidConfig(f"{where}={value}: expected {'an integer' if kind is int else 'a number'}") from None
    return value
