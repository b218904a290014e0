"""Producer, Consumer and Admin against real brokers (LocalCluster: real ZooKeeper + processes)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import defaultdict

import pyarrow as pa
import pytest

from ember.client import Admin, Consumer, OffsetAndTimestamp, Producer, TopicPartition
from ember.client.partitioner import partition_for_key
from ember.errors import (
    InvalidReplicationFactor,
    KafkaTimeoutError,
    MessageTooLarge,
    OffsetOutOfRange,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from ember.launcher.local import LocalCluster
from ember.net.connection import Connection, parse_bootstrap
from ember.wire.api_keys import ApiKey
from ember.wire.frame import decode_response

pytestmark = pytest.mark.integration


def consume_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 60) -> dict[int, list]:
    """Every record of ``topic`` from the beginning, per partition, until ``expected`` arrived."""
    out: dict[int, list] = defaultdict(list)
    with Consumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        deadline = time.monotonic() + timeout_s
        count = 0
        while count < expected and time.monotonic() < deadline:
            for tp, records in consumer.poll(500).items():
                out[tp.partition] += records
                count += len(records)
    return out


def test_keyed_records_round_trip_in_order(shared_cluster: LocalCluster, topic_name: str) -> None:
    bootstrap = shared_cluster.bootstrap
    with Admin(bootstrap) as admin:
        admin.create_topic(topic_name, partitions=6, replication_factor=2)
    n = 100_000
    with Producer(bootstrap, acks="all") as producer:
        futures = [producer.send(topic_name, b"value-%d" % i, key=b"key-%d" % (i % 997),
                                 headers=[("i", b"%d" % i)] if i % 10000 == 0 else None) for i in range(n)]
        producer.flush(60)
        metadata = [f.get(0) for f in futures]
    for i, md in enumerate(metadata):
        assert md.partition == partition_for_key(b"key-%d" % (i % 997), 6)
    records = consume_all(bootstrap, topic_name, n)
    assert sum(len(r) for r in records.values()) == n
    sent_by_partition: dict[int, list[int]] = defaultdict(list)
    for i, md in enumerate(metadata):
        sent_by_partition[md.partition].append(i)
    for partition, got in records.items():
        indexes = sent_by_partition[partition]
        assert [r.value for r in got] == [b"value-%d" % i for i in indexes]          # exact contents, in order
        assert [r.offset for r in got] == [metadata[i].offset for i in indexes]
        assert [r.offset for r in got] == list(range(len(got)))
        assert all(r.key == b"key-%d" % (i % 997) for r, i in zip(got, indexes))
        assert all(r.headers == ([("i", b"%d" % i)] if i % 10000 == 0 else []) for r, i in zip(got, indexes))


def test_send_batch_round_trip(shared_cluster: LocalCluster, topic_name: str) -> None:
    bootstrap = shared_cluster.bootstrap
    with Admin(bootstrap) as admin:
        admin.create_topic(topic_name, partitions=3)
    n = 30_000
    keys = [b"k%d" % (i % 101) if i % 7 else None for i in range(n)]
    table = pa.table({"key": pa.array(keys, pa.binary()),
                      "value": pa.array([os.urandom(8) + b"%d" % i for i in range(n)], pa.binary()),
                      "timestamp": pa.array(range(1_000_000, 1_000_000 + n), pa.int64())})
    with Producer(bootstrap) as producer:
        result = producer.send_batch(topic_name, table).result(60)
        explicit = producer.send_batch(topic_name, table.slice(0, 10), partition=2).result(30)
    assert sum(b.record_count for batches in result.values() for b in batches) == n
    assert explicit[TopicPartition(topic_name, 2)][0].record_count == 10
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic_name, p) for p in range(3)])
        got: dict[int, list[pa.RecordBatch]] = defaultdict(list)
        deadline = time.monotonic() + 60
        while sum(b.num_rows for bs in got.values() for b in bs) < n + 10 and time.monotonic() < deadline:
            for tp, batch in consumer.poll_batches(500).items():
                assert batch.schema.names == ["offset", "timestamp", "key", "value", "headers"]
                got[tp.partition].append(batch)
    rows = {p: pa.Table.from_batches(bs).to_pylist() for p, bs in got.items()}
    seen = []
    for partition, partition_rows in rows.items():
        assert [r["offset"] for r in partition_rows] == list(range(len(partition_rows)))
        if partition == 2:   # the explicitly placed rows come last
            assert [r["value"] for r in partition_rows[-10:]] == table["value"].to_pylist()[:10]
            partition_rows = partition_rows[:-10]
        assert all(partition == partition_for_key(r["key"], 3) for r in partition_rows if r["key"] is not None)
        seen += [(r["key"], r["value"], r["timestamp"]) for r in partition_rows]
    assert sorted(seen, key=lambda r: r[2]) == list(zip(keys, table["value"].to_pylist(), range(1_000_000, 1_000_000 + n)))


def test_idempotent_retry_writes_no_duplicates(shared_cluster: LocalCluster, topic_name: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker appends a batch but its answer is lost (connection dropped): the retry with the
    same producer id and sequence must be deduplicated, not appended twice."""
    bootstrap = shared_cluster.bootstrap
    with Admin(bootstrap) as admin:
        admin.create_topic(topic_name, partitions=1)
    original = Connection._dispatch
    dropped: list[int] = []

    def lose_first_produce_answer(self: Connection, frame: memoryview) -> None:
        entry = self._pending.get(decode_response(frame).correlation_id)
        if entry is not None and entry.api_key == ApiKey.PRODUCE and len(dropped) < 2:
            dropped.append(1)
            self.close()
            return
        original(self, frame)

    monkeypatch.setattr(Connection, "_dispatch", lose_first_produce_answer)
    with Producer(bootstrap, acks="all", retry_backoff_ms=20) as producer:
        futures = [producer.send(topic_name, b"%d" % i) for i in range(500)]
        producer.flush(60)
        offsets = [f.get(0).offset for f in futures]
    assert dropped, "the test never dropped an answer"
    assert offsets == list(range(500))
    records = consume_all(bootstrap, topic_name, 500)[0]
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        assert consumer.end_offsets([TopicPartition(topic_name, 0)]) == {TopicPartition(topic_name, 0): 500}
    assert [r.value for r in records] == [b"%d" % i for i in range(500)]


