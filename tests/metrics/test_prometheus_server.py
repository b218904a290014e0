"""A real Prometheus server (Debian's package, installed by `make setup`) scraping a real 3-broker
cluster every second, queried through its HTTP API: a consumer group falling behind shows lag,
refused produce requests are counted by error code, and killing a broker makes under-replicated
partitions rise while restarting it brings them back to 0. About a minute; every wait is bounded."""
from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
from pathlib import Path
from typing import Iterator

import pytest
from metrics_helpers import wait_for

from ember.client import Admin, Consumer, Producer
from ember.errors import KafkaTimeoutError
from ember.launcher.local import LocalCluster
from ember.launcher.prometheus_config import write_prometheus_config
from ember.launcher.scrape import http_get
from ember.launcher.zookeeper_server import free_port

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("prometheus") is None,
                                 reason="Debian's prometheus package is missing: run `make setup`")]

TOPIC, STRICT, GROUP = "clicks", "strict", "slow-readers"


class Prometheus:
    """A Prometheus server process with its own data directory, and its query API."""

    def __init__(self, config: Path, directory: Path) -> None:
        self.port = free_port()
        self.log = directory / "prometheus.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={directory / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for(self._ready, f"Prometheus to start (see {self.log})", timeout_s=30)

    def _ready(self) -> bool:
        assert self.process.poll() is None, f"Prometheus exited; see {self.log}"
        try:
            return http_get("127.0.0.1", self.port, "/-/ready", 2)[0] == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> dict:
        status, body = http_get("127.0.0.1", self.port, f"/api/v1/{path}?{urllib.parse.urlencode(params)}", 5)
        answer = json.loads(body)
        assert status == 200 and answer["status"] == "success", answer
        return answer["data"]

    def value(self, expr: str) -> float | None:
        """The single value of an instant query (None while it has no result)."""
        result = self.api("query", query=expr)["result"]
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(15)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("prometheus-cluster"), broker_count=3, metrics=True,
                      broker_config={"group.initial.rebalance.delay.ms": "300"}) as running:
        with Admin(running.bootstrap) as admin:
            admin.create_topic(TOPIC, partitions=3, replication_factor=3)
            # more in-sync replicas required than exist: every acks=all produce is refused
            admin.create_topic(STRICT, partitions=1, replication_factor=3, config={"min.insync.replicas": "4"})
        yield running


@pytest.fixture(scope="module")
def prometheus(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """Prometheus with the config `ember cluster up --metrics` writes (alert rules included),
    scraping every second."""
    config = write_prometheus_config(cluster.data_dir, cluster.metrics_addresses, interval_s=1)
    server = Prometheus(config, tmp_path_factory.mktemp("prometheus"))
    try:
        wait_for(lambda: server.value('sum(up{job="ember"})') == 3, "Prometheus to scrape all 3 brokers")
        yield server
    finally:
        server.stop()


def produce(cluster: LocalCluster, count: int) -> None:
    with Producer(cluster.bootstrap, acks="all") as producer:
        for i in range(count):
            producer.send(TOPIC, b"click-%d" % i, key=b"user-%d" % (i % 7))
        producer.flush(30)


def test_prometheus_loads_embers_alert_rules(prometheus) -> None:
    rules = [rule["name"] for group in prometheus.api("rules")["groups"] for rule in group["rules"]]
    assert {"EmberOfflinePartitions", "EmberUnderMinIsrPartitions", "EmberUnderReplicatedPartitions",
            "EmberConsumerLagGrowing", "EmberDiskFilling", "EmberControllerMissing"} <= set(rules)


def test_a_consumer_group_falling_behind_shows_its_lag(cluster, prometheus) -> None:
    produce(cluster, 90)
    with Consumer(TOPIC, bootstrap_servers=cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        read = 0
        while read < 90:
            batch = consumer.poll(5000)
            assert batch, f"the group read {read} of 90 records, then nothing for 5 s"
            read += sum(len(records) for records in batch.values())
        consumer.commit()
    lag = f'sum(ember_consumergroup_lag{{group="{GROUP}",topic="{TOPIC}"}})'
    wait_for(lambda: prometheus.value(lag) == 0, "the caught-up group's lag of 0 in Prometheus")
    produce(cluster, 150)   # the group's consumer is gone: it falls 150 records behind
    wait_for(lambda: prometheus.value(lag) == 150, "a lag of 150 in Prometheus")


def test_refused_produce_requests_are_counted_by_error_code(cluster, prometheus) -> None:
    with Producer(cluster.bootstrap, acks="all", retries=0) as producer:
        with pytest.raises(KafkaTimeoutError, match="NotEnoughReplicas"):
            producer.send(STRICT, b"refused").get(30)
    refused = 'sum(ember_network_requestmetrics_errors_total{request="Produce",error="NOT_ENOUGH_REPLICAS"})'
    wait_for(lambda: (prometheus.value(refused) or 0) >= 1, "the refusal counted in Prometheus")


def test_killing_a_broker_raises_under_replicated_partitions_and_a_restart_clears_them(cluster, prometheus) -> None:
    under = "sum(ember_server_replicamanager_underreplicatedpartitions)"
    wait_for(lambda: prometheus.value(under) == 0, "no under-replicated partition before the kill")
    cluster.kill_broker(3)
    # each partition of `clicks` and `strict` loses its replica on broker 3 once the controller
    # sees broker 3's ZooKeeper session expire; the leaders on brokers 1 and 2 report them
    wait_for(lambda: prometheus.value(under) == 4, "4 under-replicated partitions after broker 3 died")
    assert prometheus.value('up{job="ember",broker="3"}') == 0
    # the partition broker 3 led failed over: an election by the controller (which may be new)
    elections = "sum(ember_controller_controllerstats_leaderelections_total)"
    wait_for(lambda: (prometheus.value(elections) or 0) >= 1, "the failover's leader election")
    cluster.restart_broker(3)
    wait_for(lambda: prometheus.value(under) == 0, "under-replicated partitions back to 0 after the restart")
    # broker 3 rejoined the ISR of all 4 partitions, each written by the partition's leader
    expands = 'sum(ember_server_replicamanager_isrexpands_total{broker!="3"})'
    wait_for(lambda: (prometheus.value(expands) or 0) >= 4, "4 ISR expansions")
    wait_for(lambda: prometheus.value('sum(ember_server_ready{job="ember"})') == 3, "all 3 brokers ready again")
