"""Request metrics (ember.metrics.requests, no broker): what one request adds to the families a
scrape renders."""
from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from ember.errors import ErrorCode
from ember.metrics.broker_metrics import BrokerMetrics
from ember.metrics.requests import RequestMetrics, request_name
from ember.wire.api_keys import ApiKey
from ember.wire.reply import Reply


class Metrics:
    def __init__(self) -> None:
        self.requests = RequestMetrics()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.requests)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


def value(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_produce_counts_once_with_each_failed_partition_by_error_code(metrics) -> None:
    observer = metrics.requests.listener("ember")
    timer = observer.start(ApiKey.PRODUCE)
    assert value(metrics, "ember_network_requestchannel_requestsinflight", listener="ember") == 1
    timer.handled(Reply({"error_code": 0, "partitions": [
        {"partition": 0, "error_code": 0},
        {"partition": 1, "error_code": int(ErrorCode.NOT_ENOUGH_REPLICAS)},
        {"partition": 2, "error_code": int(ErrorCode.NOT_ENOUGH_REPLICAS)},
        {"partition": 3, "error_code": int(ErrorCode.NOT_LEADER_OR_FOLLOWER)}]}))
    timer.done()
    produce = {"listener": "ember", "request": "Produce"}
    assert value(metrics, "ember_network_requestmetrics_requests_total", **produce) == 1
    assert value(metrics, "ember_network_requestmetrics_errors_total", **produce, error="NOT_ENOUGH_REPLICAS") == 2
    assert value(metrics, "ember_network_requestmetrics_errors_total", **produce, error="NOT_LEADER_OR_FOLLOWER") == 1
    assert value(metrics, "ember_network_requestmetrics_errors_total", **produce, error="NONE") == 0
    for histogram in ("totaltime", "localtime"):
        assert value(metrics, f"ember_network_requestmetrics_{histogram}_seconds_count", **produce) == 1
    assert value(metrics, "ember_network_requestchannel_requestsinflight", listener="ember") == 0


def test_a_request_level_error_is_counted_under_its_api(metrics) -> None:
    observer = metrics.requests.listener("ember")
    timer = observer.start(ApiKey.CREATE_TOPICS)
    timer.handled(Reply({"error_code": int(ErrorCode.TOPIC_ALREADY_EXISTS), "error_message": "exists"}))
    timer.done()
    assert value(metrics, "ember_network_requestmetrics_errors_total", listener="ember", request="CreateTopics",
                 error="TOPIC_ALREADY_EXISTS") == 1


def test_a_request_whose_handler_closed_the_connection_is_counted_but_not_timed(metrics) -> None:
    observer = metrics.requests.listener("ember")
    observer.start(ApiKey.PRODUCE).done()   # acks=0 failure: CloseConnection, no handled()
    produce = {"listener": "ember", "request": "Produce"}
    assert value(metrics, "ember_network_requestmetrics_requests_total", **produce) == 1
    assert value(metrics, "ember_network_requestmetrics_totaltime_seconds_count", **produce) == 0
    assert value(metrics, "ember_network_requestchannel_requestsinflight", listener="ember") == 0


def test_listeners_are_counted_apart(metrics) -> None:
    for listener in ("ember", "kafka"):
        timer = metrics.requests.listener(listener).start(ApiKey.FETCH)
        timer.handled(None)
        timer.done()
    assert value(metrics, "ember_network_requestmetrics_requests_total", listener="kafka", request="Fetch") == 1
    assert value(metrics, "ember_network_requestmetrics_requests_total", listener="ember", request="Fetch") == 1


def test_request_labels_spell_apis_as_kafka_does() -> None:
    assert request_name(ApiKey.LIST_OFFSETS) == "ListOffsets"
    assert request_name(ApiKey.OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"
    assert request_name(999) == "Unknown999"


def test_latencies_land_in_their_buckets(metrics) -> None:
    timer = metrics.requests.listener("ember").start(ApiKey.METADATA)
    timer.started -= 0.003   # handled 3 ms after it started
    timer.handled(None)
    timer.done()
    metadata = {"listener": "ember", "request": "Metadata"}
    assert value(metrics, "ember_network_requestmetrics_localtime_seconds_bucket", **metadata, le="0.0025") == 0
    assert value(metrics, "ember_network_requestmetrics_localtime_seconds_bucket", **metadata, le="0.005") == 1
    assert value(metrics, "ember_network_requestmetrics_localtime_seconds_bucket", **metadata, le="+Inf") == 1
    assert value(metrics, "ember_network_requestmetrics_localtime_seconds_sum", **metadata) >= 0.003


def test_a_deleted_topics_series_go_away() -> None:
    metrics = BrokerMetrics()
    metrics.topic("gone").produced(3, 300)
    assert metrics.registry.get_sample_value("ember_server_brokertopicmetrics_messagesin_total",
                                             {"topic": "gone"}) == 3
    metrics.forget_topic("gone")
    assert metrics.registry.get_sample_value("ember_server_brokertopicmetrics_messagesin_total",
                                             {"topic": "gone"}) is None
