"""Requests a client sends again and again, identical but for the correlation id, decoded once.

Spark's Kafka connector asks its partition's earliest and latest offset after every poll of 500
records: the same two ListOffsets frames, byte for byte but the correlation id, 4,000 times per
million records read. Decoding one with kio (and checking its array lengths first) was a fifth of
the broker's CPU for such a request. Decoded requests are immutable (kio's entities are frozen), so
one decode serves every repeat: :class:`RepeatedRequests` keeps the last few hundred, keyed by their
frame without the correlation id, and gives a repeat its own correlation id and raw body.

Only requests the dispatcher answers at once (:attr:`ember.protocol.kafka.dispatcher.Api.now`) go
through it; a frame that does not decode is never kept (it raises, as :func:`decode_request` does).
"""
from __future__ import annotations

from typing import Any, Callable

from ember.protocol.kafka.codec import HEADER_START, KafkaRequest, decode_request

#: Distinct frames kept: a Spark job asks two per partition it reads (per consumer: the client id
#: is in the frame); the oldest goes first when a new one would exceed it.
MAX_KEPT = 512
_CORRELATION = slice(4, HEADER_START.size)     # api key (2), api version (2), correlation id (4)


class RepeatedRequests:
    """Decoded requests by their frame without the correlation id (bounded, oldest out first)."""

    def __init__(self, served: Callable[[int, int], bool], max_kept: int = MAX_KEPT) -> None:
        self._served = served
        self._max_kept = max_kept
        #: frame without its correlation id → (client id, body, where the body starts)
        self._kept: dict[bytes, tuple[str | None, Any, int]] = {}

    def decode(self, frame: memoryview) -> KafkaRequest:
        """``frame`` decoded, as :func:`decode_request` decodes it (and raising as it does)."""
        key = frame[:_CORRELATION.start].tobytes() + frame[_CORRELATION.stop:].tobytes()
        kept = self._kept.get(key)
        if kept is None:
            request = decode_request(frame, self._served)
            if request.body is None:
                return request
            kept = (request.client_id, request.body, len(frame) - len(request.raw))
            if len(self._kept) >= self._max_kept:
                del self._kept[next(iter(self._kept))]
            self._kept[key] = kept
            return request
        api_key, api_version, correlation_id = HEADER_START.unpack_from(frame)
        client_id, body, body_start = kept
        return KafkaRequest(api_key, api_version, correlation_id, client_id, body, frame[body_start:])

    def __len__(self) -> int:
        return len(self._kept)
