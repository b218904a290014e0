"""Fakes and helpers of the in-process broker-core tests (Partition, ReplicaManager): stand-ins for
what needs ZooKeeper or another broker process, so the real classes run on one event loop with real
logs in a temporary directory. (A unique module name: test folders share sys.path.)"""
from __future__ import annotations

import asyncio
import dataclasses
import threading
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping, TypeVar

from ember.cluster.metadata_cache import TopicMetadata
from ember.cluster.records import BrokerInfo, PartitionState, Reassignment, TopicRecord
from ember.errors import EmberError, TopicAuthorizationFailed
from ember.ingest.broker_config import BrokerConfig
from ember.ingest.fetch import FetchTarget, fetch
from ember.ingest.isr import IsrChange
from ember.ingest.listeners import EMBER_LISTENER
from ember.ingest.log_manager import LogManager
from ember.ingest.partition import Partition
from ember.ingest.replica_manager import LeaderQuery, ReplicaManager
from ember.record import build_batch
from ember.security.authorizer.access import ALLOW_ALL
from ember.security.authorizer.model import Operation
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Response

T = TypeVar("T")
Address = tuple[str, int]

#: The ``make_partition`` fixture (conftest.py): a new Partition over a real log.
MakePartition = Callable[..., Partition]

#: Upper bound of every test scenario: a hang fails the test instead of stalling the run.
SCENARIO_TIMEOUT_S = 20.0


def run(scenario: Coroutine[Any, Any, T], timeout_s: float = SCENARIO_TIMEOUT_S) -> T:
    """Run one test scenario on a fresh event loop (pytest-asyncio is not installed), bounded."""
    return asyncio.run(asyncio.wait_for(scenario, timeout_s))


