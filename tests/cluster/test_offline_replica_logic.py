"""Pure rules of offline replicas (a broker's log of a partition gone offline after a disk
failure): per-partition liveness from the brokers' reports, and the controller's failover with it
(a new leader from the rest of the ISR, the offline replica out of the ISR, clean only)."""
from __future__ import annotations

import pytest

from ember.cluster.election import failover_state, offline_by_replica, partition_live, preferred_state
from ember.cluster.records import NO_LEADER, OfflineReplica, OfflineReplicas, PartitionState
from ember.errors import PreferredLeaderNotAvailable

LIVE = {1, 2, 3}
T0, T1 = OfflineReplica("t", 0, "id-t"), OfflineReplica("t", 1, "id-t")


def test_reports_turn_into_brokers_per_replica() -> None:
    reports = {1: (T0,), 2: (T0, T1), 3: ()}
    assert offline_by_replica(reports) == {T0: {1, 2}, T1: {2}}
    assert offline_by_replica({}) == {}


def test_a_replica_reported_offline_is_not_live_for_that_partition_only() -> None:
    offline = offline_by_replica({1: (T0,)})
    assert partition_live(LIVE, offline, "t", "id-t", 0) == {2, 3}
    assert partition_live(LIVE, offline, "t", "id-t", 1) == LIVE       # another partition of the topic
    assert partition_live(LIVE, offline, "u", "id-u", 0) == LIVE       # another topic
    # a report about an older topic of the same name (another topic id) does not count
    assert partition_live(LIVE, offline, "t", "id-t-recreated", 0) == LIVE
    # a broker that is not registered stays dead whatever it reported
    assert partition_live({2, 3}, offline, "t", "id-t", 1) == {2, 3}


def test_an_offline_leader_hands_leadership_to_the_next_isr_member_and_leaves_the_isr() -> None:
    state = PartitionState(1, 4, [1, 2, 3], 1)
    live = partition_live(LIVE, offline_by_replica({1: (T0,)}), "t", "id-t", 0)
    assert failover_state(state, [1, 2, 3], live, controller_epoch=2) == PartitionState(2, 5, [2, 3], 2)
    # the same broker still leads its other partition, whose log is fine
    other = partition_live(LIVE, offline_by_replica({1: (T0,)}), "t", "id-t", 1)
    assert failover_state(state, [1, 2, 3], other, controller_epoch=2) is None


def test_an_offline_follower_leaves_the_isr_without_a_leader_change() -> None:
    state = PartitionState(1, 4, [1, 2, 3], 1)
    live = partition_live(LIVE, offline_by_replica({3: (T0,)}), "t", "id-t", 0)
    assert failover_state(state, [1, 2, 3], live, controller_epoch=2) == PartitionState(1, 4, [1, 2], 2)


def test_the_only_in_sync_replica_going_offline_leaves_the_partition_leaderless_not_unclean() -> None:
    state = PartitionState(1, 4, [1], 1)
    live = partition_live(LIVE, offline_by_replica({1: (T0,)}), "t", "id-t", 0)
    assert live == {2, 3}
    assert failover_state(state, [1, 2, 3], live, controller_epoch=2) == PartitionState(NO_LEADER, 5, [1], 2)


def test_a_replica_whose_report_is_gone_is_live_again_but_rejoins_the_isr_only_through_its_leader() -> None:
    after = PartitionState(2, 5, [2, 3], 2)          # broker 1 went offline for t-0 earlier
    live = partition_live(LIVE, offline_by_replica({}), "t", "id-t", 0)
    assert live == LIVE
    assert failover_state(after, [1, 2, 3], live, controller_epoch=2) is None   # the controller adds nobody
    # and it cannot get leadership back by a preferred election until the leader added it to the ISR
    with pytest.raises(PreferredLeaderNotAvailable):
        preferred_state(after, [1, 2, 3], live, controller_epoch=2)


def test_an_offline_preferred_replica_is_not_elected_back() -> None:
    state = PartitionState(2, 5, [1, 2, 3], 2)       # reported offline before the ISR shrank
    live = partition_live(LIVE, offline_by_replica({1: (T0,)}), "t", "id-t", 0)
    with pytest.raises(PreferredLeaderNotAvailable):
        preferred_state(state, [1, 2, 3], live, controller_epoch=2)


def test_the_offline_replicas_znode_round_trips_and_is_small() -> None:
    report = OfflineReplicas(2, (T1, T0))
    data = report.to_bytes()
    assert data == (b'{"broker":2,"partitions":[{"partition":0,"topic":"t","topic_id":"id-t"},'
                    b'{"partition":1,"topic":"t","topic_id":"id-t"}],"version":1}')
    assert OfflineReplicas.from_bytes(data) == OfflineReplicas(2, (T0, T1))
    assert OfflineReplicas.from_bytes(b'{"broker":2,"partitions":[]}').replicas == ()
