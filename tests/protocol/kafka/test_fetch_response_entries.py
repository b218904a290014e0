"""A Fetch response entry without records or error is built once per offsets it shows and shared
by every response (``handlers_records._idle_partition``): the same bytes as an entry built per
response, in every version the Kafka listener serves."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ember.ingest.partition import LogOffsets
from ember.protocol.kafka.codec import build, encode_entity, response_class
from ember.protocol.kafka.handlers_records import _fetch_fields, _idle_partition, _partition_class
from ember.wire.api_keys import ApiKey

OFFSETS = st.integers(min_value=-1, max_value=(1 << 62))


def _response(version: int, partitions: list) -> bytes:
    return encode_entity(build(response_class(ApiKey.FETCH, version), {
        "error_code": 0, "session_id": 0,
        "responses": [{"topic": "t", "topic_id": "00000000000000000000000000000001", "partitions": partitions}]}))


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=4, max_value=18), st.integers(min_value=0, max_value=(1 << 31) - 1), OFFSETS, OFFSETS)
def test_a_shared_idle_entry_encodes_as_one_built_for_the_response(version: int, index: int, high_watermark: int,
                                                                  log_start: int) -> None:
    shared = _idle_partition(_partition_class(version), index, high_watermark, log_start, high_watermark)
    assert shared is _idle_partition(_partition_class(version), index, high_watermark, log_start, high_watermark)
    built = _fetch_fields(index, None, LogOffsets(high_watermark, log_start, -1, high_watermark))
    assert _response(version, [shared]) == _response(version, [built])
