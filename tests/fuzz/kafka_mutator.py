"""Hostile variants of valid Kafka requests, for fuzzing a broker's Kafka listener.

:class:`KafkaRequestTemplates` builds a *valid* request of any API and version the listener
advertises, generically from ``kio``'s entity classes (Kafka's own schemas), aimed at the fuzz
cluster's topics and groups, Produce carrying real RecordBatch v2 batches. :func:`mutate_kafka`
turns it into a hostile frame:

* **soft**: the frame still decodes (fields at their type's extremes, empty or null, huge arrays,
  unknown versions, record batches with flipped bits, bad CRCs, lengths, magic or compression).
  The broker must answer with an error code and keep the connection usable.
* **lenient**: bytes of the encoded frame are damaged (bit flips, truncation with an agreeing
  length prefix, counts and lengths overwritten). Kafka may answer or close the connection: both
  are fine; a crash, a trace in the log or a hang are not.
* **fatal**: the length prefix lies, so nothing after it on that connection can be framed. The
  broker closes it (or its idle timeout does).

Everything is drawn from the ``random.Random`` passed in, so a seed replays a run exactly.
"""
from __future__ import annotations

import dataclasses
import datetime
import io
import random
import struct
import types
import typing
import uuid
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from kio.serial import entity_reader, entity_writer
from wire_mutator import FuzzTargets, Mutant

from ember.protocol.kafka.codec import HEADER_START, request_class, response_class
from ember.wire.api_keys import ApiKey

#: Largest hostile structure built (bytes), so a run stays fast and bounded.
HUGE_BYTES = 512 * 1024
HUGE_SHARE = 0.01
_LENGTH = struct.Struct(">i")
_INT_LIMITS = {"int8": 7, "int16": 15, "uint16": 16, "int32": 31, "int64": 63}


class KafkaRequestTemplates:
    """Valid requests of every (api key, version) in ``served`` (the listener's ApiVersions)."""

    def __init__(self, targets: FuzzTargets, served: list[tuple[int, int, int]], rng: random.Random) -> None:
        self.targets = targets
        self.classes = [cls for key, low, high in served for version in range(low, high + 1)
                        if (cls := request_class(key, version)) is not None]
        self.batches = [_record_batch(rng, targets.producer_ids) for _ in range(8)]

    def random(self, rng: random.Random) -> Any:
        return self.sample(rng.choice(self.classes), rng)

    def sample(self, cls: type, rng: random.Random, depth: int = 0) -> Any:
        hints = typing.get_type_hints(cls)
        return cls(**{f.name: self._value(hints[f.name], f.name, f.metadata.get("kafka_type"), rng, depth)
                      for f in dataclasses.fields(cls)})

    def _value(self, hint: Any, name: str, kafka_type: str | None, rng: random.Random, depth: int) -> Any:
        args = typing.get_args(hint)
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            return None if rng.random() < 0.1 else self._value(_non_null(args), name, kafka_type, rng, depth)
        if typing.get_origin(hint) is tuple:
            count = rng.randint(0, 3) if depth < 3 else 0
            return tuple(self._value(args[0], name, kafka_type, rng, depth + 1) for _ in range(count))
        if dataclasses.is_dataclass(hint):
            return self.sample(hint, rng, depth + 1)
        return self._primitive(hint, name, kafka_type, rng)

    def _primitive(self, hint: Any, name: str, kafka_type: str | None, rng: random.Random) -> Any:
        if kafka_type in _INT_LIMITS:
            if "partition" in name or name == "index":
                value = rng.randrange(3)
            elif "producer_id" in name and self.targets.producer_ids:
                value = rng.choice(self.targets.producer_ids)
            elif "broker" in name or "leader" in name or name in ("node_id", "replica_id"):
                value = rng.choice([*self.targets.broker_ids, -1])
            elif name == "acks":
                value = rng.choice([-1, 1, 1, 0])
            else:
                value = rng.choice([0, 0, 1, 2, -1, 100])
            return hint(max(value, 0) if kafka_type == "uint16" else value)
        if kafka_type in ("timedelta_i32", "timedelta_i64"):
            return hint(datetime.timedelta(milliseconds=rng.choice([0, 10, 100])))
        if kafka_type == "float64":
            return hint(rng.choice([0.0, 1.0]))
        if kafka_type == "bool":
            return rng.random() < 0.5
        if kafka_type == "uuid":
            return uuid.UUID(int=rng.choice([0, rng.getrandbits(128)]))
        if kafka_type == "records":
            return rng.choice(self.batches)
        if kafka_type == "bytes":
            return rng.randbytes(rng.choice([0, 4, 32]))
        if kafka_type == "string":
            type_name = getattr(hint, "__name__", "")
            if type_name == "TopicName" or "topic" in name or name == "name":
                return rng.choice([*self.targets.topics, "fz-unknown"])
            if type_name == "GroupId" or "group" in name:
                return rng.choice(self.targets.groups)
            return rng.choice(["", "x", "fuzz", "range", "consumer", "cleanup.policy", "retention.ms"])
        raise TypeError(f"no sample for {hint!r} ({kafka_type})")


