"""ember's transactional Producer on the shared 3-broker cluster: commits and aborts over several
partitions read back read_committed by ember's Consumer and by librdkafka (each ending at the next
producer epoch), fencing by a second
instance, send_batch in a transaction, a consume-transform-produce step with
send_offsets_to_transaction, the state machine's refusals, and the coordinator aborting a
transaction left open past transaction_timeout_ms."""
from __future__ import annotations

import time

import pyarrow as pa
import pytest

from ember.client import Admin, Consumer, OffsetAndMetadata, Producer, TopicPartition
from ember.errors import IllegalStateError, MessageTooLarge, ProducerFenced, TransactionAborted
from txn_reads import ember_values, librdkafka_values

pytestmark = pytest.mark.integration

WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    return shared_cluster


def create(cluster, topic: str, partitions: int = 3, **config: str) -> None:
    with Admin(bootstrap_servers=cluster.bootstrap) as admin:
        admin.create_topic(topic, partitions=partitions, replication_factor=3, config=config)


def transactional(cluster, transactional_id: str, **options) -> Producer:
    options = {"transaction_timeout_ms": 20000, "linger_ms": 5, "max_block_ms": int(WAIT_S * 1000), **options}
    producer = Producer(bootstrap_servers=cluster.bootstrap, transactional_id=transactional_id, **options)
    producer.init_transactions()
    return producer


def test_committed_transactions_are_read_and_aborted_ones_are_not(cluster, topic_name):
    create(cluster, topic_name)
    committed: list[bytes] = []
    aborted: list[bytes] = []
    with transactional(cluster, f"tx-{topic_name}") as producer:
        for round_ in range(4):
            producer.begin_transaction()
            values = [b"r%d-%d" % (round_, i) for i in range(30)]
            futures = [producer.send(topic_name, v, partition=i % 3) for i, v in enumerate(values)]
            if round_ % 2:
                producer.flush(WAIT_S)      # written, then aborted: the markers must hide them
                producer.abort_transaction()
                aborted += values
            else:
                producer.commit_transaction()
                assert all(f.succeeded() for f in futures)
                committed += values
    assert sorted(ember_values(cluster.bootstrap, topic_name, 3, "read_committed")) == sorted(committed)
    assert sorted(ember_values(cluster.bootstrap, topic_name, 3, "read_uncommitted")) == sorted(committed + aborted)
    from_librdkafka = librdkafka_values(cluster.kafka_bootstrap, topic_name, 3, "read_committed", len(committed))
    assert sorted(from_librdkafka) == sorted(committed)
    with Admin(bootstrap_servers=cluster.bootstrap) as admin:
        state = admin.describe_transaction(f"tx-{topic_name}")
    # each transaction ended at the next epoch (as Kafka's transaction version 2): init gave epoch 0
    assert (state.state, state.producer_epoch) == ("CompleteAbort", 4)


def test_send_batch_in_a_transaction(cluster, topic_name):
    create(cluster, topic_name)
    table = pa.table({"key": [b"k%d" % i for i in range(200)], "value": [b"v%d" % i for i in range(200)]})
    with transactional(cluster, f"tx-{topic_name}") as producer:
        producer.begin_transaction()
        producer.send_batch(topic_name, table)
        producer.abort_transaction()
        producer.begin_transaction()
        written = producer.send_batch(topic_name, table.slice(0, 120))
        producer.commit_transaction()
        assert sum(m.record_count for batches in written.result(WAIT_S).values() for m in batches) == 120
    assert sorted(ember_values(cluster.bootstrap, topic_name, 3, "read_committed")) == sorted(b"v%d" % i for i in range(120))


def test_abort_drops_the_records_not_yet_sent(cluster, topic_name):
    create(cluster, topic_name)
    with transactional(cluster, f"tx-{topic_name}", linger_ms=60000) as producer:   # nothing leaves by itself
        producer.begin_transaction()
        futures = [producer.send(topic_name, b"dropped", partition=p) for p in range(3)]
        producer.abort_transaction()
        for future in futures:
            with pytest.raises(TransactionAborted):
                future.get(1)
        producer.begin_transaction()
        producer.send(topic_name, b"kept", partition=0)
        producer.commit_transaction()             # the commit sends what is queued first
    assert ember_values(cluster.bootstrap, topic_name, 3, "read_uncommitted") == [b"kept"]


def test_a_second_instance_fences_the_first(cluster, topic_name):
    create(cluster, topic_name)
    transactional_id = f"tx-{topic_name}"
    zombie = transactional(cluster, transactional_id)
    zombie.begin_transaction()
    zombie.send(topic_name, b"zombie", partition=0).get(WAIT_S)
    with transactional(cluster, transactional_id) as producer:     # fences the zombie, aborts its transaction
        with pytest.raises(ProducerFenced):
            zombie.commit_transaction()
        with pytest.raises(ProducerFenced):                        # fatal: every later call fails too
            zombie.begin_transaction()
        with pytest.raises(ProducerFenced):
            zombie.send(topic_name, b"late", partition=1)
        zombie.close(5)
        producer.begin_transaction()
        producer.send(topic_name, b"new", partition=1)
        producer.commit_transaction()
    assert ember_values(cluster.bootstrap, topic_name, 3, "read_committed") == [b"new"]


