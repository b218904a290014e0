"""A minimal blocking Kafka-protocol client built on kio, for tests that need exact requests
(unsupported versions, raw produce sequences, malformed frames). Every socket read is bounded."""
from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.serial import entity_reader, entity_writer

from ember.kafka.codec import response_class

WAIT_S = 30.0
_LENGTH = struct.Struct(">i")


class KafkaWire:
    def __init__(self, address: str, timeout_s: float = WAIT_S) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self._next_id = 0

    def frame(self, request: Any, api_version: int | None = None) -> tuple[int, bytes]:
        """(correlation id, frame) of a kio request entity."""
        self._next_id += 1
        header_cls = type(request).__header_schema__
        buffer = io.BytesIO()
        entity_writer(header_cls)(buffer, header_cls(request_api_key=request.__api_key__,
                                                      request_api_version=request.__version__ if api_version is None
                                                      else api_version,
                                                      correlation_id=self._next_id, client_id="ember-tests"))
        entity_writer(type(request))(buffer, request)
        body = buffer.getvalue()
        return self._next_id, _LENGTH.pack(len(body)) + body

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive(self) -> tuple[int, memoryview]:
        """(correlation id, body after the response header v0's correlation id)."""
        (size,) = _LENGTH.unpack(self._exactly(4))
        frame = memoryview(self._exactly(size))
        return _LENGTH.unpack_from(frame)[0], frame[4:]

    def call(self, request: Any) -> Any:
        correlation_id, data = self.frame(request)
        self.send_raw(data)
        received, body = self.receive()
        assert received == correlation_id
        cls = response_class(request.__api_key__, request.__version__)
        header_size = 1 if cls.__flexible__ and request.__api_key__ != 18 else 0   # tagged fields of header v1
        return entity_reader(cls)(body, header_size)[0]

    def is_closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _exactly(self, size: int) -> bytes:
        chunks, remaining = [], size
        while remaining:
            chunk = self.sock.recv(remaining)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "KafkaWire":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
