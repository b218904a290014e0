"""Hostile variants of valid ember requests, for fuzzing the broker's wire protocol.

:class:`RequestTemplates` builds a *valid* request of any API against the fuzz cluster's own
topics, groups and brokers (produce carries real record batches, idempotent ones included);
:func:`mutate` turns it into a hostile frame. Mutations are of two kinds:

* **soft**: the frame and its JSON stay well-formed (field types, missing or extra fields, huge
  arrays and strings, extreme numbers, wrong api keys and versions, payloads whose sizes disagree
  with the body, record batches with flipped bits, bad CRCs, lengths, counts or garbage Arrow
  payloads). The broker must answer with an error code and keep the connection usable.
* **fatal**: the framing or the JSON itself is broken (bit flips in the JSON text, truncation,
  wrong length prefix or JSON length, JSON nested past any parser's depth, not an object). The
  broker must close that connection, and only that one, without a trace in its log.

Everything is drawn from the ``random.Random`` passed in, so a seed replays a run exactly.
"""
from __future__ import annotations

import copy
import json
import random
import struct
from dataclasses import dataclass, field
from typing import Any, Callable

from ember.record import HEADER_SIZE, BatchHeader, build_batch
from ember.record.crc import crc32
from ember.record.header import CRC_START
from ember.wire.api_keys import ApiKey
from ember.wire.frame import FRAME_LENGTH, REQUEST_HEADER

#: Largest hostile structure the fuzzer builds (bytes of JSON), so a run stays fast and bounded.
HUGE_BYTES = 512 * 1024
#: Share of mutations that build a huge array or string (they dominate the bytes sent).
HUGE_SHARE = 0.01

#: Values substituted for fields: every JSON type, numbers at and past Kafka's int32/int64
#: limits, floats ints() reject or overflow on, strings no topic or group may have.
HOSTILE_VALUES: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 2, -2, 3, -2 ** 31, 2 ** 31 - 1, 2 ** 31, -2 ** 63, 2 ** 63 - 1, 2 ** 63,
    2 ** 64, -(10 ** 40), 10 ** 300, 0.5, -0.0, 1e308, float("inf"), float("-inf"), float("nan"),
    "", "0", "-1", "1e3", "x", "\x00", "\ud800", "..", "/", "é" * 3, "a" * 300, [], {}, [None], [[]],
    {"": None}, [1, 2, 3], {"topic": None},
)


#: Stands in the body for a deeply nested value spliced into the JSON text (json.dumps itself
#: cannot nest past the recursion limit).
_DEEP = "@@deep@@"


@dataclass
class Request:
    """A request before framing: api key and version, JSON body, payload pieces."""
    api_key: int
    body: Any
    payload: list[bytes] = field(default_factory=list)
    api_version: int = 0
    deep: bytes = b""      # JSON text that replaces the _DEEP marker

    def encode(self, correlation_id: int) -> bytes:
        doc = _dump(self.body)
        if self.deep:
            doc = doc.replace(_dump(_DEEP), self.deep, 1)
        return frame(self.api_key, self.api_version, correlation_id, doc, b"".join(self.payload))

    @property
    def silent(self) -> bool:
        """An acks=0 produce as the broker reads it: no response, and a failure closes the connection."""
        if self.api_key != ApiKey.PRODUCE or self.api_version != 0 or not isinstance(self.body, dict):
            return False
        try:
            return int(self.body.get("acks", 1)) == 0
        except (TypeError, ValueError, OverflowError):
            return False


@dataclass(frozen=True)
class Mutant:
    """A frame as sent (length prefix included), what was done to it, whether it breaks the
    connection (``fatal``), whether the broker answers it at all (``silent``: acks=0) and whether
    it may either answer or close the connection (``lenient``: Kafka's rule for undecodable bodies)."""
    data: bytes
    fatal: bool
    what: str
    silent: bool = False
    lenient: bool = False


