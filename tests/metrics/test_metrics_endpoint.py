"""Every broker's metrics endpoint on a real 3-broker cluster: what producing, consuming, committing
and refused requests add up to, health checks, ``ember cluster status``, ``ember top``, and that
docs/operations.md lists every metric a broker exports."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Producer as KafkaProducer
from metrics_helpers import cluster_total, scrape_all

from ember.client import Admin, Consumer, Producer, TopicPartition
from ember.commands.cluster import print_metrics
from ember.errors import TopicAlreadyExists
from ember.launcher.local import LocalCluster
from ember.launcher.scrape import http_get

pytestmark = pytest.mark.integration

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
TOPIC, GROUP = "metered", "behind"
PER_PARTITION = 100
COMMITTED = {0: 10, 1: 0, 2: PER_PARTITION}


def read_all(bootstrap: str, count: int) -> None:
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(3)])
        read = 0
        while read < count:
            batch = consumer.poll(5000)
            assert batch, f"read {read} of {count} records, then nothing for 5 s"
            read += sum(len(records) for records in batch.values())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """3 brokers serving metrics; topic ``metered`` (3 partitions, RF 3) got 100 records per
    partition, all read back once, and group ``behind`` committed 10, 0 and 100 of them the way a
    Spark query reading with ``groupId`` commits (``Admin.commit_offsets``)."""
    with LocalCluster(tmp_path_factory.mktemp("metrics"), broker_count=3, metrics=True) as running:
        with Admin(running.bootstrap) as admin:
            admin.create_topic(TOPIC, partitions=3, replication_factor=3)
        with Producer(running.bootstrap, acks="all") as producer:
            for i in range(3 * PER_PARTITION):
                producer.send(TOPIC, b"v%d" % i, partition=i % 3)
            producer.flush(30)
        read_all(running.bootstrap, 3 * PER_PARTITION)
        with Admin(running.bootstrap) as admin:
            admin.commit_offsets(GROUP, {TopicPartition(TOPIC, p): offset for p, offset in COMMITTED.items()})
        yield running


def test_records_produced_and_read_are_counted_once_per_topic_across_brokers(cluster) -> None:
    assert cluster_total(cluster, "ember_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == 3 * PER_PARTITION
    brokers = scrape_all(cluster)
    bytes_in = sum(s.total("ember_server_brokertopicmetrics_bytesin_total", topic=TOPIC) for s in brokers.values())
    bytes_out = sum(s.total("ember_server_brokertopicmetrics_bytesout_total", topic=TOPIC) for s in brokers.values())
    assert bytes_in > 3 * PER_PARTITION and bytes_out >= bytes_in   # every batch read back once (or more)
    # followers copied every leader's batches: 2 followers per partition
    assert sum(s.total("ember_server_brokertopicmetrics_replicationbytesin_total", topic=TOPIC)
               for s in brokers.values()) == 2 * bytes_in
    # each partition is reported by its leader only, and is fully replicated
    for partition in ("0", "1", "2"):
        reports = [s for s in brokers.values()
                   if s.get("ember_cluster_partition_insyncreplicascount", topic=TOPIC, partition=partition) is not None]
        assert len(reports) == 1
        assert reports[0].get("ember_cluster_partition_underreplicated", topic=TOPIC, partition=partition) == 0
    # every replica's log holds all of its partition's records
    for samples in brokers.values():
        for partition in ("0", "1", "2"):
            assert samples.get("ember_log_log_logendoffset", topic=TOPIC, partition=partition) == PER_PARTITION
            assert samples.get("ember_log_log_numlogsegments", topic=TOPIC, partition=partition) == 1
    assert sum(s.total("ember_network_requestmetrics_requests_total", request="Produce") for s in brokers.values()) > 0
    assert sum(s.total("ember_controller_activecontrollercount") for s in brokers.values()) == 1


def test_group_lag_and_offsets_are_exported_by_its_coordinator_alone(cluster) -> None:
    brokers = scrape_all(cluster)
    exporters = [s for s in brokers.values() if s.get("ember_consumergroup_lag", group=GROUP) is not None]
    assert len(exporters) == 1
    samples = exporters[0]
    for partition, committed in COMMITTED.items():
        labels = {"group": GROUP, "topic": TOPIC, "partition": str(partition)}
        assert samples.get("ember_consumergroup_current_offset", **labels) == committed
        assert samples.get("ember_consumergroup_lag", **labels) == PER_PARTITION - committed


def test_refused_requests_are_counted_by_error_code(cluster) -> None:
    before = cluster_total(cluster, "ember_network_requestmetrics_errors_total", request="CreateTopics",
                           error="TOPIC_ALREADY_EXISTS")
    with Admin(cluster.bootstrap) as admin, pytest.raises(TopicAlreadyExists):
        admin.create_topic(TOPIC, partitions=3, replication_factor=3)
    assert cluster_total(cluster, "ember_network_requestmetrics_errors_total", request="CreateTopics",
                         error="TOPIC_ALREADY_EXISTS") == before + 1


def test_a_kafka_clients_requests_are_counted_under_its_listener(cluster) -> None:
    from confluent_kafka import Producer as KafkaProducer
    topic = "kafka-metered"
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, partitions=1, replication_factor=3)
    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce(topic, b"kafka-%d" % i)
    assert producer.flush(30) == 0
    assert cluster_total(cluster, "ember_server_brokertopicmetrics_messagesin_total", topic=topic) == 10
    assert cluster_total(cluster, "ember_network_requestmetrics_requests_total", listener="KAFKA",
                         request="Produce") >= 1
    assert cluster_total(cluster, "ember_network_requestmetrics_requests_total", listener="EMBER",
                         request="CreateTopics") >= 1
    # ember's Produce requests went to the EMBER listener only
    assert cluster_total(cluster, "ember_network_requestmetrics_requests_total", listener="KAFKA",
                         request="CreateTopics") == 0


def test_a_kafka_clients_refusals_are_counted_by_error_code_under_its_listener(cluster) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic
    labels = {"listener": "KAFKA", "request": "CreateTopics", "error": "TOPIC_ALREADY_EXISTS"}
    before = cluster_total(cluster, "ember_network_requestmetrics_errors_total", **labels)
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    future = admin.create_topics([NewTopic(TOPIC, 3, 3)], request_timeout=30)[TOPIC]
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        future.result(60)
    assert cluster_total(cluster, "ember_network_requestmetrics_errors_total", **labels) == before + 1


def test_every_broker_is_live_and_ready_and_cluster_status_says_so(cluster) -> None:
    for broker in cluster.brokers.values():
        assert http_get(broker.host, broker.metrics_port, "/livez", 5) == (200, b'{"live": true}\n')
        status, body = http_get(broker.host, broker.metrics_port, "/readyz", 5)
        assert (status, json.loads(body)) == (200, {"ready": True, "reasons": []})
        assert http_get(broker.host, broker.metrics_port, "/nothing", 5)[0] == 404
    out = subprocess.run([sys.executable, "-m", "ember.cli", "cluster", "status", "--data", str(cluster.data_dir)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert len(re.findall(r"^broker \d+ .* up  pid \d+  Kafka \S+  ready$", out.stdout, re.MULTILINE)) == 3


def test_ember_top_shows_each_broker_the_topic_and_the_groups_lag(cluster) -> None:
    out = subprocess.run([sys.executable, "-m", "ember.cli", "top", "--data", str(cluster.data_dir),
                          "--iterations", "2", "--interval", "0.5"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    frames = out.stdout.split("ember top ")[1:]
    assert len(frames) == 2
    last = frames[-1]
    assert len(re.findall(r"^[123]\*? +127\.0\.0\.1:\d+ +ready ", last, re.MULTILINE)) == 3
    assert re.search(rf"^{TOPIC} +\d", last, re.MULTILINE)
    lag = PER_PARTITION - COMMITTED[0] + PER_PARTITION - COMMITTED[1]
    assert re.search(rf"^{GROUP} +{TOPIC} +{lag} ", last, re.MULTILINE), last
    assert len(re.findall(r"^[123] +\d+\.\d +\d+ +\d+\.\d +\d+\.\d\d +\S+ +0$", last, re.MULTILINE)) == 3, last


def test_an_open_transaction_shows_in_the_partition_metrics_and_ember_top(cluster) -> None:
    topic = "transactional"
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, partitions=1, replication_factor=3)
    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap, "transactional.id": "metered-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, b"v%d" % i)
    producer.flush(30)
    try:
        leader_metrics = [http_get(b.host, b.metrics_port, "/metrics", 5)[1].decode() for b in cluster.brokers.values()]
        found = "".join(leader_metrics)
        assert re.search(rf'^ember_log_log_opentransactions\{{partition="0",topic="{topic}"\}} 1\.0$', found, re.MULTILINE)
        assert re.search(rf'^ember_log_log_laststableoffset\{{partition="0",topic="{topic}"\}} 0\.0$', found, re.MULTILINE)
        assert re.search(rf'^ember_log_log_highwatermark\{{partition="0",topic="{topic}"\}} 5\.0$', found, re.MULTILINE)
        # the coordinator's broker counts the id as Ongoing and the transaction's age
        ongoing = re.findall(r'^ember_coordinator_transaction_transactional_ids\{state="Ongoing"\} (\d+)\.0$',
                             found, re.MULTILINE)
        assert len(ongoing) == 3 and sum(map(int, ongoing)) >= 1, found
        assert any(float(age) > 0 for age in re.findall(r"^ember_coordinator_transaction_oldest_open_ms (\S+)$",
                                                         found, re.MULTILINE))
        with Admin(cluster.bootstrap) as admin:     # a group at offset 0: 5 records behind, none of them readable yet
            admin.commit_offsets("txn-reader", {TopicPartition(topic, 0): 0})
        lags = "".join(http_get(b.host, b.metrics_port, "/metrics", 5)[1].decode() for b in cluster.brokers.values())
        labels = rf'\{{group="txn-reader",partition="0",topic="{topic}"\}}'
        assert re.search(rf"^ember_consumergroup_lag{labels} 5\.0$", lags, re.MULTILINE), lags
        assert re.search(rf"^ember_consumergroup_lag_stable{labels} 0\.0$", lags, re.MULTILINE), lags
        out = subprocess.run([sys.executable, "-m", "ember.cli", "top", "--data", str(cluster.data_dir),
                              "--iterations", "1", "--interval", "0.5"], capture_output=True, text=True, timeout=60)
        assert re.search(rf"^{topic} +1 +5$", out.stdout, re.MULTILINE), out.stdout
    finally:
        producer.commit_transaction(30)


def test_cluster_up_metrics_prints_every_endpoint_and_a_prometheus_config(cluster, capsys) -> None:
    print_metrics(cluster)
    printed = capsys.readouterr().out
    for address in cluster.metrics_addresses.values():
        assert f"http://{address}/metrics" in printed
    targets = json.loads((cluster.data_dir / "prometheus-targets.json").read_text())
    assert sorted(t["targets"][0] for t in targets) == sorted(cluster.metrics_addresses.values())
    assert "file_sd_configs" in (cluster.data_dir / "prometheus.yml").read_text()


def test_operations_doc_lists_every_metric_a_broker_exports_and_no_other(cluster) -> None:
    exported = set()
    for broker in cluster.brokers.values():
        _, body = http_get(broker.host, broker.metrics_port, "/metrics", 5)
        exported |= set(re.findall(r"^# HELP (\S+)", body.decode(), re.MULTILINE))
    documented = set(re.findall(r"`((?:ember|process)_[a-z_]+)`", DOCS.read_text()))
    assert exported - documented == set(), "exported but not in docs/operations.md"
    assert documented - exported == set(), "in docs/operations.md but not exported"
