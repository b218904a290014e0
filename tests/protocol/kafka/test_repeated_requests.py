"""Repeated requests (Spark's ListOffsets after every poll) decoded once: a repeat gets its own
correlation id and raw body, anything that differs is decoded afresh, bad frames are never kept."""
from __future__ import annotations

import pytest
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic

from ember.errors import InvalidRequest
from ember.protocol.kafka.codec import decode_request, encode_entity
from ember.protocol.kafka.repeated_requests import RepeatedRequests


def served(api_key: int, api_version: int) -> bool:
    return api_key == 2 and 1 <= api_version <= 9


def list_offsets(correlation_id: int, timestamp: int = -1, topic: str = "t", client_id: str = "spark-0",
                 version: int = 7) -> memoryview:
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(
        name=topic, partitions=(ListOffsetsPartition(partition_index=0, timestamp=timestamp, current_leader_epoch=-1),)),))
    header = type(request).__header_schema__(request_api_key=request.__api_key__, request_api_version=version,
                                             correlation_id=correlation_id, client_id=client_id)
    return memoryview(encode_entity(header) + encode_entity(request))


def test_a_repeat_is_decoded_once_and_carries_its_own_correlation_id_and_raw_body() -> None:
    repeated = RepeatedRequests(served)
    first, again = list_offsets(7), list_offsets(8)
    decoded = repeated.decode(first)
    repeat = repeated.decode(again)
    assert len(repeated) == 1
    assert repeat.body is decoded.body                        # the same immutable entity
    assert (repeat.correlation_id, decoded.correlation_id) == (8, 7)
    assert repeat.client_id == "spark-0"
    assert repeat.raw.obj is again.obj and bytes(repeat.raw) == bytes(decode_request(again, served).raw)
    assert repeat == decode_request(again, served)


@pytest.mark.parametrize("other", [dict(timestamp=-2), dict(topic="u"), dict(client_id="spark-1"), dict(version=6)])
def test_a_request_differing_in_anything_but_the_correlation_id_is_decoded_afresh(other: dict) -> None:
    repeated = RepeatedRequests(served)
    repeated.decode(list_offsets(1))
    different = repeated.decode(list_offsets(2, **other))
    assert different == decode_request(list_offsets(2, **other), served)
    assert len(repeated) == 2


def test_the_oldest_request_goes_when_the_bound_is_reached() -> None:
    repeated = RepeatedRequests(served, max_kept=3)
    for topic in "abcd":
        repeated.decode(list_offsets(1, topic=topic))
    assert len(repeated) == 3
    assert repeated.decode(list_offsets(2, topic="d")).body.topics[0].name == "d"
    assert len(repeated) == 3                                  # "d" was kept: no new entry
    repeated.decode(list_offsets(3, topic="a"))                # "a" went first: decoded and kept again
    assert len(repeated) == 3


def test_malformed_and_unserved_frames_are_never_kept() -> None:
    repeated = RepeatedRequests(served)
    truncated = memoryview(bytes(list_offsets(1))[:-3])
    for _ in range(2):
        with pytest.raises(InvalidRequest):
            repeated.decode(truncated)
    unserved = repeated.decode(list_offsets(1, version=10))
    assert unserved.body is None
    assert len(repeated) == 0