def _dump(body: Any) -> bytes:
    # allow_nan: NaN and Infinity are not JSON, yet Python's parser (the broker's) accepts them.
    return json.dumps(body, separators=(",", ":")).encode()


def frame(api_key: int, api_version: int, correlation_id: int, doc: bytes, payload: bytes) -> bytes:
    head = REQUEST_HEADER.pack(api_key, api_version, correlation_id, len(doc))
    return FRAME_LENGTH.pack(len(head) + len(doc) + len(payload)) + head + doc + payload


# -- valid requests ---------------------------------------------------------------------------

@dataclass(frozen=True)
class FuzzTargets:
    """What the fuzzer may touch: its own topics (name -> partitions), groups and the broker ids,
    plus producer ids it was given, so valid requests hit real state."""
    topics: dict[str, int]
    groups: tuple[str, ...]
    broker_ids: tuple[int, ...]
    producer_ids: tuple[int, ...]


class RequestTemplates:
    """Valid requests of every API the broker serves (and SyncGroup, which it refuses)."""

    def __init__(self, targets: FuzzTargets, rng: random.Random) -> None:
        self.targets = targets
        self.batches = _sample_batches(targets.producer_ids, rng)
        self._builders: dict[int, Callable[[random.Random], Request]] = {
            ApiKey.PRODUCE: self.produce, ApiKey.FETCH: self.fetch, ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.METADATA: self.metadata, ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch, ApiKey.FIND_COORDINATOR: self.find_coordinator,
            ApiKey.JOIN_GROUP: self.join_group, ApiKey.HEARTBEAT: self.heartbeat,
            ApiKey.LEAVE_GROUP: self.leave_group, ApiKey.SYNC_GROUP: self.sync_group,
            ApiKey.DESCRIBE_GROUPS: self.describe_groups, ApiKey.LIST_GROUPS: self.empty(ApiKey.LIST_GROUPS),
            ApiKey.API_VERSIONS: self.empty(ApiKey.API_VERSIONS), ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics, ApiKey.INIT_PRODUCER_ID: self.empty(ApiKey.INIT_PRODUCER_ID),
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs, ApiKey.ALTER_CONFIGS: self.alter_configs,
            ApiKey.DELETE_GROUPS: self.delete_groups, ApiKey.ELECT_LEADERS: self.elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.alter_partition_reassignments,
            ApiKey.CREATE_PARTITIONS: self.create_partitions, ApiKey.DELETE_RECORDS: self.delete_records,
            ApiKey.SASL_HANDSHAKE: lambda rng: Request(ApiKey.SASL_HANDSHAKE, {"mechanism": "SCRAM-SHA-512"}),
            ApiKey.SASL_AUTHENTICATE: lambda rng: Request(ApiKey.SASL_AUTHENTICATE, {}, [b"n,,n=fz,r=abc"]),
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: lambda rng: Request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                                                                        {"users": None}),
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: lambda rng: Request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {
                "upsertions": [], "deletions": [{"name": f"fz-user{rng.randrange(4)}", "mechanism": 1}]}),
            ApiKey.DESCRIBE_ACLS: lambda rng: Request(ApiKey.DESCRIBE_ACLS, {"resource_type": "Topic"}),
            ApiKey.CREATE_ACLS: lambda rng: Request(ApiKey.CREATE_ACLS, {"acls": [self._acl(rng)]}),
            ApiKey.DELETE_ACLS: lambda rng: Request(ApiKey.DELETE_ACLS, {"filters": [self._acl(rng)]}),
            ApiKey.WRITE_TXN_MARKERS: self.write_txn_markers,
            ApiKey.ADD_PARTITIONS_TO_TXN: lambda rng: Request(ApiKey.ADD_PARTITIONS_TO_TXN, {
                **self._txn(rng), "partitions": self._tps(rng)}),
            ApiKey.ADD_OFFSETS_TO_TXN: lambda rng: Request(ApiKey.ADD_OFFSETS_TO_TXN, {
                **self._txn(rng), "group_id": self._group(rng)}),
            ApiKey.END_TXN: lambda rng: Request(ApiKey.END_TXN, {**self._txn(rng), "commit": rng.random() < 0.5}),
            ApiKey.TXN_OFFSET_COMMIT: lambda rng: Request(ApiKey.TXN_OFFSET_COMMIT, {
                **self._txn(rng), "group_id": self._group(rng),
                "offsets": [{**tp, "offset": rng.choice([0, 1, 5])} for tp in self._tps(rng)]}),
            ApiKey.LIST_TRANSACTIONS: lambda rng: Request(ApiKey.LIST_TRANSACTIONS, {
                "states": rng.choice([[], ["Ongoing"], ["NoSuchState"]])}),
            ApiKey.DESCRIBE_TRANSACTIONS: lambda rng: Request(ApiKey.DESCRIBE_TRANSACTIONS, {
                "transactional_ids": [self._txn(rng)["transactional_id"]]}),
            ApiKey.DESCRIBE_PRODUCERS: lambda rng: Request(ApiKey.DESCRIBE_PRODUCERS, {"partitions": self._tps(rng)}),
        }
        # Record APIs carry most real traffic; weigh them up.
        self._weights = {key: 6 if key in (ApiKey.PRODUCE, ApiKey.FETCH) else 1 for key in self._builders}

    def random(self, rng: random.Random) -> Request:
        keys = list(self._builders)
        key = rng.choices(keys, [self._weights[k] for k in keys])[0]
        return self._builders[key](rng)

    # -- helpers --

    @staticmethod
    def _acl(rng: random.Random) -> dict[str, str]:
        """An ACL on a topic of the fuzz's own (without an authorizer the broker answers SECURITY_DISABLED)."""
        return {"resource_type": "Topic", "resource_name": f"fz-acl{rng.randrange(4)}", "principal": "User:fz",
                "operation": rng.choice(["Read", "Write"]), "permission": "Allow"}

    def _tp(self, rng: random.Random) -> dict[str, Any]:
        topic = rng.choice(sorted(self.targets.topics))
        return {"topic": topic, "partition": rng.randrange(self.targets.topics[topic])}

    def _tps(self, rng: random.Random, most: int = 3) -> list[dict[str, Any]]:
        return [self._tp(rng) for _ in range(rng.randint(1, most))]

    def _txn(self, rng: random.Random) -> dict[str, Any]:
        """A transactional producer's fields (ids of the fuzz's own: mostly refused, as unknown)."""
        return {"transactional_id": f"fz-txn{rng.randrange(3)}", "producer_id": rng.choice(self.targets.producer_ids),
                "producer_epoch": 0}

    def _group(self, rng: random.Random) -> str:
        return rng.choice(self.targets.groups)

    @staticmethod
    def empty(api_key: int) -> Callable[[random.Random], Request]:
        return lambda rng: Request(api_key, {})

    def write_txn_markers(self, rng: random.Random) -> Request:
        """A coordinator's markers (for producers with no open transaction: the leaders answer them)."""
        return Request(ApiKey.WRITE_TXN_MARKERS, {
            "producer_id": rng.choice(self.targets.producer_ids), "producer_epoch": 0, "coordinator_epoch": 0,
            "commit": rng.random() < 0.5, "partitions": self._tps(rng)})

    # -- record APIs --

    def produce(self, rng: random.Random) -> Request:
        entries, payload = [], []
        for tp in self._tps(rng):
            batch = rng.choice(self.batches)
            entries.append({**tp, "size": len(batch)})
            payload.append(batch)
        return Request(ApiKey.PRODUCE, {"acks": rng.choice([1, -1, 1, 0]), "timeout_ms": 5000,
                                        "partitions": entries}, payload)

    def fetch(self, rng: random.Random) -> Request:
        follower = rng.random() < 0.2
        return Request(ApiKey.FETCH, {
            "replica_id": rng.choice(self.targets.broker_ids) if follower else -1,
            "max_wait_ms": rng.choice([0, 0, 10, 100]), "min_bytes": rng.choice([0, 1, 1024]),
            "max_bytes": rng.choice([1, 1 << 16, 1 << 20]),
            "partitions": [{**tp, "fetch_offset": rng.choice([0, 0, 1, 5, 100]), "max_bytes": 1 << 16,
                            **({"current_leader_epoch": rng.choice([0, 1])} if rng.random() < 0.3 else {})}
                           for tp in self._tps(rng)]})

    def list_offsets(self, rng: random.Random) -> Request:
        return Request(ApiKey.LIST_OFFSETS, {"replica_id": -1, "partitions": [
            {**tp, "timestamp": rng.choice([-2, -1, 0, 1_700_000_000_000])} for tp in self._tps(rng)]})

    def offset_for_leader_epoch(self, rng: random.Random) -> Request:
        return Request(ApiKey.OFFSET_FOR_LEADER_EPOCH, {
            "replica_id": rng.choice(self.targets.broker_ids),
            "partitions": [{**tp, "current_leader_epoch": 0, "leader_epoch": rng.choice([0, 1, -1])}
                           for tp in self._tps(rng)]})

    # -- cluster and admin APIs --

    def metadata(self, rng: random.Random) -> Request:
        return Request(ApiKey.METADATA, {"topics": None if rng.random() < 0.3 else
                                         [t["topic"] for t in self._tps(rng)]})

    def create_topics(self, rng: random.Random) -> Request:
        # validate_only: a valid request changes nothing; a mutated one may create a topic.
        return Request(ApiKey.CREATE_TOPICS, {"validate_only": True, "timeout_ms": 1000, "topics": [
            {"topic": f"fz-new{rng.randrange(4)}", "partitions": rng.choice([1, 2, -1]), "replication_factor": 1,
             "config": {"retention.ms": "60000"} if rng.random() < 0.5 else {}}]})

    def create_partitions(self, rng: random.Random) -> Request:
        # validate_only: a valid request changes nothing; a mutated one may add partitions.
        return Request(ApiKey.CREATE_PARTITIONS, {"validate_only": True, "timeout_ms": 1000, "topics": [
            {"topic": self._tp(rng)["topic"], "count": rng.choice([1, 4, 6])}]})

    def delete_records(self, rng: random.Random) -> Request:
        return Request(ApiKey.DELETE_RECORDS, {"partitions": [{**tp, "offset": rng.choice([0, 1, -1])}
                                                              for tp in self._tps(rng)]})

    def delete_topics(self, rng: random.Random) -> Request:
        return Request(ApiKey.DELETE_TOPICS, {"timeout_ms": 1000, "topics": [f"fz-gone{rng.randrange(4)}"]})

    def describe_configs(self, rng: random.Random) -> Request:
        return Request(ApiKey.DESCRIBE_CONFIGS, {"topics": [t["topic"] for t in self._tps(rng)]})

    def alter_configs(self, rng: random.Random) -> Request:
        return Request(ApiKey.ALTER_CONFIGS, {"topic": self._tp(rng)["topic"], "validate_only": True,
                                              "set": {"retention.ms": "3600000"}, "delete": ["flush.ms"]})

    def elect_leaders(self, rng: random.Random) -> Request:
        return Request(ApiKey.ELECT_LEADERS, {"election_type": 0, "partitions": self._tps(rng)})

    def alter_partition_reassignments(self, rng: random.Random) -> Request:
        # An empty replica list is refused (INVALID_REPLICA_ASSIGNMENT): valid in form, changes nothing.
        return Request(ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                       {"partitions": [{**tp, "replicas": []} for tp in self._tps(rng, 1)]})

    # -- group APIs --

    def find_coordinator(self, rng: random.Random) -> Request:
        return Request(ApiKey.FIND_COORDINATOR, {"key": self._group(rng)})

    def join_group(self, rng: random.Random) -> Request:
        return Request(ApiKey.JOIN_GROUP, {
            "group_id": self._group(rng), "member_id": rng.choice(["", "fz-member"]), "client_id": "fz",
            "session_timeout_ms": 6000, "rebalance_timeout_ms": 6000, "protocol_type": "consumer",
            "topics": sorted(self.targets.topics)[:2], "protocols": ["range"]})

    def heartbeat(self, rng: random.Random) -> Request:
        return Request(ApiKey.HEARTBEAT, {"group_id": self._group(rng), "member_id": "fz-member", "generation": 1})

    def leave_group(self, rng: random.Random) -> Request:
        return Request(ApiKey.LEAVE_GROUP, {"group_id": self._group(rng), "member_id": "fz-member"})

    def sync_group(self, rng: random.Random) -> Request:
        return Request(ApiKey.SYNC_GROUP, {"group_id": self._group(rng), "member_id": "fz-member", "generation": 1})

    def offset_commit(self, rng: random.Random) -> Request:
        return Request(ApiKey.OFFSET_COMMIT, {
            "group_id": self._group(rng), "member_id": "", "generation": -1,
            "offsets": [{**tp, "offset": rng.choice([0, 1, 10]), "metadata": "fz"} for tp in self._tps(rng)]})

    def offset_fetch(self, rng: random.Random) -> Request:
        return Request(ApiKey.OFFSET_FETCH, {"group_id": self._group(rng),
                                             "partitions": None if rng.random() < 0.3 else self._tps(rng)})

    def describe_groups(self, rng: random.Random) -> Request:
        return Request(ApiKey.DESCRIBE_GROUPS, {"groups": [self._group(rng)]})

    def delete_groups(self, rng: random.Random) -> Request:
        return Request(ApiKey.DELETE_GROUPS, {"groups": [f"fzg-gone{rng.randrange(4)}"]})


