"""A minimal blocking Kafka-protocol client built on kio, for tests that need exact requests
(unsupported versions, raw produce sequences, malformed frames). Every socket read is bounded."""
from __future__ import annotations

import io
import struct
from typing import Any

from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.serial import entity_reader, entity_writer

from blocking_connection import BlockingConnection
from ember.protocol.kafka.codec import response_class
from ember.wire.api_keys import ApiKey

WAIT_S = 30.0
_LENGTH = struct.Struct(">i")


class KafkaWire(BlockingConnection):
    def __init__(self, address: str, timeout_s: float = WAIT_S) -> None:
        super().__init__(address, timeout_s)

    def frame(self, request: Any, api_version: int | None = None) -> tuple[int, bytes]:
        """(correlation id, frame) of a kio request entity (sent as ``api_version`` if given)."""
        correlation_id = self.next_correlation_id()
        header_cls = type(request).__header_schema__
        buffer = io.BytesIO()
        version = request.__version__ if api_version is None else api_version
        entity_writer(header_cls)(buffer, header_cls(request_api_key=request.__api_key__, request_api_version=version,
                                                      correlation_id=correlation_id, client_id="ember-tests"))
        entity_writer(type(request))(buffer, request)
        body = buffer.getvalue()
        return correlation_id, _LENGTH.pack(len(body)) + body

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive(self) -> tuple[int, memoryview]:
        """(correlation id, the frame after the correlation id)."""
        (size,) = _LENGTH.unpack(self.exactly(4))
        frame = memoryview(self.exactly(size))
        return _LENGTH.unpack_from(frame)[0], frame[4:]

    def call(self, request: Any) -> Any:
        correlation_id, data = self.frame(request)
        self.send_raw(data)
        received, body = self.receive()
        assert received == correlation_id
        cls = response_class(request.__api_key__, request.__version__)
        # response header v1 adds (empty) tagged fields; ApiVersions always answers with header v0
        tagged = 1 if cls.__flexible__ and request.__api_key__ != ApiKey.API_VERSIONS else 0
        return entity_reader(cls)(body, tagged)[0]


def partition_leader(address: str, topic: str, partition: int = 0) -> tuple[int, int, dict[int, str]]:
    """(leader id, leader epoch) of a partition as Metadata v12 gives them, and every broker's
    Kafka address by id."""
    with KafkaWire(address) as wire:
        metadata = wire.call(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                                             allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in metadata.brokers}
    found = [p for p in metadata.topics[0].partitions if p.partition_index == partition]
    return (found[0].leader_id, found[0].leader_epoch, brokers) if found else (-1, -1, brokers)