def test_offsets_timestamps_and_seek(shared_cluster: LocalCluster, topic_name: str) -> None:
    bootstrap = shared_cluster.bootstrap
    tp = TopicPartition(topic_name, 0)
    with Admin(bootstrap) as admin:
        admin.create_topic(topic_name, partitions=1)
    with Producer(bootstrap) as producer:
        for i in range(100):
            producer.send(topic_name, b"%d" % i, timestamp_ms=10_000 + i * 10)
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="latest") as consumer:
        consumer.assign([tp])
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 100}
        assert consumer.position(tp) == 100
        assert consumer.offsets_for_times({tp: 10_500}) == {tp: OffsetAndTimestamp(50, 10_500)}
        assert consumer.offsets_for_times({tp: 10_505}) == {tp: OffsetAndTimestamp(51, 10_510)}
        assert consumer.offsets_for_times({tp: 99_999}) == {tp: None}
        consumer.seek(tp, 42)
        records = consumer.poll(10_000, max_records=5)[tp]
        assert [(r.offset, r.value, r.timestamp) for r in records] == [(42 + i, b"%d" % (42 + i), 10_420 + 10 * i)
                                                                     for i in range(5)]
        assert consumer.position(tp) == 47
        consumer.seek_to_beginning(tp)
        assert consumer.poll(10_000, max_records=1)[tp][0].offset == 0
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == 100


def test_auto_offset_reset_none(shared_cluster: LocalCluster, topic_name: str) -> None:
    bootstrap = shared_cluster.bootstrap
    tp = TopicPartition(topic_name, 0)
    with Admin(bootstrap) as admin:
        admin.create_topic(topic_name, partitions=1)
    with Producer(bootstrap) as producer:
        producer.send(topic_name, b"only").get(30)
    with Consumer(topic_name, bootstrap_servers=bootstrap, auto_offset_reset="none") as consumer:
        with pytest.raises(OffsetOutOfRange, match="auto_offset_reset='none'"):
            consumer.poll(100)
        consumer.seek(tp, 5)
        with pytest.raises(OffsetOutOfRange, match="offset 5 is out of range"):
            consumer.poll(5000)
        consumer.seek(tp, 0)
        assert consumer.poll(5000)[tp][0].value == b"only"


def test_unknown_topic_and_oversized_record(shared_cluster: LocalCluster, topic_name: str) -> None:
    bootstrap = shared_cluster.bootstrap
    with Producer(bootstrap, max_block_ms=1000) as producer:
        started = time.monotonic()
        with pytest.raises(UnknownTopicOrPartition, match=topic_name):
            producer.send(topic_name, b"x")
        assert time.monotonic() - started < 30
        with Admin(bootstrap) as admin:
            admin.create_topic(topic_name, partitions=2)
        with pytest.raises(MessageTooLarge):
            producer.send(topic_name, b"x" * (2 * 1024 * 1024))
        with pytest.raises(UnknownTopicOrPartition, match="no partition 7"):
            producer.send(topic_name, b"x", partition=7)
        assert producer.send(topic_name, b"fits", partition=1).get(30).partition == 1