def _sample_batches(producer_ids: tuple[int, ...], rng: random.Random) -> list[bytes]:
    """Valid batches of every shape: one and many records, keys, headers, null values, each
    codec, idempotent (sequences 0.. of the given producer ids) and not. Timestamps are fixed,
    so a seed gives the same bytes."""
    ts = 1_700_000_000_000
    batches = [
        build_batch([(None, b"v", ts)]),
        build_batch([(b"k%d" % i, b"value-%d" % i, ts + i) for i in range(20)]),
        build_batch([(b"k", None, 1_000, [("h", b"x"), ("n", None)])]),
        build_batch([(None, bytes(rng.randrange(256) for _ in range(2000)), ts)], compression="lz4"),
        build_batch([(b"k%d" % i, b"z" * 100, ts) for i in range(50)], compression="zstd"),
    ]
    for producer_id in producer_ids:
        batches += [build_batch([(None, b"idem-%d" % s, ts)], producer_id=producer_id, producer_epoch=0,
                                base_sequence=s) for s in range(3)]
    return batches


# -- mutations --------------------------------------------------------------------------------

Slot = tuple[Any, Any]   # (container, key or index): a place in a JSON tree


def _slots(value: Any) -> list[Slot]:
    """Every place in a JSON tree where a value sits."""
    slots: list[Slot] = []
    stack = [value]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            slots.append((node, key))
            stack.append(child)
    return slots


