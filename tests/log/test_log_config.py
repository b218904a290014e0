"""LogConfig: Kafka names, defaults, validation, the shared config table."""
from __future__ import annotations

import pytest

from ember import errors
from ember.log import TOPIC_CONFIGS, LogConfig


def test_defaults_match_kafka():
    config = LogConfig()
    assert config.segment_bytes == 1 << 30
    assert config.retention_ms == 168 * 3600 * 1000
    assert config.retention_bytes == -1
    assert config.max_message_bytes == 1048588
    assert config.index_interval_bytes == 4096
    assert config.flush_messages is None
    assert config.min_insync_replicas == 1
    assert config.unclean_leader_election_enable is False
    assert config.message_timestamp_type == "CreateTime"


def test_from_properties_parses_wire_strings():
    config = LogConfig.from_properties({"segment.bytes": "2048", "retention.ms": "-1",
                                        "unclean.leader.election.enable": "TRUE",
                                        "flush.messages": "none", "compression.type": "producer"})
    assert (config.segment_bytes, config.retention_ms, config.unclean_leader_election_enable,
            config.flush_messages, config.compression_type) == (2048, -1, True, None, "producer")


@pytest.mark.parametrize("props, message", [
    ({"segment.bites": 1}, "unknown topic config 'segment.bites'"),
    ({"segment.bytes": "0"}, r"segment.bytes; allowed: \[14, 2147483647\]"),
    ({"retention.ms": "-2"}, r"retention.ms; allowed: \[-1, "),
    ({"min.insync.replicas": "two"}, "min.insync.replicas"),
    ({"message.timestamp.type": "Now"}, "allowed: CreateTime, LogAppendTime"),
    ({"cleanup.policy": "compact,shred"}, "'shred' is not one of delete, compact"),
    ({"cleanup.policy": "compact,"}, "an empty item"),
    ({"min.cleanable.dirty.ratio": "1.5"}, r"min.cleanable.dirty.ratio; allowed: \[0.0, 1.0\]"),
    ({"min.cleanable.dirty.ratio": "half"}, "min.cleanable.dirty.ratio"),
    ({"delete.retention.ms": "-1"}, "delete.retention.ms"),
    ({"max.compaction.lag.ms": "0"}, "max.compaction.lag.ms"),
    ({"compression.type": "gzip"}, "not supported yet"),
    ({"compression.type": "zstd"}, "not supported yet"),
    ({"flush.ms": 1.5}, "flush.ms"),
])
def test_invalid_configs_name_the_key_and_range(props, message):
    with pytest.raises(errors.InvalidConfig, match=message):
        LogConfig.from_properties(props)


def test_direct_construction_is_validated_too():
    with pytest.raises(errors.InvalidConfig, match="index.interval.bytes"):
        LogConfig(index_interval_bytes=-1)


def test_round_trip_and_overrides():
    config = LogConfig.from_properties({"retention.bytes": 10})
    props = config.to_properties()
    assert set(props) == set(TOPIC_CONFIGS) and props["retention.bytes"] == 10
    assert LogConfig.from_properties(props) == config
    altered = config.overridden({"segment.ms": "60000"})
    assert (altered.segment_ms, altered.retention_bytes) == (60000, 10)
    assert config.segment_ms != 60000  # frozen original unchanged


def test_config_table_describes_every_entry():
    for name, definition in TOPIC_CONFIGS.items():
        assert definition.name == name and definition.doc and definition.valid_values
        assert definition.type in ("int", "long", "double", "boolean", "string", "list")


@pytest.mark.parametrize("policy, compact, delete", [
    ("delete", False, True), ("compact", True, False), ("compact,delete", True, True),
    (" delete , compact ", True, True), ("compact,compact", True, False)])
def test_cleanup_policy_is_a_list_of_delete_and_compact(policy, compact, delete):
    config = LogConfig.from_properties({"cleanup.policy": policy, "min.cleanable.dirty.ratio": "0.1"})
    assert (config.compact, config.delete, config.min_cleanable_dirty_ratio) == (compact, delete, 0.1)
    assert config.cleanup_policy == ",".join(dict.fromkeys(p.strip() for p in policy.split(",")))