async def until(check: Callable[[], Any], what: str, timeout_s: float = 5.0) -> Any:
    """Poll ``check`` on the loop until it is truthy; fail after ``timeout_s`` (background tasks
    such as ISR writes and replica fetchers get to run in between)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        result = check()
        if result:
            return result
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def batch(count: int = 1, *, timestamp: int = 1_000, **kw: Any) -> bytes:
    """One raw batch of ``count`` records (timestamps ``timestamp + i``); ``kw`` go to ``build_batch``
    (``base_offset``, ``partition_leader_epoch`` for batches as a leader would serve them)."""
    return build_batch([(f"k{i}".encode(), f"v{i}".encode(), timestamp + i) for i in range(count)], **kw)


def broker_info(broker_id: int) -> BrokerInfo:
    """A registration with an EMBER listener (the fake inter-broker client never dials it)."""
    return BrokerInfo(broker_id, "127.0.0.1", 19000 + broker_id, ((EMBER_LISTENER, "127.0.0.1", 19000 + broker_id),))


class FakeMetadataCache:
    """Stands in for ``MetadataCache`` (which needs ZooKeeper watches): the test writes topics,
    partition states and live brokers; ReplicaManager reads them through the same readers
    (``topic``, ``topics``, ``brokers``). States carry znode versions like the real ones."""

    def __init__(self, brokers: Iterable[int] = (1, 2, 3)) -> None:
        self._lock = threading.Lock()
        self._brokers = {b: broker_info(b) for b in brokers}
        self._topics: dict[str, TopicMetadata] = {}

    # -- what ReplicaManager reads -------------------------------------------------------------

    def brokers(self) -> dict[int, BrokerInfo]:
        with self._lock:
            return dict(self._brokers)

    def topics(self) -> dict[str, TopicMetadata]:
        with self._lock:
            return dict(self._topics)

    def topic(self, name: str) -> TopicMetadata | None:
        with self._lock:
            return self._topics.get(name)

    # -- what the test (the "controller") writes -----------------------------------------------

    def put_topic(self, name: str, assignment: Mapping[int, list[int]], *, topic_id: str | None = None,
                  config: Mapping[str, str] | None = None, reassignments: Mapping[int, Reassignment] | None = None,
                  states: Mapping[int, PartitionState] | None = None) -> None:
        """Create or replace a topic. Without ``states``, a topic with the same id keeps its states."""
        record = TopicRecord(topic_id or f"id-{name}", dict(assignment), dict(config or {}), dict(reassignments or {}))
        with self._lock:
            old = self._topics.get(name)
            kept = old.states if old is not None and old.topic_id == record.topic_id else {}
            self._topics[name] = TopicMetadata(name, record, dict(states if states is not None else kept))

    def set_state(self, name: str, index: int, state: PartitionState | None) -> None:
        with self._lock:
            topic = self._topics[name]
            states = dict(topic.states)
            if state is None:
                states.pop(index, None)
            else:
                states[index] = state
            self._topics[name] = TopicMetadata(name, topic.record, states)

    def state(self, name: str, index: int) -> PartitionState | None:
        with self._lock:
            topic = self._topics.get(name)
            return topic.states.get(index) if topic is not None else None

    def remove_topic(self, name: str) -> None:
        with self._lock:
            self._topics.pop(name, None)

    def next_state(self, name: str, index: int, *, leader: int | None = None,
                   isr: list[int] | None = None) -> PartitionState:
        """Write the partition's next state (znode version + 1), as the controller would: a new
        leader gets a new leader epoch. Returns it."""
        current = self.state(name, index)
        assert current is not None, f"{name}-{index} has no state"
        state = PartitionState(current.leader if leader is None else leader,
                               current.leader_epoch + (1 if leader is not None else 0),
                               list(current.isr if isr is None else isr), current.controller_epoch, current.version + 1)
        self.set_state(name, index, state)
        return state


class FakeIsrWriter:
    """Stands in for ``IsrWriter``: the same compare-and-set rule (write only while this broker
    leads at the epoch it believes in; else answer the state found), against the fake cache.
    Called from a worker thread, as the real one is."""

    def __init__(self, cache: FakeMetadataCache, broker_id: int) -> None:
        self.cache = cache
        self.broker_id = broker_id
        #: (topic, partition, leader epoch asked, ISR written or None when nothing was written)
        self.calls: list[tuple[str, int, int, list[int] | None]] = []

    def update(self, topic: str, index: int, topic_id: str, leader_epoch: int,
               change: IsrChange) -> PartitionState | None:
        current = self.cache.state(topic, index)
        if current is None:
            self.calls.append((topic, index, leader_epoch, None))
            return None
        if current.leader != self.broker_id or current.leader_epoch != leader_epoch:
            self.calls.append((topic, index, leader_epoch, None))
            return current
        isr = change(list(current.isr))
        if isr == current.isr:
            self.calls.append((topic, index, leader_epoch, None))
            return current
        written = dataclasses.replace(current, isr=isr, version=current.version + 1)
        self.cache.set_state(topic, index, written)
        self.calls.append((topic, index, leader_epoch, isr))
        return written


class FakeAccess:
    """Stands in for ``Access`` (the authorizer needs a connection's session): refuses every
    operation on the ``denied`` topics and records what was checked."""

    def __init__(self, denied: Iterable[str] = ()) -> None:
        self.denied = set(denied)
        self.checked: list[tuple[Operation, str]] = []

    def check_topic(self, operation: Operation, topic: str) -> None:
        self.checked.append((operation, topic))
        if topic in self.denied:
            raise TopicAuthorizationFailed(f"not authorized to {operation.name} topic {topic}")

    def follower_or_topic(self, replica_id: int, operation: Operation) -> Operation | None:
        return operation if replica_id < 0 else None


LeaderHandler = Callable[[ApiKey, dict[str, Any]], Awaitable[Response]]


class FakeBrokerClient:
    """Stands in for ``BrokerClient``: requests go to an in-process handler instead of a socket."""

    def __init__(self, address: Address, handler: LeaderHandler, requests: list[tuple[Address, ApiKey, dict]]) -> None:
        self.address = address
        self._handler = handler
        self._requests = requests
        self.closed = False

    async def call(self, api_key: ApiKey, body: dict[str, Any], timeout_s: float | None = None) -> Response:
        assert not self.closed, "request on a closed connection"
        self._requests.append((self.address, api_key, body))
        return await self._handler(api_key, body)

    def close(self) -> None:
        self.closed = True


class FakeInterBroker:
    """Stands in for ``InterBroker``: "connects" to an in-process handler and records every
    connection and request. Without a handler it is a leader with nothing to replicate (empty
    fetches after a short long-poll, so a fetcher loop never spins)."""

    def __init__(self, handler: LeaderHandler | None = None) -> None:
        self.handler = handler or idle_leader
        self.clients: list[FakeBrokerClient] = []
        self.requests: list[tuple[Address, ApiKey, dict]] = []

    def address(self, info: BrokerInfo | None) -> Address | None:
        return info.endpoint(EMBER_LISTENER) if info is not None else None

    async def connect(self, address: Address, request_timeout_ms: int) -> FakeBrokerClient:
        client = FakeBrokerClient(address, self.handler, self.requests)
        self.clients.append(client)
        return client

    def fetched(self, address: Address, topic: str, index: int) -> list[dict[str, Any]]:
        """The partition entries of every Fetch sent to ``address`` for ``topic``-``index``."""
        return [p for a, key, body in self.requests if a == address and key == ApiKey.FETCH
                for p in body["partitions"] if (p["topic"], p["partition"]) == (topic, index)]


def answer_to(target: Mapping[str, Any], error: Exception | None = None, **fields: Any) -> dict[str, Any]:
    """One partition's entry of a response, in the ember protocol's shape (``ember.wire``)."""
    code = 0 if error is None else int(error.code) if isinstance(error, EmberError) else -1
    return {"topic": target["topic"], "partition": target["partition"], "error_code": code,
            **({"error_message": str(error)} if error is not None else {}), **fields}


async def idle_leader(api_key: ApiKey, body: dict[str, Any]) -> Response:
    """A leader with empty logs: every fetch waits a little and brings nothing."""
    if api_key == ApiKey.FETCH:
        await asyncio.sleep(0.01)
        return Response(0, {"partitions": [answer_to(p, high_watermark=0, log_start_offset=0, log_end_offset=0, size=0)
                                           for p in body["partitions"]]})
    if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
        return Response(0, {"partitions": [answer_to(p, leader_epoch=-1, end_offset=0) for p in body["partitions"]]})
    raise AssertionError(f"unexpected request {api_key!r} to the idle leader")


def leader_broker(leader: ReplicaManager) -> LeaderHandler:
    """A handler that answers follower requests from a real in-process leader ``ReplicaManager``
    through the broker's own Fetch path (``ember.ingest.fetch``), as the ember protocol would."""
    async def handle(api_key: ApiKey, body: dict[str, Any]) -> Response:
        replica_id = int(body["replica_id"])
        if api_key == ApiKey.FETCH:
            targets = [FetchTarget(p["topic"], p["partition"], p["fetch_offset"], p["max_bytes"],
                                   p["current_leader_epoch"]) for p in body["partitions"]]
            # a request-level error (an unknown session) raises, as BrokerClient.call does
            results, session_id = await fetch(
                leader, targets, replica_id, body["min_bytes"], body["max_bytes"], body["max_wait_ms"] / 1000,
                body.get("session_id", 0), body.get("session_epoch", -1),
                [(f["topic"], f["partition"]) for f in body.get("forgotten", [])])
            items, payload = [], b""
            for result in results:
                target = {"topic": result.target.topic, "partition": result.target.partition}
                data = result.slice.read_bytes() if result.slice is not None else b""
                items.append(answer_to(target, result.error, size=len(data), **dataclasses.asdict(result.offsets)))
                payload += data
            return Response(0, {"session_id": session_id, "partitions": items}, memoryview(payload))
        if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            queries = [LeaderQuery(p["topic"], p["partition"], p["current_leader_epoch"], p["leader_epoch"])
                       for p in body["partitions"]]
            answers = await leader.answer_at_leader(queries, Partition.end_offset_for_epoch, None)
            return Response(0, {"partitions": [
                answer_to(target, a.error, **dict(zip(("leader_epoch", "end_offset"), a.value or (-1, -1))))
                for target, a in zip(body["partitions"], answers)]})
        raise AssertionError(f"unexpected request {api_key!r} to leader broker {leader.broker_id}")

    return handle


class FakeOfflineReplicaWriter:
    """Stands in for ``OfflineReplicaWriter``: records every report written (from a worker thread,
    as the real one runs); ``failures`` makes that many writes fail first, as an unreachable
    ZooKeeper would; :meth:`new_session` runs the callbacks a replaced ZooKeeper session runs."""

    def __init__(self, failures: int = 0) -> None:
        self.writes: list[list[tuple[str, int, str]]] = []
        self.failures = failures
        self._callbacks: list[Callable[[], None]] = []

    def on_new_session(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def new_session(self) -> None:
        for callback in self._callbacks:
            threading.Thread(target=callback).start()

    def write(self, replicas: Iterable[Any]) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise TimeoutError("ZooKeeper did not answer")
        self.writes.append(sorted((r.topic, r.partition, r.topic_id) for r in replicas))

    @property
    def last(self) -> list[tuple[str, int, str]] | None:
        return self.writes[-1] if self.writes else None


#: Short fetcher back-off and long-poll, so follower scenarios settle in milliseconds.
FAST_FETCHING = {"replica.fetch.backoff.ms": "10", "replica.fetch.wait.max.ms": "100"}


@asynccontextmanager
async def replica_manager(data_dir: Path, cache: FakeMetadataCache, broker_id: int = 1, *, start: bool = True,
                          inter_broker: FakeInterBroker | None = None,
                          access: Any = ALLOW_ALL, config: dict[str, str] | None = None) -> AsyncIterator[ReplicaManager]:
    """A (started) ReplicaManager of broker ``broker_id`` over ``data_dir`` (broker ``config`` over
    :data:`FAST`), its ISR writes going to a fake writer over ``cache``; closed (fetchers, ISR
    writes, logs) on exit."""
    logs = LogManager(data_dir, broker_id)
    broker_config = BrokerConfig.from_properties({**FAST_FETCHING, **(config or {})})
    replicas = ReplicaManager(broker_id, cache, logs, broker_config, FakeIsrWriter(cache, broker_id),
                              inter_broker=inter_broker or FakeInterBroker(), access=access)
    try:
        if start:
            await replicas.start()
        yield replicas
    finally:
        await replicas.close()
        logs.close()


@asynccontextmanager
async def io_pool_busy(partition: Partition, threads: int) -> AsyncIterator[None]:
    """``threads`` jobs occupy ``partition``'s I/O pool (all of its threads) for the block."""
    release = threading.Event()
    busy = asyncio.gather(*[partition.run(release.wait, 10) for _ in range(threads)])
    try:
        yield
    finally:
        release.set()
        await busy


@asynccontextmanager
async def log_held_elsewhere(partition: Partition) -> AsyncIterator[None]:
    """Another thread holds ``partition``'s log lock for the block (as an append or a roll would)."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with partition.log.locked():
            held.set()
            release.wait(10)

    holder = asyncio.ensure_future(asyncio.to_thread(hold))
    try:
        await asyncio.to_thread(held.wait, 10)
        yield
    finally:
        release.set()
        await holder
