"""After a fuzz run: is every partition's log still whole?

Reads every partition of every topic raw from its leader (consumer fetches up to the high
watermark) and checks that each batch passes the broker's own validation (length, header, CRC),
that offsets run contiguously from the log start to the high watermark (no half-written or
overlapping batch), and whether each batch's Arrow payload decodes. A producer may legitimately
get a batch with a valid CRC over bytes that are no Arrow stream accepted (the broker never
decodes payloads, docs/log.md), so undecodable batches are counted, and only the topics named
as ``must_decode`` (the well-behaved client's) must have none.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from ember.client.metadata import MetadataClient
from ember.client.offsets import EARLIEST, list_offsets
from ember.errors import CorruptRecord, EmberError
from ember.record.batch import decode_payload, iter_batches
from ember.wire.api_keys import ApiKey
from ember.wire.types import TopicPartition

FETCH_BYTES = 8 * 1024 * 1024
MAX_FETCHES_PER_PARTITION = 10_000
LIST_TIMEOUT_S = 30.0


@dataclass
class AuditResult:
    partitions: int = 0
    batches: int = 0
    records: int = 0
    undecodable: int = 0
    problems: list[str] = field(default_factory=list)


def audit_logs(bootstrap: str, must_decode: Iterable[str], timeout_s: float = 30.0) -> AuditResult:
    result = AuditResult()
    strict = set(must_decode)
    metadata = MetadataClient(bootstrap, request_timeout_ms=int(timeout_s * 1000))
    try:
        for topic, info in sorted(metadata.refresh(None).items()):
            if info.error_code:
                result.problems.append(f"topic {topic}: metadata error {info.error_code}")
                continue
            for partition in info.partitions:
                result.partitions += 1
                _audit_partition(metadata, topic, partition.partition, partition.leader, topic in strict, result)
    finally:
        metadata.close()
    return result


def _audit_partition(metadata: MetadataClient, topic: str, partition: int, leader: int, strict: bool,
                     result: AuditResult) -> None:
    where = f"{topic}-{partition}"
    if leader < 0:
        result.problems.append(f"{where}: no leader")
        return
    try:     # retention (a fuzzed config change) may have moved the log start
        offset = list_offsets(metadata, {TopicPartition(topic, partition): EARLIEST}, LIST_TIMEOUT_S)[
            TopicPartition(topic, partition)][0]
    except EmberError as exc:
        result.problems.append(f"{where}: no log start offset: {exc}")
        return
    end = None
    for _ in range(MAX_FETCHES_PER_PARTITION):
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": FETCH_BYTES,
                "partitions": [{"topic": topic, "partition": partition, "max_bytes": FETCH_BYTES,
                                "fetch_offset": offset}]}
        try:
            response = metadata.request(ApiKey.FETCH, body, broker_id=leader)
        except EmberError as exc:
            result.problems.append(f"{where}: fetch failed: {exc}")
            return
        entry = response.body["partitions"][0]
        if entry["error_code"]:
            result.problems.append(f"{where}: fetch at {offset} got error {entry['error_code']}: "
                                   f"{entry.get('error_message')}")
            return
        end = entry["high_watermark"]
        if offset >= end or not entry["size"]:
            break
        try:
            for header, raw in iter_batches(response.payload):
                if header.last_offset < offset:
                    continue
                if header.base_offset > offset:
                    result.problems.append(f"{where}: gap: expected offset {offset}, batch starts at "
                                           f"{header.base_offset}")
                    return
                result.batches += 1
                result.records += header.record_count
                offset = header.last_offset + 1
                try:
                    decode_payload(header, raw)
                except CorruptRecord as exc:
                    result.undecodable += 1
                    if strict:
                        result.problems.append(f"{where}: {exc}")
        except CorruptRecord as exc:
            result.problems.append(f"{where}: a stored batch fails validation: {exc}")
            return
    else:
        result.problems.append(f"{where}: still reading after {MAX_FETCHES_PER_PARTITION} fetches")
    if end is not None and offset != end:
        result.problems.append(f"{where}: batches end at {offset}, the high watermark is {end}")
