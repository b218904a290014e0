"""Pure cluster-metadata rules: replica assignment, the controller's leader elections (failover,
unclean, preferred, imbalance) and reassignment steps."""
from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.cluster.assignment import assign_replicas
from ember.cluster.election import (
    failover_state,
    imbalanced_partitions,
    is_unclean,
    offline_reason,
    preferred_state,
    unclean_state,
)
from ember.cluster.metadata_cache import MetadataCache, TopicMetadata
from ember.cluster.reassignment import (
    cancel_reassignment,
    completion_state,
    finish_reassignment,
    reassignment_complete,
    reassignment_ready,
    start_reassignment,
)
from ember.cluster.records import ABSENT_VERSION, NO_LEADER, PartitionState, Reassignment, TopicRecord
from ember.errors import (
    ElectionNotNeeded,
    EligibleLeadersNotAvailable,
    InvalidPartitions,
    InvalidReplicaAssignment,
    InvalidReplicationFactor,
    NoReassignmentInProgress,
    PreferredLeaderNotAvailable,
    ReassignmentInProgress,
)


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
    moved = failover_state(state, [1, 2, 3], live={2, 3}, controller_epoch=2)
    assert moved == PartitionState(2, 5, [2, 3], 2)


def test_dead_follower_leaves_isr_without_epoch_bump():
    state = PartitionState(1, 4, [1, 2, 3], 1)
    assert failover_state(state, [1, 2, 3], live={1, 2}, controller_epoch=2) == PartitionState(1, 4, [1, 2], 2)
    assert failover_state(state, [1, 2, 3], live={1, 2, 3}, controller_epoch=2) is None


def test_no_unclean_election_and_revival_from_last_isr():
    state = PartitionState(1, 4, [1], 1)
    offline = failover_state(state, [1, 2], live={2}, controller_epoch=2)
    assert offline == PartitionState(NO_LEADER, 5, [1], 2)       # 2 is not in the ISR
    assert failover_state(offline, [1, 2], live={2}, controller_epoch=2) is None
    assert failover_state(offline, [1, 2], live={1, 2}, controller_epoch=3) == PartitionState(1, 6, [1], 3)


def test_znode_documents_round_trip():
    record = TopicRecord("abc", {0: [1, 2], 1: [2, 1]}, {"retention.ms": "5"})
    assert TopicRecord.from_bytes(record.to_bytes()) == record
    moving = TopicRecord("abc", {0: [2, 3, 1]}, {}, {0: Reassignment([3], [1])})
    assert TopicRecord.from_bytes(moving.to_bytes()) == moving
    state = PartitionState(2, 3, [2, 1], 7)
    assert PartitionState.from_bytes(state.to_bytes(), version=4) == PartitionState(2, 3, [2, 1], 7, 4)


def test_unclean_election_only_when_the_topic_allows_it():
    state = PartitionState(1, 4, [1], 1)
    assert failover_state(state, [1, 2, 3], live={3, 2}, controller_epoch=2, unclean=False) == \
        PartitionState(NO_LEADER, 5, [1], 2)
    unclean = failover_state(state, [1, 2, 3], live={3, 2}, controller_epoch=2, unclean=True)
    assert unclean == PartitionState(2, 5, [2], 2) and is_unclean(state, unclean)
    offline = PartitionState(NO_LEADER, 5, [1], 2)
    assert failover_state(offline, [1, 2], live={2}, controller_epoch=2, unclean=True) == PartitionState(2, 6, [2], 2)
    assert failover_state(offline, [1, 2], live=set(), controller_epoch=2, unclean=True) is None
    # A clean failover is never called unclean.
    assert not is_unclean(state, PartitionState(1, 4, [1], 2))


def test_offline_reason_names_the_partition_and_the_cause():
    offline = PartitionState(NO_LEADER, 5, [1], 2)
    reason = offline_reason("t-0", offline, [1, 2], live={2}, unclean=False)
    assert "t-0 is offline" in reason and "[1]" in reason and "unclean.leader.election.enable is false" in reason
    assert "none of its replicas" in offline_reason("t-0", offline, [1, 2], live=set(), unclean=True)
    assert "election is in progress" in offline_reason("t-0", offline, [1, 2], live={1}, unclean=False)
    assert "not registered" in offline_reason("t-0", PartitionState(3, 1, [3], 1), [3], live={1}, unclean=False)


