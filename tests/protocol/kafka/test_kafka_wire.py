"""Exact Kafka requests against a broker's Kafka listener: idempotent sequences behave as for
ember's producer, unsupported APIs and versions get Kafka error responses on a connection that
stays open, malformed frames close only their own connection."""
from __future__ import annotations

import datetime
import struct
import time

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from kafka_helpers import create_topic
from kafka_wire import WAIT_S, KafkaWire, partition_leader
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest as DescribeGroupsV5
from kio.schema.describe_groups.v6.request import DescribeGroupsRequest as DescribeGroupsV6
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v6.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.serial import entity_reader

from ember.errors import ErrorCode
from ember.protocol.kafka.codec import response_class
from ember.wire.api_keys import ApiKey

pytestmark = pytest.mark.integration

_INT16 = struct.Struct(">h")
#: KIP-848's consumer group protocol, not served: Java consumers with group.protocol=consumer fail
#: fast on its absence from ApiVersions ("set group.protocol=classic").
CONSUMER_GROUP_HEARTBEAT = 68


@pytest.fixture(scope="module")
def kafka_address(shared_cluster) -> str:
    return shared_cluster.kafka_bootstrap.split(",")[0]


def ready_leader(address: str, topic: str) -> str:
    """The Kafka address of partition 0's leader once metadata names it and it serves the
    partition (a new topic reaches every broker within moments, not at once)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        leader_id, _, brokers = partition_leader(address, topic)
        if leader_id in brokers:
            leader = brokers[leader_id]
            with KafkaWire(leader) as wire:
                offsets = wire.call(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(
                    name=topic, partitions=(ListOffsetsPartition(partition_index=0, timestamp=-1),)),)))
            if offsets.topics[0].partitions[0].error_code.value == 0:
                return leader
        time.sleep(0.1)
    raise AssertionError(f"no leader of {topic}-0 served it within {WAIT_S}s")


def produce_request(producer_id: int, sequence: int, count: int, topic: str) -> ProduceRequest:
    builder = DefaultRecordBatchBuilder(2, 0, 0, producer_id, 0, sequence, 1 << 20)
    for i in range(count):
        builder.append(i, 1000 + i, None, f"seq-{sequence + i}".encode(), [])
    data = PartitionProduceData(index=0, records=bytes(builder.build()))
    return ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
                          topic_data=(TopicProduceData(name=topic, partition_data=(data,)),))


def test_idempotent_retries_are_deduplicated_and_sequence_gaps_refused(kafka_address, topic_name):
    create_topic(kafka_address, topic_name, replication_factor=3)
    with KafkaWire(ready_leader(kafka_address, topic_name)) as wire:
        ids = wire.call(InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(0),
                                              producer_id=-1, producer_epoch=-1))
        assert ids.error_code.value == 0 and ids.producer_id >= 0

        def send(sequence: int, count: int) -> tuple[int, int]:
            response = wire.call(produce_request(ids.producer_id, sequence, count, topic_name))
            partition = response.responses[0].partition_responses[0]
            return partition.error_code.value, partition.base_offset

        assert send(0, 3) == (0, 0)
        assert send(0, 3) == (0, 0)                    # a retry: the original offsets, nothing written
        assert send(10, 2)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert send(3, 2) == (0, 3)


def test_unsupported_apis_and_versions_get_kafka_errors_and_the_connection_stays_open(kafka_address):
    with KafkaWire(kafka_address) as wire:
        # ApiVersions newer than served: Kafka's fallback, a v0 response listing what is served
        _, frame = wire.frame(ApiVersionsRequest(client_software_name="t", client_software_version="1"), api_version=9)
        wire.send_raw(frame)
        _, body = wire.receive()
        assert _INT16.unpack_from(body)[0] == ErrorCode.UNSUPPORTED_VERSION
        listed = {struct.unpack_from(">hhh", body, 6 + 6 * i)[0] for i in range(struct.unpack_from(">i", body, 2)[0])}
        assert ApiKey.PRODUCE in listed and ApiKey.FETCH in listed and CONSUMER_GROUP_HEARTBEAT not in listed
        # an API this broker does not serve (ConsumerGroupHeartbeat), an unknown API key, Metadata v99
        for api_key, version in ((CONSUMER_GROUP_HEARTBEAT, 0), (999, 0), (ApiKey.METADATA, 99)):
            header = struct.pack(">hhih", api_key, version, 77, -1)
            wire.send_raw(struct.pack(">i", len(header) + 3) + header + b"\0\0\0")
            correlation_id, body = wire.receive()
            assert (correlation_id, _INT16.unpack_from(body)[0]) == (77, ErrorCode.UNSUPPORTED_VERSION)
        # Produce v2 (advertised from v0, as Kafka does): every partition answered UNSUPPORTED_VERSION
        topic = b"some-topic"
        produce_v2 = struct.pack(">hhih", ApiKey.PRODUCE, 2, 78, -1) + struct.pack(">hii", 1, 1000, 1) + \
            struct.pack(">h", len(topic)) + topic + struct.pack(">iii", 1, 4, 0)
        wire.send_raw(struct.pack(">i", len(produce_v2)) + produce_v2)
        correlation_id, body = wire.receive()
        assert correlation_id == 78
        assert struct.unpack_from(">ih", body, 4 + 2 + len(topic) + 4) == (4, ErrorCode.UNSUPPORTED_VERSION)
        versions = wire.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        assert versions.error_code.value == 0


def test_an_unknown_group_is_described_dead_and_from_v6_not_found(kafka_address, topic_name):
    """Kafka's answers: DescribeGroups v0-5 describe an unknown group as Dead without an error,
    v6 adds GROUP_ID_NOT_FOUND (KIP-1043); the Java admin reads both as "does not exist"."""
    group = f"nobody-{topic_name}"
    with KafkaWire(kafka_address) as wire:
        coordinator = wire.call(FindCoordinatorRequest(key=group, key_type=0))
    with KafkaWire(f"{coordinator.host}:{coordinator.port}") as wire:
        old, new = (wire.call(request(groups=(group,), include_authorized_operations=False)).groups[0]
                    for request in (DescribeGroupsV5, DescribeGroupsV6))
    assert (old.error_code.value, old.group_state, old.members) == (0, "Dead", ())
    assert (new.error_code.value, new.group_state, new.members) == (ErrorCode.GROUP_ID_NOT_FOUND, "Dead", ())


@pytest.mark.parametrize("garbage", [
    struct.pack(">i", 3) + b"abc",                                        # shorter than any header
    struct.pack(">i", 12) + struct.pack(">hhih", ApiKey.METADATA, 12, 1, 50) + b"\0\0",   # client id runs past the end
    struct.pack(">i", 14) + struct.pack(">hhih", ApiKey.METADATA, 12, 1, -1) + b"\x05\x05\x05\x05",   # body is junk
    struct.pack(">i", 2_000_000_000),                                     # over socket.request.max.bytes
])
def test_malformed_frames_close_only_their_connection(kafka_address, garbage):
    with KafkaWire(kafka_address, timeout_s=10) as bad, KafkaWire(kafka_address) as good:
        bad.send_raw(garbage)
        assert bad.is_closed_by_peer()
        versions = good.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        assert versions.error_code.value == 0


def _with_crc(batch: bytearray) -> bytes:
    """The batch with its CRC-32C recomputed (over attributes to the end, Kafka's rule)."""
    struct.pack_into(">I", batch, 17, calc_crc32c(bytes(batch[21:])))
    return bytes(batch)


def _good_batch(count: int = 3, value_size: int = 10) -> bytearray:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(count):
        builder.append(i, 1000 + i, None, bytes([65 + i]) * value_size, [])
    return bytearray(builder.build())


def _corrupt_crc() -> bytes:
    batch = _good_batch()
    batch[-1] ^= 0xFF
    return bytes(batch)


def _bad_compression() -> bytes:
    batch = _good_batch()
    struct.pack_into(">h", batch, 21, 1)            # attributes say gzip; the records are not
    return _with_crc(batch)


def _magic_1() -> bytes:
    batch = _good_batch()
    batch[16] = 1
    return bytes(batch)


def _truncated() -> bytes:
    return bytes(_good_batch()[:-5])


def _two_batches() -> bytes:
    return bytes(_good_batch()) + bytes(_good_batch())    # Produce v3+ carries one batch per partition


def _transactional() -> bytes:
    batch = _good_batch()
    struct.pack_into(">h", batch, 21, 0x10)
    return _with_crc(batch)


def _oversized() -> bytes:
    return bytes(_good_batch(count=20, value_size=5000))    # ~100 KB against max.message.bytes 20000


@pytest.mark.parametrize("records, error", [
    (_corrupt_crc, ErrorCode.CORRUPT_RECORD),
    (_bad_compression, ErrorCode.CORRUPT_RECORD),
    (_magic_1, ErrorCode.CORRUPT_RECORD),
    (_truncated, ErrorCode.CORRUPT_RECORD),
    (_two_batches, ErrorCode.INVALID_RECORD),
    (_transactional, ErrorCode.INVALID_RECORD),
    (_oversized, ErrorCode.MESSAGE_TOO_LARGE),
], ids=lambda case: getattr(case, "__name__", "").strip("_") or None)
def test_bad_record_batches_get_kafka_errors_and_nothing_is_written(kafka_address, topic_name, records, error):
    create_topic(kafka_address, topic_name, config={"max.message.bytes": "20000"})
    with KafkaWire(ready_leader(kafka_address, topic_name)) as wire:
        def produce(data: bytes) -> tuple[int, int]:
            request = ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
                                     topic_data=(TopicProduceData(name=topic_name, partition_data=(
                                         PartitionProduceData(index=0, records=data),)),))
            partition = wire.call(request).responses[0].partition_responses[0]
            return partition.error_code.value, partition.base_offset

        assert produce(records())[0] == error
        assert produce(bytes(_good_batch())) == (0, 0)    # the refused batch left nothing behind


