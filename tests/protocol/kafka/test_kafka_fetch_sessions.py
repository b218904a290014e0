"""KIP-227 fetch sessions on the Kafka listener, with the real clients at 1,000 partitions: the Java
client opens a session and then fetches incrementally (the broker's FetchSessionCache metrics
show it holding every partition), librdkafka fetches sessionless; both read every record."""
from __future__ import annotations

import subprocess
import time

import pytest
from kafka_helpers import WAIT_S, consume, create_topic, produce

from ember.jars import KAFKA_TOOLS
from ember.launcher.scrape import scrape

pytestmark = pytest.mark.integration

PARTITIONS = 1000
RECORDS = 3000
SESSIONS = "ember_server_fetchsessioncache_numincrementalfetchsessions"
CACHED = "ember_server_fetchsessioncache_numincrementalfetchpartitionscached"


def test_java_and_librdkafka_consumers_read_1000_partitions_the_java_one_in_a_session(make_cluster, topic_name):
    cluster = make_cluster(brokers=1, metrics=True)
    bootstrap = cluster.kafka_bootstrap
    create_topic(bootstrap, topic_name, partitions=PARTITIONS)
    items = [(i % PARTITIONS, f"k{i}".encode(), f"value-{i}".encode(), [], 1_700_000_000_000 + i)
             for i in range(RECORDS)]
    produce(bootstrap, topic_name, items)
    broker = next(iter(cluster.brokers.values()))

    def samples():  # type: ignore[no-untyped-def]
        return scrape(broker.host, broker.metrics_port)

    # librdkafka: sessionless (it sends epoch -1), every partition named and answered
    got = consume(bootstrap, topic_name, dict.fromkeys(range(PARTITIONS), 0), RECORDS)
    assert sorted(value for *_, value, _h, _t in got) == sorted(value for _p, _k, value, _h, _t in items)
    assert samples().total(SESSIONS) == 0

    # the Java client: a full fetch opens a session, then incremental fetches; it stays up (waiting for
    # one record more than there is) while the broker's cache is looked at
    java = subprocess.Popen(
        ["java", "-Xmx256m", "-cp", KAFKA_TOOLS.classpath, "org.apache.kafka.tools.consumer.ConsoleConsumer",
         "--bootstrap-server", bootstrap, "--topic", topic_name, "--from-beginning",
         "--max-messages", str(RECORDS + 1), "--timeout-ms", "20000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while samples().total(CACHED) < PARTITIONS:
            assert time.monotonic() < deadline and java.poll() is None, "no fetch session holds every partition"
            time.sleep(0.5)
        assert samples().total(SESSIONS) == 1
        out, err = java.communicate(timeout=WAIT_S + 90)
    finally:
        if java.poll() is None:
            java.kill()
            java.wait(10)
    values = [line for line in out.splitlines() if line.startswith("value-")]    # not the timeout's log line
    assert sorted(values) == sorted(value.decode() for _p, _k, value, _h, _t in items), err[-3000:]


def test_fetch_frames_open_continue_and_leave_a_session_as_kip_227_says(make_cluster, topic_name):
    """Frame by frame (Fetch v13, topic ids): epoch 0 opens a session and answers both partitions;
    epoch 1 naming nothing answers nothing new; after an append only that partition comes back; a
    fetch naming an unknown topic id runs sessionless (session id 0) instead of leaving it out."""
    import datetime
    import uuid

    from kafka_wire import KafkaWire
    from kio.schema.fetch.v13.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    cluster = make_cluster(brokers=1)
    bootstrap = cluster.kafka_bootstrap
    create_topic(bootstrap, topic_name, partitions=2)
    produce(bootstrap, topic_name, [(0, b"k", b"v", [], 1_700_000_000_000)])
    with KafkaWire(bootstrap.split(",")[0]) as wire:
        metadata = wire.call(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=topic_name),),
                                             allow_auto_topic_creation=False,
                                             include_topic_authorized_operations=False))
        topic_id = metadata.topics[0].topic_id

        def fetch(session_id: int, epoch: int, positions: dict[int, int], topic: uuid.UUID = topic_id):  # type: ignore[no-untyped-def]
            parts = tuple(FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1,
                                         log_start_offset=-1, partition_max_bytes=1 << 20) for p, o in positions.items())
            answer = wire.call(FetchRequest(
                replica_id=-1, max_wait=datetime.timedelta(milliseconds=100), min_bytes=1, max_bytes=1 << 20,
                isolation_level=0, session_id=session_id, session_epoch=epoch,
                topics=(FetchTopic(topic_id=topic, partitions=parts),) if parts else (), forgotten_topics_data=()))
            assert answer.error_code == 0
            return answer.session_id, {p.partition_index: p.high_watermark for t in answer.responses
                                       for p in t.partitions}

        session, answered = fetch(0, 0, {0: 0, 1: 0})
        assert session > 0 and answered == {0: 1, 1: 0}
        assert fetch(session, 1, {0: 1}) == (session, {})                 # nothing new
        produce(bootstrap, topic_name, [(1, b"k", b"v", [], 1_700_000_000_001)])
        assert fetch(session, 2, {}) == (session, {1: 1})                 # only what changed
        unknown, answered = fetch(session, 3, {0: 1}, uuid.uuid4())
        assert unknown == 0                                               # the client starts over
