"""Kafka frames, request/response headers and message bodies, through ``kio``'s codecs (generated
from Kafka's own message schemas, so every version's fields, flexible encodings and tagged fields
are Kafka's).

Handlers describe a response as plain values (dicts for structs, lists for arrays, ints for
error codes, milliseconds and timestamps); :func:`build` turns them into the response class of the
request's version, keeping the fields that version has and leaving out the ones it lacks, so one
handler serves every version.
"""
from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import types
import typing
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KafkaErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.readers import tz_aware_from_i64
from kio.static.protocol import Entity, RequestPayload

from ember.errors import InvalidRequest
from ember.protocol.kafka.array_bounds import check_array_lengths

FRAME_LENGTH = struct.Struct(">i")
#: api_key, api_version, correlation_id: the start of every request header version.
HEADER_START = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")


@dataclass
class KafkaRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    #: The decoded body, None when this (api key, version) has no schema here (unsupported).
    body: Any
    #: The raw body bytes (after the header), for the few requests decoded by hand.
    raw: memoryview


@functools.cache
def request_class(api_key: int, api_version: int) -> type[RequestPayload] | None:
    """kio's class of the request, None when kio (Kafka 4.x's schemas) has no such version."""
    try:
        return load_request_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        return None


@functools.cache
def response_class(api_key: int, api_version: int) -> type[Entity]:
    return load_response_schema(api_key, api_version)


def _skip_v1_header(frame: memoryview) -> int:
    """Where the body starts after a request header v1 (no tagged fields)."""
    pos = HEADER_START.size
    if len(frame) < pos + _INT16.size:
        raise InvalidRequest("request frame shorter than its header")
    (length,) = _INT16.unpack_from(frame, pos)
    pos += _INT16.size + max(length, 0)
    if pos > len(frame):
        raise InvalidRequest("request header's client id runs past the frame")
    return pos


def decode_request(frame: memoryview, served: Callable[[int, int], bool]) -> KafkaRequest:
    """Decode a request frame (without its length). A request that is not ``served`` (or has no
    schema) gets ``body`` None and is not decoded further (the dispatcher answers it); garbage
    raises InvalidRequest (the connection closes: nothing in it can be trusted any more)."""
    if len(frame) < HEADER_START.size:
        raise InvalidRequest(f"request frame of {len(frame)} bytes is shorter than any header")
    api_key, api_version, correlation_id = HEADER_START.unpack_from(frame)
    cls = request_class(api_key, api_version) if served(api_key, api_version) else None
    if cls is None:
        return KafkaRequest(api_key, api_version, correlation_id, None, None, frame[_skip_v1_header(frame):])
    try:
        header, header_size = entity_reader(cls.__header_schema__)(frame, 0)
        check_array_lengths(cls, frame, header_size)   # before kio reserves memory for any array
        body, _ = entity_reader(cls)(frame, header_size)
    except InvalidRequest as exc:
        raise InvalidRequest(f"malformed {cls.__name__} v{api_version}: {exc}") from None
    except Exception as exc:   # kio raises several types on malformed input
        raise InvalidRequest(f"malformed {cls.__name__} v{api_version}: {type(exc).__name__}: {exc}") from None
    refuse_nulls(body)
    return KafkaRequest(api_key, api_version, correlation_id, header.client_id, body, frame[header_size:])


@dataclass(frozen=True)
class EncodedResponse:
    """A response body a handler encoded itself (from cached parts), with the header schema its
    version uses and the non-zero error codes it carries (for the request metrics)."""
    header: type
    body: bytes
    error_codes: tuple[int, ...]


def encode_entity(entity: Any) -> bytes:
    """One kio entity's bytes (a body, a header, or a struct of one)."""
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def encode_response(correlation_id: int, response: Entity | EncodedResponse) -> bytes:
    """A whole response frame: length, the header version the response's schema uses, body."""
    return b"".join(encode_response_pieces(correlation_id, response))