def test_consume_transform_produce_commits_offsets_only_with_the_transaction(cluster, topic_name):
    source, sink, group = topic_name, f"{topic_name}-out", f"{topic_name}-group"
    create(cluster, source, partitions=1)
    create(cluster, sink, partitions=1)
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as plain:
        for i in range(10):
            plain.send(source, b"%d" % i, partition=0)
        plain.flush(WAIT_S)
    tp = TopicPartition(source, 0)
    with Consumer(bootstrap_servers=cluster.bootstrap, group_id=group, auto_offset_reset="earliest",
                  enable_auto_commit=False, isolation_level="read_committed") as consumer, \
            transactional(cluster, f"tx-{topic_name}") as producer:
        consumer.assign([tp])

        def step(commit: bool) -> None:
            consumer.seek(tp, consumer.committed(tp) or 0)
            records: list = []
            deadline = time.monotonic() + WAIT_S
            while len(records) < 10 and time.monotonic() < deadline:
                records += consumer.poll(timeout_ms=200).get(tp, [])
            producer.begin_transaction()
            for record in records:
                producer.send(sink, record.value * 2, partition=0)
            producer.send_offsets_to_transaction({tp: OffsetAndMetadata(records[-1].offset + 1)},
                                                 consumer.group_metadata())
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()

        step(commit=False)
        assert consumer.committed(tp) is None                      # the aborted step committed nothing
        step(commit=True)
        assert consumer.committed(tp) == 10
    assert ember_values(cluster.bootstrap, sink, 1, "read_committed") == [b"%d" % i * 2 for i in range(10)]


def test_a_refused_batch_makes_the_transaction_abortable_and_the_next_one_commits(cluster, topic_name):
    """The broker refuses a numbered batch (larger than the topic's max.message.bytes): the
    transaction must be aborted, and the next epoch (no sequence gap) commits on that partition."""
    create(cluster, topic_name, partitions=1, **{"max.message.bytes": "2048"})
    with transactional(cluster, f"tx-{topic_name}") as producer:
        producer.begin_transaction()
        producer.send(topic_name, b"before", partition=0).get(WAIT_S)
        too_large = producer.send(topic_name, b"x" * 4096, partition=0)
        with pytest.raises(MessageTooLarge):
            too_large.get(WAIT_S)
        with pytest.raises(MessageTooLarge):         # abortable: only abort_transaction() is allowed
            producer.commit_transaction()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic_name, b"after", partition=0)
        producer.commit_transaction()
    assert ember_values(cluster.bootstrap, topic_name, 1, "read_committed") == [b"after"]


def test_illegal_calls_raise_clear_errors(cluster, topic_name):
    create(cluster, topic_name)
    producer = Producer(bootstrap_servers=cluster.bootstrap, transactional_id=f"tx-{topic_name}")
    try:
        with pytest.raises(IllegalStateError, match="before init_transactions"):
            producer.begin_transaction()
        producer.init_transactions(WAIT_S)
        with pytest.raises(IllegalStateError, match="READY"):
            producer.commit_transaction()
        with pytest.raises(IllegalStateError, match="READY"):
            producer.send(topic_name, b"outside", partition=0)
        producer.begin_transaction()
        with pytest.raises(IllegalStateError, match="IN_TRANSACTION"):
            producer.begin_transaction()
        producer.abort_transaction()
    finally:
        producer.close(5)
    with pytest.raises(ValueError, match="acks='all'"):
        Producer(bootstrap_servers=cluster.bootstrap, transactional_id="x", acks=1)
    with Producer(bootstrap_servers=cluster.bootstrap) as plain, pytest.raises(IllegalStateError):
        plain.begin_transaction()


def test_coordinator_aborts_a_transaction_open_past_its_timeout(cluster, topic_name):
    """The shared cluster checks timeouts every 10 s (transaction.abort.timed.out.transaction.cleanup.interval.ms)."""
    create(cluster, topic_name)
    producer = transactional(cluster, f"tx-{topic_name}", transaction_timeout_ms=1000)
    try:
        producer.begin_transaction()
        producer.send(topic_name, b"left open", partition=0).get(WAIT_S)
        tp = TopicPartition(topic_name, 0)
        with Consumer(bootstrap_servers=cluster.bootstrap, isolation_level="read_committed") as consumer:
            deadline = time.monotonic() + WAIT_S
            while consumer.end_offsets([tp])[tp] == 0 and time.monotonic() < deadline:
                time.sleep(0.5)       # the last stable offset moves past the transaction once it is aborted
            assert consumer.end_offsets([tp])[tp] == 2      # the record and the abort marker
        assert ember_values(cluster.bootstrap, topic_name, 3, "read_committed") == []
        with pytest.raises(ProducerFenced):       # the abort bumped the epoch: this producer is fenced
            producer.commit_transaction()
    finally:
        producer.close(5)