def test_preferred_leader_election_rules():
    state = PartitionState(2, 4, [2, 1], 1)
    assert preferred_state(state, [1, 2], live={1, 2}, controller_epoch=3) == PartitionState(1, 5, [2, 1], 3)
    with pytest.raises(ElectionNotNeeded):
        preferred_state(PartitionState(1, 4, [1, 2], 1), [1, 2], live={1, 2}, controller_epoch=3)
    with pytest.raises(PreferredLeaderNotAvailable, match="not in the ISR"):
        preferred_state(PartitionState(2, 4, [2], 1), [1, 2], live={1, 2}, controller_epoch=3)
    with pytest.raises(PreferredLeaderNotAvailable, match="not registered"):
        preferred_state(state, [1, 2], live={2}, controller_epoch=3)


def test_unclean_election_on_demand_prefers_a_live_isr_member_and_needs_a_dead_leader():
    offline = PartitionState(NO_LEADER, 5, [1], 2)
    assert unclean_state(offline, [1, 2, 3], live={2, 3}, controller_epoch=3) == PartitionState(2, 6, [2], 3)
    # A live in-sync replica wins over an out-of-sync one listed before it: that election is clean.
    assert unclean_state(PartitionState(1, 5, [1, 3], 2), [1, 2, 3], live={2, 3}, controller_epoch=3) == \
        PartitionState(3, 6, [3], 3)
    with pytest.raises(ElectionNotNeeded, match="broker 1 leads it"):
        unclean_state(PartitionState(1, 5, [1], 2), [1, 2], live={1, 2}, controller_epoch=3)
    with pytest.raises(EligibleLeadersNotAvailable, match=r"none of its replicas \[1, 2\]"):
        unclean_state(offline, [1, 2], live={3}, controller_epoch=3)


def test_imbalance_moves_partitions_of_brokers_over_the_threshold():
    # Broker 1 is preferred for 4 partitions and leads 3 (25% elsewhere); broker 2 leads all 10 of its own.
    leadership = {("a", p): ([1, 2], 1 if p < 3 else 2) for p in range(4)}
    leadership.update({("b", p): ([2, 1], 2) for p in range(10)})
    assert imbalanced_partitions(leadership, 10) == [("a", 3)]
    assert imbalanced_partitions(leadership, 25) == []     # not above the threshold


def test_reassignment_steps():
    record = TopicRecord("id", {0: [1, 2], 1: [2, 3]})
    moving = start_reassignment("t", record, 0, [2, 3], live={1, 2, 3})
    assert moving.assignment[0] == [2, 3, 1] and moving.reassignments == {0: Reassignment([3], [1])}
    assert moving.reassignments[0].target(moving.assignment[0]) == [2, 3]
    with pytest.raises(ReassignmentInProgress):
        start_reassignment("t", moving, 0, [3, 1], live={1, 2, 3})
    for bad in ([], [2, 2], [2, 7]):
        with pytest.raises(InvalidReplicaAssignment):
            start_reassignment("t", record, 1, bad, live={1, 2, 3})
    # A reordering only changes the preferred leader, at once.
    assert start_reassignment("t", record, 1, [3, 2], live={1, 2, 3}) == TopicRecord("id", {0: [1, 2], 1: [3, 2]})

    # Not ready until 3 is in sync; then the leader (1, being removed) hands over to 2.
    catching_up = PartitionState(1, 4, [1, 2], 1)
    assert not reassignment_ready(catching_up, [2, 3], live={1, 2, 3})
    caught_up = PartitionState(1, 4, [1, 2, 3], 1)
    assert reassignment_ready(caught_up, [2, 3], live={1, 2, 3})
    done = completion_state(caught_up, [2, 3], live={1, 2, 3}, controller_epoch=2)
    assert done == PartitionState(2, 5, [2, 3], 2) and reassignment_complete(done, [2, 3])
    # A leader that stays keeps its epoch; only the ISR shrinks.
    assert completion_state(PartitionState(2, 4, [1, 2, 3], 1), [2, 3], {1, 2, 3}, 2) == PartitionState(2, 4, [2, 3], 2)
    assert completion_state(done, [2, 3], {1, 2, 3}, 2) is None
    assert finish_reassignment(moving, 0) == TopicRecord("id", {0: [2, 3], 1: [2, 3]})