def encode_response_pieces(correlation_id: int, response: Entity | EncodedResponse) -> list[bytes | memoryview]:
    """:func:`encode_response` in pieces: a byte field of :data:`BY_REFERENCE` bytes or more (a
    fetch's records) is its own piece, the very object the response holds, not a copy. A Fetch
    response of 1 MiB was copied three times before its first byte reached the socket (into kio's
    buffer, out of it, into the frame); written piece by piece, it is copied by the kernel alone."""
    pieces: list[bytes | memoryview]
    if isinstance(response, EncodedResponse):
        header, pieces = response.header, [response.body]
    else:
        header = response.__header_schema__   # type: ignore[attr-defined]
        writer = _PiecesWriter()
        entity_writer(type(response))(writer, response)   # type: ignore[arg-type]
        pieces = writer.pieces()
    head = FRAME_LENGTH.pack(correlation_id) + _header_tail(header)
    size = len(head) + sum(len(piece) for piece in pieces)
    if pieces and len(pieces[0]) < BY_REFERENCE:
        pieces[0] = FRAME_LENGTH.pack(size) + head + pieces[0]
    else:
        pieces.insert(0, FRAME_LENGTH.pack(size) + head)
    return pieces


#: Byte fields this large or larger go out as their own piece of a response frame.
BY_REFERENCE = 64 * 1024


class _PiecesWriter:
    """What kio's entity writers write into (they only call ``write``): small writes gathered in
    one buffer, large ones kept as they are, in order."""

    def __init__(self) -> None:
        self._pieces: list[bytes | memoryview] = []
        self._small = bytearray()

    def write(self, data: bytes | memoryview) -> int:
        if len(data) < BY_REFERENCE:
            self._small += data
        else:
            if self._small:
                self._pieces.append(bytes(self._small))
                self._small.clear()
            self._pieces.append(data)
        return len(data)

    def pieces(self) -> list[bytes | memoryview]:
        if self._small or not self._pieces:
            self._pieces.append(bytes(self._small))
        return self._pieces


@functools.cache
def _header_tail(header: type) -> bytes:
    """A response header's bytes after its correlation id (an int32, the first field of both
    header versions): nothing in v0, v1's empty tagged fields. Encoded once per header class."""
    return encode_entity(header(correlation_id=0))[FRAME_LENGTH.size:]


def frame_v0(correlation_id: int, body: bytes) -> bytes:
    """A response frame with header v0 around a body encoded by hand."""
    return FRAME_LENGTH.pack(FRAME_LENGTH.size + len(body)) + FRAME_LENGTH.pack(correlation_id) + body


def encode_error_only(correlation_id: int, error_code: int) -> bytes:
    """The answer to a request this broker cannot decode (unknown API key or version): header v0
    and the error code alone, which is how every Kafka ApiVersions response starts."""
    return frame_v0(correlation_id, _INT16.pack(error_code))


def error_codes(entity: Any) -> Iterator[int]:
    """The non-zero error codes of a response entity: its own and those of the entries of its
    arrays at any depth (Produce's are per partition inside per topic), as Kafka counts them.
    Only the fields that can lead to an error code are visited (:func:`_error_paths`); a response
    encoded from cached parts carries its codes."""
    if isinstance(entity, EncodedResponse):
        yield from entity.error_codes
        return
    cls: type = type(entity)   # not type[Any], which mypy does not see as Hashable (mypy#11470)
    for name, nested in _error_paths(cls):
        value = getattr(entity, name)
        if nested is None:
            if value:
                yield int(value)
        elif type(value) is tuple:
            for item in value:
                yield from error_codes(item)
        elif value is not None:
            yield from error_codes(value)


@functools.cache
def _error_paths(cls: type) -> tuple[tuple[str, type | None], ...]:
    """(field, entity class inside it or None for the error code itself) of the fields of ``cls``
    that hold an error code or lead to one: the response's schema read once per class."""
    paths: list[tuple[str, type | None]] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name == "error_code":
            paths.append((f.name, None))
            continue
        inner = hints[f.name]
        while typing.get_origin(inner) in (tuple, typing.Union, types.UnionType):
            inner = next(a for a in typing.get_args(inner) if a is not type(None) and a is not Ellipsis)
        if isinstance(inner, type) and dataclasses.is_dataclass(inner) and _error_paths(inner):
            paths.append((f.name, inner))
    return tuple(paths)


