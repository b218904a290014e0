"""RequestObserver (one class, no broker): what one request adds to the request metrics."""
from __future__ import annotations

import pytest

from ember.errors import ErrorCode
from ember.ingest.protocol import ApiKey
from ember.ingest.reply import Reply
from ember.metrics.broker_metrics import BrokerMetrics
from ember.metrics.requests import RequestObserver, request_name


@pytest.fixture
def metrics() -> BrokerMetrics:
    return BrokerMetrics()


def value(metrics: BrokerMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_produce_counts_once_with_each_failed_partition_by_error_code(metrics) -> None:
    observer = RequestObserver(metrics, "ember")
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
    observer = RequestObserver(metrics, "ember")
    timer = observer.start(ApiKey.CREATE_TOPICS)
    timer.handled(Reply({"error_code": int(ErrorCode.TOPIC_ALREADY_EXISTS), "error_message": "exists"}))
    timer.done()
    assert value(metrics, "ember_network_requestmetrics_errors_total", listener="ember", request="CreateTopics",
                 error="TOPIC_ALREADY_EXISTS") == 1


def test_a_request_whose_handler_closed_the_connection_is_counted_but_not_timed(metrics) -> None:
    observer = RequestObserver(metrics, "ember")
    observer.start(ApiKey.PRODUCE).done()   # acks=0 failure: CloseConnection, no handled()
    produce = {"listener": "ember", "request": "Produce"}
    assert value(metrics, "ember_network_requestmetrics_requests_total", **produce) == 1
    assert value(metrics, "ember_network_requestmetrics_totaltime_seconds_count", **produce) == 0
    assert value(metrics, "ember_network_requestchannel_requestsinflight", listener="ember") == 0


def test_listeners_are_counted_apart(metrics) -> None:
    for listener in ("ember", "kafka"):
        timer = RequestObserver(metrics, listener).start(ApiKey.FETCH)
        timer.handled(None)
        timer.done()
    assert value(metrics, "ember_network_requestmetrics_requests_total", listener="kafka", request="Fetch") == 1
    assert value(metrics, "ember_network_requestmetrics_requests_total", listener="ember", request="Fetch") == 1


def test_request_labels_spell_apis_as_kafka_does() -> None:
    assert request_name(ApiKey.LIST_OFFSETS) == "ListOffsets"
    assert request_name(ApiKey.OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"
    assert request_name(999) == "Unknown999"


def test_a_deleted_topics_series_go_away(metrics) -> None:
    metrics.topic("gone").produced(3, 300)
    assert value(metrics, "ember_server_brokertopicmetrics_messagesin_total", topic="gone") == 3
    metrics.forget_topic("gone")
    assert metrics.registry.get_sample_value("ember_server_brokertopicmetrics_messagesin_total",
                                             {"topic": "gone"}) is None
