import pytest

from ember.errors import InvalidRequest, MessageTooLarge
from ember.wire import frame as p
from ember.wire.api_keys import ApiKey


def _frame(buffers):
    data = b"".join(bytes(b) for b in buffers)
    (size,) = p.FRAME_LENGTH.unpack_from(data)
    assert size == len(data) - 4
    return data[4:]


def test_request_round_trip_keeps_payload_bytes():
    frame = _frame(p.encode_request(ApiKey.PRODUCE, 0, 42, {"acks": 1}, [b"abc", b"de"]))
    request = p.decode_request(frame)
    assert (request.api_key, request.api_version, request.correlation_id) == (0, 0, 42)
    assert request.body == {"acks": 1}
    assert [bytes(x) for x in p.split_payload(request.payload, [3, 2])] == [b"abc", b"de"]


def test_response_round_trip():
    frame = _frame(p.encode_response(7, {"error_code": 0}, [b"xyz"]))
    response = p.decode_response(frame)
    assert response.correlation_id == 7 and response.body == {"error_code": 0}
    assert bytes(response.payload) == b"xyz"


@pytest.mark.parametrize("garbage", [b"", b"\x00\x01", b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x09{",
                                     b"\x00" * 12 + b"[1]"])
def test_garbage_requests_raise_invalid_request(garbage):
    with pytest.raises(InvalidRequest):
        p.decode_request(garbage)


def test_split_payload_rejects_mismatched_sizes():
    with pytest.raises(InvalidRequest):
        p.split_payload(memoryview(b"abc"), [2])
    with pytest.raises(InvalidRequest):
        p.split_payload(memoryview(b"abc"), [4])


def test_frame_size_limit():
    p.check_frame_size(100, 1000)
    with pytest.raises(MessageTooLarge):
        p.check_frame_size(1001, 1000)