# -- building responses from plain values --------------------------------------------------------

@dataclass(frozen=True)
class _Field:
    name: str
    kafka_type: str | None
    nested: type | None         # entity class of a struct or array-of-struct field
    required: bool
    nullable: bool


@functools.cache
def _fields(cls: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    result = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        candidates = [hint, *typing.get_args(hint)]
        candidates += [a for c in candidates for a in typing.get_args(c)]
        nested = next((c for c in candidates if isinstance(c, type) and dataclasses.is_dataclass(c)), None)
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        nullable = type(None) in typing.get_args(hint)
        result.append(_Field(f.name, f.metadata.get("kafka_type"), nested, required, nullable))
    return tuple(result)


def refuse_nulls(entity: Any) -> None:
    """InvalidRequest when a field the schema does not let be null is null. kio reads a length of
    -1 as None even where Kafka's schema forbids it (Kafka's own parser refuses such a request),
    and handlers rely on the schema: an array is iterable, a string is a string."""
    cls: type = type(entity)   # not type[Any], which mypy does not see as Hashable (mypy#11470)
    for field in _fields(cls):
        value = getattr(entity, field.name)
        if value is None:
            if not field.nullable:
                raise InvalidRequest(f"{type(entity).__name__}.{field.name} is null, which its schema does not allow")
        elif field.nested is not None:
            for item in value if isinstance(value, tuple) else (value,):
                refuse_nulls(item)
        elif isinstance(value, tuple) and None in value and field.kafka_type != "uuid":
            raise InvalidRequest(f"{type(entity).__name__}.{field.name} holds a null, which its schema does not allow")


def _convert(field: _Field, value: Any) -> Any:
    if value is None:
        return None
    if field.nested is not None:
        if isinstance(value, Mapping):
            return build(field.nested, value)
        if isinstance(value, (list, tuple)):
            return tuple(build(field.nested, v) if isinstance(v, Mapping) else v for v in value)
        return value
    kafka_type = field.kafka_type
    if kafka_type == "error_code":
        return KafkaErrorCode(int(value))
    if kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64" and isinstance(value, int):
        # ignore: kio's i64 is an int bounded at run time only (a phantom type), which an int does not narrow to
        return None if value < 0 else tz_aware_from_i64(value)   # type: ignore[arg-type]
    if kafka_type == "uuid" and isinstance(value, str):
        return uuid.UUID(hex=value)
    if isinstance(value, list):
        return tuple(value)
    return value


def nested_class(cls: type, name: str) -> type:
    """The entity class of kio class ``cls``'s struct or array-of-struct field ``name``."""
    nested = next(f.nested for f in _fields(cls) if f.name == name)
    if nested is None:
        raise TypeError(f"{cls.__name__}.{name} holds no entity")
    return nested


def build(cls: type, values: Mapping[str, Any]) -> Any:
    """An instance of kio class ``cls`` from ``values``: keys the class lacks are ignored (an older
    or newer version), fields not given take their default (None when nullable); ``throttle_time``
    defaults to 0."""
    kwargs = {}
    for field in _fields(cls):
        if field.name in values:
            kwargs[field.name] = _convert(field, values[field.name])
        elif field.name == "throttle_time" and field.required:
            kwargs[field.name] = datetime.timedelta(0)
        elif field.required and field.nullable:
            kwargs[field.name] = None
        elif field.required:
            raise KeyError(f"{cls.__name__} v{getattr(cls, '__version__', '?')} needs {field.name!r}")
    return cls(**kwargs)


def has_field(cls: type, name: str) -> bool:
    return any(f.name == name for f in _fields(cls))


def millis(value: datetime.timedelta | int) -> int:
    """A kio duration (timedelta) as milliseconds."""
    return value if isinstance(value, int) else round(value.total_seconds() * 1000)


@functools.lru_cache(maxsize=1 << 16)
def topic_uuid(topic_id: str) -> uuid.UUID:
    """ember's topic id (hex) as the UUID Kafka's protocol carries (a UUID is immutable: one per id)."""
    return uuid.UUID(hex=topic_id)
