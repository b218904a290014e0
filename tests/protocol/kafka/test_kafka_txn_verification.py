"""KIP-890's server-side defence, request by request: a partition leader appends a transactional
producer's first batch only once the coordinator says the partition is in the producer's ongoing
transaction. A batch that arrives after its transaction ended (a retry delayed past EndTxn, a
partition the producer never added) is refused, and no transaction is left hanging: the last
stable offset still reaches the high watermark."""
from __future__ import annotations

import datetime

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kafka_helpers import create_topic
from kafka_wire import KafkaWire, partition_leader
from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnRequest, AddPartitionsToTxnTopic
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v6.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from ember.errors import ErrorCode
from waiting import eventually

pytestmark = pytest.mark.integration


def produce(wire: KafkaWire, transactional_id: str | None, topic: str, producer_id: int, epoch: int, sequence: int,
            transactional: bool = True) -> int:
    """Error code of a Produce of one (transactional) batch of 2 records to partition 0."""
    builder = DefaultRecordBatchBuilder(2, 0, int(transactional), producer_id, epoch, sequence, 1 << 20)
    for i in range(2):
        builder.append(i, 1000 + i, None, b"late-%d" % (sequence + i), [])
    data = PartitionProduceData(index=0, records=bytes(builder.build()))
    response = wire.call(ProduceRequest(transactional_id=transactional_id, acks=-1,
                                        timeout=datetime.timedelta(seconds=30),
                                        topic_data=(TopicProduceData(name=topic, partition_data=(data,)),)))
    return response.responses[0].partition_responses[0].error_code.value


def end_offset(address: str, topic: str, isolation: int) -> int:
    with KafkaWire(address) as wire:
        found = wire.call(ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=(ListOffsetsTopic(
            name=topic, partitions=(ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1),)),)))
    return found.topics[0].partitions[0].offset


def test_a_batch_after_its_transaction_ended_is_refused_and_leaves_nothing_hanging(shared_cluster, topic_name):
    address = shared_cluster.kafka_bootstrap.split(",")[0]
    create_topic(shared_cluster.kafka_bootstrap, topic_name, replication_factor=3)
    transactional_id = f"late-{topic_name}"
    with KafkaWire(address) as wire:
        found = wire.call(FindCoordinatorRequest(key_type=1, coordinator_keys=(transactional_id,))).coordinators[0]
    coordinator = f"{found.host}:{found.port}"
    leader_id, _, brokers = eventually(lambda: (found := partition_leader(address, topic_name))[0] >= 0 and found,
                                       "a leader for the topic")
    leader = brokers[leader_id]
    with KafkaWire(coordinator) as txn, KafkaWire(leader) as data:
        ids = txn.call(InitProducerIdRequest(transactional_id=transactional_id,
                                             transaction_timeout=datetime.timedelta(seconds=30),
                                             producer_id=-1, producer_epoch=-1))
        assert ids.error_code.value == 0
        pid, epoch = ids.producer_id, ids.producer_epoch
        # a transactional batch without the request's transactional id, and the other way round
        assert produce(data, None, topic_name, pid, epoch, 0) == ErrorCode.INVALID_RECORD
        assert produce(data, transactional_id, topic_name, pid, epoch, 0, transactional=False) == \
            ErrorCode.INVALID_RECORD
        # not added to the transaction yet: the leader asks the coordinator and refuses
        assert produce(data, transactional_id, topic_name, pid, epoch, 0) == ErrorCode.INVALID_TXN_STATE
        added = txn.call(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(AddPartitionsToTxnTopic(name=topic_name, partitions=(0,)),)))
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code.value == 0
        assert produce(data, transactional_id, topic_name, pid, epoch, 0) == 0
        ended = txn.call(EndTxnRequest(transactional_id=transactional_id, producer_id=pid, producer_epoch=epoch,
                                       committed=True))
        assert ended.error_code.value == 0
        # the producer's next batch, sent as if its AddPartitionsToTxn had been lost: refused
        assert produce(data, transactional_id, topic_name, pid, epoch, 2) == ErrorCode.INVALID_TXN_STATE
    # the committed transaction and its marker are readable; nothing holds the last stable offset back
    assert eventually(lambda: end_offset(leader, topic_name, 1) == end_offset(leader, topic_name, 0) == 3,
                      "the last stable offset to reach the high watermark")
