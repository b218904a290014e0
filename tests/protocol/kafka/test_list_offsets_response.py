"""ListOffsets responses written without kio entities: byte for byte what kio encodes, in every version the
Kafka listener serves, with the non-zero error codes counted as kio's entity would report them."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ember.errors import ErrorCode
from ember.protocol.kafka.codec import build, encode_entity, encode_response, error_codes, response_class
from ember.protocol.kafka.list_offsets_response import encode_list_offsets
from ember.wire.api_keys import ApiKey

VERSIONS = st.integers(min_value=1, max_value=10)
INT32 = st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1)
INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
CODES = st.sampled_from([0, int(ErrorCode.NOT_LEADER_OR_FOLLOWER), int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                         int(ErrorCode.OFFSET_NOT_AVAILABLE), int(ErrorCode.FENCED_LEADER_EPOCH)])
PARTITIONS = st.lists(st.tuples(INT32, CODES, INT64, INT64), max_size=140)   # > 127: a two-byte compact length
TOPICS = st.lists(st.tuples(st.text(max_size=130), PARTITIONS), max_size=3)


def kio_entity(version: int, topics: list) -> object:
    return build(response_class(ApiKey.LIST_OFFSETS, version), {"topics": [
        {"name": name, "partitions": [{"partition_index": index, "error_code": code, "timestamp": timestamp,
                                       "offset": offset, "leader_epoch": -1}
                                      for index, code, timestamp, offset in partitions]}
        for name, partitions in topics]})


@settings(max_examples=300, deadline=None)
@given(VERSIONS, TOPICS, INT32)
def test_list_offsets_bytes_equal_kios_in_every_version(version: int, topics: list, correlation_id: int) -> None:
    encoded = encode_list_offsets(version, topics)
    entity = kio_entity(version, topics)
    assert encoded.body == encode_entity(entity)
    assert list(encoded.error_codes) == list(error_codes(entity))
    assert encode_response(correlation_id, encoded) == encode_response(correlation_id, entity)   # with the header

