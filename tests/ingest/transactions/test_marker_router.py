"""Marker routing in process with fakes: partitions this broker leads go to the local writer,
the others in one WRITE_TXN_MARKERS per leader; partitions without a leader, of unknown topics,
or whose leader cannot be reached come back as errors the coordinator retries or drops."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from ember.cluster.records import PartitionState
from ember.errors import BrokerNotAvailable, LeaderNotAvailable, NotLeaderOrFollower, UnknownTopicOrPartition
from ember.ingest.transactions.marker_router import MarkerRouter
from ember.ingest.transactions.peers import Peers
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Response

#: t-0 and t-3 led by broker 1 (this one), t-1 by 2, t-2 by 3, t-4 without a leader.
LEADERS = {0: 1, 1: 2, 2: 3, 3: 1, 4: -1}


class FakeCache:
    def topics(self) -> dict[str, Any]:
        states = {p: PartitionState(leader, 1, [max(leader, 1)], 1) for p, leader in LEADERS.items()}
        return {"t": SimpleNamespace(partitions={p: [1, 2, 3] for p in LEADERS},
                                     shown_state=lambda index: states.get(index))}

    def brokers(self) -> dict[int, Any]:
        return {b: SimpleNamespace(id=b) for b in (1, 2, 3)}


class LocalWriter:
    def __init__(self) -> None:
        self.calls: list[list[tuple[str, int]]] = []

    async def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                            partitions: list[tuple[str, int]]) -> dict[tuple[str, int], Exception | None]:
        self.calls.append(partitions)
        return {p: None for p in partitions}


class FakeClient:
    def __init__(self, broker: int, sent: list[tuple[int, dict[str, Any]]]) -> None:
        self.broker, self.sent, self.closed = broker, sent, False

    async def call(self, api_key: ApiKey, body: dict[str, Any], timeout_s: float | None = None) -> Response:
        assert api_key == ApiKey.WRITE_TXN_MARKERS
        self.sent.append((self.broker, body))
        code = 6 if self.broker == 3 else 0          # broker 3 no longer leads: NOT_LEADER_OR_FOLLOWER
        return Response(1, {"error_code": 0, "partitions": [{**p, "error_code": code} for p in body["partitions"]]})

    def close(self) -> None:
        self.closed = True


class FakeInterBroker:
    def __init__(self, unreachable: frozenset[int] = frozenset()) -> None:
        self.sent: list[tuple[int, dict[str, Any]]] = []
        self.unreachable = unreachable
        self.connects = 0

    def address(self, info: Any) -> Any:
        return ("127.0.0.1", info.id) if info is not None else None

    async def connect(self, address: Any, request_timeout_ms: int) -> FakeClient:
        self.connects += 1
        if address[1] in self.unreachable:
            raise BrokerNotAvailable(f"broker {address[1]} refused the connection")
        return FakeClient(address[1], self.sent)


def route(inter_broker: FakeInterBroker, partitions: list[tuple[str, int]]) -> tuple[dict, LocalWriter]:
    local = LocalWriter()
    router = MarkerRouter(1, FakeCache(), local, Peers(FakeCache(), inter_broker))  # type: ignore[arg-type]
    results = asyncio.run(router.write_markers(7, 2, 5, True, partitions))
    return results, local


def test_each_leader_gets_its_partitions() -> None:
    inter_broker = FakeInterBroker()
    results, local = route(inter_broker, [("t", p) for p in range(5)] + [("gone", 0)])
    assert local.calls == [[("t", 0), ("t", 3)]]
    assert [(b, body["partitions"]) for b, body in sorted(inter_broker.sent, key=lambda s: s[0])] == [
        (2, [{"topic": "t", "partition": 1}]), (3, [{"topic": "t", "partition": 2}])]
    assert all(body["producer_id"] == 7 and body["producer_epoch"] == 2 and body["coordinator_epoch"] == 5
               and body["commit"] is True for _, body in inter_broker.sent)
    assert results[("t", 0)] is None and results[("t", 1)] is None and results[("t", 3)] is None
    assert isinstance(results[("t", 2)], NotLeaderOrFollower)
    assert isinstance(results[("t", 4)], LeaderNotAvailable)
    assert isinstance(results[("gone", 0)], UnknownTopicOrPartition)


def test_an_unreachable_leader_fails_its_partitions_retriably() -> None:
    results, _ = route(FakeInterBroker(unreachable=frozenset({2})), [("t", 0), ("t", 1)])
    assert results[("t", 0)] is None
    error = results[("t", 1)]
    assert isinstance(error, BrokerNotAvailable) and error.retriable
