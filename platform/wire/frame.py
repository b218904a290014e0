"""The ember wire protocol: framing and message codec shared by brokers and clients.

A frame is a 4-byte big-endian length followed by that many bytes. Requests carry
``api_key, api_version, correlation_id``; responses echo the correlation id. The body is a small
JSON document (the request or response fields) followed by an opaque binary *payload*: record
batches travel there as raw bytes, referenced from the JSON by size and in order, so brokers and
followers copy them (or ``sendfile`` them) instead of re-encoding. See docs/protocol.md.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ember.errors import EmberError, InvalidRequest, MessageTooLarge, error_for_code
from ember.record.header import Buffer

FRAME_LENGTH = struct.Struct(">I")
REQUEST_HEADER = struct.Struct(">hhiI")   # api_key, api_version, correlation_id, json_length
RESPONSE_HEADER = struct.Struct(">iI")    # correlation_id, json_length

#: Kafka's socket.request.max.bytes default; brokers may lower or raise it by config.
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024



@dataclass
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    body: dict[str, Any]
    payload: memoryview = field(default_factory=lambda: memoryview(b""))


@dataclass
class Response:
    correlation_id: int
    body: dict[str, Any]
    payload: memoryview = field(default_factory=lambda: memoryview(b""))


def _dump(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def encode_request(api_key: int, api_version: int, correlation_id: int, body: Mapping[str, Any],
                   payload: Sequence[Buffer] = ()) -> list[Buffer]:
    """Frame a request as a list of buffers for ``writelines``/``sendmsg`` (payload not copied)."""
    doc = _dump(body)
    size = REQUEST_HEADER.size + len(doc) + sum(len(p) for p in payload)
    head = FRAME_LENGTH.pack(size) + REQUEST_HEADER.pack(api_key, api_version, correlation_id, len(doc))
    return [head, doc, *payload]


def response_prefix(correlation_id: int, body: dict[str, Any], payload_size: int) -> bytes:
    """Frame length, header and JSON of a response whose payload (``payload_size`` bytes)
    the caller writes next, e.g. with ``sendfile``."""
    doc = _dump(body)
    size = RESPONSE_HEADER.size + len(doc) + payload_size
    return FRAME_LENGTH.pack(size) + RESPONSE_HEADER.pack(correlation_id, len(doc)) + doc


def encode_response(correlation_id: int, body: dict[str, Any],
                    payload: Sequence[Buffer] = ()) -> list[Buffer]:
    return [response_prefix(correlation_id, body, sum(len(p) for p in payload)), *payload]


_HTTP_METHODS = {b"GET ", b"HEAD", b"POST", b"PUT ", b"DELE", b"OPTI", b"PATC", b"CONN", b"TRAC"}
_ZOOKEEPER_WORDS = {b"srvr", b"stat", b"ruok", b"mntr", b"conf", b"cons", b"envi", b"dump", b"wchs", b"isro"}


def foreign_protocol(head: bytes) -> str | None:
    """What the first 4 bytes of a connection are when they are no frame length but another
    protocol's opening a confused client sends (named for the log line); None otherwise."""
    if head in _HTTP_METHODS:
        return f"an HTTP request ({head.decode().strip()} ...)"
    if head[:1] == b"\x16" and head[1:2] == b"\x03":
        return "a TLS handshake"
    if head in _ZOOKEEPER_WORDS:
        return f"a ZooKeeper four-letter command ({head.decode()})"
    return None


def check_frame_size(size: int, max_frame_bytes: int) -> None:
    if size > max_frame_bytes:
        raise MessageTooLarge(f"frame of {size} bytes exceeds the limit of {max_frame_bytes} bytes")
    if size < RESPONSE_HEADER.size:
        raise InvalidRequest(f"frame of {size} bytes is shorter than any header")


def _load(doc: memoryview) -> dict[str, Any]:
    try:
        body = json.loads(bytes(doc))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidRequest(f"frame body is not valid JSON: {str(exc)[:200]}") from None
    except RecursionError:
        raise InvalidRequest("frame body is JSON nested too deeply to parse") from None
    if not isinstance(body, dict):
        raise InvalidRequest("frame body must be a JSON object")
    return body


def decode_request(frame: Buffer) -> Request:
    """Parse a request frame (without its 4-byte length). Raises InvalidRequest on garbage."""
    view = memoryview(frame)
    if len(view) < REQUEST_HEADER.size:
        raise InvalidRequest("request frame shorter than its header")
    api_key, api_version, correlation_id, doc_len = REQUEST_HEADER.unpack_from(view)
    end = REQUEST_HEADER.size + doc_len
    if end > len(view):
        raise InvalidRequest("request JSON length runs past the frame")
    return Request(api_key, api_version, correlation_id, _load(view[REQUEST_HEADER.size:end]), view[end:])


def decode_response(frame: Buffer) -> Response:
    """Parse a response frame (without its 4-byte length)."""
    view = memoryview(frame)
    if len(view) < RESPONSE_HEADER.size:
        raise InvalidRequest("response frame shorter than its header")
    correlation_id, doc_len = RESPONSE_HEADER.unpack_from(view)
    end = RESPONSE_HEADER.size + doc_len
    if end > len(view):
        raise InvalidRequest("response JSON length runs past the frame")
    return Response(correlation_id, _load(view[RESPONSE_HEADER.size:end]), view[end:])


def response_error(body: dict[str, Any]) -> EmberError | None:
    """The exception for a response's top-level error code, if any."""
    code = body.get("error_code", 0)
    return error_for_code(code, body.get("error_message", "")) if code else None


def split_payload(payload: memoryview, sizes: Sequence[int]) -> list[memoryview]:
    """Cut a payload into the consecutive pieces the JSON body announced by size."""
    pieces, pos = [], 0
    for size in sizes:
        if size < 0 or pos + size > len(payload):
            raise InvalidRequest("payload sizes in the body do not match the payload")
        pieces.append(payload[pos:pos + size])
        pos += size
    if pos != len(payload):
        raise InvalidRequest("payload longer than the sizes in the body")
    return pieces
