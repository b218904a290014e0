"""Kafka clients nobody here wrote (confluent-kafka/librdkafka, kafka-python) against the Kafka
listeners of a shared 3-broker cluster (real ZooKeeper, real broker processes), and interop with
ember's own clients both ways."""
from __future__ import annotations

import time

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic, OffsetSpec
from kafka_helpers import BASE_MS, WAIT_S, admin, consume, create_topic, ember_read, produce, records

from ember.client import Consumer as EmberConsumer
from ember.client import OffsetAndMetadata
from ember.client import Producer as EmberProducer
from ember.client import TopicPartition as EmberTopicPartition

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def bootstrap(shared_cluster) -> str:
    return shared_cluster.kafka_bootstrap


def expected(items, offsets) -> list[tuple]:
    """What :func:`consume` returns for produced ``items`` delivered at ``offsets``."""
    return sorted(((p, o, k, v, h, (TIMESTAMP_CREATE_TIME, ts))
                   for (_, k, v, h, ts), (p, o) in zip(items, offsets)), key=lambda m: (m[0], m[1]))


def test_idempotent_confluent_producer_and_seeking_consumer_see_exact_records(shared_cluster, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=3, replication_factor=3)
    items = records(60, partitions=3)
    offsets = produce(bootstrap, topic_name, items, **{"enable.idempotence": True, "acks": "all"})
    assert sorted(offsets) == [(p, o) for p in range(3) for o in range(20)]
    want = expected(items, offsets)
    assert consume(bootstrap, topic_name, {0: 0, 1: 0, 2: 0}, 60) == want
    assert consume(bootstrap, topic_name, {1: 15}, 5) == [m for m in want if m[0] == 1 and m[1] >= 15]
    # the same records through ember's own consumer (the stored Kafka batches, decoded natively on the consumer's side)
    assert ember_read(shared_cluster, topic_name, 3, 60) == sorted(
        (p, o, k, v, [(hk, hv) for hk, hv in h], ts) for p, o, k, v, h, (_, ts) in want)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_compression_codec_round_trips(shared_cluster, bootstrap, topic_name, codec):
    create_topic(bootstrap, topic_name)
    items = records(300)
    offsets = produce(bootstrap, topic_name, items, **{"compression.type": codec, "linger.ms": 50})
    assert consume(bootstrap, topic_name, {0: 0}, 300) == expected(items, offsets)
    assert [m[3] for m in ember_read(shared_cluster, topic_name, 1, 300)] == [v for _, _, v, _, _ in items]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_ember_producer_compresses_with_every_kafka_codec_and_librdkafka_reads_it(shared_cluster, bootstrap,
                                                                                  topic_name, codec):
    create_topic(bootstrap, topic_name)
    items = records(300)
    with EmberProducer(shared_cluster.bootstrap, compression_type=codec, linger_ms=50, acks="all") as producer:
        futures = [producer.send(topic_name, value, key=key, headers=headers, partition=0, timestamp_ms=ts)
                   for _, key, value, headers, ts in items]
        producer.flush()
    offsets = [(f.get(timeout=WAIT_S).partition, f.get(timeout=WAIT_S).offset) for f in futures]
    assert consume(bootstrap, topic_name, {0: 0}, 300) == expected(items, offsets)


def test_list_offsets_earliest_latest_by_timestamp_and_max_timestamp(bootstrap, topic_name):
    create_topic(bootstrap, topic_name)
    produce(bootstrap, topic_name, [*records(10), (0, None, b"late", [], BASE_MS + 500)], acks="1")
    client = admin(bootstrap)
    tp = TopicPartition(topic_name, 0)
    specs = {"earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest(), "max": OffsetSpec.max_timestamp(),
             "t3.5": OffsetSpec.for_timestamp(BASE_MS + 3500), "after": OffsetSpec.for_timestamp(BASE_MS + 10 ** 6)}
    found = {name: client.list_offsets({tp: spec})[tp].result(timeout=WAIT_S).offset for name, spec in specs.items()}
    # the largest timestamp is record 9's, not the last record's (ListOffsets v7 MAX_TIMESTAMP)
    assert found == {"earliest": 0, "latest": 11, "max": 9, "t3.5": 4, "after": -1}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        assert consumer.get_watermark_offsets(tp, timeout=WAIT_S) == (0, 11)
        [by_time] = consumer.offsets_for_times([TopicPartition(topic_name, 0, BASE_MS + 7000)], timeout=WAIT_S)
        assert by_time.offset == 7
    finally:
        consumer.close()