def _non_null(args: tuple[Any, ...]) -> Any:
    return next(a for a in args if a is not type(None))


def _record_batch(rng: random.Random, producer_ids: tuple[int, ...]) -> bytes:
    idempotent = bool(producer_ids) and rng.random() < 0.5
    builder = DefaultRecordBatchBuilder(2, rng.choice([0, 0, 1, 2, 3, 4]), 0,
                                        rng.choice(producer_ids) if idempotent else -1, 0 if idempotent else -1,
                                        rng.randrange(100) if idempotent else -1, 1 << 20)
    for i in range(rng.randint(1, 20)):
        builder.append(i, 1_700_000_000_000 + i, rng.choice([None, b"k"]), rng.randbytes(rng.choice([0, 10, 300])),
                       [("h", b"v")] if i % 3 == 0 else [])
    return bytes(builder.build())


# -- encoding ----------------------------------------------------------------------------------

def encode(request: Any, correlation_id: int, api_version: int | None = None) -> bytes:
    """The frame (length prefix included) of a kio request entity."""
    header_cls = type(request).__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_cls)(buffer, header_cls(
        request_api_key=request.__api_key__,
        request_api_version=request.__version__ if api_version is None else api_version,
        correlation_id=correlation_id, client_id="ember-fuzz"))
    entity_writer(type(request))(buffer, request)
    body = buffer.getvalue()
    return _LENGTH.pack(len(body)) + body


def _silent(request: Any) -> bool:
    """An acks=0 Produce: no answer, and Kafka closes the connection when it fails."""
    return request.__api_key__ == 0 and getattr(request, "acks", 1) == 0


class KafkaResponseReader:
    """Reads a response frame's body as a Kafka client would: with the schema of the request it
    answers (api key and version from that request's header). A response that does not decode,
    or leaves bytes over, is a broker bug a real client would choke on."""

    def __init__(self, served: list[tuple[int, int, int]]) -> None:
        self.served = {(key, version) for key, low, high in served for version in range(low, high + 1)}

    def __call__(self, body: bytes, request: bytes) -> tuple[int, int]:
        """(correlation id, first error code in the response, 0 when none)."""
        if len(body) < 4:
            raise ValueError(f"response of {len(body)} bytes has no correlation id")
        correlation_id = int.from_bytes(body[:4], "big", signed=True)
        api_key, version, _ = HEADER_START.unpack_from(request, _LENGTH.size)
        if (api_key, version) not in self.served or request_class(api_key, version) is None:
            if api_key == 18:    # ApiVersions answers an unknown version with its v0 and the list
                return correlation_id, self._decode(body, 18, 0)
            if len(body) != 6:
                raise ValueError(f"unsupported api {api_key} v{version} answered with {len(body)} bytes, "
                                 "not a header and UNSUPPORTED_VERSION")
            return correlation_id, int.from_bytes(body[4:], "big", signed=True)
        return correlation_id, self._decode(body, api_key, version)

    @staticmethod
    def _decode(body: bytes, api_key: int, version: int) -> int:
        cls = response_class(api_key, version)
        try:
            _, at = entity_reader(cls.__header_schema__)(body, 0)
            response, size = entity_reader(cls)(body, at)
        except Exception as exc:     # kio raises several types on malformed input
            if api_key == ApiKey.DESCRIBE_TRANSACTIONS and "negative timestamp" in str(exc):
                # Kafka's schema has an int64 there and its brokers send -1 (no transaction open),
                # which Kafka's admin client reads as "none"; kio types it as a date and refuses
                return 0
            raise ValueError(f"{cls.__name__} v{version} does not decode: {type(exc).__name__}: {exc}") from None
        if at + size != len(body):
            raise ValueError(f"{cls.__name__} v{version} leaves {len(body) - at - size} bytes over")
        return _first_error(response)


