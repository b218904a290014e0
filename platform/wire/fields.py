"""Typed reading of request fields: the JSON body of every request passes through here.

A handler reads each field with the helper for its type, so a missing field, a value of the wrong
JSON type, a number outside the field's Kafka wire type (int8/16/32/64), a string longer than a
Kafka STRING or a list naming the same thing twice becomes INVALID_REQUEST naming the field, never
a Python error deep inside the broker (and a traceback in its log). Messages describe bad values
instead of echoing them, so a hostile request cannot blow up the broker's log or its response.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Hashable, Mapping, TypeVar

from ember.errors import InvalidRequest

INT8, INT16, INT32, INT64 = 8, 16, 32, 64
#: Kafka's STRING is at most 32767 bytes long (an int16 length).
MAX_STRING_LENGTH = 32767

Body = Mapping[str, Any]
T = TypeVar("T")
_REQUIRED: Any = object()


def _kind(value: Any) -> str:
    return "null" if value is None else {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
                                          list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _get(body: Body, name: str, default: Any) -> Any:
    """The field's value; ``default`` when it is absent (or null, for an optional field)."""
    value = body.get(name)
    if value is None:
        if default is _REQUIRED:
            raise InvalidRequest(f"field {name!r} is required" + (" (got null)" if name in body else ""))
        return default
    return value


def _as_int(value: Any, name: str, bits: int) -> int:
    if type(value) is float and math.isfinite(value) and value.is_integer():
        value = int(value)      # JSON has one number type: 500.0 is the integer 500
    if type(value) is not int:
        raise InvalidRequest(f"field {name!r} must be an integer, not {_kind(value)}")
    limit = 1 << (bits - 1)
    if not -limit <= value < limit:
        raise InvalidRequest(f"field {name!r} is outside the int{bits} range")
    return value


def _as_str(value: Any, name: str, max_length: int) -> str:
    if type(value) is not str:
        raise InvalidRequest(f"field {name!r} must be a string, not {_kind(value)}")
    if len(value) > max_length:
        raise InvalidRequest(f"field {name!r} is {len(value)} characters long (at most {max_length})")
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:   # JSON can spell lone surrogates ("\ud800"); UTF-8 cannot
            raise InvalidRequest(f"field {name!r} is not valid Unicode text") from None
    return value


def integer(body: Body, name: str, default: Any = _REQUIRED, *, bits: int = INT32) -> Any:
    value = _get(body, name, default)
    return value if value is default else _as_int(value, name, bits)


def string(body: Body, name: str, default: Any = _REQUIRED, *, max_length: int = MAX_STRING_LENGTH) -> Any:
    value = _get(body, name, default)
    return value if value is default else _as_str(value, name, max_length)


def boolean(body: Body, name: str, default: bool) -> bool:
    value = _get(body, name, default)
    if type(value) is not bool:
        raise InvalidRequest(f"field {name!r} must be true or false, not {_kind(value)}")
    return value


def _list(body: Body, name: str, default: Any) -> Any:
    value = _get(body, name, default)
    if value is default:
        return value
    if type(value) is not list:
        raise InvalidRequest(f"field {name!r} must be a list, not {_kind(value)}")
    return value


def objects(body: Body, name: str, default: Any = _REQUIRED) -> Any:
    """A list of JSON objects (the per-partition or per-topic entries of a request)."""
    items = _list(body, name, default)
    if items is not default:
        for item in items:
            if type(item) is not dict:
                raise InvalidRequest(f"field {name!r} must list objects, not {_kind(item)}")
    return items


def strings(body: Body, name: str, default: Any = _REQUIRED, *, max_length: int = MAX_STRING_LENGTH) -> Any:
    """A list of distinct strings (names: a repeated one would only repeat work and answers)."""
    items = _list(body, name, default)
    if items is default:
        return items
    return unique([_as_str(item, name, max_length) for item in items], lambda s: s, name)


def integers(body: Body, name: str, *, bits: int = INT32) -> list[int]:
    return [_as_int(item, name, bits) for item in _list(body, name, _REQUIRED)]


def string_map(body: Body, name: str) -> dict[str, str]:
    """An object of config names to values; values may be JSON strings or numbers."""
    value = _get(body, name, {})
    if type(value) is not dict:
        raise InvalidRequest(f"field {name!r} must be an object, not {_kind(value)}")
    out = {}
    for key, item in value.items():
        _as_str(key, f"{name} key", MAX_STRING_LENGTH)
        if type(item) in (int, float) and math.isfinite(item):
            item = str(item)
        out[key] = _as_str(item, f"{name}[{key[:50]!r}]", MAX_STRING_LENGTH)
    return out


def unique(items: list[T], key: Callable[[T], Hashable], name: str) -> list[T]:
    """``items`` unchanged; INVALID_REQUEST if two share a key (Kafka refuses duplicates too)."""
    seen: set[Hashable] = set()
    for item in items:
        k = key(item)
        if k in seen:
            raise InvalidRequest(f"field {name!r} lists {str(k)[:300]} more than once")
        seen.add(k)
    return items


def topic_partition(entry: Body) -> tuple[str, int]:
    """The ``topic`` and ``partition`` fields every per-partition entry has."""
    return string(entry, "topic"), integer(entry, "partition")


def partitions(body: Body, name: str = "partitions", default: Any = _REQUIRED) -> Any:
    """Per-partition entries, each naming a distinct ``topic``/``partition``."""
    entries = objects(body, name, default)
    if entries is default:
        return entries
    return unique(entries, topic_partition, name)
