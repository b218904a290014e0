"""``Producer(producer_id=...)``: a caller-chosen idempotent identity, deduplicated across producer instances."""
from __future__ import annotations

from typing import Optional

import pyarrow as pa
import pytest

from ember.client import Admin, Consumer, Producer, TopicPartition
from ember.client.accumulator import RecordAccumulator
from ember.client.producer import split_batches
from ember.client.sender import Sender, SenderConfig
from ember.errors import OutOfOrderSequenceNumber, UnknownProducerId
from ember.launcher.local import LocalCluster

PRODUCER_ID = (1 << 62) + 12345
MAX_REQUEST_SIZE = 4096   # ~34 rows of table() per batch
PARTITIONS = 2


def table(count: int, *, tag: str = "v") -> pa.Table:
    return pa.table({"key": pa.array([b"k%d" % (i % 7) for i in range(count)], pa.binary()),
                     "value": pa.array([f"{tag}-{i:05d}".encode() * 8 for i in range(count)], pa.binary())})


def producer(bootstrap: str) -> Producer:
    """A fresh producer with the fixed identity (as a re-run after a restart creates)."""
    return Producer(bootstrap, acks="all", producer_id=PRODUCER_ID, max_request_size=MAX_REQUEST_SIZE)


def send(bootstrap: str, topic: str, rows: pa.Table, partition: Optional[int] = None) -> dict[TopicPartition, list]:
    with producer(bootstrap) as p:
        return p.send_batch(topic, rows, partition=partition).result(timeout=30)


def stored(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    """Every value in the topic, per partition, in offset order."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        remaining = sum(consumer.end_offsets(tps).values())
        while remaining > 0:   # more may arrive meanwhile
            for tp, records in consumer.poll(1000).items():
                out[tp.partition] += [r.value for r in records]
                remaining -= len(records)
    return out


@pytest.fixture
def topic(shared_cluster: LocalCluster, topic_name: str) -> str:
    with Admin(shared_cluster.bootstrap) as admin:
        admin.create_topic(topic_name, partitions=PARTITIONS, replication_factor=2)
    return topic_name


@pytest.mark.integration
def test_same_identity_resend_returns_original_offsets(shared_cluster: LocalCluster, topic: str) -> None:
    rows = table(200)
    first = send(shared_cluster.bootstrap, topic, rows)
    assert all(len(batches) > 1 for batches in first.values())   # several batches (sequences) per partition
    assert send(shared_cluster.bootstrap, topic, rows) == first
    assert sorted(sum(stored(shared_cluster.bootstrap, topic).values(), [])) == sorted(rows["value"].to_pylist())


@pytest.mark.integration
def test_resend_after_a_partial_send_writes_only_the_rest(shared_cluster: LocalCluster, topic: str) -> None:
    rows = table(150)
    batches = split_batches(rows, MAX_REQUEST_SIZE)
    assert 2 < len(batches) <= 5   # the broker caches a producer's last 5 batches per partition
    with producer(shared_cluster.bootstrap) as killed:   # a run that stopped after two batches
        for batch in batches[:2]:
            killed.send_batch(topic, batch, partition=0).result(timeout=30)
    send(shared_cluster.bootstrap, topic, rows, partition=0)
    assert stored(shared_cluster.bootstrap, topic)[0] == rows["value"].to_pylist()


@pytest.mark.integration
def test_different_batches_under_a_used_identity_fail_instead_of_taking_a_new_id(
        shared_cluster: LocalCluster, topic: str) -> None:
    rows = table(150)
    send(shared_cluster.bootstrap, topic, rows, partition=0)
    with pytest.raises(OutOfOrderSequenceNumber):
        send(shared_cluster.bootstrap, topic, table(100, tag="other"), partition=0)
    assert stored(shared_cluster.bootstrap, topic)[0] == rows["value"].to_pylist()


@pytest.mark.parametrize("options", [dict(acks=0), dict(enable_idempotence=False), dict(producer_id=-1),
                                     dict(producer_id=2**63), dict(producer_epoch=2**15)])
def test_identity_is_validated(options: dict) -> None:
    with pytest.raises(ValueError):
        Producer("127.0.0.1:1", **{"producer_id": PRODUCER_ID, **options})


@pytest.mark.parametrize("producer_id, resets", [(PRODUCER_ID, False), (-1, True)], ids=["fixed", "assigned"])
def test_failed_batch_resets_only_an_assigned_identity(producer_id: int, resets: bool) -> None:
    accumulator = RecordAccumulator(batch_size=1 << 20, buffer_memory=1 << 20, linger_ms=0)
    config = SenderConfig(acks=-1, compression="none", retries=10, retry_backoff_s=0.01, delivery_timeout_s=60,
                          request_timeout_ms=1000, max_in_flight=5, max_request_size=1 << 20, idempotent=True,
                          producer_id=producer_id)
    sender = Sender(None, accumulator, config, set())   # never started: no broker is needed
    tp = TopicPartition("t", 0)
    batch = accumulator.append_table(tp, table(3), 1024, 1)
    assert accumulator.pop(tp, 5) is batch
    sender._encode(batch)
    sender._retry_or_fail(batch, UnknownProducerId("no state for this producer id"), maybe_written=False)
    if resets:   # an assigned id retries (retriable), and a final failure takes a new id
        sender._fail(accumulator.pop(tp, 5), UnknownProducerId("gave up"), in_flight=True)
    assert isinstance(batch.future.exception(timeout=0), UnknownProducerId)
    assert sender.idempotence.reset_requested is resets
    assert sender.idempotence.producer_id == producer_id