def test_admin_topics(shared_cluster: LocalCluster, topic_name: str) -> None:
    with Admin(shared_cluster.bootstrap) as admin:
        admin.create_topic(topic_name, partitions=2, replication_factor=3, config={"retention.ms": 3600000})
        with pytest.raises(TopicAlreadyExists):
            admin.create_topic(topic_name)
        with pytest.raises(InvalidReplicationFactor):
            admin.create_topic(topic_name + "-rf", replication_factor=9)
        assert topic_name in admin.list_topics()
        with Producer(shared_cluster.bootstrap, acks="all") as producer:
            for i in range(10):
                producer.send(topic_name, b"%d" % i, partition=0)
        description = admin.describe_topic(topic_name)
        first = description.partitions[0]
        assert (first.partition, len(first.replicas), first.log_start_offset, first.high_watermark) == (0, 3, 0, 10)
        assert first.leader in first.replicas and first.log_end_offset == 10
        assert description.config["retention.ms"] == "3600000"
        admin.alter_configs(topic_name, {"retention.ms": 7200000})
        assert admin.describe_configs(topic_name)["retention.ms"]["value"] == "7200000"
        admin.delete_topic(topic_name)
        assert topic_name not in admin.list_topics()
        with pytest.raises(UnknownTopicOrPartition):
            admin.describe_topic(topic_name)


def test_admin_groups(shared_cluster: LocalCluster, topic_name: str) -> None:
    """The one Admin also lists and describes consumer groups, and ``close`` closes the group
    coordinator's connection along with the brokers' pool."""
    group = f"g-{topic_name}"
    with Admin(shared_cluster.bootstrap) as admin:
        admin.create_topic(topic_name, partitions=2, replication_factor=2)
        with Producer(shared_cluster.bootstrap, acks="all") as producer:
            for i in range(10):
                producer.send(topic_name, b"%d" % i, partition=i % 2)
        with Consumer(topic_name, bootstrap_servers=shared_cluster.bootstrap, group_id=group,
                      auto_offset_reset="earliest", enable_auto_commit=False, client_id="admin-test") as consumer:
            read = 0
            deadline = time.monotonic() + 60
            while read < 10 and time.monotonic() < deadline:
                read += sum(len(batch) for batch in consumer.poll(200).values())
            consumer.commit()
            assert admin.list_groups()[group] == "Stable"
            described = admin.describe_group(group)
            assert (described.state, len(described.members), described.members[0].client_id) == ("Stable", 1, "admin-test")
            assert sorted(described.members[0].assignment) == [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)]
            assert {p.partition.partition: (p.committed, p.log_end, p.lag) for p in described.partitions} == {
                0: (5, 5, 0), 1: (5, 5, 0)}
        admin.commit_offsets(group, {TopicPartition(topic_name, 0): 2})      # the member has left
        assert admin.list_groups()[group] == "Empty"
        assert [p.lag for p in admin.describe_group(group).partitions] == [3, 0]
        coordinator = admin._coordinator(group)
        connections = [coordinator._pool.get(coordinator.coordinator()), *admin._metadata.pool._connections.values()]
    assert connections and all(conn.closed for conn in connections)


def test_broker_down_retries_then_times_out(make_cluster, topic_name: str) -> None:
    cluster = make_cluster(brokers=1)
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic_name, partitions=1)
    with Producer(cluster.bootstrap, request_timeout_ms=1000, delivery_timeout_ms=3000, retry_backoff_ms=50) as producer:
        assert producer.send(topic_name, b"before").get(30).offset == 0
        cluster.kill_broker(1)
        future = producer.send(topic_name, b"after")
        with pytest.raises(KafkaTimeoutError, match="delivery_timeout_ms.*last error"):
            future.get(30)
        cluster.restart_broker(1)
        assert producer.send(topic_name, b"again").get(30).offset == 1


def test_admin_keeps_answering_after_the_controller_it_asked_dies(make_cluster, topic_name: str) -> None:
    """Admin asks the controller (same view after a write); found by the chaos harness: a
    streaming query died because describe_topic gave up when that broker was SIGKILLed."""
    cluster = make_cluster(brokers=3)
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic_name, partitions=2, replication_factor=3)
        assert len(admin.describe_topic(topic_name).partitions) == 2
        connection = Connection(parse_bootstrap(cluster.bootstrap)[0])
        try:
            controller = connection.request(ApiKey.METADATA, {"topics": []}).result(10).body["controller_id"]
        finally:
            connection.close()
        cluster.kill_broker(controller)
        assert len(admin.describe_topic(topic_name).partitions) == 2
        assert topic_name in admin.list_topics()


