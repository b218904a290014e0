"""Kafka response frames: the header from a per-class template and large byte fields (a fetch's
records) kept by reference as pieces of their own; joined, byte for byte what kio encodes."""
from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer

from ember.protocol.kafka.codec import (
    BY_REFERENCE,
    FRAME_LENGTH,
    build,
    encode_entity,
    encode_response,
    encode_response_pieces,
    response_class,
)
from ember.wire.api_keys import ApiKey

INT32 = st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1)


@given(INT32, st.sampled_from([(ApiKey.LIST_OFFSETS, 5), (ApiKey.LIST_OFFSETS, 6), (ApiKey.METADATA, 12),
                               (ApiKey.API_VERSIONS, 3)]))
def test_response_headers_are_kios_for_any_correlation_id(correlation_id: int, api: tuple[int, int]) -> None:
    """v0 headers hold the id; v1 the id and no tagged fields."""
    entity = build(response_class(*api), {"topics": [], "api_keys": [], "brokers": [], "error_code": 0})
    header = type(entity).__header_schema__   # type: ignore[attr-defined]
    head = encode_entity(header(correlation_id=correlation_id))
    frame = encode_response(correlation_id, entity)
    assert frame[4:4 + len(head)] == head and frame[4 + len(head):] == encode_entity(entity)


def fetch_response(version: int, records: list[bytes | memoryview | None]) -> object:
    return build(response_class(ApiKey.FETCH, version), {"error_code": 0, "session_id": 0, "responses": [
        {"topic": "t", "topic_id": "0" * 32, "partitions": [
            {"partition_index": i, "error_code": 0, "high_watermark": 10, "last_stable_offset": 10,
             "log_start_offset": 0, "aborted_transactions": [], "preferred_read_replica": -1, "records": r}
            for i, r in enumerate(records)]}]})


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([4, 11, 12, 13, 16]), INT32,
       st.lists(st.one_of(st.none(), st.sampled_from([0, 1, 100, BY_REFERENCE - 1, BY_REFERENCE, 300_000])),
                max_size=5))
def test_fetch_records_go_out_by_reference_and_the_frame_is_kios(version: int, correlation_id: int,
                                                                 sizes: list[int | None]) -> None:
    # records as the fetch path has them: bytes read from a segment, or a view of them
    records = [None if size is None else bytes([i % 251]) * size if i % 2 else memoryview(bytes([i % 251]) * size)
               for i, size in enumerate(sizes)]
    entity = fetch_response(version, records)
    pieces = encode_response_pieces(correlation_id, entity)
    body = io.BytesIO()
    entity_writer(type(entity))(body, entity)
    expected = encode_response(correlation_id, entity)
    assert b"".join(pieces) == expected
    assert FRAME_LENGTH.unpack_from(expected)[0] == len(expected) - 4
    assert expected.endswith(body.getvalue())
    large = [r for r in records if r is not None and len(r) >= BY_REFERENCE]
    assert [p for p in pieces if any(p is r for r in large)] == large     # the same objects, not copies
