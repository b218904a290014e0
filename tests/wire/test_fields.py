"""ember.wire.fields: how the broker reads request fields (docs/protocol.md)."""
from __future__ import annotations

import pytest

from ember.errors import InvalidRequest
from ember.wire import fields


@pytest.mark.parametrize("value", [True, "5", [5], {"a": 5}, 5.5, float("nan"), float("inf"), None])
def test_an_integer_field_refuses_every_other_json_type(value):
    with pytest.raises(InvalidRequest, match="'partition'"):
        fields.integer({"partition": value}, "partition")


def test_integers_are_range_checked_against_their_kafka_type():
    assert fields.integer({"p": 2 ** 31 - 1}, "p") == 2 ** 31 - 1
    assert fields.integer({"p": 500.0}, "p") == 500          # JSON has one number type
    for body, bits in (({"p": 2 ** 31}, fields.INT32), ({"p": -2 ** 63 - 1}, fields.INT64),
                       ({"p": 2 ** 15}, fields.INT16)):
        with pytest.raises(InvalidRequest, match=f"int{bits} range"):
            fields.integer(body, "p", bits=bits)


def test_optional_fields_take_their_default_when_absent_or_null():
    assert fields.integer({}, "acks", 1) == 1
    assert fields.integer({"current_leader_epoch": None}, "current_leader_epoch", None) is None
    with pytest.raises(InvalidRequest, match="required"):
        fields.integer({"offset": None}, "offset")


def test_strings_must_be_short_valid_unicode_and_errors_never_echo_them():
    with pytest.raises(InvalidRequest) as too_long:
        fields.string({"topic": "x" * 40000}, "topic")
    assert "xxxx" not in str(too_long.value) and "40000" in str(too_long.value)
    with pytest.raises(InvalidRequest, match="Unicode"):
        fields.string({"topic": "\ud800"}, "topic")
    assert fields.string({"topic": "é"}, "topic") == "é"


def test_lists_of_names_and_partitions_refuse_repeats():
    with pytest.raises(InvalidRequest, match="more than once"):
        fields.strings({"topics": ["a", "b", "a"]}, "topics")
    with pytest.raises(InvalidRequest, match="more than once"):
        fields.partitions({"partitions": [{"topic": "a", "partition": 0}, {"topic": "a", "partition": 0}]})
    with pytest.raises(InvalidRequest, match="objects"):
        fields.partitions({"partitions": [1, 2]})
    assert fields.strings({}, "topics", None) is None


def test_config_maps_take_strings_and_numbers_only():
    config = {"retention.ms": 1000, "x": "y"}
    assert fields.string_map({"config": config}, "config") == {"retention.ms": "1000", "x": "y"}
    with pytest.raises(InvalidRequest):
        fields.string_map({"config": {"retention.ms": [1]}}, "config")
    with pytest.raises(InvalidRequest):
        fields.string_map({"config": "retention.ms=1"}, "config")
