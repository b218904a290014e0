"""A broker's liveness and readiness, as its metrics endpoint answers them.

*Live*: the event loop answers (the endpoint runs on it, so a wedged loop fails the check).
*Ready*: the broker may take traffic: its ZooKeeper session is connected, it is registered in
``/brokers/ids``, it has opened every partition assigned to it and applied the newest state its
ZooKeeper watches delivered for each (caught up with the controller's decisions), and every
partition the metadata names it leader of is open and led here (none it leads is offline), and no
log of its partitions is offline after a disk failure (``Log.offline``, or on a log directory
that failed at start-up; the controller has moved those partitions away until the broker reopens
them, once their disk works again, or restarts with the directory working).
``ember cluster status`` and load balancers use readiness; liveness only tells a supervisor to
restart.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Collection, Mapping, Protocol

from ember.cluster.records import BrokerInfo

if TYPE_CHECKING:
    from ember.cluster.metadata_cache import TopicMetadata
    from ember.ingest.partition import Partition

#: Partitions named per failed check; the rest are counted.
SHOWN = 5


class MetadataView(Protocol):
    def brokers(self) -> dict[int, BrokerInfo]: ...
    def topics(self) -> dict[str, "TopicMetadata"]: ...


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reasons: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"ready": self.ready, "reasons": list(self.reasons)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Readiness":
        return cls(bool(doc["ready"]), tuple(doc.get("reasons", ())))


def _named(what: str, names: list[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return f"{what}: {', '.join(names[:SHOWN])}{more}"


def _log_offline(local: "Partition") -> bool:
    """True when a disk failure took the partition's log offline (a stand-in without a log: no)."""
    log_ = getattr(local, "log", None)
    return bool(log_ is not None and log_.offline)


def check_readiness(me: BrokerInfo, session_state: str, cache: MetadataView,
                    partitions: Mapping[tuple[str, int], "Partition"] | None,
                    in_offline_dirs: Collection[tuple[str, int]] = ()) -> Readiness:
    """Readiness of broker ``me`` from its ZooKeeper session state (kazoo's ``CONNECTED``...),
    metadata cache, open partitions (None while the broker is still starting) and the partitions
    it cannot open because their log directory failed at start-up."""
    if partitions is None:
        return Readiness(False, ("starting up: logs not open yet",))
    reasons = []
    if session_state != "CONNECTED":
        reasons.append(f"ZooKeeper session is {session_state}")
    if cache.brokers().get(me.id) != me:
        reasons.append(f"broker {me.id} is not registered in ZooKeeper as {me.host}:{me.port}")
    behind, offline = [], []
    for name, meta in sorted(cache.topics().items()):
        for index, replicas in sorted(meta.partitions.items()):
            if me.id not in replicas or (name, index) in in_offline_dirs:
                continue
            local = partitions.get((name, index))
            state = meta.states.get(index)
            if local is None or (state is not None and local.state.version < state.version):
                behind.append(f"{name}-{index}")
            if state is not None and state.leader == me.id and (local is None or not local.is_leader):
                offline.append(f"{name}-{index}")
    if behind:
        reasons.append(_named("partition states from ZooKeeper not applied yet", behind))
    if offline:
        reasons.append(_named("partitions led here but not served yet", offline))
    failed = [f"{name}-{index}" for (name, index), local in sorted(partitions.items()) if _log_offline(local)]
    if failed:
        reasons.append(_named("logs offline after a disk failure (reopened once the disk works again)", failed))
    if in_offline_dirs:
        reasons.append(_named("logs on an offline log directory (fix the disk, then restart the broker)",
                              [f"{name}-{index}" for name, index in sorted(in_offline_dirs)]))
    return Readiness(not reasons, tuple(reasons))
