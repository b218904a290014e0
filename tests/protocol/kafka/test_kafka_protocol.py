"""The Kafka listener's configuration and codec: named listeners, the advertised API table (every
version decodes with Kafka's schemas) and the generic response builder."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from ember.errors import ErrorCode, InvalidConfig
from ember.ingest.listeners import ListenerConfig
from ember.protocol.kafka.codec import KafkaRequest, build, error_codes, request_class, response_class
from ember.protocol.kafka.handlers_acls import AclHandlers
from ember.protocol.kafka.listener import kafka_dispatcher
from ember.security.authorizer.access import ALLOW_ALL
from ember.wire.api_keys import ApiKey


def test_listen_is_the_ember_listener_and_advertised_listeners_override_by_name():
    config = ListenerConfig.resolve(("127.0.0.1", 9092), "KAFKA://0.0.0.0:9093", "KAFKA://broker1.example:19093")
    assert [str(b) for b in config.bind] == ["EMBER://127.0.0.1:9092", "KAFKA://0.0.0.0:9093"]
    assert config.advertised_address("KAFKA") == ("broker1.example", 19093)
    assert config.advertised_address("EMBER") == ("127.0.0.1", 9092)
    assert [k.name for k in config.kafka] == ["KAFKA"]


@pytest.mark.parametrize("listen, listeners, advertised, problem", [
    (None, "KAFKA://127.0.0.1:9093", None, "no EMBER listener"),
    (("127.0.0.1", 1), "EMBER://127.0.0.1:2", None, "disagree"),
    (("127.0.0.1", 1), "KAFKA://a:2,KAFKA://a:3", None, "more than once"),
    (("127.0.0.1", 1), "KAFKA://0.0.0.0:2", None, "cannot be advertised"),
    (("127.0.0.1", 1), "KAFKA://a:2", "OTHER://b:3", "does not bind"),
    (("127.0.0.1", 1), "KAFKA:a:2", None, "NAME://HOST:PORT"),
])
def test_bad_listener_settings_say_what_to_fix(listen, listeners, advertised, problem):
    with pytest.raises(InvalidConfig, match=problem):
        ListenerConfig.resolve(listen, listeners, advertised)


def test_every_advertised_version_has_kafkas_schema_except_rejected_produce_v0_to_2():
    supported = kafka_dispatcher(core=None, listener="KAFKA").supported()   # type: ignore[arg-type]
    keys = {key for key, _, _ in supported}
    assert keys == {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA, ApiKey.OFFSET_COMMIT,
                    ApiKey.OFFSET_FETCH, ApiKey.FIND_COORDINATOR, ApiKey.API_VERSIONS, ApiKey.CREATE_TOPICS,
                    ApiKey.DELETE_TOPICS, ApiKey.INIT_PRODUCER_ID, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP,
                    ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS,
                    ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE, ApiKey.OFFSET_FOR_LEADER_EPOCH,
                    ApiKey.CREATE_PARTITIONS, ApiKey.DELETE_RECORDS,
                    ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS,
                    ApiKey.DESCRIBE_CLUSTER, ApiKey.DESCRIBE_TOPIC_PARTITIONS, ApiKey.ELECT_LEADERS,
                    ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS, ApiKey.DESCRIBE_LOG_DIRS,
                    ApiKey.DESCRIBE_ACLS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS,
                    ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                    ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN,
                    ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT, ApiKey.WRITE_TXN_MARKERS,
                    ApiKey.DESCRIBE_TRANSACTIONS, ApiKey.LIST_TRANSACTIONS, ApiKey.DESCRIBE_PRODUCERS,
                    48}   # 48: DescribeClientQuotas (none)
    for key, low, high in supported:
        for version in range(low, high + 1):
            if key == ApiKey.PRODUCE and version < 3:
                assert request_class(key, version) is None
                continue
            assert request_class(key, version) is not None, (key, version)
            response_class(key, version)


def test_build_keeps_the_fields_a_version_has_and_defaults_the_rest():
    values = {"brokers": [{"node_id": 1, "host": "h", "port": 9, "rack": None}], "cluster_id": "c",
              "controller_id": 1, "topics": [{"error_code": 3, "name": "t", "partitions": []}], "error_code": 0}
    v0 = build(response_class(ApiKey.METADATA, 0), values)
    v13 = build(response_class(ApiKey.METADATA, 13), values)
    assert not hasattr(v0, "cluster_id") and v13.cluster_id == "c"
    assert v0.topics[0].error_code.value == 3 and v13.topics[0].name == "t"
    with pytest.raises(KeyError, match="brokers"):
        build(response_class(ApiKey.METADATA, 13), {"topics": []})


def test_error_codes_are_found_at_every_depth_of_a_response_and_zero_is_not_one():
    produce = build(response_class(ApiKey.PRODUCE, 9), {"throttle_time_ms": 0, "responses": [
        {"name": "a", "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": 5, "log_append_time_ms": -1, "log_start_offset": 0,
             "record_errors": [], "error_message": None},
            {"index": 1, "error_code": 19, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": 0,
             "record_errors": [], "error_message": None}]},
        {"name": "b", "partition_responses": [
            {"index": 0, "error_code": 6, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": 0,
             "record_errors": [], "error_message": None}]}]})
    assert sorted(error_codes(produce)) == [6, 19]
    created = build(response_class(ApiKey.CREATE_TOPICS, 7), {"throttle_time_ms": 0, "topics": [
        {"name": "t", "topic_id": None, "error_code": 36, "error_message": "exists", "num_partitions": -1,
         "replication_factor": -1, "configs": None}]})
    assert list(error_codes(created)) == [36]


@pytest.mark.parametrize("field, value", [("resource_type_filter", 100), ("operation", -1), ("permission_type", 7),
                                          ("pattern_type_filter", 127)])
def test_acl_requests_with_codes_kafka_does_not_define_get_invalid_request(field, value):
    fields = {"resource_type_filter": 2, "resource_name_filter": None, "pattern_type_filter": 3,
              "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1, field: value}
    describe = build(request_class(ApiKey.DESCRIBE_ACLS, 3), fields)
    handlers = AclHandlers(core=SimpleNamespace(access=ALLOW_ALL, acls=None))   # type: ignore[arg-type]
    response = asyncio.run(handlers.describe_acls(KafkaRequest(ApiKey.DESCRIBE_ACLS, 3, 1, "c", describe, memoryview(b""))))
    assert response.error_code == ErrorCode.INVALID_REQUEST and str(value) in response.error_message
