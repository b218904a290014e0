"""A consume-transform-produce loop written with confluent-kafka (librdkafka) on ember's Kafka
listener, committing its input offsets with send_offsets_to_transaction, copies every record
exactly once while a broker is SIGKILLed mid-transaction (after the transaction's records were
produced, before it commits) and restarted: once a broker leading an output partition that does
not coordinate the transaction, once the broker coordinating the transactional id. An abortable
error aborts and rewinds to the committed offsets, a fatal one (fenced) starts a new producer. The
output, read read_committed by librdkafka and by ember's Spark source, holds each input record once."""
from __future__ import annotations

import time
from typing import Callable, Iterator, TypeVar

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka_helpers import create_topic, produce

from ember.launcher.local import LocalCluster
from txn_failover import coordinator_of, leaders_of
from txn_reads import librdkafka_values, spark_values

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TOTAL = 600
PARTITIONS = 3
BATCH = 25
#: Bound of one copy, faults included; of each librdkafka call (a timed-out call is made again).
WAIT_S = 180.0
CALL_S = 10.0
#: A killed broker leaves ZooKeeper (its partitions and transactional ids move) within 3 s.
CONFIG = {"zookeeper.session.timeout.ms": "3000", "replica.fetch.backoff.ms": "200"}

#: librdkafka 2.x's send_offsets_to_transaction ignores its timeout (librdkafka #5456) and, when the
#: group coordinator it cached was killed and left the metadata, waits for another broker connection
#: to change state before it looks the coordinator up again (#5511): in one CI run that took until
#: ember closed an idle connection (connections.max.idle.ms, 10 min), and the transaction had timed
#: out by then. The producer closing its own idle connections makes such changes come within seconds.
IDLE_CLOSE_MS = 5000

T = TypeVar("T")

#: What librdkafka's committed() reports, not retrying by itself, while the group's coordinator moves.
COORDINATOR_MOVING = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                                KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError._TIMED_OUT, KafkaError._TRANSPORT})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One private 3-broker cluster for both scenarios (each with its own topics and ids)."""
    with LocalCluster(tmp_path_factory.mktemp("eos-failover"), broker_count=3, broker_config=CONFIG) as started:
        yield started


def transform(value: bytes) -> bytes:
    return b"out-" + value


def retried(call: Callable[[], T], deadline: float, also: frozenset[int] = frozenset()) -> T:
    """A call whose error is retriable (it timed out: a broker is down), or one of ``also``, is
    made again, as librdkafka's documentation prescribes for the transaction calls."""
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0]
            if not (error.retriable() or error.code() in also) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class Copier:
    """The loop: consume a batch (read_committed), produce its transform in a transaction, send the
    consumed offsets to the transaction, commit; on an error, abort (or, fenced, start a new
    producer) and rewind to the group's committed offsets."""

    def __init__(self, cluster: LocalCluster, source: str, sink: str, transactional_id: str) -> None:
        self.bootstrap, self.source, self.sink, self.transactional_id = \
            cluster.kafka_bootstrap, source, sink, transactional_id
        self.tps = [TopicPartition(source, p) for p in range(PARTITIONS)]
        self.consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"{transactional_id}-group",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "isolation.level": "read_committed"})
        self.started = time.monotonic()
        self.events: list[str] = []    # faults and errors, when: shown if the copy fails
        self.producer = self.new_producer()

    def note(self, what: str) -> None:
        self.events.append(f"{time.monotonic() - self.started:6.1f}s {what}")

    def new_producer(self) -> Producer:
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id,
                             "transaction.timeout.ms": 30000, "linger.ms": 5,
                             "connections.max.idle.ms": IDLE_CLOSE_MS})
        retried(lambda: producer.init_transactions(CALL_S), time.monotonic() + WAIT_S)
        return producer

    def committed(self, deadline: float) -> dict[int, int]:
        """The group's committed offset per input partition (0 when none)."""
        found = retried(lambda: self.consumer.committed(self.tps, timeout=CALL_S), deadline, COORDINATOR_MOVING)
        return {tp.partition: max(tp.offset, 0) for tp in found}

    def rewind(self, deadline: float) -> None:
        self.consumer.assign([TopicPartition(self.source, p, offset) for p, offset in self.committed(deadline).items()])

    def run(self, ends: dict[int, int], mid_transaction: Callable[[int], None]) -> None:
        """Copy until the committed offsets reach ``ends``; ``mid_transaction(step)`` runs after a
        transaction's records were produced (and sent), before its offsets and commit."""
        deadline = time.monotonic() + WAIT_S
        self.rewind(deadline)
        step = 0
        while True:
            assert time.monotonic() < deadline, f"the copy did not finish within {WAIT_S:.0f}s: {self.events}"
            messages = [m for m in self.consumer.consume(BATCH, timeout=0.5) if m.error() is None]
            if not messages:
                if self.committed(deadline) == ends:
                    return
                continue
            step += 1
            try:
                self.producer.begin_transaction()
                for i, message in enumerate(messages):     # every transaction writes every output partition
                    self.producer.produce(self.sink, value=transform(message.value()), key=message.key(),
                                          partition=i % PARTITIONS)
                self.producer.flush(CALL_S)
                mid_transaction(step)
                offsets = {m.partition(): m.offset() + 1 for m in messages}
                positions = [TopicPartition(self.source, p, o) for p, o in offsets.items()]
                metadata = self.consumer.consumer_group_metadata()
                retried(lambda: self.producer.send_offsets_to_transaction(positions, metadata, CALL_S), deadline)
                retried(lambda: self.producer.commit_transaction(CALL_S), deadline)
            except KafkaException as exc:
                self.note(f"step {step}: {exc.args[0].name()}: {exc.args[0].str()}")
                self.recover(exc, deadline)
                self.rewind(deadline)

    def recover(self, exc: KafkaException, deadline: float) -> None:
        if not exc.args[0].fatal():
            try:
                retried(lambda: self.producer.abort_transaction(CALL_S), deadline)
                self.note("aborted")
                return
            except KafkaException as abort_exc:
                self.note(f"abort: {abort_exc.args[0].str()}")
                if not abort_exc.args[0].fatal():
                    raise
        self.producer = self.new_producer()    # its init_transactions ends what the fenced one left open

    def close(self) -> None:
        self.consumer.close()