def _first_error(entity: Any) -> int:
    """The entity's error code, else the first non-zero one inside it (0 when all are 0)."""
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.name == "error_code" and value:
            return int(value)
        for item in value if isinstance(value, tuple) else (value,):
            if dataclasses.is_dataclass(item) and (code := _first_error(item)):
                return code
    return 0


# -- mutations ---------------------------------------------------------------------------------

def _leaves(entity: Any, path: tuple = ()) -> list[tuple[tuple, dataclasses.Field, Any, bool]]:
    """(path, field, value, nullable) of every field below ``entity`` (arrays included as values)."""
    found = []
    hints = typing.get_type_hints(type(entity))
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        found.append(((*path, f.name), f, value, type(None) in typing.get_args(hints[f.name])))
        if dataclasses.is_dataclass(value):
            found += _leaves(value, (*path, f.name))
        elif isinstance(value, tuple):
            for i, item in enumerate(value):
                if dataclasses.is_dataclass(item):
                    found += _leaves(item, (*path, f.name, i))
    return found


def _replace(entity: Any, path: tuple, value: Any) -> Any:
    head, rest = path[0], path[1:]
    if isinstance(entity, tuple):
        return entity[:head] + (_replace(entity[head], rest, value) if rest else value,) + entity[head + 1:]
    return dataclasses.replace(entity, **{head: _replace(getattr(entity, head), rest, value) if rest else value})


def _extreme(request: Any, rng: random.Random) -> tuple[Any, str]:
    """A field at its type's extremes (or empty / null): still decodable, must be answered."""
    leaves = [leaf for leaf in _leaves(request) if not isinstance(leaf[2], tuple)]
    if not leaves:
        return request, "no field"
    path, f, value, nullable = rng.choice(leaves)
    if value is None:       # a null field (a null array of ints, say) is at its extreme already
        return request, "kept"
    kafka_type = f.metadata.get("kafka_type")
    hint = type(value)
    if kafka_type in _INT_LIMITS:
        bits = _INT_LIMITS[kafka_type]
        low = 0 if kafka_type == "uint16" else -(1 << bits)
        new = hint(rng.choice([low, (1 << bits) - 1, -1, 0, 1, 7]) if kafka_type != "uint16"
                   else rng.choice([0, (1 << bits) - 1]))
    elif kafka_type == "string" and isinstance(value, str):
        new = rng.choice(["", "\x00", "..", "é" * 3, "a" * 300, "a" * 32767])
    elif kafka_type in ("timedelta_i32", "timedelta_i64"):
        new = type(value)(milliseconds=rng.choice([0, 2 ** 31 - 1, -1]))
    elif nullable:
        new = None
    else:
        return request, "kept"
    return _replace(request, path, new), f"{'.'.join(map(str, path))}={str(new)[:20]!r}"


