"""A broker's liveness and readiness, as its metrics endpoint answers them.

*Live*: the event loop answers (the endpoint runs on it, so a wedged loop fails the check).
*Ready*: the broker may take traffic: its ZooKeeper session is connected, it is registered in
``/brokers/ids``, it has opened every partition assigned to it and applied the newest state its
ZooKeeper watches delivered for each (caught up with the controller's decisions), and every
partition the metadata names it leader of is open and led here (none it leads is offline), and no
log of its partitions is offline after a disk failure (``Log.offline``; the controller has moved
those partitions away, and only a restart on a working disk brings them back).
``ember cluster status`` and load balancers use readiness; liveness only tells a supervisor to
restart.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Protocol

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
                    partitions: Mapping[tuple[str, int], "Partition"] | None) -> Readiness:
    """Readiness of broker ``me`` from its ZooKeeper session state (kazoo's ``CONNECTED``...),
    metadata cache and open partitions (None while the broker is still starting)."""
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
            if me.id not in replicas:
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
        reasons.append(_named("logs offline after a disk failure (restart the broker on a working disk)", failed))
    return Readiness(not reasons, tuple(reasons))
