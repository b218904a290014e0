"""Partition assignors: who in a consumer group reads which partitions.

The coordinator runs them (see docs/groups.md: the assignment is computed broker-side, so every
member of a generation gets a consistent answer without a leader round trip). Each assignor takes
the members' subscriptions, the partition count of every subscribed topic and the previous
generation's assignment (only ``sticky`` uses it), and returns every member's partitions; a
member with nothing to do gets an empty list.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

from ember.wire.types import TopicPartition

Subscriptions = Mapping[str, Sequence[str]]        # member id -> subscribed topics
PartitionCounts = Mapping[str, int]                # topic -> partition count
Assignment = dict[str, list[TopicPartition]]       # member id -> partitions
Assignor = Callable[[Subscriptions, PartitionCounts, Mapping[str, Sequence[TopicPartition]]], Assignment]


def _subscribers(subscriptions: Subscriptions, counts: PartitionCounts) -> dict[str, list[str]]:
    """Topic -> sorted member ids subscribed to it (topics that do not exist are skipped)."""
    by_topic: dict[str, list[str]] = {}
    for member in sorted(subscriptions):
        for topic in dict.fromkeys(subscriptions[member]):
            if counts.get(topic, 0) > 0:
                by_topic.setdefault(topic, []).append(member)
    return by_topic


def range_assign(subscriptions: Subscriptions, counts: PartitionCounts,
                 _previous: Mapping[str, Sequence[TopicPartition]] = {}) -> Assignment:
    """Kafka's RangeAssignor: per topic, consecutive partition ranges to members in id order;
    the first ``count % members`` members get one extra."""
    out: Assignment = {member: [] for member in subscriptions}
    for topic, members in sorted(_subscribers(subscriptions, counts).items()):
        share, extra = divmod(counts[topic], len(members))
        start = 0
        for i, member in enumerate(members):
            size = share + (1 if i < extra else 0)
            out[member] += [TopicPartition(topic, p) for p in range(start, start + size)]
            start += size
    return out


def roundrobin_assign(subscriptions: Subscriptions, counts: PartitionCounts,
                      _previous: Mapping[str, Sequence[TopicPartition]] = {}) -> Assignment:
    """Kafka's RoundRobinAssignor: all partitions in (topic, partition) order dealt to members in
    id order, skipping members not subscribed to the partition's topic."""
    out: Assignment = {member: [] for member in subscriptions}
    members = sorted(subscriptions)
    if not members:
        return out
    subscribers = {topic: set(ms) for topic, ms in _subscribers(subscriptions, counts).items()}
    turn = 0
    for topic in sorted(subscribers):
        for partition in range(counts[topic]):
            while members[turn % len(members)] not in subscribers[topic]:
                turn += 1
            out[members[turn % len(members)]].append(TopicPartition(topic, partition))
            turn += 1
    return out


def sticky_assign(subscriptions: Subscriptions, counts: PartitionCounts,
                  previous: Mapping[str, Sequence[TopicPartition]] = {}) -> Assignment:
    """Balanced like round robin, but a member keeps the partitions it had (up to its fair share),
    so a rebalance moves as few partitions as possible (Kafka's StickyAssignor, simplified).

    Members end up at most one partition apart when they share subscriptions."""
    subscribers = {topic: set(ms) for topic, ms in _subscribers(subscriptions, counts).items()}
    partitions = [TopicPartition(t, p) for t in sorted(subscribers) for p in range(counts[t])]
    out: Assignment = {member: [] for member in subscriptions}
    if not out:
        return out
    quota = math.ceil(len(partitions) / len(out))
    valid = set(partitions)
    owned: set[TopicPartition] = set()
    for member in sorted(out):
        for tp in previous.get(member, ()):
            tp = TopicPartition(*tp)
            if (tp in valid and tp not in owned and member in subscribers[tp.topic]
                    and len(out[member]) < quota):
                out[member].append(tp)
                owned.add(tp)
    for tp in partitions:
        if tp not in owned:
            out[min(subscribers[tp.topic], key=lambda m: (len(out[m]), m))].append(tp)
    _level(out, subscribers)
    for member in out:
        out[member].sort()
    return out


def _level(out: Assignment, subscribers: Mapping[str, set[str]]) -> None:
    """Move single partitions from the fullest member to an eligible one holding two fewer,
    until no such move exists (each move lowers the spread, so this ends)."""
    moved = True
    while moved:
        moved = False
        for giver in sorted(out, key=lambda m: (-len(out[m]), m)):
            for tp in reversed(out[giver]):
                taker = min(subscribers[tp.topic], key=lambda m: (len(out[m]), m))
                if len(out[giver]) - len(out[taker]) >= 2:
                    out[giver].remove(tp)
                    out[taker].append(tp)
                    moved = True
                    break
            if moved:
                break


ASSIGNORS: dict[str, Assignor] = {"range": range_assign, "roundrobin": roundrobin_assign,
                                  "sticky": sticky_assign}
