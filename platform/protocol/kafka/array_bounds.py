"""Refuse a request whose arrays declare more elements than its frame can hold, before kio decodes it.

kio's native decoder reserves memory for an array's declared element count before reading the
elements. A count near 2**32 (one varint of five bytes) makes that reservation larger than the
machine, and a failed allocation in native code aborts the whole broker process: one hostile frame
took a broker down (the Kafka-listener fuzzer, seed 5). Kafka's own generated parsers check every
array count against the bytes remaining; this module does the same walk over the request's schema
(kio's classes), skipping what it does not need: fixed-size fields in one step, strings and byte
fields by their length. A count that cannot fit refuses the request, which closes the connection as
any malformed request does.
"""
from __future__ import annotations

import dataclasses
import functools
import struct
import types
import typing
from dataclasses import dataclass
from typing import Any, Optional, Union

from ember.errors import InvalidRequest

#: Bytes of each fixed-size Kafka type (kio's ``kafka_type`` names).
_FIXED = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "float64": 8,
          "uuid": 16, "timedelta_i32": 4, "timedelta_i64": 8, "datetime_i64": 8, "error_code": 2}
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


@dataclass(frozen=True)
class _Plan:
    """How to step over one entity: its regular fields in order, then (flexible) its tagged fields."""
    name: str
    steps: tuple["_Step", ...]
    #: Tag -> how to step over a tagged field that holds a struct or an array.
    tagged: dict[int, "_Step"]
    flexible: bool
    min_size: int


@dataclass(frozen=True)
class _Step:
    field: str
    #: "fixed", "string", "bytes", "struct", "nullable_struct", "array_fixed", "array_string", "array_struct"
    kind: str
    size: int = 0                      # fixed: bytes; array_fixed: bytes per element
    nested: Optional[_Plan] = None     # struct / array_struct


def check_array_lengths(cls: type, frame: memoryview, offset: int) -> int:
    """Where the body of ``cls`` starting at ``offset`` ends; InvalidRequest when one of its arrays
    declares more elements than the rest of ``frame`` could hold (or a length runs past the frame)."""
    return _walk(_plan(cls), frame, offset, len(frame))


def _walk(plan: _Plan, frame: memoryview, pos: int, end: int) -> int:
    flexible = plan.flexible
    for step in plan.steps:
        if step.kind == "fixed":   # the common case, inline: nothing is read, only skipped
            pos += step.size
            if pos > end:
                raise InvalidRequest(f"{plan.name}.{step.field} runs past the end of the request")
        else:
            pos = _step(step, plan, flexible, frame, pos, end)
    if flexible:
        if pos < end and frame[pos] == 0:   # no tagged fields: the common case
            return pos + 1
        count, pos = _uvarint(frame, pos, end, plan.name)
        _fits(plan.name, "tagged fields", count, 2, pos, end)
        for _ in range(count):
            tag, pos = _uvarint(frame, pos, end, plan.name)
            size, pos = _uvarint(frame, pos, end, plan.name)
            _fits(plan.name, f"tagged field {tag}", size, 1, pos, end)
            nested = plan.tagged.get(tag)
            if nested is not None:
                _step(nested, plan, True, frame, pos, pos + size)
            pos += size
    return pos


def _step(step: _Step, plan: _Plan, flexible: bool, frame: memoryview, pos: int, end: int) -> int:
    kind = step.kind   # "fixed" never comes here: _walk skips it inline, and no tagged field is fixed
    if kind == "struct":
        return _walk(step.nested, frame, pos, end)   # type: ignore[arg-type]
    if kind == "nullable_struct":   # Kafka's marker byte: -1 null, 1 present
        marker_end = _advance(plan.name, step.field, pos, 1, end)
        return marker_end if frame[pos] == 0xFF else _walk(step.nested, frame, marker_end, end)   # type: ignore[arg-type]
    if kind in ("string", "bytes"):
        length, pos = _length(kind, flexible, frame, pos, end, plan.name)
        return _advance(plan.name, step.field, pos, max(length, 0), end)
    count, pos = _count(flexible, frame, pos, end, plan.name)
    if count <= 0:
        return pos
    if kind == "array_fixed":
        _fits(plan.name, step.field, count, step.size, pos, end)
        return pos + count * step.size
    if kind == "array_string":
        _fits(plan.name, step.field, count, 1 if flexible else 2, pos, end)
        for _ in range(count):
            length, pos = _length("string", flexible, frame, pos, end, plan.name)
            pos = _advance(plan.name, step.field, pos, max(length, 0), end)
        return pos
    nested: _Plan = step.nested   # type: ignore[assignment]
    _fits(plan.name, step.field, count, nested.min_size, pos, end)
    for _ in range(count):
        pos = _walk(nested, frame, pos, end)
    return pos


