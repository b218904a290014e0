"""Transaction version 2 (KIP-890 part 2), request by request: the ``transaction.version`` feature
is finalized at 2; a Produce v12 joins the transaction without AddPartitionsToTxn; EndTxn v5
bumps the producer epoch and the markers carry the new one, so a batch the producer sent at the
old epoch that arrives late is refused instead of joining the next transaction (Jepsen's torn and
aborted-read anomalies); TxnOffsetCommit v5 adds the group itself; and a Kafka 4 Java producer
runs its transactions that way (its epoch climbs by one per transaction)."""
from __future__ import annotations

import datetime
import uuid

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from confluent_kafka import Consumer, TopicPartition
from kafka_helpers import create_topic, run_tool
from kafka_wire import KafkaWire, partition_leader
from kio.schema.api_versions.v4.request import ApiVersionsRequest
from kio.schema.end_txn.v5.request import EndTxnRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v6.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.produce.v12.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.txn_offset_commit.v5.request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)

from ember.client import Admin
from ember.errors import ErrorCode
from txn_reads import librdkafka_values
from waiting import eventually

pytestmark = pytest.mark.integration

READ_COMMITTED = 1


def produce(wire: KafkaWire, transactional_id: str, topic: str, producer_id: int, epoch: int, sequence: int,
            values: list[bytes]) -> int:
    """Error code of a Produce v12 of one transactional batch of ``values`` to partition 0."""
    builder = DefaultRecordBatchBuilder(2, 0, 1, producer_id, epoch, sequence, 1 << 20)
    for i, value in enumerate(values):
        builder.append(i, 1000 + i, None, value, [])
    data = PartitionProduceData(index=0, records=bytes(builder.build()))
    response = wire.call(ProduceRequest(transactional_id=transactional_id, acks=-1,
                                        timeout=datetime.timedelta(seconds=30),
                                        topic_data=(TopicProduceData(name=topic, partition_data=(data,)),)))
    return response.responses[0].partition_responses[0].error_code.value


def end_txn(wire: KafkaWire, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> tuple[int, int, int]:
    """(error code, producer id, epoch) of an EndTxn v5."""
    ended = wire.call(EndTxnRequest(transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch,
                                    committed=commit))
    return ended.error_code.value, ended.producer_id, ended.producer_epoch


def stable_and_end(leader: str, topic: str) -> tuple[int, int]:
    """(last stable offset, high watermark) of partition 0, asked of its leader."""
    offsets = []
    with KafkaWire(leader) as wire:
        for isolation in (READ_COMMITTED, 0):
            found = wire.call(ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=(ListOffsetsTopic(
                name=topic, partitions=(ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                             timestamp=-1),)),)))
            offsets.append(found.topics[0].partitions[0].offset)
    return offsets[0], offsets[1]


def coordinator_address(address: str, transactional_id: str) -> str:
    with KafkaWire(address) as wire:
        found = wire.call(FindCoordinatorRequest(key_type=1, coordinator_keys=(transactional_id,))).coordinators[0]
    return f"{found.host}:{found.port}"


def test_the_transaction_version_feature_is_finalized_at_two(shared_cluster):
    with KafkaWire(shared_cluster.kafka_bootstrap.split(",")[0]) as wire:
        versions = wire.call(ApiVersionsRequest(client_software_name="ember-tests", client_software_version="1"))
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in versions.finalized_features}
    supported = {f.name: (f.min_version, f.max_version) for f in versions.supported_features}
    assert finalized["transaction.version"] == (2, 2)
    assert supported["transaction.version"] == (0, 2)
    assert versions.finalized_features_epoch >= 0          # clients ignore finalized levels at epoch -1
    apis = {k.api_key: k.max_version for k in versions.api_keys}
    assert apis[26] >= 5 and apis[28] >= 5 and apis[0] >= 12     # EndTxn, TxnOffsetCommit, Produce


