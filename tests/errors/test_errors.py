
from ember import errors
from ember.wire.frame import response_error


def test_every_code_maps_back_to_its_exception():
    for cls in errors.EmberError.__subclasses__():
        if cls.code == errors.ErrorCode.UNKNOWN_SERVER_ERROR:
            continue
        err = errors.error_for_code(int(cls.code), "boom")
        assert err.code == cls.code
        assert "boom" in str(err)


def test_unknown_code_is_unknown_server_error():
    assert isinstance(errors.error_for_code(9999), errors.UnknownServerError)


def test_a_response_without_an_error_code_has_no_error_and_one_with_a_code_names_the_fix():
    assert response_error({"topics": []}) is None and response_error({"error_code": 0}) is None
    error = response_error({"error_code": int(errors.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), "error_message": "x-0"})
    assert isinstance(error, errors.UnknownTopicOrPartition) and "ember topics create" in str(error)


def test_retriable_flags_follow_kafka():
    assert errors.NotLeaderOrFollower.retriable
    assert not errors.MessageTooLarge.retriable


def test_a_corrupt_segment_reaches_clients_as_a_non_retriable_error():
    received = errors.error_for_code(int(errors.CorruptSegment.code), "bad bytes in 000.log at 4096")
    assert not received.retriable