def _fits(entity: str, field: str, count: int, element_size: int, pos: int, end: int) -> None:
    if count * max(element_size, 1) > end - pos:
        raise InvalidRequest(f"{entity}.{field} declares {count} element(s) but only {end - pos} byte(s) follow")


def _advance(entity: str, field: str, pos: int, size: int, end: int) -> int:
    if pos + size > end:
        raise InvalidRequest(f"{entity}.{field} runs past the end of the request")
    return pos + size


def _length(kind: str, flexible: bool, frame: memoryview, pos: int, end: int, entity: str) -> tuple[int, int]:
    """A string's or byte field's length (-1: null) and where its bytes start."""
    if flexible:
        value, pos = _uvarint(frame, pos, end, entity)
        return value - 1, pos
    fixed = _INT16 if kind == "string" else _INT32
    if pos + fixed.size > end:
        raise InvalidRequest(f"{entity} runs past the end of the request")
    return fixed.unpack_from(frame, pos)[0], pos + fixed.size


def _count(flexible: bool, frame: memoryview, pos: int, end: int, entity: str) -> tuple[int, int]:
    if flexible:
        value, pos = _uvarint(frame, pos, end, entity)
        return value - 1, pos
    if pos + 4 > end:
        raise InvalidRequest(f"{entity} runs past the end of the request")
    return _INT32.unpack_from(frame, pos)[0], pos + 4


def _uvarint(frame: memoryview, pos: int, end: int, entity: str) -> tuple[int, int]:
    value = shift = 0
    while shift <= 28:
        if pos >= end:
            raise InvalidRequest(f"{entity} runs past the end of the request")
        byte = frame[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise InvalidRequest(f"{entity} holds a varint longer than 5 bytes")


@functools.cache
def _plan(cls: type) -> _Plan:
    flexible = bool(getattr(cls, "__flexible__", False))
    hints = typing.get_type_hints(cls)
    steps: list[_Step] = []
    tagged: list[tuple[int, _Step]] = []
    for f in dataclasses.fields(cls):
        step = _field_step(f, hints[f.name], flexible)
        if "tag" in f.metadata:
            if step.kind in ("struct", "nullable_struct", "array_struct", "array_string", "array_fixed"):
                tagged.append((int(f.metadata["tag"]), step))
        elif step.kind == "fixed" and steps and steps[-1].kind == "fixed":
            steps[-1] = _Step(steps[-1].field, "fixed", steps[-1].size + step.size)
        else:
            steps.append(step)
    min_size = sum(_min_size(step, flexible) for step in steps) + (1 if flexible else 0)
    return _Plan(cls.__name__, tuple(steps), dict(tagged), flexible, min_size)


def _field_step(f: dataclasses.Field[Any], hint: object, flexible: bool) -> _Step:
    kafka_type = f.metadata.get("kafka_type")
    inner = _without_none(hint)
    if typing.get_origin(inner) is tuple:
        element = _without_none(typing.get_args(inner)[0])
        if dataclasses.is_dataclass(element):
            return _Step(f.name, "array_struct", nested=_plan(element))   # type: ignore[arg-type]
        if kafka_type in _FIXED:
            return _Step(f.name, "array_fixed", _FIXED[kafka_type])
        return _Step(f.name, "array_string")
    if isinstance(inner, type) and dataclasses.is_dataclass(inner):
        return _Step(f.name, "struct" if inner is hint else "nullable_struct", nested=_plan(inner))
    if kafka_type in _FIXED:
        return _Step(f.name, "fixed", _FIXED[kafka_type])
    if kafka_type == "string":
        return _Step(f.name, "string")
    if kafka_type in ("bytes", "records"):
        return _Step(f.name, "bytes")
    raise TypeError(f"unknown Kafka type {kafka_type!r} of {f.name}")


def _without_none(hint: object) -> object:
    """``X | None`` -> ``X``."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else hint
    return hint


def _min_size(step: _Step, flexible: bool) -> int:
    if step.kind == "fixed":
        return step.size
    if step.kind == "struct":
        return step.nested.min_size   # type: ignore[union-attr]
    if step.kind == "nullable_struct":
        return 1
    if step.kind == "string":
        return 1 if flexible else 2
    return 1 if flexible else 4   # bytes and arrays: their length