def _offsets_request(topic: str, *timestamps: int) -> ListOffsetsRequest:
    return ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(name=topic, partitions=tuple(
        ListOffsetsPartition(partition_index=0, timestamp=t) for t in timestamps)),))


def _offsets(wire: KafkaWire, correlation_id: int) -> list[tuple[int, int]]:
    """(error code, offset) per partition of the ListOffsets v6 answer to ``correlation_id``."""
    received, body = wire.receive()
    assert received == correlation_id
    response, _ = entity_reader(response_class(ApiKey.LIST_OFFSETS, 6))(body, 1)
    return [(p.error_code.value, p.offset) for t in response.topics for p in t.partitions]


def test_list_offsets_answered_as_it_arrives_sees_every_produce_sent_before_it(kafka_address, topic_name):
    """Earliest/latest ListOffsets are answered as they arrive on an idle connection (ember.net.immediate);
    one sent right behind an acks=all Produce, in the same write or the next, still waits for that
    Produce and sees its records, and one for a timestamp (which reads the time index) is answered too."""
    create_topic(kafka_address, topic_name, replication_factor=3)
    with KafkaWire(ready_leader(kafka_address, topic_name)) as wire:
        ids = wire.call(InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(0),
                                              producer_id=-1, producer_epoch=-1))
        expected = 0
        for round_, together in enumerate((True, False, True)):
            produce_id, produce = wire.frame(produce_request(ids.producer_id, expected, 5, topic_name))
            offsets_id, offsets = wire.frame(_offsets_request(topic_name, -2, -1))
            if together:
                wire.send_raw(produce + offsets)
            else:
                wire.send_raw(produce)
                wire.send_raw(offsets)
            assert wire.receive()[0] == produce_id
            expected += 5
            assert _offsets(wire, offsets_id) == [(0, 0), (0, expected)], f"round {round_}"
        for _ in range(3):     # idle: answered at once, the same answers
            offsets_id, offsets = wire.frame(_offsets_request(topic_name, -2, -1, 1000))
            wire.send_raw(offsets)
            assert _offsets(wire, offsets_id) == [(0, 0), (0, expected), (0, 0)]
        missing_id, missing = wire.frame(_offsets_request(topic_name + "-missing", -1))
        wire.send_raw(missing)
        assert _offsets(wire, missing_id) == [(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]