def _containers(value: Any, kind: type) -> list[Any]:
    found = [value] if isinstance(value, kind) else []
    return found + [c[k] for c, k in _slots(value) if isinstance(c[k], kind)]


def _nested(depth: int, rng: random.Random) -> bytes:
    """JSON text of a value nested ``depth`` levels (lists or single-key objects)."""
    opening, closing = (b"[", b"]") if rng.random() < 0.5 else (b'{"a":', b"}")
    return opening * depth + rng.choice([b"0", b'"x"', b"null"]) + closing * depth


def _hostile(rng: random.Random) -> Any:
    return copy.deepcopy(rng.choice(HOSTILE_VALUES))   # never share (then grow) the table's lists


def _set_type(request: Request, rng: random.Random) -> str:
    slots = _slots(request.body)
    if not slots:       # an empty body; one that is not an object at all is a fatal mutation
        request.body = {rng.choice(["topics", "partitions", "x"]): _hostile(rng)}
        return "body filled"
    container, key = rng.choice(slots)
    value = _hostile(rng)
    container[key] = value
    return f"{key}={_short(value)}"


def _remove_field(request: Request, rng: random.Random) -> str:
    objects = [o for o in _containers(request.body, dict) if o]
    if not objects:
        return _set_type(request, rng)
    target = rng.choice(objects)
    key = rng.choice(list(target))
    del target[key]
    return f"-{key}"


