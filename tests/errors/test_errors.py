import pytest

from ember import errors


def test_every_code_maps_back_to_its_exception():
    for cls in errors.EmberError.__subclasses__():
        if cls.code == errors.ErrorCode.UNKNOWN_SERVER_ERROR:
            continue
        err = errors.error_for_code(int(cls.code), "boom")
        assert err.code == cls.code
        assert "boom" in str(err)


def test_unknown_code_is_unknown_server_error():
    assert isinstance(errors.error_for_code(9999), errors.UnknownServerError)


def test_raise_for_code_none_is_silent_and_errors_raise():
    errors.raise_for_code(0)
    with pytest.raises(errors.UnknownTopicOrPartition, match="ember topics create"):
        errors.raise_for_code(int(errors.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))


def test_retriable_flags_follow_kafka():
    assert errors.NotLeaderOrFollower.retriable
    assert not errors.MessageTooLarge.retriable


def test_a_corrupt_segment_reaches_clients_as_a_non_retriable_error():
    received = errors.error_for_code(int(errors.CorruptSegment.code), "bad bytes in 000.log at 4096")
    assert not received.retriable