def test_a_late_batch_at_the_old_epoch_cannot_join_the_next_transaction(shared_cluster, topic_name):
    address = shared_cluster.kafka_bootstrap.split(",")[0]
    create_topic(shared_cluster.kafka_bootstrap, topic_name, replication_factor=3)
    transactional_id = f"tv2-{topic_name}"
    leader_id, _, brokers = eventually(lambda: (found := partition_leader(address, topic_name))[0] >= 0 and found,
                                       "a leader for the topic")
    with KafkaWire(coordinator_address(address, transactional_id)) as txn, KafkaWire(brokers[leader_id]) as data:
        ids = txn.call(InitProducerIdRequest(transactional_id=transactional_id,
                                             transaction_timeout=datetime.timedelta(seconds=30),
                                             producer_id=-1, producer_epoch=-1))
        pid, epoch = ids.producer_id, ids.producer_epoch
        # no AddPartitionsToTxn: the leader adds the partition to the transaction
        assert produce(data, transactional_id, topic_name, pid, epoch, 0, [b"first-0", b"first-1"]) == 0
        error, next_pid, next_epoch = end_txn(txn, transactional_id, pid, epoch, commit=True)
        assert (error, next_pid, next_epoch) == (0, pid, epoch + 1)
        # the EndTxn's answer was lost and it is sent again: the same answer, no second bump
        assert end_txn(txn, transactional_id, pid, epoch, commit=True) == (0, pid, epoch + 1)
        # a batch of the old epoch arriving late (a retry delayed past EndTxn) is refused, at the
        # leader, and opens no transaction
        assert produce(data, transactional_id, topic_name, pid, epoch, 2, [b"late"]) == ErrorCode.INVALID_PRODUCER_EPOCH
        # the next transaction runs at the new epoch from sequence 0 and is aborted
        assert produce(data, transactional_id, topic_name, pid, next_epoch, 0, [b"aborted"]) == 0
        assert end_txn(txn, transactional_id, pid, next_epoch, commit=False) == (0, pid, next_epoch + 1)
        # an abort with nothing written (every write failed) ends at the next epoch too
        assert end_txn(txn, transactional_id, pid, next_epoch + 1, commit=False) == (0, pid, next_epoch + 2)
        # the old epoch is fenced at the coordinator as well
        assert end_txn(txn, transactional_id, pid, epoch, commit=False)[0] == ErrorCode.PRODUCER_FENCED
    stable, end = eventually(lambda: (found := stable_and_end(brokers[leader_id], topic_name))[0] == found[1] and found,
                             "the last stable offset at the high watermark: nothing left open")
    assert end == 5        # 2 records and their commit marker, 1 aborted record and its abort marker
    assert librdkafka_values(shared_cluster.kafka_bootstrap, topic_name, 1, "read_committed", 2) == \
        [b"first-0", b"first-1"]


def test_txn_offset_commit_v5_adds_the_group_to_the_transaction(shared_cluster, topic_name):
    address = shared_cluster.kafka_bootstrap.split(",")[0]
    create_topic(shared_cluster.kafka_bootstrap, topic_name)
    transactional_id, group = f"tv2-offsets-{topic_name}", f"tv2-group-{topic_name}"
    with KafkaWire(address) as wire:
        group_found = wire.call(FindCoordinatorRequest(key_type=0, coordinator_keys=(group,))).coordinators[0]
    with KafkaWire(coordinator_address(address, transactional_id)) as txn, \
            KafkaWire(f"{group_found.host}:{group_found.port}") as groups:
        ids = txn.call(InitProducerIdRequest(transactional_id=transactional_id,
                                             transaction_timeout=datetime.timedelta(seconds=30),
                                             producer_id=-1, producer_epoch=-1))
        pid, epoch = ids.producer_id, ids.producer_epoch
        committed = groups.call(TxnOffsetCommitRequest(
            transactional_id=transactional_id, group_id=group, producer_id=pid, producer_epoch=epoch,
            topics=(TxnOffsetCommitRequestTopic(name=topic_name, partitions=(TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=42, committed_metadata=""),)),)))
        assert committed.topics[0].partitions[0].error_code.value == 0
        assert end_txn(txn, transactional_id, pid, epoch, commit=True) == (0, pid, epoch + 1)
    consumer = Consumer({"bootstrap.servers": shared_cluster.kafka_bootstrap, "group.id": group})
    try:
        offsets = eventually(lambda: (found := consumer.committed([TopicPartition(topic_name, 0)], timeout=10))
                             [0].offset == 42 and found, "the offset committed with the transaction")
    finally:
        consumer.close()
    assert offsets[0].offset == 42


def test_a_kafka_4_java_producer_bumps_its_epoch_at_every_transaction(shared_cluster, topic_name):
    """kafka-producer-perf-test with a transactional id commits a transaction every 50 ms; under
    transaction version 2 each commit moves the producer to the next epoch."""
    bootstrap = shared_cluster.kafka_bootstrap
    create_topic(bootstrap, topic_name)
    transactional_id = f"tv2-java-{uuid.uuid4().hex[:8]}"
    run_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic_name, "--num-records", "2000",
             "--record-size", "100", "--throughput", "-1", "--transactional-id", transactional_id,
             "--transaction-duration-ms", "50", "--producer-props", f"bootstrap.servers={bootstrap}",
             timeout_s=120)
    with Admin(bootstrap_servers=shared_cluster.bootstrap) as admin:
        state = admin.describe_transaction(transactional_id)
    assert state.state == "CompleteCommit"
    assert state.producer_epoch >= 2, "one epoch per transaction: the Java producer ran transaction version 2"
    assert len(librdkafka_values(bootstrap, topic_name, 1, "read_committed", 2000)) == 2000
