"""``ember.client.Admin``: create, grow, delete, list, describe and configure topics; delete
records; elect leaders and reassign partitions; ACLs and SCRAM users; and, inherited from
:class:`ember.client.group_admin.GroupOperations`, consumer groups."""
from __future__ import annotations

import base64
import os
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, TypeVar

from ember.client.group_admin import GroupOperations
from ember.client.metadata import MetadataClient
from ember.client.offsets import EARLIEST, LATEST, at_leaders, list_offsets
from ember.client.transaction_admin import TransactionOperations
from ember.errors import (
    BrokerNotAvailable,
    EmberError,
    ErrorCode,
    KafkaTimeoutError,
    NetworkError,
    RequestTimedOut,
    error_for_code,
)
from ember.security.authorizer.acl_fields import binding_fields, binding_from_fields, filter_fields
from ember.security.authorizer.model import AclBinding, AclBindingFilter
from ember.security.client import ClientSecurity
from ember.security.sasl.scram import DEFAULT_ITERATIONS, MECHANISM_TYPES, SCRAM_MECHANISMS, check_iterations, salted_password
from ember.wire.api_keys import ApiKey
from ember.wire.frame import response_error
from ember.wire.types import TopicPartition

_CONTROLLER_RETRY_S = 0.2
T = TypeVar("T")


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    adding_replicas: tuple[int, ...] = ()     # a reassignment in progress
    removing_replicas: tuple[int, ...] = ()
    error: str = ""                           # why there is no leader, when there is none
    leader_alive: bool = True                 # the leader is a live broker (Kafka's "available")


@dataclass(frozen=True)
class ElectionResult:
    """A partition's leader election: who led before and after, or why nothing moved."""
    topic: str
    partition: int
    previous_leader: int
    leader: int
    error: EmberError | None = None

    @property
    def moved(self) -> bool:
        return self.error is None and self.leader != self.previous_leader


@dataclass(frozen=True)
class TopicDescription:
    topic: str
    partitions: tuple[PartitionDescription, ...]
    config: dict[str, str]   # configs set on the topic (not defaults)