def test_admin_client_creates_and_deletes_topics_with_kafkas_errors(bootstrap, topic_name):
    client = admin(bootstrap)
    create_topic(bootstrap, topic_name, partitions=4, replication_factor=2, config={"retention.ms": "60000"})
    assert len(client.list_topics(topic_name, timeout=WAIT_S).topics[topic_name].partitions) == 4
    failures = {
        topic_name: NewTopic(topic_name, 1, 1),
        f"{topic_name}-bad-config": NewTopic(f"{topic_name}-bad-config", 1, 1, config={"retention.ms": "soon"}),
        f"{topic_name}-too-many-replicas": NewTopic(f"{topic_name}-too-many-replicas", 1, 4)}
    codes = {}
    for name, future in client.create_topics(list(failures.values()), operation_timeout=WAIT_S).items():
        with pytest.raises(KafkaException) as error:
            future.result(timeout=WAIT_S)
        codes[name] = error.value.args[0].code()
    assert codes == {topic_name: KafkaError.TOPIC_ALREADY_EXISTS,
                     f"{topic_name}-bad-config": KafkaError.INVALID_CONFIG,
                     f"{topic_name}-too-many-replicas": KafkaError.INVALID_REPLICATION_FACTOR}
    client.delete_topics([topic_name], operation_timeout=WAIT_S)[topic_name].result(timeout=WAIT_S)
    deadline = time.monotonic() + WAIT_S
    while topic_name in client.list_topics(timeout=WAIT_S).topics and time.monotonic() < deadline:
        time.sleep(0.2)
    assert topic_name not in client.list_topics(timeout=WAIT_S).topics


def test_kafka_python_produces_and_consumes_with_a_long_poll(bootstrap, topic_name):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    create_topic(bootstrap, topic_name, partitions=2, replication_factor=3)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                             request_timeout_ms=int(WAIT_S * 1000))
    sent = [producer.send(topic_name, key=f"k{i}".encode(), value=None if i == 3 else f"v{i}".encode(),
                          headers=[("i", str(i).encode())], partition=i % 2, timestamp_ms=BASE_MS + i)
            for i in range(20)]
    producer.flush(timeout=WAIT_S)
    assert sorted((m.get(timeout=WAIT_S).partition, m.get(timeout=WAIT_S).offset) for m in sent) == \
        [(p, o) for p in range(2) for o in range(10)]
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=5000,
                             consumer_timeout_ms=int(WAIT_S * 1000))
    try:
        consumer.assign([KTopicPartition(topic_name, 0), KTopicPartition(topic_name, 1)])
        consumer.seek_to_beginning()
        got = [next(consumer) for _ in range(20)]
        assert sorted((r.partition, r.offset, r.key, r.value, r.headers, r.timestamp) for r in got) == sorted(
            (i % 2, i // 2, f"k{i}".encode(), None if i == 3 else f"v{i}".encode(), [("i", str(i).encode())],
             BASE_MS + i) for i in range(20))
        # caught up: the next fetch parks at the broker until this record arrives
        producer.send(topic_name, value=b"late", partition=0).get(timeout=WAIT_S)
        assert next(consumer).value == b"late"
    finally:
        consumer.close()
        producer.close(timeout=WAIT_S)


def test_ember_producer_records_are_read_by_confluent_with_both_timestamp_types(shared_cluster, bootstrap, topic_name):
    appended = f"{topic_name}-append"
    create_topic(bootstrap, topic_name)
    create_topic(bootstrap, appended, config={"message.timestamp.type": "LogAppendTime"})
    with EmberProducer(bootstrap_servers=shared_cluster.bootstrap, acks="all", compression_type="lz4") as producer:
        for name in (topic_name, appended):
            futures = [producer.send(name, key=None if i == 0 else f"k{i}".encode(), value=None if i == 1 else b"v" * i,
                                     headers=[("h", None if i == 2 else b"x")], timestamp_ms=BASE_MS + i)
                       for i in range(8)]
            producer.flush()
            for future in futures:
                future.get(timeout=WAIT_S)
    created = consume(bootstrap, topic_name, {0: 0}, 8)
    assert created == [(0, i, None if i == 0 else f"k{i}".encode(), None if i == 1 else b"v" * i,
                        [("h", None if i == 2 else b"x")], (TIMESTAMP_CREATE_TIME, BASE_MS + i)) for i in range(8)]
    stamped = consume(bootstrap, appended, {0: 0}, 8)
    ember_timestamps = [m[5] for m in ember_read(shared_cluster, appended, 1, 8)]
    assert [m[5] for m in stamped] == [(TIMESTAMP_LOG_APPEND_TIME, ts) for ts in ember_timestamps]
    assert all(ts > BASE_MS + 10 ** 9 for ts in ember_timestamps)