def test_admin_answers_while_the_controller_and_another_broker_are_dead(make_cluster, topic_name: str) -> None:
    """Two of three brokers SIGKILLed at once stay registered until their sessions expire: the
    Admin tries each broker in turn, not one random other (found by the chaos harness: a
    streaming query died when its retry picked the second dead broker)."""
    cluster = make_cluster(brokers=3, config={"zookeeper.session.timeout.ms": "30000"})
    with Admin(cluster.bootstrap) as setup:
        setup.create_topic(topic_name, partitions=3, replication_factor=3)   # each broker leads one
    connection = Connection(parse_bootstrap(cluster.bootstrap)[0])
    try:
        controller = connection.request(ApiKey.METADATA, {"topics": []}).result(10).body["controller_id"]
    finally:
        connection.close()
    other = next(b for b in (1, 2, 3) if b != controller)
    cluster.kill_broker(controller)
    cluster.kill_broker(other)
    for _ in range(8):      # fresh clients: each one's single random retry had an even chance of a dead broker
        with Admin(cluster.bootstrap) as admin:
            assert topic_name in admin.list_topics()
            assert "retention.ms" in admin.describe_configs(topic_name)
    with Admin(cluster.bootstrap, request_timeout_ms=60000) as admin:
        # the layout only: no ListOffsets to leaders that are dead but registered (each would hold it 60 s),
        # nor to the survivor (its partition would have high watermark 0)
        layout = admin.describe_topic(topic_name, configs=False, offsets=False).partitions
        assert [(p.partition, len(p.replicas), p.high_watermark) for p in layout] == [(0, 3, -1), (1, 3, -1), (2, 3, -1)]


def test_admin_answers_from_another_broker_while_the_controller_hangs(make_cluster, topic_name: str) -> None:
    """A paused controller stays registered and accepts connections but answers nothing: the
    Admin asks another broker after one request timeout, and learns the controller from it too
    (a refresh from the hung broker would fail the call; seen as a flaky test in CI)."""
    cluster = make_cluster(brokers=2, config={"zookeeper.session.timeout.ms": "30000"})
    with Admin(cluster.bootstrap) as setup:
        setup.create_topic(topic_name, partitions=1, replication_factor=2)
    connection = Connection(parse_bootstrap(cluster.bootstrap)[0])
    try:
        hung = connection.request(ApiKey.METADATA, {"topics": []}).result(10).body["controller_id"]
    finally:
        connection.close()
    cluster.pause_broker(hung)
    try:
        for _ in range(3):      # fresh clients: the bootstrap list or the controller sends them to the hung broker
            with Admin(cluster.bootstrap, request_timeout_ms=2000) as admin:
                assert [p.partition for p in admin.describe_topic(topic_name, configs=False).partitions] == [0]
    finally:
        cluster.resume_broker(hung)


def run_cli(*args: str, stdin: bytes = b"", env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ember.cli", *args], input=stdin, capture_output=True,
                          timeout=60, env={**os.environ, **(env or {})})


def test_cli_produce_consume(shared_cluster: LocalCluster, topic_name: str) -> None:
    env = {"EMBER_BOOTSTRAP": shared_cluster.bootstrap}
    created = run_cli("topics", "create", topic_name, "--partitions", "2", "--config", "retention.ms=600000", env=env)
    assert created.returncode == 0, created.stderr
    lines = [b"k%d:line %d" % (i % 3, i) for i in range(50)]
    produced = run_cli("produce", topic_name, "--key-separator", ":", stdin=b"\n".join(lines) + b"\n", env=env)
    assert produced.returncode == 0 and b"50 records sent" in produced.stderr, produced.stderr
    consumed = run_cli("consume", topic_name, "--from-beginning", "--max-messages", "50", "--timeout-ms", "20000",
                       "--print-key", "--separator", ":", env=env)
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.splitlines()) == sorted(lines)
    partition = partition_for_key(b"k0", 2)
    one = run_cli("consume", topic_name, "--partition", str(partition), "--offset", "1", "--max-messages", "1",
                  "--print-offset", "--timeout-ms", "20000", env=env)
    assert one.stdout.startswith(b"%d:1\t" % partition), one.stdout
    described = run_cli("topics", "describe", topic_name, env=env)
    assert b"high watermark" in described.stdout and b"retention.ms=600000" in described.stdout
    missing = run_cli("topics", "describe", topic_name + "-nope", env=env)
    assert missing.returncode == 1 and b"UnknownTopicOrPartition" in missing.stderr


