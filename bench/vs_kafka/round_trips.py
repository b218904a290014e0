"""The cost of one small Kafka request, side by side: ListOffsets for the earliest and the latest
offset of a partition, one after the other on one connection, as Spark's Kafka connector sends
them after every poll of 500 records (4,000 per million records a ``format("kafka")`` job reads).

A small request's round trip and the broker CPU it costs are what bound that job once the records
themselves are cheap to serve (bench/vs_kafka/README.md, "Where ember loses"); this row follows
them from run to run. Frames are encoded once with kio (Kafka's own schemas) and sent by a plain
blocking socket, so the client costs next to nothing and each request waits for the one before.
"""
from __future__ import annotations

import socket
import struct
import time
from typing import Sequence

from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.list_offsets.v7.response import ListOffsetsResponse
from kio.serial import entity_reader
from systems import System, kafka_client_bootstrap, wait_for
from workloads import Row, broker_cpu_s, interleaved, log

from ember.protocol.kafka.codec import encode_entity

TOPIC = "round-trips"
#: ListOffsets v7, a flexible version both systems serve (the Java client of Spark 4 sends v9+,
#: whose body differs by one int32).
VERSION = 7
_LENGTH = struct.Struct(">i")
WAIT_S = 30.0
WARM_UP = 500
IDLE_SAMPLE_S = 2.0


def request_round_trips(systems: Sequence[System], requests: int, repeats: int) -> list[Row]:
    """``requests`` ListOffsets (earliest, latest, earliest, ...) per run to the partition's leader:
    the median round trip, and the brokers' CPU per request (less their idle CPU over as long)."""
    rtt: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    for system in systems:
        system.create_topic(TOPIC, 1, 1)
    try:
        for system in interleaved(systems, repeats):
            with _Connection(_leader_address(system)) as connection:
                frames = [_frame(timestamp, correlation_id) for correlation_id, timestamp in enumerate((-2, -1))]
                for frame in frames:
                    _check_answer(system, connection.call(frame))
                for i in range(WARM_UP):
                    connection.call(frames[i & 1])
                idle_per_s = _idle_cpu_per_s(system)
                times = []
                before, started_run = broker_cpu_s(system), time.perf_counter()
                for i in range(requests):
                    started = time.perf_counter()
                    connection.call(frames[i & 1])
                    times.append(time.perf_counter() - started)
                broker_s = broker_cpu_s(system) - before - idle_per_s * (time.perf_counter() - started_run)
            times.sort()
            median_us, per_request_us = times[len(times) // 2] * 1e6, broker_s / requests * 1e6
            log(f"round trips {system.name:5s} ListOffsets median {median_us:7.0f} us, p90 "
                f"{times[int(len(times) * 0.9)] * 1e6:7.0f} us, brokers {per_request_us:6.0f} CPU us per request")
            rtt.setdefault(system.name, []).append(median_us)
            cpu.setdefault(system.name, []).append(per_request_us)
    finally:
        for system in systems:
            system.delete_topic(TOPIC)
    group = "Small-request round trip (ListOffsets earliest/latest, one connection, one at a time)"
    return [Row(group, "median round trip", "us", rtt["ember"], rtt["kafka"], False,
                "Kafka listener", "Kafka"),
            Row(group, "all brokers' CPU per request, idle CPU taken off", "us", cpu["ember"], cpu["kafka"], False,
                "Kafka listener", "Kafka")]


def _idle_cpu_per_s(system: System) -> float:
    """The brokers' CPU seconds per second with no request: taken off the run's, so the row counts
    what the requests cost and not a JVM's or a ZooKeeper session's background work."""
    before, started = broker_cpu_s(system), time.perf_counter()
    time.sleep(IDLE_SAMPLE_S)
    return (broker_cpu_s(system) - before) / (time.perf_counter() - started)


def _leader_address(system: System) -> str:
    """host:port of the Kafka listener leading partition 0 of :data:`TOPIC`, from Metadata."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": kafka_client_bootstrap(system), "log_level": 3})
    found: list[str] = []

    def led() -> bool:
        metadata = admin.list_topics(TOPIC, timeout=10)
        partition = metadata.topics[TOPIC].partitions.get(0)
        if partition is None or partition.leader not in metadata.brokers:
            return False
        broker = metadata.brokers[partition.leader]
        found.append(f"{broker.host}:{broker.port}")
        return True
    wait_for(led, f"{system.name}: the leader of {TOPIC}-0", WAIT_S)
    return found[0]


def _check_answer(system: System, answer: bytes) -> None:
    """The answer names an offset, not an error: a run of error answers would time the wrong thing."""
    body = memoryview(answer)[_LENGTH.size + 1:]     # correlation id, response header v1's tagged fields
    response, _ = entity_reader(ListOffsetsResponse)(body, 0)
    partition = response.topics[0].partitions[0]
    if partition.error_code != 0 or partition.offset < 0:
        raise RuntimeError(f"{system.name}: ListOffsets answered {partition}")


def _frame(timestamp: int, correlation_id: int) -> bytes:
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(
        name=TOPIC, partitions=(ListOffsetsPartition(partition_index=0, timestamp=timestamp, current_leader_epoch=-1),)),))
    header = type(request).__header_schema__(request_api_key=request.__api_key__, request_api_version=VERSION,
                                             correlation_id=correlation_id, client_id="vs-kafka-round-trips")
    body = encode_entity(header) + encode_entity(request)
    return _LENGTH.pack(len(body)) + body


class _Connection:
    """One blocking connection: send a frame, read its whole answer (every read bounded)."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.answers = self.sock.makefile("rb")

    def call(self, frame: bytes) -> bytes:
        """The answer's frame (without its length)."""
        self.sock.sendall(frame)
        (size,) = _LENGTH.unpack(self._read(_LENGTH.size))
        return self._read(size)

    def _read(self, size: int) -> bytes:
        data = self.answers.read(size)     # a buffered read returns short only at the end of the stream
        if len(data) < size:
            raise ConnectionError("the broker closed the connection")
        return data

    def __enter__(self) -> "_Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.answers.close()
        self.sock.close()
