"""The client's view of the cluster: brokers, partition leaders, and connections to them.

Producers, consumers and the admin client share this layer. Metadata is fetched from any broker
that answers (known brokers first, then the bootstrap list) and refreshed when a broker says it
is not the leader, the topic is unknown, or the leader is unavailable.
"""
from __future__ import annotations

import random
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ember.errors import (
    BrokerNotAvailable,
    EmberError,
    ErrorCode,
    KafkaTimeoutError,
    NetworkError,
    RequestTimedOut,
    error_for_code,
)
from ember.net.channel import Address
from ember.net.connection import Connection, ConnectionPool, parse_bootstrap
from ember.record.header import Buffer
from ember.security.client import ClientSecurity
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Response, response_error

#: Errors after which a client should refresh metadata before retrying.
STALE_METADATA = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.FENCED_LEADER_EPOCH,
                            ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.BROKER_NOT_AVAILABLE,
                            ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT})


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int            # -1 when there is none
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int = 0
    error_message: str = ""                 # why there is no leader, when there is none
    adding_replicas: tuple[int, ...] = ()   # a reassignment in progress
    removing_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class TopicInfo:
    topic: str
    error_code: int
    partitions: tuple[PartitionInfo, ...]
    error_message: str = ""     # the broker's reason (e.g. which ACL is missing)


