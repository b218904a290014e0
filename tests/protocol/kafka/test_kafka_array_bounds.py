"""A Kafka request whose array declares more elements than its frame holds is refused before kio
decodes it: kio's native decoder reserves memory for the declared count first, and a count near
2**32 made that reservation fail and abort the whole broker (found by the Kafka-listener fuzzer).
Every valid request of every version still passes, and the walk ends exactly where the body does."""
from __future__ import annotations

import io
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from kio.serial import entity_reader, entity_writer

from ember.errors import InvalidRequest
from ember.protocol.kafka.array_bounds import check_array_lengths
from ember.protocol.kafka.codec import decode_request
from ember.protocol.kafka.listener import kafka_dispatcher

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fuzz"))
from kafka_mutator import KafkaRequestTemplates  # noqa: E402
from wire_mutator import FuzzTargets  # noqa: E402

#: A MetadataRequest v12 (header v2, client id "a", no tagged fields) whose topics array declares
#: 2**32 - 2 elements in one five-byte varint.
HUGE_COUNT_METADATA = struct.pack(">hhih", 3, 12, 1, 1) + b"a\x00" + bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) + bytes(64)


def frame_of(request: object) -> memoryview:
    header = type(request).__header_schema__
    buffer = io.BytesIO()
    entity_writer(header)(buffer, header(request_api_key=request.__api_key__, request_api_version=request.__version__,
                                         correlation_id=1, client_id="c"))
    entity_writer(type(request))(buffer, request)
    return memoryview(buffer.getvalue())


def test_every_valid_request_of_every_served_version_passes_and_ends_where_its_body_ends():
    served = kafka_dispatcher(core=None, listener="KAFKA").supported()   # type: ignore[arg-type]
    rng = random.Random(3)
    templates = KafkaRequestTemplates(FuzzTargets({"t": 3}, ("g",), (1,), (7,)), served, rng)
    for cls in templates.classes:
        for _ in range(20):
            frame = frame_of(templates.sample(cls, rng))
            _, header_size = entity_reader(cls.__header_schema__)(frame, 0)
            assert check_array_lengths(cls, frame, header_size) == len(frame), f"{cls.__name__} v{cls.__version__}"


def test_a_count_larger_than_the_frame_is_refused_naming_the_array_and_the_process_lives_on():
    """In a child process: without the check the decoder aborts whatever process runs it."""
    code = ("import sys; from ember.protocol.kafka.codec import decode_request; from ember.errors import InvalidRequest\n"
            "try:\n    decode_request(memoryview(bytes.fromhex(sys.argv[1])), lambda k, v: True)\n"
            "except InvalidRequest as exc:\n    print(exc)\n")
    child = subprocess.run([sys.executable, "-c", code, HUGE_COUNT_METADATA.hex()], capture_output=True, text=True,
                           timeout=60)
    assert child.returncode == 0, child.stderr[-2000:]
    assert "MetadataRequest v12: MetadataRequest.topics declares 4294967294 element(s)" in child.stdout


def test_a_truncated_length_and_a_lying_string_length_are_refused():
    truncated = HUGE_COUNT_METADATA[:12]
    with pytest.raises(InvalidRequest):
        decode_request(memoryview(truncated), lambda key, version: True)
    # Metadata v1 (legacy): one topic whose name claims 30000 bytes in a frame of a few.
    lying = struct.pack(">hhih", 3, 1, 1, 1) + b"a" + struct.pack(">ih", 1, 30000) + b"x"
    with pytest.raises(InvalidRequest, match="runs past the end"):
        decode_request(memoryview(lying), lambda key, version: True)
