"""check_readiness (one function): what makes a broker ready or not, from stand-ins for the
metadata cache and the broker's open partitions."""
from __future__ import annotations

from dataclasses import dataclass

from ember.cluster.metadata_cache import TopicMetadata
from ember.cluster.records import BrokerInfo, PartitionState, TopicRecord
from ember.server.health import check_readiness

ME = BrokerInfo(1, "127.0.0.1", 9092)


@dataclass
class Cache:
    registered: dict[int, BrokerInfo]
    states: dict[int, PartitionState]

    def brokers(self) -> dict[int, BrokerInfo]:
        return self.registered

    def topics(self) -> dict[str, TopicMetadata]:
        record = TopicRecord("id", {0: [1, 2], 1: [2, 1], 2: [2, 3]}, {})
        return {"t": TopicMetadata("t", record, self.states)}


@dataclass
class Local:
    state: PartitionState
    is_leader: bool


def state(leader: int, version: int) -> PartitionState:
    return PartitionState(leader, 1, [1, 2], 1, version)


STATES = {0: state(1, 3), 1: state(2, 5), 2: state(2, 1)}
SERVING = {("t", 0): Local(STATES[0], True), ("t", 1): Local(STATES[1], False)}


def test_a_registered_broker_serving_the_current_states_is_ready() -> None:
    readiness = check_readiness(ME, "CONNECTED", Cache({1: ME}, STATES), SERVING)
    assert readiness.ready and readiness.reasons == ()


def test_a_broker_still_opening_its_logs_is_not_ready() -> None:
    assert check_readiness(ME, "CONNECTED", Cache({1: ME}, STATES), None).reasons == ("starting up: logs not open yet",)


def test_an_unregistered_broker_without_a_zookeeper_session_is_not_ready() -> None:
    readiness = check_readiness(ME, "SUSPENDED", Cache({}, STATES), SERVING)
    assert not readiness.ready
    assert readiness.reasons == ("ZooKeeper session is SUSPENDED",
                                 "broker 1 is not registered in ZooKeeper as 127.0.0.1:9092")


def test_a_broker_registered_under_another_address_is_not_ready() -> None:
    readiness = check_readiness(ME, "CONNECTED", Cache({1: BrokerInfo(1, "127.0.0.1", 9999)}, STATES), SERVING)
    assert readiness.reasons == ("broker 1 is not registered in ZooKeeper as 127.0.0.1:9092",)


def test_a_partition_state_not_applied_yet_means_metadata_is_behind() -> None:
    newer = {**STATES, 1: state(2, 6)}
    readiness = check_readiness(ME, "CONNECTED", Cache({1: ME}, newer), SERVING)
    assert readiness.reasons == ("partition states from ZooKeeper not applied yet: t-1",)


def test_a_partition_the_metadata_says_it_leads_but_it_does_not_serve_keeps_it_not_ready() -> None:
    moved = {**STATES, 1: state(1, 6)}   # leadership came here; not applied, not opened as leader
    readiness = check_readiness(ME, "CONNECTED", Cache({1: ME}, moved), SERVING)
    assert readiness.reasons == ("partition states from ZooKeeper not applied yet: t-1",
                                 "partitions led here but not served yet: t-1")