class MetadataClient:
    """Cached cluster metadata plus a connection pool keyed by broker."""

    def __init__(self, bootstrap_servers: str | Iterable[str], *, request_timeout_ms: int = 30000,
                 retry_backoff_ms: int = 100, metadata_max_age_ms: int = 300000,
                 security: ClientSecurity = ClientSecurity()) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.request_timeout_s = request_timeout_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.max_age_s = metadata_max_age_ms / 1000
        self.security = security
        self.pool = ConnectionPool(request_timeout_ms=request_timeout_ms, security=security)
        self.brokers: dict[int, Address] = {}
        self.controller_id = -1
        self.topics: dict[str, TopicInfo] = {}
        self._updated_at = 0.0
        self._stale = threading.Event()
        self._lock = threading.Lock()

    # -- lookups -----------------------------------------------------------------------------

    def partition_count(self, topic: str) -> int | None:
        info = self.topics.get(topic)
        return len(info.partitions) if info is not None and info.partitions else None

    def leader(self, topic: str, partition: int) -> int | None:
        info = self.topics.get(topic)
        if info is None or partition >= len(info.partitions):
            return None
        leader = info.partitions[partition].leader
        return leader if leader >= 0 and leader in self.brokers else None

    def leader_error(self, topic: str, partition: int) -> EmberError:
        """Why ``topic``-``partition`` has no usable leader, as the broker explained it."""
        info = self.topics.get(topic)
        if info is None or partition >= len(info.partitions):
            return error_for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} is not in the metadata")
        p = info.partitions[partition]
        return error_for_code(p.error_code or ErrorCode.LEADER_NOT_AVAILABLE,
                              p.error_message or f"leader broker {p.leader} of {topic}-{partition} is not known")

    def mark_stale(self) -> None:
        """Ask for a refresh before the next lookup that needs fresh data."""
        self._stale.set()

    def needs_refresh(self) -> bool:
        return self._stale.is_set() or time.monotonic() - self._updated_at > self.max_age_s

    # -- connections -------------------------------------------------------------------------

    def connection(self, broker_id: int) -> Connection:
        address = self.brokers.get(broker_id)
        if address is None:
            raise BrokerNotAvailable(f"broker {broker_id} is not in the cluster metadata")
        return self.pool.get(address)

    def any_connection(self, avoid: Address | None = None) -> Connection:
        """A connection to some live broker: known brokers in random order, then the bootstrap list;
        ``avoid`` (a broker that just did not answer) only when no other is reachable."""
        known = [address for address in self.brokers.values() if address != avoid]
        random.shuffle(known)
        errors = []
        for address in dict.fromkeys([*known, *(a for a in self.bootstrap if a != avoid), *([avoid] if avoid else [])]):
            try:
                return self.pool.get(address)
            except BrokerNotAvailable as exc:
                errors.append(str(exc))
        raise BrokerNotAvailable("no broker reachable: " + "; ".join(errors))

    def request(self, api_key: int, body: dict[str, Any], payload: Sequence[Buffer] = (), *,
                broker_id: int | None = None, timeout_s: float | None = None) -> Response:
        """Send one request (to ``broker_id`` or any broker) and wait for its response."""
        conn = self.any_connection() if broker_id is None else self.connection(broker_id)
        return self._send(conn, api_key, body, payload, timeout_s)

    def _send(self, conn: Connection, api_key: int, body: dict[str, Any], payload: Sequence[Buffer] = (),
              timeout_s: float | None = None) -> Response:
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        future: Future[Response] = conn.request(api_key, body, payload, timeout_s=timeout)
        try:
            return future.result(timeout + 1.0)
        except FutureTimeout:
            raise KafkaTimeoutError(f"no response from broker {conn.name} within {timeout:.1f}s") from None

    def _metadata_from_any(self, body: dict[str, Any], avoid: Address | None) -> Response:
        """A Metadata answer from any broker. One that does not answer (a hung broker still accepts
        connections) is left for another once, as Kafka's clients move on to the next node."""
        conn = self.any_connection(avoid)
        try:
            return self._send(conn, ApiKey.METADATA, body)
        except (NetworkError, RequestTimedOut, KafkaTimeoutError):
            other = self.any_connection(conn.address)
            if other.address == conn.address:
                raise
            return self._send(other, ApiKey.METADATA, body)

    # -- refresh -----------------------------------------------------------------------------

    def refresh(self, topics: Iterable[str] | None = None, broker_id: int | None = None,
                avoid: int | None = None) -> dict[str, TopicInfo]:
        """Fetch metadata for ``topics`` (all topics when None) from ``broker_id``, else from any
        broker (broker ``avoid`` last), and merge it into the cache."""
        names = None if topics is None else sorted(set(topics))
        request = {"topics": names}
        body = (self.request(ApiKey.METADATA, request, broker_id=broker_id) if broker_id is not None
                else self._metadata_from_any(request, self.brokers.get(avoid) if avoid is not None else None)).body
        error = response_error(body)
        if error is not None:
            raise error
        fetched = {t["topic"]: _topic_info(t) for t in body.get("topics", [])}
        with self._lock:
            self.brokers = {b["id"]: (b["host"], b["port"]) for b in body.get("brokers", [])}
            self.controller_id = body.get("controller_id", -1)
            merged = {} if names is None else dict(self.topics)
            for name in names or ():
                merged.pop(name, None)
            merged.update({name: info for name, info in fetched.items() if info.error_code == 0})
            self.topics = merged
            self._updated_at = time.monotonic()
            self._stale.clear()
        return fetched

    def wait_for_topic(self, topic: str, timeout_s: float) -> TopicInfo:
        """Metadata of ``topic`` with a leader for every partition, retrying until ``timeout_s``.

        Raises UnknownTopicOrPartition (or the last retriable error) when time runs out."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                info = self.refresh([topic]).get(topic)
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if info is None else info.error_code
                if code or info is None:
                    error: EmberError = error_for_code(code, (info.error_message if info else "")
                                                       or _topic_message(topic, code))
                else:
                    leaderless = [p.partition for p in info.partitions if p.leader < 0]
                    if not leaderless:
                        return info
                    error = self.leader_error(topic, leaderless[0])
            except EmberError as exc:
                if not exc.retriable:
                    raise
                error = exc
            if not error.retriable or time.monotonic() + self.retry_backoff_s > deadline:
                raise error
            time.sleep(self.retry_backoff_s)

    def close(self) -> None:
        self.pool.close()


def _topic_info(doc: dict[str, Any]) -> TopicInfo:
    partitions = sorted((PartitionInfo(p["partition"], p.get("leader", -1), p.get("leader_epoch", -1),
                                       tuple(p.get("replicas", ())), tuple(p.get("isr", ())),
                                       p.get("error_code", 0), p.get("error_message", ""),
                                       tuple(p.get("adding_replicas", ())), tuple(p.get("removing_replicas", ())))
                         for p in doc.get("partitions", [])), key=lambda p: p.partition)
    return TopicInfo(doc["topic"], doc.get("error_code", 0), tuple(partitions), doc.get("error_message") or "")


def _topic_message(topic: str, code: int) -> str:
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return f"topic {topic!r} does not exist"
    if code == ErrorCode.LEADER_NOT_AVAILABLE:
        return f"topic {topic!r} has partitions without a leader"
    return f"metadata for topic {topic!r} failed"