def _huge_array(request: Any, rng: random.Random) -> tuple[Any, str]:
    arrays = [leaf for leaf in _leaves(request) if isinstance(leaf[2], tuple) and leaf[2]]
    if not arrays:
        return request, "no array"
    path, _, value, _ = rng.choice(arrays)
    request_bytes = len(encode(request, 0))     # at least one element's size: bounds the bytes built
    count = max(2, min(rng.choice([1000, 10_000, 100_000]), HUGE_BYTES // request_bytes))
    return _replace(request, path, value * (count // len(value))), f"{'.'.join(map(str, path))} x{count}"


def _damage_records(request: Any, rng: random.Random) -> tuple[Any, str]:
    leaves = [leaf for leaf in _leaves(request) if leaf[1].metadata.get("kafka_type") == "records" and leaf[2]]
    if not leaves:
        return request, "no records"
    path, _, value, _ = rng.choice(leaves)
    batch = bytearray(value)
    kind = rng.choice(["flip", "crc", "length", "truncate", "magic", "codec", "count", "extend"])
    if len(batch) < 61:      # cut short by an earlier mutation: no header left to damage
        kind = "extend"
    if kind == "flip":
        for _ in range(rng.randint(1, 4)):
            batch[rng.randrange(len(batch))] ^= 1 << rng.randrange(8)
    elif kind == "crc":
        struct.pack_into(">I", batch, 17, rng.getrandbits(32))
    elif kind == "length":
        struct.pack_into(">i", batch, 8, rng.choice([-1, 0, 48, len(batch) - 13, 2 ** 31 - 1]))
    elif kind == "truncate":
        del batch[rng.randrange(len(batch)):]
    elif kind == "magic":
        batch[16] = rng.choice([0, 1, 3, 255])
    elif kind in ("codec", "count"):    # fields the CRC covers, with the CRC made right again
        if kind == "codec":
            struct.pack_into(">h", batch, 21, rng.choice([1, 2, 3, 4, 5, 7, 0x10, 0x20]))
        else:
            struct.pack_into(">i", batch, 57, rng.choice([0, -1, 2 ** 31 - 1, 1000]))
        struct.pack_into(">I", batch, 17, calc_crc32c(bytes(batch[21:])))
    else:
        batch += rng.randbytes(rng.choice([1, 61, 500]))
    return _replace(request, path, bytes(batch)), f"records {kind}"


_SOFT = (_extreme, _extreme, _extreme, _damage_records, _damage_records)


def mutate_kafka(request: Any, correlation_id: int, rng: random.Random, *, allow_fatal: bool) -> Mutant:
    """One hostile frame from a valid ``request``; damaged bytes mostly when ``allow_fatal`` (the
    last frame of a pipeline), so most frames before it are answered on an open connection."""
    roll = rng.random()
    if roll < 0.05:
        return Mutant(encode(request, correlation_id), False, f"{type(request).__name__} valid", _silent(request))
    if roll < 0.10:    # a version this listener may not serve: an error answer, never a closed connection;
        # one above the body's may be served, and then the body does not parse as it (damaged bytes)
        version = rng.choice([-1, 99, 2 ** 15 - 1, request.__version__ + 1])
        return Mutant(encode(request, correlation_id, version), False, f"{type(request).__name__} v{version}",
                      lenient=version == request.__version__ + 1)
    if roll < (0.50 if allow_fatal else 0.11):    # mostly a pipeline's last frame: one the broker may close on
        return _damage_bytes(request, correlation_id, rng, allow_fatal)
    applied = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        step = _huge_array if rng.random() < HUGE_SHARE else rng.choice(_SOFT)
        candidate, what = step(request, rng)
        try:
            encode(candidate, correlation_id)
        except Exception:     # out of the field's range for this version (kio refuses to write it)
            continue
        request = candidate
        applied.append(what)
        if step is _huge_array:
            break
    return Mutant(encode(request, correlation_id), False, f"{type(request).__name__}: " + ", ".join(applied),
                  _silent(request))


def _damage_bytes(request: Any, correlation_id: int, rng: random.Random, allow_fatal: bool) -> Mutant:
    """Damage the encoded bytes (the header's api key, version and correlation id stay): the
    broker may answer or close the connection; a length prefix that lies can only be closed on."""
    data = bytearray(encode(request, correlation_id))
    name = type(request).__name__
    kinds = ["flip", "flip", "truncate", "count", "count", "garbage"] + (["length"] if allow_fatal else [])
    kind = rng.choice(kinds)
    body_start = _LENGTH.size + 8     # after api key, version and correlation id
    if kind == "flip":
        for _ in range(rng.randint(1, 4)):    # the api key and version too, never the correlation id
            position = rng.randrange(body_start - 8, len(data))
            position += 4 if body_start - 4 <= position < body_start else 0
            data[min(position, len(data) - 1)] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del data[rng.randrange(body_start, max(body_start + 1, len(data))):]
        _LENGTH.pack_into(data, 0, len(data) - _LENGTH.size)
    elif kind == "count":     # an array count, string length or varint overwritten with a big one
        position = rng.randrange(body_start, max(body_start + 1, len(data) - 4))
        data[position:position + 4] = rng.choice([b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00",
                                                  b"\xff\xff\xff\x7f", b"\x00\x01\x00\x00"])
    elif kind == "garbage":
        data[body_start:] = rng.randbytes(rng.choice([0, 1, 8, 100]))
        _LENGTH.pack_into(data, 0, len(data) - _LENGTH.size)
    else:
        _LENGTH.pack_into(data, 0, max(0, len(data) - _LENGTH.size + rng.choice([-5, -1, 1, 100])))
        return Mutant(bytes(data), True, f"{name} bytes {kind}")
    return Mutant(bytes(data), False, f"{name} bytes {kind}", lenient=True)