def _add_field(request: Request, rng: random.Random) -> str:
    objects = _containers(request.body, dict) or [request.body]
    target = rng.choice(objects)
    if isinstance(target, dict):
        target[rng.choice(["extra", "topics", "partitions", "size", ""])] = _hostile(rng)
    return "+field"


def _extreme_number(request: Request, rng: random.Random) -> str:
    numeric = [(c, k) for c, k in _slots(request.body) if type(c[k]) in (int, float)]
    if not numeric:
        return _set_type(request, rng)
    container, key = rng.choice(numeric)
    value = rng.choice([-1, -2, 0, -2 ** 31 - 1, 2 ** 31, 2 ** 62, 2 ** 63, -2 ** 63 - 1, 10 ** 30, 1e300,
                        float("inf"), float("nan"), container[key] + 1, container[key] - 1,
                        container[key] * 1000])
    container[key] = value
    return f"{key}={_short(value)}"


def _huge_array(request: Request, rng: random.Random) -> str:
    lists = [c for c in _containers(request.body, list) if c]
    if not lists or rng.random() < 0.2:
        objects = _containers(request.body, dict) or [{}]
        target = rng.choice(objects)
        key = rng.choice(["partitions", "topics", "groups", "offsets", "replicas"])
        target[key] = [rng.choice(HOSTILE_VALUES[:12])] * rng.choice([1000, 20000, 50000])
        return f"{key}=[x]*{len(target[key])}"
    target = rng.choice(lists)
    size = len(_dump(target[0])) + 1
    count = min(rng.choice([100, 1000, 10000, 50000]), HUGE_BYTES // size)
    target.extend([target[0]] * count)
    return f"array*{count}"


def _deep_nesting(request: Request, rng: random.Random, allow_fatal: bool) -> tuple[str, bool]:
    depth = rng.choice([10, 100, 500] + ([5000, 50000] if allow_fatal else []))
    slots = [(c, k) for c, k in _slots(request.body) if c[k] != _DEEP]
    if request.deep:
        return f"nested {depth} (skipped)", False
    if slots:
        container, key = rng.choice(slots)
        container[key] = _DEEP
    else:
        request.body = {"x": _DEEP}
    request.deep = _nested(depth, rng)
    # Past Python's recursion limit (1000) the JSON cannot be parsed at all: the broker must close.
    return f"nested {depth}", depth >= 5000


def _huge_string(request: Request, rng: random.Random) -> str:
    text = rng.choice(["a", "\u00e9", "\ud83d\ude00", "/", "\x00"]) * rng.choice([1000, 100000, HUGE_BYTES // 8])
    objects = _containers(request.body, dict)
    strings = [(c, k) for c, k in _slots(request.body) if isinstance(c[k], str)]
    if strings and rng.random() < 0.7:
        container, key = rng.choice(strings)
        container[key] = text
    elif objects:
        rng.choice(objects)[text] = 1         # a huge key
    return f"string of {len(text)}"


def _api_header(request: Request, rng: random.Random) -> str:
    if rng.random() < 0.5:
        request.api_version = rng.choice([1, -1, 2 ** 15 - 1, -2 ** 15])
        return f"version={request.api_version}"
    request.api_key = rng.choice([*map(int, ApiKey), 4, 5, 6, 7, 17, 24, 99, -1, 2 ** 15 - 1, -2 ** 15])
    return f"api_key={request.api_key}"


def _payload(request: Request, rng: random.Random) -> str:
    """Damage record batches or the sizes that announce them."""
    if not request.payload:
        request.payload = [rng.randbytes(rng.choice([1, 61, 200]))]
        return "payload on a request without one"
    index = rng.randrange(len(request.payload))
    batch = bytearray(request.payload[index])
    kind = rng.choice(["flip", "flip", "crc", "length", "header", "header", "truncate", "extend", "garbage",
                       "concat", "size", "magic"])
    if len(batch) < HEADER_SIZE:   # already cut short by an earlier mutation
        kind = rng.choice(["extend", "concat", "size"])
    if kind == "flip":
        for _ in range(rng.randint(1, 4)):
            position = rng.randrange(len(batch))
            batch[position] ^= 1 << rng.randrange(8)
    elif kind == "crc":
        struct.pack_into(">I", batch, 17, rng.randrange(1 << 32))
    elif kind == "length":
        struct.pack_into(">i", batch, 8, rng.choice([-1, 0, 48, 49, len(batch) - 11, len(batch) - 13,
                                                     2 ** 31 - 1, -2 ** 31]))
    elif kind == "header":   # a field the CRC covers, with the CRC made right again
        header = BatchHeader.parse(batch)
        name = rng.choice(["attributes", "last_offset_delta", "record_count", "first_timestamp",
                           "max_timestamp", "producer_id", "producer_epoch", "base_sequence"])
        limit = 2 ** 15 if name in ("attributes", "producer_epoch") else 2 ** 31 if name in (
            "last_offset_delta", "record_count", "base_sequence") else 2 ** 63
        value = rng.choice([-1, 0, 1, 7, 8, 1000, limit - 1, -limit])
        batch[:HEADER_SIZE] = header._replace(**{name: value}).pack()
        _fix_crc(batch)
    elif kind == "truncate":
        del batch[rng.randrange(len(batch)):]
    elif kind == "extend":
        batch += rng.randbytes(rng.choice([1, 12, 61, 500]))
    elif kind == "garbage":  # a valid header and CRC over bytes that are no Arrow stream
        batch[HEADER_SIZE:] = rng.randbytes(len(batch) - HEADER_SIZE)
        _fix_crc(batch)
    elif kind == "concat":   # two batches announced as one
        batch += rng.choice(request.payload)
    elif kind == "magic":
        batch[16] = rng.choice([0, 2, 255])
    request.payload[index] = bytes(batch)
    if kind == "size" or rng.random() < 0.1:
        return f"payload {kind}, sizes {_resize(request, rng)}"
    _sync_sizes(request)
    return f"payload {kind}"


def _fix_crc(batch: bytearray) -> None:
    struct.pack_into(">I", batch, 17, crc32(bytes(batch[CRC_START:])))


def _sync_sizes(request: Request) -> None:
    """Keep the body's ``size`` fields in step with the payload pieces (when still present)."""
    entries = request.body.get("partitions") if isinstance(request.body, dict) else None
    if isinstance(entries, list) and len(entries) == len(request.payload):
        for entry, piece in zip(entries, request.payload):
            if isinstance(entry, dict) and "size" in entry:
                entry["size"] = len(piece)


def _resize(request: Request, rng: random.Random) -> str:
    """Make the announced sizes disagree with the payload."""
    _sync_sizes(request)
    entries = request.body.get("partitions") if isinstance(request.body, dict) else None
    sized = [e for e in entries if isinstance(e, dict) and "size" in e] if isinstance(entries, list) else []
    if sized:
        entry = rng.choice(sized)
        size = entry["size"] if type(entry["size"]) is int else 0
        entry["size"] = rng.choice([0, -1, size + 1, size - 1, 2 ** 31, len(b"".join(request.payload)) + 1])
        return f"size={entry['size']}"
    request.payload.append(rng.randbytes(7))
    return "payload longer than the sizes"


SOFT: tuple[Callable[[Request, random.Random], str], ...] = (
    _set_type, _set_type, _remove_field, _add_field, _extreme_number, _extreme_number, _api_header,
    _payload, _payload, _payload,
)
#: Mutations that make a body big (with repeated, shared elements): rare, and always the last one
#: applied, so a later mutation never multiplies through the repeats.
HUGE: tuple[Callable[[Request, random.Random], str], ...] = (_huge_array, _huge_string)


def mutate(request: Request, correlation_id: int, rng: random.Random, *, allow_fatal: bool) -> Mutant:
    """One hostile frame from a valid ``request`` (which is consumed). Fatal mutations only when
    ``allow_fatal``; a few frames pass unchanged, so valid requests keep flowing too."""
    roll = rng.random()
    if roll < 0.05:
        return Mutant(request.encode(correlation_id), False, "valid", request.silent)
    if allow_fatal and roll < 0.25:
        return _fatal(request, correlation_id, rng)
    applied, fatal = [], False
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        roll = rng.random()
        if roll < 0.03:
            what, deep = _deep_nesting(request, rng, allow_fatal)
            fatal = fatal or deep
        elif roll < 0.03 + HUGE_SHARE:
            applied.append(rng.choice(HUGE)(request, rng))
            break
        else:
            what = rng.choice(SOFT)(request, rng)
        applied.append(what)
    return Mutant(request.encode(correlation_id), fatal, ", ".join(applied), request.silent)


def _fatal(request: Request, correlation_id: int, rng: random.Random) -> Mutant:
    data = bytearray(request.encode(correlation_id))
    doc_start = FRAME_LENGTH.size + REQUEST_HEADER.size
    (doc_len,) = struct.unpack_from(">I", data, doc_start - 4)
    kind = rng.choice(["json-flip", "json-flip", "truncate", "length", "json-length", "oversized", "garbage",
                       "not-object", "bad-utf8", "huge-int"])
    if kind == "json-flip":
        for _ in range(rng.randint(1, 3)):
            position = doc_start + rng.randrange(max(doc_len, 1))
            data[position % len(data)] ^= 1 << rng.randrange(8)
    elif kind == "truncate":   # the length prefix agrees: a frame too short for its own header/JSON
        del data[rng.randrange(FRAME_LENGTH.size, doc_start + doc_len):]
        struct.pack_into(">I", data, 0, len(data) - FRAME_LENGTH.size)
    elif kind == "length":     # the prefix lies: the next frame (or nothing) completes this one
        struct.pack_into(">I", data, 0, max(0, len(data) - FRAME_LENGTH.size + rng.choice([-5, -1, 1, 100, 10000])))
    elif kind == "json-length":
        struct.pack_into(">I", data, doc_start - 4, rng.choice([0, doc_len - 1, doc_len + 1, 2 ** 32 - 1]))
    elif kind == "oversized":
        struct.pack_into(">I", data, 0, rng.choice([2 ** 31, 2 ** 32 - 1, 200 * 1024 * 1024]))
    elif kind == "garbage":
        size = rng.choice([0, 1, 11, 12, 100])
        data = bytearray(FRAME_LENGTH.pack(size) + rng.randbytes(size))
    elif kind in ("not-object", "bad-utf8", "huge-int"):
        doc = {"not-object": lambda: rng.choice([b"[]", b"null", b"\"x\"", b"1", b"", b"{", b"{}{}"]),
               "bad-utf8": lambda: b'{"topics":["\xff\xfe"]}',
               "huge-int": lambda: b'{"acks":1' + b"0" * 5000 + b"}"}[kind]()
        data = bytearray(frame(request.api_key, 0, correlation_id, doc, b""))
    return Mutant(bytes(data), True, f"fatal {kind}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