def test_cli_grows_a_topic_and_deletes_its_oldest_records(shared_cluster: LocalCluster, topic_name: str) -> None:
    env = {"EMBER_BOOTSTRAP": shared_cluster.bootstrap}
    assert run_cli("topics", "create", topic_name, "--replication-factor", "2", env=env).returncode == 0
    produced = run_cli("produce", topic_name, stdin=b"".join(b"line %d\n" % i for i in range(10)), env=env)
    assert produced.returncode == 0, produced.stderr
    grown = run_cli("topics", "alter", topic_name, "--partitions", "3", env=env)
    assert grown.returncode == 0 and b"(3 partitions)" in grown.stdout, grown.stderr
    deleted = run_cli("topics", "delete-records", topic_name, "--partition", "0", "--offset", "4", env=env)
    assert deleted.returncode == 0 and b"log start 4" in deleted.stdout, deleted.stderr
    with Admin(shared_cluster.bootstrap) as admin:
        partitions = admin.describe_topic(topic_name).partitions
    assert [(p.partition, p.log_start_offset, p.high_watermark) for p in partitions] == [(0, 4, 10), (1, 0, 0), (2, 0, 0)]
    shrink = run_cli("topics", "alter", topic_name, "--partitions", "2", env=env)
    assert shrink.returncode == 1 and b"InvalidPartitions" in shrink.stderr and b"has 3 partitions" in shrink.stderr
    too_far = run_cli("topics", "delete-records", topic_name, "--partition", "0", "--offset", "11", env=env)
    assert too_far.returncode == 1 and b"OffsetOutOfRange" in too_far.stderr and b"high watermark 10" in too_far.stderr


def test_long_poll_returns_records_produced_while_waiting(shared_cluster: LocalCluster, topic_name: str) -> None:
    bootstrap = shared_cluster.bootstrap
    tp = TopicPartition(topic_name, 0)
    with Admin(bootstrap) as admin:
        admin.create_topic(topic_name, partitions=1)
    with Consumer(topic_name, bootstrap_servers=bootstrap, fetch_max_wait_ms=5000) as consumer, \
            Producer(bootstrap) as producer:
        assert consumer.poll(0) == {} and consumer.position(tp) == 0   # a fetch is now parked at the broker
        producer.send(topic_name, b"late").get(30)
        assert [r.value for r in consumer.poll(20_000)[tp]] == [b"late"]


def test_leader_failover_keeps_every_acknowledged_record_once(make_cluster, topic_name: str) -> None:
    cluster = make_cluster(brokers=3)
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic_name, partitions=1, replication_factor=3)
        deadline = time.monotonic() + 30
        while (leader := admin.describe_topic(topic_name).partitions[0].leader) < 0:
            assert time.monotonic() < deadline, "the new topic never got a leader"
            time.sleep(0.1)
    acked: list[int] = []
    with Producer(cluster.bootstrap, acks="all", request_timeout_ms=3000, retry_backoff_ms=100,
                  delivery_timeout_ms=60000) as producer:
        for i in range(2000):
            producer.send(topic_name, b"%d" % i).add_callback(lambda md, i=i: acked.append(i))
            if i == 1000:
                producer.flush(30)
                cluster.kill_broker(leader)
        producer.flush(90)
    assert len(acked) == 2000
    values = [int(r.value) for r in consume_all(cluster.bootstrap, topic_name, 2000, timeout_s=15)[0]]
    assert values == list(range(2000))       # none lost, none duplicated, in order


def test_flush_returns_after_every_callback_ran(shared_cluster: LocalCluster, topic_name: str) -> None:
    """Kafka's contract: when flush() returns, the callbacks of the flushed records have run."""
    with Admin(shared_cluster.bootstrap) as admin:
        admin.create_topic(topic_name, partitions=1)
    acked: list[int] = []

    def slow_callback(metadata) -> None:
        time.sleep(0.0005)   # widens the window between "future resolved" and "callbacks done"
        acked.append(metadata.offset)

    with Producer(shared_cluster.bootstrap, acks=1, linger_ms=50) as producer:
        for i in range(1000):
            producer.send(topic_name, b"v%d" % i).add_callback(slow_callback)
        producer.flush(timeout=60)
        assert len(acked) == 1000
        assert sorted(acked) == list(range(1000))