class Admin(GroupOperations, TransactionOperations):
    """Cluster administration against any broker: topics, configs, ACLs, SCRAM users, leadership,
    and consumer groups (list, describe, delete, reset and commit offsets: :class:`GroupOperations`)."""

    def __init__(self, bootstrap_servers: str | Iterable[str] = "127.0.0.1:9092", *,
                 request_timeout_ms: int = 30000, **security: Any) -> None:
        """``security``: the TLS and SASL keywords of :class:`ember.security.client.SecurityOptions`."""
        super().__init__()
        self.request_timeout_s = request_timeout_ms / 1000
        self._metadata = MetadataClient(bootstrap_servers, request_timeout_ms=request_timeout_ms,
                                        security=ClientSecurity.from_options(security, "Admin"))

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     config: Optional[Mapping[str, Any]] = None, validate_only: bool = False) -> None:
        """Create a topic; ``config`` takes Kafka topic configs (``retention.ms``, ...)."""
        self._topic_results(ApiKey.CREATE_TOPICS, {"topics": [{
            "topic": name, "partitions": partitions, "replication_factor": replication_factor,
            "config": {k: str(v) for k, v in (config or {}).items()}}], "validate_only": validate_only})

    def create_partitions(self, name: str, count: int, assignments: Optional[Iterable[Iterable[int]]] = None,
                          validate_only: bool = False) -> None:
        """Grow topic ``name`` to ``count`` partitions (partitions are never removed: a smaller or
        equal count raises InvalidPartitions). ``assignments`` gives each new partition's replicas
        (preferred leader first); by default they are spread like a new topic's. Keys hash onto
        the new partition count from then on."""
        listed = None if assignments is None else [{"replicas": [int(b) for b in a]} for a in assignments]
        self._topic_results(ApiKey.CREATE_PARTITIONS, {"topics": [{"topic": name, "count": count,
                                                                   "assignments": listed}],
                                                       "validate_only": validate_only})

    def delete_records(self, before: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Delete the records before each partition's offset (-1: its high watermark) by moving
        its log start there; returns each partition's new log start (its low watermark). An
        offset above the high watermark raises OffsetOutOfRange."""
        answers = at_leaders(self._metadata, ApiKey.DELETE_RECORDS, {tp: {"offset": int(offset)}
                                                                    for tp, offset in before.items()},
                             self.request_timeout_s)
        return {tp: int(item["low_watermark"]) for tp, item in answers.items()}

    def delete_topic(self, name: str) -> None:
        self._topic_results(ApiKey.DELETE_TOPICS, {"topics": [name]})

    def list_topics(self) -> list[str]:
        return sorted(self._at_home(lambda broker: self._metadata.refresh(None, broker_id=broker)))

    def describe_configs(self, name: str) -> dict[str, dict[str, Any]]:
        """``{config: {"value", "default", "doc"}}`` of a topic, defaults included."""
        (item,) = self._topic_results(ApiKey.DESCRIBE_CONFIGS, {"topics": [name]})
        return {c["name"]: {"value": c.get("value"), "default": c.get("default", False), "doc": c.get("doc", "")}
                for c in item.get("configs", [])}

    def alter_configs(self, name: str, set: Optional[Mapping[str, Any]] = None,
                      delete: Iterable[str] = (), validate_only: bool = False) -> None:
        """Set and/or reset (to the default) topic configs."""
        body = self._request(ApiKey.ALTER_CONFIGS, {
            "topic": name, "set": {k: str(v) for k, v in (set or {}).items()}, "delete": list(delete),
            "validate_only": validate_only})
        error = response_error(body)
        if error is not None:
            raise error

    def elect_leaders(self, partitions: Iterable[TopicPartition] | None = None,
                      unclean: bool = False) -> list[ElectionResult]:
        """Move leadership of ``partitions`` (None: every partition) back to their preferred
        replica (the first of the assignment) where it is in the ISR; with ``unclean``, give
        partitions without a live leader one, an out-of-sync replica if no in-sync one is alive
        (records it lacks are lost). Per-partition failures (ElectionNotNeeded,
        PreferredLeaderNotAvailable, EligibleLeadersNotAvailable, ...) are in the results."""
        listed = None if partitions is None else [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]
        body = self._controller_request(ApiKey.ELECT_LEADERS, {"election_type": 1 if unclean else 0,
                                                               "partitions": listed})
        return [ElectionResult(item["topic"], item["partition"], item["previous_leader"], item["leader"],
                               error_for_code(item["error_code"], item.get("error_message", ""))
                               if item["error_code"] else None) for item in body["partitions"]]

    def reassign_partitions(self, moves: Mapping[TopicPartition, Iterable[int]]) -> None:
        """Start moving partitions to new replica lists (the first is the preferred leader); the
        controller adds the new replicas, waits until they are in sync, then drops the old ones.
        Follow the progress with :meth:`describe_topic`. Raises the first partition's error."""
        body = self._controller_request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, {"partitions": [
            {"topic": tp.topic, "partition": tp.partition, "replicas": [int(b) for b in replicas]}
            for tp, replicas in moves.items()]})
        for item in body["partitions"]:
            if item["error_code"]:
                raise error_for_code(item["error_code"], item.get("error_message", ""))

    def describe_topic(self, name: str, *, configs: bool = True, offsets: bool = True) -> TopicDescription:
        """Leader, replicas, ISR, log start, high watermark and log end of every partition, and
        the configs set on the topic. ``configs=False`` leaves ``config`` empty and skips
        DescribeConfigs, so a principal with only Describe (or Read) on the topic may call it.
        ``offsets=False`` (the layout only, as Kafka's describeTopics) leaves the offsets -1 and
        asks no leader: a leader that died but is still registered would hold the call for its
        request timeout."""
        info = self._at_home(lambda broker: self._metadata.refresh([name], broker_id=broker)).get(name)
        if info is None or info.error_code:
            code = info.error_code if info else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            raise error_for_code(code, (info.error_message if info else "") or _topic_error_text(name, code))
        # offsets only where a live leader can answer: ListOffsets would wait out its timeout for the others
        tps = [TopicPartition(name, p.partition) for p in info.partitions
               if offsets and self._metadata.leader(name, p.partition) is not None]
        ends = self._log_ends(tps)
        descriptions = []
        for p in info.partitions:
            start, hw, end = ends.get(TopicPartition(name, p.partition), (-1, -1, -1))
            descriptions.append(PartitionDescription(p.partition, p.leader, p.replicas, p.isr, start, hw, end,
                                                     p.adding_replicas, p.removing_replicas, p.error_message,
                                                     self._metadata.leader(name, p.partition) is not None))
        overrides = ({k: v["value"] for k, v in self.describe_configs(name).items() if not v["default"]}
                     if configs else {})
        return TopicDescription(name, tuple(descriptions), overrides)

    def describe_users(self, users: Optional[Iterable[str]] = None) -> dict[str, dict[str, int]]:
        """``{user: {mechanism: iterations}}`` of the users with SCRAM credentials (all of them
        by default); a named user without credentials raises ResourceNotFound."""
        response = self._request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": list(users) if users else None})
        error = response_error(response)
        if error is not None:
            raise error
        names = {number: name for name, number in MECHANISM_TYPES.items()}
        result = {}
        for item in response.get("results", []):
            if item.get("error_code"):
                raise error_for_code(item["error_code"], item.get("error_message") or f"user {item.get('user')!r}")
            result[item["user"]] = {names[c["mechanism"]]: c["iterations"] for c in item["credential_infos"]}
        return result

    def set_user_password(self, user: str, password: str, mechanisms: Iterable[str] = SCRAM_MECHANISMS,
                          iterations: int = DEFAULT_ITERATIONS) -> None:
        """Create ``user`` or change its password, for each SCRAM mechanism. Only a salted
        password travels (the broker derives the stored keys), as with ``kafka-configs``."""
        upsertions = []
        for mechanism in mechanisms:
            check_iterations(iterations, mechanism)
            salt = os.urandom(24)
            upsertions.append({"name": user, "mechanism": MECHANISM_TYPES[mechanism], "iterations": iterations,
                               "salt": base64.b64encode(salt).decode(), "salted_password": base64.b64encode(
                                   salted_password(mechanism, password, salt, iterations)).decode()})
        self._user_results({"upsertions": upsertions, "deletions": []})

    def delete_user(self, user: str, mechanisms: Iterable[str] | None = None) -> None:
        """Remove ``user``'s credentials (all of them by default): it can no longer authenticate
        (connections already authenticated stay open until they close, or with the brokers'
        ``connections.max.reauth.ms`` until their next re-authentication)."""
        if mechanisms is None:
            mechanisms = self.describe_users([user])[user]
        self._user_results({"upsertions": [], "deletions": [{"name": user, "mechanism": MECHANISM_TYPES[m]}
                                                            for m in mechanisms]})

    def _user_results(self, body: dict[str, Any]) -> None:
        response = self._request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body)
        error = response_error(response)
        if error is not None:
            raise error
        for item in response.get("results", []):
            if item.get("error_code"):
                raise error_for_code(item["error_code"], item.get("error_message") or f"user {item.get('user')!r}")

    def _log_ends(self, tps: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int, int]]:
        """(log start, high watermark, log end) per partition: ListOffsets finds the high watermark,
        then an empty Fetch there reports all three (log end is not in ListOffsets)."""
        try:
            hws = list_offsets(self._metadata, {tp: LATEST for tp in tps}, self.request_timeout_s)
        except EmberError:
            return {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in hws:
            leader = self._metadata.leader(tp.topic, tp.partition)
            if leader is not None:
                by_leader.setdefault(leader, []).append(tp)
        out = {}
        for leader, group in by_leader.items():
            try:
                body = self._metadata.request(ApiKey.FETCH, {
                    "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1,
                    "partitions": [{"topic": tp.topic, "partition": tp.partition, "fetch_offset": hws[tp][0],
                                    "max_bytes": 1} for tp in group]}, broker_id=leader).body
            except EmberError:
                continue
            for item in body.get("partitions", []):
                out[TopicPartition(item["topic"], item["partition"])] = (
                    item.get("log_start_offset", -1), item.get("high_watermark", -1), item.get("log_end_offset", -1))
        missing = [tp for tp in tps if tp not in out and tp in hws]
        if missing:
            starts = list_offsets(self._metadata, {tp: EARLIEST for tp in missing}, self.request_timeout_s)
            out.update({tp: (starts[tp][0], hws[tp][0], -1) for tp in missing})
        return out

    def _home(self) -> int | None:
        """Admin requests go to the controller when known, so a describe or list after a create,
        alter or delete reads the same broker's view (each broker applies ZooKeeper changes on its
        own schedule)."""
        if self._metadata.controller_id not in self._metadata.brokers:
            self._metadata.refresh([])
        controller = self._metadata.controller_id
        return controller if controller in self._metadata.brokers else None

    def _at_home(self, call: Callable[[int | None], T]) -> T:
        """``call(broker)`` at the controller (see :meth:`_home`); when it does not answer (it died,
        hangs or moved), again at each other broker in turn after a refresh from one that
        answers (which also learns the new controller), then at any reachable broker: one broker
        down, or two at once, is not an error while another is up. Past the second attempt, none
        starts later than one request timeout into the call: refused connections fail fast and
        every broker gets its turn, while hung brokers end the call within about two timeouts."""
        deadline = time.monotonic() + self.request_timeout_s
        tried: set[int | None] = set()
        broker = self._home()
        while True:
            try:
                return call(broker)
            except (BrokerNotAvailable, NetworkError, RequestTimedOut, KafkaTimeoutError):
                if (broker is None and None in tried) or (tried and time.monotonic() > deadline):
                    raise                              # even "any reachable broker" failed, or out of time
                tried.add(broker)
                self._metadata.refresh([], avoid=broker)   # from another broker: this one may hang again
                if len(tried) > 1 and time.monotonic() > deadline:
                    raise
                broker = self._instead_of(tried)

    def _instead_of(self, tried: set[int | None]) -> int | None:
        """Where to ask after the ``tried`` brokers did not answer: the controller if it moved,
        else another registered broker (a paused or just-killed broker still counts as
        registered until its session expires), else None (any broker that accepts a connection)."""
        controller = self._home()
        if controller is not None and controller not in tried:
            return controller
        others = [broker for broker in self._metadata.brokers if broker not in tried]
        return random.choice(others) if others else None

    def _request(self, api_key: int, body: dict[str, Any]) -> dict[str, Any]:
        return self._at_home(lambda broker: self._metadata.request(api_key, body, broker_id=broker).body)

    def _controller_request(self, api_key: int, body: dict[str, Any]) -> dict[str, Any]:
        """A request only the controller serves, retried while the controller moves."""
        deadline = time.monotonic() + self.request_timeout_s
        while True:
            response = self._request(api_key, body)
            error = response_error(response)
            if error is None:
                return response
            if not error.retriable or time.monotonic() + _CONTROLLER_RETRY_S > deadline:
                raise error
            self._metadata.refresh([])
            time.sleep(_CONTROLLER_RETRY_S)

    def _topic_results(self, api_key: int, body: dict[str, Any]) -> list[dict[str, Any]]:
        """Send a per-topic admin request and raise the first topic's error, if any."""
        response = self._request(api_key, body)
        error = response_error(response)
        if error is not None:
            raise error
        items = response.get("topics", [])
        for item in items:
            if item.get("error_code"):
                raise error_for_code(item["error_code"], item.get("error_message") or f"topic {item.get('topic')!r}")
        return items

    # -- ACLs (kafka-python's method names; ember's binding types) -----------------------------

    def create_acls(self, acls: Iterable[AclBinding]) -> None:
        """Store ACLs (the principal needs Alter on the cluster); raises the first refusal."""
        listed = list(acls)
        response = self._request(ApiKey.CREATE_ACLS, {"acls": [binding_fields(b) for b in listed]})
        _raise_first(response)

    def describe_acls(self, acl_filter: AclBindingFilter = AclBindingFilter()) -> list[AclBinding]:
        """The ACLs ``acl_filter`` matches (default: all); needs Describe on the cluster."""
        response = self._request(ApiKey.DESCRIBE_ACLS, filter_fields(acl_filter))
        _raise_first(response)
        return [binding_from_fields(item) for item in response.get("acls", [])]

    def delete_acls(self, acl_filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        """Delete every ACL one of ``acl_filters`` matches; returns what was deleted."""
        response = self._request(ApiKey.DELETE_ACLS, {"filters": [filter_fields(f) for f in acl_filters]})
        _raise_first(response)
        return [binding_from_fields(item) for result in response.get("results", []) for item in result["acls"]]

    def close(self) -> None:
        """Close every connection: the groups' coordinator connections and the brokers' pool."""
        self._close_coordinators()
        self._metadata.close()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _raise_first(response: dict[str, Any]) -> None:
    """Raise the response's error, else the first error of its ``results``."""
    error = response_error(response)
    if error is None:
        error = next((response_error(r) for r in response.get("results", []) if r.get("error_code")), None)
    if error is not None:
        raise error


def _topic_error_text(name: str, code: int) -> str:
    """What a topic's metadata error means when the broker sent no message. Kafka answers
    TOPIC_AUTHORIZATION_FAILED for a topic the principal may not Describe whether it exists or
    not, so that text never claims either."""
    if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
        return (f"not authorized to Describe topic {name!r} (or it does not exist); an operator grants it with "
                f"`ember acls add --allow-principal PRINCIPAL --operation Describe --topic {name}`")
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return f"topic {name!r} does not exist"
    return f"metadata for topic {name!r} failed"
