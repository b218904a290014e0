"""Pure cluster-metadata rules: replica assignment and the controller's leader election."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from ember.cluster.assignment import assign_replicas
from ember.cluster.controller import next_state
from ember.cluster.records import NO_LEADER, PartitionState, TopicRecord
from ember.errors import InvalidPartitions, InvalidReplicationFactor


@pytest.mark.parametrize("brokers, partitions, rf", [([1, 2, 3], 6, 3), ([1, 2, 3, 4, 5], 10, 2), ([7], 4, 1)])
def test_assignment_spreads_leaders_and_replicas_evenly(brokers, partitions, rf):
    assignment = assign_replicas(brokers, partitions, rf, random.Random(42))
    assert sorted(assignment) == list(range(partitions))
    for replicas in assignment.values():
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= set(brokers)
    leaders = Counter(replicas[0] for replicas in assignment.values())
    assert max(leaders.values()) - min(leaders.values()) <= 1 and len(leaders) == min(len(brokers), partitions)
    load = Counter(b for replicas in assignment.values() for b in replicas)
    assert max(load.values()) - min(load.values()) <= 1


def test_assignment_rejects_impossible_requests():
    with pytest.raises(InvalidReplicationFactor, match="larger than the 2 live broker"):
        assign_replicas([1, 2], 1, 3)
    with pytest.raises(InvalidPartitions):
        assign_replicas([1, 2], 0, 1)
    with pytest.raises(InvalidReplicationFactor):
        assign_replicas([1, 2], 1, 0)


def test_leader_moves_to_first_live_isr_member_with_bumped_epoch():
    state = PartitionState(1, 4, [1, 2, 3], 1)
    moved = next_state(state, [1, 2, 3], live={2, 3}, controller_epoch=2)
    assert moved == PartitionState(2, 5, [2, 3], 2)


def test_dead_follower_leaves_isr_without_epoch_bump():
    state = PartitionState(1, 4, [1, 2, 3], 1)
    assert next_state(state, [1, 2, 3], live={1, 2}, controller_epoch=2) == PartitionState(1, 4, [1, 2], 2)
    assert next_state(state, [1, 2, 3], live={1, 2, 3}, controller_epoch=2) is None


def test_no_unclean_election_and_revival_from_last_isr():
    state = PartitionState(1, 4, [1], 1)
    offline = next_state(state, [1, 2], live={2}, controller_epoch=2)
    assert offline == PartitionState(NO_LEADER, 5, [1], 2)       # 2 is not in the ISR
    assert next_state(offline, [1, 2], live={2}, controller_epoch=2) is None
    assert next_state(offline, [1, 2], live={1, 2}, controller_epoch=3) == PartitionState(1, 6, [1], 3)


def test_znode_documents_round_trip():
    record = TopicRecord("abc", {0: [1, 2], 1: [2, 1]}, {"retention.ms": "5"})
    assert TopicRecord.from_bytes(record.to_bytes()) == record
    state = PartitionState(2, 3, [2, 1], 7)
    assert PartitionState.from_bytes(state.to_bytes(), version=4) == PartitionState(2, 3, [2, 1], 7, 4)