def test_offsets_and_order_are_one_sequence_whichever_protocol_writes(shared_cluster, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, replication_factor=3)
    with EmberProducer(bootstrap_servers=shared_cluster.bootstrap, acks="all", enable_idempotence=True) as ember:
        for round_ in range(3):
            ember.send(topic_name, value=f"ember-{round_}".encode(), partition=0).get(timeout=WAIT_S)
            produce(bootstrap, topic_name, [(0, None, f"kafka-{round_}".encode(), [], BASE_MS)],
                    **{"enable.idempotence": True, "acks": "all"})
    values = [f"{who}-{r}".encode() for r in range(3) for who in ("ember", "kafka")]
    assert [(m[1], m[3]) for m in consume(bootstrap, topic_name, {0: 0}, 6)] == list(enumerate(values))
    assert [(m[1], m[3]) for m in ember_read(shared_cluster, topic_name, 1, 6)] == list(enumerate(values))


def test_offsets_committed_over_kafka_are_the_ember_groups_offsets(shared_cluster, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=2)
    produce(bootstrap, topic_name, records(10, partitions=2))
    group = f"g-{topic_name}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic_name, 0, 3), TopicPartition(topic_name, 1, 5)],
                        asynchronous=False)
        committed = consumer.committed([TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)], timeout=WAIT_S)
        assert [(tp.partition, tp.offset) for tp in committed] == [(0, 3), (1, 5)]
    finally:
        consumer.close()
    ember = EmberConsumer(bootstrap_servers=shared_cluster.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        assert ember.committed(EmberTopicPartition(topic_name, 1)) == 5
        ember.assign([EmberTopicPartition(topic_name, 0)])
        ember.commit({EmberTopicPartition(topic_name, 0): OffsetAndMetadata(4, "")})
    finally:
        ember.close()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        assert consumer.committed([TopicPartition(topic_name, 0)], timeout=WAIT_S)[0].offset == 4
    finally:
        consumer.close()


def test_acks_zero_producer_delivers_and_an_out_of_range_position_resets(bootstrap, topic_name):
    create_topic(bootstrap, topic_name)
    items = records(10)
    # the first with acks=1: it waits until the new partition's leader serves it; an acks=0 record
    # the leader cannot take is dropped with the connection (Kafka's acks=0 contract)
    produce(bootstrap, topic_name, items[:1], acks="1")
    produce(bootstrap, topic_name, items[1:], acks="0")
    # acks=0 reports no offsets; the records are there all the same, in order
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        deadline = time.monotonic() + WAIT_S
        while consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=WAIT_S)[1] < 10:
            assert time.monotonic() < deadline, "acks=0 records did not arrive"
            time.sleep(0.2)
    finally:
        consumer.close()
    # offset 1000 is past the log end: OFFSET_OUT_OF_RANGE, and the client resets to the earliest
    got = consume(bootstrap, topic_name, {0: 1000}, 10, **{"auto.offset.reset": "earliest"})
    assert [(m[1], m[3]) for m in got] == [(i, item[2]) for i, item in enumerate(items)]


def test_fetch_responses_of_many_batches_larger_than_a_piece_read_back_exactly(shared_cluster, bootstrap, topic_name):
    """A fetch whose records run to hundreds of KiB goes out in pieces (the records by reference):
    stored Kafka batches as read and v2 batches built from ember's Arrow ones, both in one partition."""
    create_topic(bootstrap, topic_name)
    values = [bytes([65 + i % 26]) * 200 + str(i).encode() for i in range(6000)]
    offsets = produce(bootstrap, topic_name, [(0, None, v, [], BASE_MS + i) for i, v in enumerate(values[:3000])],
                      **{"linger.ms": 50, "batch.size": 400_000})
    assert offsets[-1] == (0, 2999)
    with EmberProducer(shared_cluster.bootstrap, acks="all") as producer:
        table = pa.table({"value": pa.array(values[3000:], pa.binary()),
                          "timestamp": pa.array([BASE_MS + 3000 + i for i in range(3000)], pa.int64())})
        producer.send_batch(topic_name, table, partition=0).result(WAIT_S)
    got = consume(bootstrap, topic_name, {0: 0}, 6000, **{"fetch.max.bytes": 4 << 20,
                                                            "max.partition.fetch.bytes": 2 << 20})
    assert [(m[1], m[3]) for m in got] == list(enumerate(values))