def test_reassignment_refuses_a_new_replication_factor_when_told_to():
    record = TopicRecord("id", {0: [1, 2]})
    with pytest.raises(InvalidReplicationFactor, match="replication factor 2"):
        start_reassignment("t", record, 0, [1, 2, 3], live={1, 2, 3}, allow_replication_factor_change=False)
    assert start_reassignment("t", record, 0, [3, 2], live={1, 2, 3}, allow_replication_factor_change=False) \
        .reassignments == {0: Reassignment([3], [1])}


def test_cancelling_turns_a_move_back_to_the_original_replicas():
    record = TopicRecord("id", {0: [1, 2], 1: [2, 3]})
    moving = start_reassignment("t", record, 0, [2, 3], live={1, 2, 3})      # assignment [2, 3, 1]
    back = cancel_reassignment("t", moving, 0)
    # 3 was being added: now it is removed, through the same steps; 1 and 2 are the target again.
    assert back.assignment[0] == [2, 1, 3] and back.reassignments == {0: Reassignment([], [3])}
    assert back.reassignments[0].target(back.assignment[0]) == [2, 1]
    assert finish_reassignment(back, 0).assignment[0] == [2, 1]
    # A move that only removed replicas is undone at once.
    shrinking = start_reassignment("t", record, 1, [2], live={1, 2, 3})
    assert cancel_reassignment("t", shrinking, 1) == TopicRecord("id", {0: [1, 2], 1: [2, 3]})
    with pytest.raises(NoReassignmentInProgress):
        cancel_reassignment("t", record, 0)


def test_clients_are_shown_a_partitions_initial_state_until_its_state_is_read() -> None:
    """A new topic's partitions have no state znode: until the topic's states are listed and
    read, clients see the initial state its record implies."""
    record = TopicRecord("id", {0: [2, 3, 1], 1: [3, 1, 2]}, {})
    read = PartitionState(1, 4, [1, 2], 7, version=3)
    meta = TopicMetadata("t", record, {1: read})
    assert meta.shown_state(0) == PartitionState(2, 0, [2, 3, 1], 0, ABSENT_VERSION)
    assert meta.shown_state(1) is read
    assert meta.shown_state(2) is None
    assert not meta.states.get(0)          # decisions still see only what was read
    moving = TopicMetadata("t", TopicRecord("id", {0: [4, 2, 3]}, {}, {0: Reassignment([4], [1])}), {})
    assert moving.shown_state(0) is None   # its replica list no longer says who leads


def _written(czxid: int, version: int) -> PartitionState:
    return PartitionState(1 + version % 3, version, [1, 2, 3], 1, version, czxid)


@given(st.lists(st.one_of(st.just(None), st.tuples(st.integers(1, 3), st.integers(0, 5))), min_size=1, max_size=12))
@settings(max_examples=200, deadline=None)
def test_the_cache_keeps_a_partitions_newest_state_whatever_order_the_reads_answer_in(reads) -> None:
    """Listings (a partition without a state znode: its initial state, None here) and reads of
    its znode (creation zxid, version) answer in any order: the cache ends with the newest
    written state, and an initial state never replaces a written one."""
    record = TopicRecord("id", {0: [3, 1, 2]}, {})
    cache = MetadataCache(session=None)     # type: ignore[arg-type]   # only the store is used
    cache._set_topic("t", record)
    for read in reads:
        cache._set_states("t", {0: PartitionState.initial([3, 1, 2]) if read is None else _written(*read)})
    written = [read for read in reads if read is not None]
    stored = cache.topic("t").states[0]
    if written:
        assert (stored.created_zxid, stored.version) == max(written)
    else:
        assert stored == PartitionState.initial([3, 1, 2]) and stored.version == ABSENT_VERSION
    cache._set_states("t", {1: _written(9, 9)})      # a partition the record lacks: not stored
    assert 1 not in cache.topic("t").states
