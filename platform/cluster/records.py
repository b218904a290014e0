"""The JSON documents stored in ZooKeeper znodes, as typed values.

Each class converts to and from the bytes of its znode so no other module handles raw JSON.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

NO_LEADER = -1
#: The version of a partition state whose znode is not written yet (:meth:`PartitionState.initial`);
#: ZooKeeper numbers a written znode's versions from 0.
ABSENT_VERSION = -1
#: The version of "no state applied yet" on a replica: below every state it may be given.
NOT_APPLIED_VERSION = -2


def _dump(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class BrokerInfo:
    """A live broker's registration: where clients reach it. ``host``/``port`` is its ember
    listener; ``endpoints`` lists every advertised listener as (name, host, port), so Kafka
    clients are told the address of the listener they use."""
    id: int
    host: str
    port: int
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """(host, port) of the named listener, None if the broker has no such listener."""
        return next(((host, port) for name, host, port in self.endpoints if name == listener), None)

    def to_bytes(self) -> bytes:
        return _dump({"id": self.id, "host": self.host, "port": self.port,
                      "endpoints": [f"{name}://{host}:{port}" for name, host, port in self.endpoints]})

    @classmethod
    def from_bytes(cls, data: bytes) -> "BrokerInfo":
        doc = json.loads(data)
        endpoints = []
        for url in doc.get("endpoints", []):
            name, _, address = str(url).partition("://")
            host, _, port = address.rpartition(":")
            endpoints.append((name, host, int(port)))
        return cls(int(doc["id"]), str(doc["host"]), int(doc["port"]), tuple(endpoints))


@dataclass(frozen=True)
class Reassignment:
    """A partition moving to new replicas. During the move its assignment is the target replicas
    followed by the ones being removed (Kafka's order), so the target's first replica stays the
    preferred leader."""
    adding: list[int]
    removing: list[int]

    def target(self, assignment: list[int]) -> list[int]:
        return [b for b in assignment if b not in self.removing]

    def to_doc(self) -> dict[str, list[int]]:
        return {"adding": self.adding, "removing": self.removing}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "Reassignment":
        return cls([int(b) for b in doc["adding"]], [int(b) for b in doc["removing"]])


@dataclass(frozen=True)
class TopicRecord:
    """A topic's identity, replica assignment ``{partition: [broker ids]}``, config overrides and
    partitions being reassigned.

    ``topic_id`` tells a re-created topic from an older one of the same name, so a broker that
    was down while a topic was deleted and re-created never serves the old data.
    """
    topic_id: str
    assignment: dict[int, list[int]]
    config: dict[str, str] = field(default_factory=dict)
    reassignments: dict[int, Reassignment] = field(default_factory=dict)
    #: The topic is being deleted chunk by chunk (more state znodes than one ZooKeeper transaction
    #: deletes, :mod:`ember.cluster.topic_admin`), or (left by an older ember) its partition nodes
    #: were being written: no broker serves it.
    creating: bool = False
    deleting: bool = False

    @property
    def complete(self) -> bool:
        return not (self.creating or self.deleting)

    def to_bytes(self) -> bytes:
        doc: dict[str, Any] = {"topic_id": self.topic_id,
                               "partitions": {str(p): r for p, r in self.assignment.items()},
                               "config": self.config}
        if self.reassignments:
            doc["reassigning"] = {str(p): r.to_doc() for p, r in self.reassignments.items()}
        if self.creating:
            doc["creating"] = True
        if self.deleting:
            doc["deleting"] = True
        return _dump(doc)

    @classmethod
    def from_bytes(cls, data: bytes) -> "TopicRecord":
        doc = json.loads(data)
        assignment = {int(p): [int(b) for b in r] for p, r in doc["partitions"].items()}
        reassignments = {int(p): Reassignment.from_doc(r) for p, r in doc.get("reassigning", {}).items()}
        return cls(str(doc["topic_id"]), dict(sorted(assignment.items())),
                   {str(k): str(v) for k, v in doc.get("config", {}).items()}, dict(sorted(reassignments.items())),
                   bool(doc.get("creating", False)), bool(doc.get("deleting", False)))


@dataclass(frozen=True)
class PartitionState:
    """Leadership of one partition. ``version`` is the znode version it was read at (for CAS)."""
    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int
    version: int = -1
    #: The znode's creation zxid (-1: unknown): a re-created topic's state node has a larger one,
    #: so a read of the old node arriving late never passes for newer (versions restart at 0).
    created_zxid: int = field(default=-1, compare=False)

    def to_bytes(self) -> bytes:
        return _dump({"leader": self.leader, "leader_epoch": self.leader_epoch,
                      "isr": self.isr, "controller_epoch": self.controller_epoch})

    @classmethod
    def initial(cls, replicas: list[int]) -> "PartitionState":
        """The state of a partition whose state znode is not written yet: led by its first
        replica at epoch 0, every replica in sync (:mod:`ember.cluster.partition_state_store`)."""
        return cls(replicas[0], 0, list(replicas), 0, ABSENT_VERSION)

    @classmethod
    def from_bytes(cls, data: bytes, version: int = -1, created_zxid: int = -1) -> "PartitionState":
        doc = json.loads(data)
        return cls(int(doc["leader"]), int(doc["leader_epoch"]), [int(b) for b in doc["isr"]],
                   int(doc["controller_epoch"]), version, created_zxid)

    def newer_than(self, other: "PartitionState") -> bool:
        """Read from a later incarnation of the znode, or a later version of the same one."""
        return (self.created_zxid, self.version) > (other.created_zxid, other.version)


@dataclass(frozen=True)
class ControllerInfo:
    """Content of the ephemeral ``/controller`` znode."""
    broker_id: int
    epoch: int

    def to_bytes(self) -> bytes:
        return _dump({"broker_id": self.broker_id, "epoch": self.epoch})

    @classmethod
    def from_bytes(cls, data: bytes) -> "ControllerInfo":
        doc = json.loads(data)
        return cls(int(doc["broker_id"]), int(doc["epoch"]))


@dataclass(frozen=True, order=True)
class OfflineReplica:
    """A replica whose log a disk failure took offline on the broker that hosts it. ``topic_id``
    tells it from a replica of a re-created topic of the same name."""
    topic: str
    partition: int
    topic_id: str


@dataclass(frozen=True)
class OfflineReplicas:
    """Content of ``/brokers/offline_replicas/<id>``: the broker's replicas with an offline log
    (Kafka's log-dir event notification, per partition)."""
    broker: int
    replicas: tuple[OfflineReplica, ...]

    def to_bytes(self) -> bytes:
        return _dump({"version": 1, "broker": self.broker,
                      "partitions": [{"topic": r.topic, "partition": r.partition, "topic_id": r.topic_id}
                                     for r in sorted(self.replicas)]})

    @classmethod
    def from_bytes(cls, data: bytes) -> "OfflineReplicas":
        doc = json.loads(data)
        return cls(int(doc["broker"]), tuple(OfflineReplica(str(p["topic"]), int(p["partition"]),
                                                            str(p.get("topic_id", "")))
                                             for p in doc.get("partitions", [])))
