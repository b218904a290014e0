"""``Sender`` alone (one class, its broker faked): what happens to queued batches when another
batch fails and the idempotent producer starts over with a new producer id, and how long it
waits for that id."""
from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

from ember.client.accumulator import RECORD_OVERHEAD, RecordAccumulator
from ember.client.sender import Sender, SenderConfig
from ember.errors import ErrorCode, KafkaTimeoutError, RequestTimedOut
from ember.record import to_table
from ember.record.header import BatchHeader
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Response
from ember.wire.types import TopicPartition

A, B = TopicPartition("t", 0), TopicPartition("t", 1)
#: Partition A is led by broker 1, B by broker 2: one request each.
LEADERS = {A: 1, B: 2}


class FakeConnection:
    """Holds each Produce request's future for the test to answer."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.sent: list[tuple[dict[str, Any], list[bytes], Future[Any]]] = []

    def request(self, api_key: int, body: dict[str, Any], payload: list[bytes], expect_response: bool = True,
                timeout_s: float | None = None) -> Future[Any]:
        future: Future[Any] = Future()
        self.sent.append((body, list(payload), future))
        return future


class FakeMetadata:
    """Leaders from LEADERS, a new producer id from each InitProducerId."""

    def __init__(self) -> None:
        self.connections = {1: FakeConnection(), 2: FakeConnection()}
        self.producer_ids = 0
        self.timeouts: list[float | None] = []

    def needs_refresh(self) -> bool:
        return False

    def mark_stale(self) -> None:
        pass

    def leader(self, topic: str, partition: int) -> int:
        return LEADERS[TopicPartition(topic, partition)]

    def connection(self, leader: int) -> FakeConnection:
        return self.connections[leader]

    def request(self, api_key: int, body: dict[str, Any], timeout_s: float | None = None) -> Response:
        assert api_key == ApiKey.INIT_PRODUCER_ID
        self.timeouts.append(timeout_s)
        self.producer_ids += 1
        return Response(0, {"error_code": 0, "producer_id": 100 + self.producer_ids, "producer_epoch": 0})


def sender() -> tuple[Sender, RecordAccumulator, FakeMetadata]:
    acc = RecordAccumulator(batch_size=1 << 16, buffer_memory=1 << 20, linger_ms=0)
    metadata = FakeMetadata()
    config = SenderConfig(acks=-1, compression="none", retries=10, retry_backoff_s=0.0, delivery_timeout_s=60.0,
                          request_timeout_ms=30_000, max_in_flight=5, max_request_size=1 << 20, idempotent=True)
    return Sender(metadata, acc, config, {"t"}), acc, metadata  # type: ignore[arg-type]


def send(acc: RecordAccumulator, tp: TopicPartition, value: bytes) -> Any:
    return acc.append(tp, 1_000, None, value, None, RECORD_OVERHEAD + len(value), 1.0)


def answer(future: Future[Any], tp: TopicPartition, code: int = 0) -> None:
    future.set_result(Response(0, {"partitions": [{"topic": tp.topic, "partition": tp.partition,
                                                   "error_code": code, "base_offset": 0}]}))


def sent_batches(connection: FakeConnection) -> list[tuple[int, int, list[bytes]]]:
    """(producer id, base sequence, values) of every batch sent on ``connection``."""
    out = []
    for _, payload, _ in connection.sent:
        for raw in payload:
            header = BatchHeader.parse(raw)
            out.append((header.producer_id, header.base_sequence, to_table(raw).column("value").to_pylist()))
    return out


@pytest.mark.parametrize("first_error, resent", [
    (RequestTimedOut("broker 1 did not answer within the request timeout"), False),   # may be written
    (ErrorCode.REQUEST_TIMED_OUT, False),                                        # written, not replicated in time
    (ErrorCode.NOT_LEADER_OR_FOLLOWER, False),          # also after the write: a leader deposed in an acks=all wait
    (ErrorCode.NOT_ENOUGH_REPLICAS, True),                                       # refused before any write
])
def test_after_a_producer_id_reset_only_batches_surely_unwritten_are_sent_again(first_error: Any,
                                                                                 resent: bool) -> None:
    """Resent under a new producer id, a batch the broker may already hold would be written
    twice (the broker deduplicates by producer id and sequence): such a batch fails instead."""
    s, acc, metadata = sender()
    one, two = metadata.connections[1], metadata.connections[2]
    a = send(acc, A, b"a")
    send(acc, B, b"b")
    s._run_once()
    assert [b[:2] for b in sent_batches(one)] == [(101, 0)] and [b[:2] for b in sent_batches(two)] == [(101, 0)]
    if isinstance(first_error, Exception):
        one.sent[0][2].set_exception(first_error)
    else:
        answer(one.sent[0][2], A, first_error)                   # A: retriable, queued again
    answer(two.sent[0][2], B, ErrorCode.MESSAGE_TOO_LARGE)     # B fails for good: a gap, so a new id
    send(acc, A, b"a2")
    s._run_once()
    later = sent_batches(one)[1:]
    if resent:
        assert later[0] == (102, 0, [b"a"])       # first, under the new id (b"a2" follows it)
        assert not a.done()
    else:
        assert later == [(102, 0, [b"a2"])]
        with pytest.raises(KafkaTimeoutError, match="not sent again"):
            a.get(timeout=1)


def test_a_producer_id_is_awaited_no_longer_than_the_oldest_batch_may_still_wait() -> None:
    """A broker that takes InitProducerId and never answers (paused) must not hold the sender, and
    every batch with it, past the delivery timeout (seen in a chaos run: sends resolved after 47 s)."""
    s, acc, metadata = sender()
    send(acc, A, b"a")
    head = acc.peek(A)
    assert head is not None
    head.created -= 59.5                  # 0.5 s of its 60 s delivery timeout left
    s._run_once()
    assert metadata.timeouts and metadata.timeouts[0] is not None and metadata.timeouts[0] <= 0.5