def copy_while_killing(cluster: LocalCluster, spark, name: str, choose_victim: Callable[[str, str], int]) -> None:
    """Feed ``TOTAL`` unique values, copy them with a ``Copier`` while the broker
    ``choose_victim(sink, transactional_id)`` is killed at step 3 (mid-transaction) and restarted at
    step 7, then read the output read_committed (librdkafka, Spark): each value once, none lost."""
    source, sink, transactional_id = f"{name}-in", f"{name}-out", f"{name}-copier"
    for topic in (source, sink):
        create_topic(cluster.kafka_bootstrap, topic, partitions=PARTITIONS, replication_factor=3)
    values = [b"%04d" % i for i in range(TOTAL)]
    produce(cluster.kafka_bootstrap, source, [(i % PARTITIONS, None, v, None, 0) for i, v in enumerate(values)],
            acks="all")
    ends = {p: len(range(p, TOTAL, PARTITIONS)) for p in range(PARTITIONS)}
    victims: list[int] = []

    copier = Copier(cluster, source, sink, transactional_id)

    def mid_transaction(step: int) -> None:
        if step == 3:
            victims.append(choose_victim(sink, transactional_id))
            cluster.kill_broker(victims[-1])
            copier.note(f"step 3: killed broker {victims[-1]}")
        elif step == 7:
            cluster.restart_broker(victims[-1])
            copier.note(f"step 7: restarted broker {victims[-1]}")

    try:
        copier.run(ends, mid_transaction)
    finally:
        copier.close()
        if victims and not cluster.broker_running(victims[-1]):
            cluster.restart_broker(victims[-1])
    assert victims, "the copy ended before the fault"
    want = sorted(transform(v) for v in values)
    librdkafka = sorted(librdkafka_values(cluster.kafka_bootstrap, sink, PARTITIONS, "read_committed", TOTAL))
    assert librdkafka == want, f"librdkafka read {len(librdkafka)} of {TOTAL} (none lost, none twice); {copier.events}"
    in_spark = sorted(spark_values(spark, cluster.bootstrap, sink))
    assert in_spark == want, f"Spark read {len(in_spark)} of {TOTAL} (none lost, none twice); {copier.events}"


def test_copy_loop_is_exactly_once_when_an_output_leader_is_killed_mid_transaction(cluster, spark):
    def output_leader(sink: str, transactional_id: str) -> int:
        coordinator = coordinator_of(cluster, transactional_id)
        leaders = set(leaders_of(cluster, sink).values()) - {coordinator}
        assert leaders, f"every partition of {sink} is led by the coordinator {coordinator}"
        return min(leaders)

    copy_while_killing(cluster, spark, "eos-leader", output_leader)


def test_copy_loop_is_exactly_once_when_the_transaction_coordinator_is_killed_mid_transaction(cluster, spark):
    copy_while_killing(cluster, spark, "eos-coordinator",
                       lambda _sink, transactional_id: coordinator_of(cluster, transactional_id))
