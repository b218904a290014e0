"""Who should lead a partition: the controller's election rules, as pure functions.

*Failover*: the first live ISR member in replica order leads, with the leader epoch bumped. With
none alive, a topic with ``unclean.leader.election.enable`` gets the first live replica (out of
sync: records it lacks are lost) with ISR = [it]; otherwise the partition stays offline and keeps
its last ISR, so one of those brokers can lead again when it returns.

*Preferred leader*: the first replica of the assignment. Leadership moves back to it once it is
in the ISR — on demand (ElectLeaders), or automatically when too many of a broker's preferred
partitions are led elsewhere (``leader.imbalance.per.broker.percentage``).

*Offline replicas*: a replica whose log a disk failure took offline (reported by its broker in
``/brokers/offline_replicas``) is not live for its partition, although its broker is
(:func:`partition_live`): the rules above elect from the rest of the ISR and drop it from the ISR.

*Unclean on demand* (ElectLeaders with election type 1): a partition without a live leader gets
one by the failover rule with unclean election allowed, whatever the topic's config says.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Collection, Hashable, Iterable, Mapping, TypeVar

from ember.cluster.records import NO_LEADER, OfflineReplica, PartitionState
from ember.errors import ElectionNotNeeded, EligibleLeadersNotAvailable, PreferredLeaderNotAvailable

K = TypeVar("K", bound=Hashable)


def offline_by_replica(reports: Mapping[int, Iterable[OfflineReplica]]) -> dict[OfflineReplica, set[int]]:
    """The brokers' offline-replica reports (broker id → its offline replicas) turned around:
    replica → brokers whose copy of it is offline."""
    brokers: dict[OfflineReplica, set[int]] = defaultdict(set)
    for broker, replicas in reports.items():
        for replica in replicas:
            brokers[replica].add(broker)
    return dict(brokers)


def partition_live(live: Collection[int], offline: Mapping[OfflineReplica, Collection[int]], topic: str,
                   topic_id: str, partition: int) -> set[int]:
    """The brokers that are live *for this partition*: registered, and not reporting its log
    offline (a report of another topic id is of an older topic of that name and is ignored)."""
    down = offline.get(OfflineReplica(topic, partition, topic_id), ())
    return {b for b in live if b not in down}


def failover_state(state: PartitionState, replicas: list[int], live: Collection[int], controller_epoch: int,
                   unclean: bool = False) -> PartitionState | None:
    """The state a partition should move to given the live brokers, or None if it is fine."""
    alive_isr = [b for b in state.isr if b in live]
    if state.leader in live:
        if alive_isr == state.isr:
            return None
        return PartitionState(state.leader, state.leader_epoch, alive_isr, controller_epoch)
    candidates = [b for b in replicas if b in alive_isr]
    if candidates:
        return PartitionState(candidates[0], state.leader_epoch + 1, alive_isr, controller_epoch)
    out_of_sync = [b for b in replicas if b in live]
    if unclean and out_of_sync:
        return PartitionState(out_of_sync[0], state.leader_epoch + 1, [out_of_sync[0]], controller_epoch)
    if state.leader == NO_LEADER:
        return None
    # Keep the last ISR so one of its members can lead again when it comes back.
    return PartitionState(NO_LEADER, state.leader_epoch + 1, state.isr, controller_epoch)


def is_unclean(before: PartitionState, after: PartitionState) -> bool:
    """True when ``after`` hands leadership to a replica that was not in sync."""
    return after.leader != NO_LEADER and after.leader != before.leader and after.leader not in before.isr


def preferred_state(state: PartitionState, replicas: list[int], live: Collection[int],
                    controller_epoch: int) -> PartitionState:
    """Leadership moved to the preferred replica; raises ElectionNotNeeded when it leads already,
    PreferredLeaderNotAvailable when it is down or not in the ISR (still catching up)."""
    preferred = replicas[0]
    if state.leader == preferred and preferred in live:
        raise ElectionNotNeeded(f"its preferred replica {preferred} leads already")
    if preferred not in live:
        raise PreferredLeaderNotAvailable(f"its preferred replica, broker {preferred}, is not registered")
    if preferred not in state.isr:
        raise PreferredLeaderNotAvailable(f"its preferred replica {preferred} is not in the ISR {state.isr} "
                                          f"(still catching up)")
    return PartitionState(preferred, state.leader_epoch + 1, state.isr, controller_epoch)


def unclean_state(state: PartitionState, replicas: list[int], live: Collection[int],
                  controller_epoch: int) -> PartitionState:
    """A leader for a partition that has none alive: the first live ISR member, else the first
    live replica (out of sync: records it lacks are lost). Raises ElectionNotNeeded when a live
    broker leads, EligibleLeadersNotAvailable when no replica is alive."""
    if state.leader in live:
        raise ElectionNotNeeded(f"broker {state.leader} leads it and is alive")
    target = failover_state(state, replicas, live, controller_epoch, unclean=True)
    if target is None or target.leader == NO_LEADER:
        raise EligibleLeadersNotAvailable(f"none of its replicas {replicas} is alive")
    return target


def imbalanced_partitions(leadership: Mapping[K, tuple[list[int], int]], percentage: int) -> list[K]:
    """Partitions to move back to their preferred replica: every partition not led by its
    preferred replica, for each broker whose share of such partitions (among those it is
    preferred for) exceeds ``percentage`` (Kafka's rule). ``leadership`` maps a partition to
    (replicas, leader)."""
    preferred: dict[int, list[K]] = defaultdict(list)
    for key, (replicas, _) in leadership.items():
        preferred[replicas[0]].append(key)
    moves: list[K] = []
    for keys in preferred.values():
        elsewhere = [k for k in keys if leadership[k][1] != leadership[k][0][0]]
        if len(elsewhere) * 100 > percentage * len(keys):
            moves += elsewhere
    return moves


def offline_reason(partition: str, state: PartitionState | None, replicas: list[int], live: Collection[int],
                   unclean: bool) -> str:
    """Why ``partition`` has no serving leader, for the LEADER_NOT_AVAILABLE a client sees."""
    if state is None:
        return f"{partition} has no leader yet: the topic is being created"
    if state.leader != NO_LEADER and state.leader not in live:
        return f"{partition}: leader broker {state.leader} is not registered; a new leader is being elected"
    if any(b in live for b in state.isr) or (unclean and any(b in live for b in replicas)):
        return f"{partition} has no leader right now: an election is in progress"
    if not unclean:
        return (f"{partition} is offline: no in-sync replica is alive (last ISR {state.isr}) and "
                f"unclean.leader.election.enable is false; restart broker(s) {state.isr}, or enable unclean "
                f"election to let an out-of-sync replica lead (acknowledged records may be lost)")
    return f"{partition} is offline: none of its replicas {replicas} is alive"
