"""What API handlers return: a response body plus payload pieces, some of them file regions
the server sends with ``sendfile`` instead of copying through Python."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from ember.errors import EmberError, ErrorCode

log = logging.getLogger(__name__)


@dataclass
class FileRegion:
    """``size`` bytes of an open segment file from ``position``; the server closes ``file``."""
    file: BinaryIO
    position: int
    size: int

    def __len__(self) -> int:
        return self.size


#: A Kafka listener's encoded response frame in pieces, written in order: large byte fields
#: (fetched records) are kept by reference instead of being copied into one buffer.
FramePieces = tuple["bytes | memoryview", ...]


@dataclass
class Reply:
    body: dict[str, Any]
    payload: list[bytes | memoryview | FileRegion] = field(default_factory=list)

    @property
    def payload_size(self) -> int:
        return sum(len(piece) for piece in self.payload)

    def close(self) -> None:
        for piece in self.payload:
            if isinstance(piece, FileRegion):
                piece.file.close()


class CloseConnection(Exception):
    """Raised by a handler that must close the connection instead of answering (a failed
    acks=0 produce: the client gets no response, so a closed socket is its only signal)."""


#: Longest error message sent: messages may quote what a request named (a config name, a value),
#: and Kafka's older versions carry strings of at most 32,767 bytes.
MAX_ERROR_MESSAGE = 1000


def error_fields(exc: BaseException) -> dict[str, Any]:
    """``error_code``/``error_message`` for a failure; unexpected ones are logged with a trace."""
    if isinstance(exc, EmberError):
        return {"error_code": int(exc.code), "error_message": _shortened(str(exc))}
    log.error("unexpected error while handling a request", exc_info=exc)
    return {"error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
            "error_message": _shortened(f"{type(exc).__name__}: {exc}") + " (see the broker log)"}


def _shortened(message: str) -> str:
    return message if len(message) <= MAX_ERROR_MESSAGE else message[:MAX_ERROR_MESSAGE - 3] + "..."


OK: dict[str, Any] = {"error_code": 0}
