"""Replica assignment for new topics, Kafka's way: round robin over the sorted live brokers from a
random start, followers shifted so that leaders and followers both spread evenly."""
from __future__ import annotations

import random
from typing import Collection, Mapping, Sequence

from ember.errors import InvalidPartitions, InvalidReplicaAssignment, InvalidReplicationFactor


def assign_replicas(brokers: Sequence[int], partitions: int, replication_factor: int,
                    rng: random.Random | None = None) -> dict[int, list[int]]:
    """``{partition: [replica broker ids]}``; the first replica is the preferred leader."""
    if partitions < 1:
        raise InvalidPartitions(f"a topic needs at least 1 partition, got {partitions}")
    if replication_factor < 1:
        raise InvalidReplicationFactor(f"replication factor must be at least 1, got {replication_factor}")
    ids = sorted(brokers)
    n = len(ids)
    if replication_factor > n:
        raise InvalidReplicationFactor(
            f"replication factor {replication_factor} is larger than the {n} live broker(s) {ids}")
    rng = rng or random.Random()
    start = rng.randrange(n)
    shift = rng.randrange(n)
    result: dict[int, list[int]] = {}
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        result[p] = replicas
    return result


def check_replicas(what: str, replicas: Sequence[int], live: Collection[int]) -> None:
    """A replica list must be non-empty, distinct and name registered brokers."""
    if not replicas or len(set(replicas)) != len(replicas):
        raise InvalidReplicaAssignment(f"{what}: replicas {list(replicas)} must be distinct and not empty")
    missing = [b for b in replicas if b not in live]
    if missing:
        raise InvalidReplicaAssignment(f"{what}: broker(s) {missing} are not registered")


def check_assignment(topic: str, assignment: Mapping[int, Sequence[int]], live: Collection[int]) -> None:
    """A manual assignment of a new topic: partitions 0..n-1, each with as many valid replicas."""
    if not assignment or sorted(assignment) != list(range(len(assignment))):
        raise InvalidReplicaAssignment(f"{topic}: partitions {sorted(assignment)} must be numbered 0..n-1")
    for index, replicas in assignment.items():
        check_replicas(f"{topic}-{index}", replicas, live)
    if len({len(replicas) for replicas in assignment.values()}) > 1:
        raise InvalidReplicaAssignment(f"{topic}: every partition needs the same number of replicas")
