"""Requests to partition leaders: ListOffsets (earliest, latest, or first offset at a timestamp)
and DeleteRecords.

Shared by the consumer (position resets, ``offsets_for_times``) and the admin client (describe,
delete records). Requests go to each partition's leader, grouped per leader, and are retried
after a metadata refresh while leaders move.
"""
from __future__ import annotations

import time
from typing import Any, Mapping

from ember.client.metadata import MetadataClient
from ember.errors import EmberError, KafkaTimeoutError, LeaderNotAvailable, UnknownTopicOrPartition, error_for_code
from ember.wire.api_keys import ApiKey
from ember.wire.frame import response_error
from ember.wire.isolation import READ_UNCOMMITTED
from ember.wire.types import TopicPartition

EARLIEST = -2
LATEST = -1


def list_offsets(metadata: MetadataClient, query: Mapping[TopicPartition, int],
                 timeout_s: float, isolation: int = READ_UNCOMMITTED) -> dict[TopicPartition, tuple[int, int]]:
    """``{tp: (offset, timestamp)}`` for ``{tp: timestamp}`` (EARLIEST, LATEST = high watermark, or
    the last stable offset for READ_COMMITTED, or ms).

    Offset is -1 when no record has a timestamp at or after the one asked for."""
    found = at_leaders(metadata, ApiKey.LIST_OFFSETS, {tp: {"timestamp": t} for tp, t in query.items()}, timeout_s,
                       {"isolation_level": isolation})
    return {tp: (item.get("offset", -1), item.get("timestamp", -1)) for tp, item in found.items()}


def at_leaders(metadata: MetadataClient, api_key: int, query: Mapping[TopicPartition, dict[str, Any]],
               timeout_s: float, request_fields: Mapping[str, Any] | None = None) -> dict[TopicPartition, dict[str, Any]]:
    """Each partition's answer to a per-partition request (``query``: its fields besides topic and
    partition; ``request_fields``: the request's own) sent to the partition's leader: grouped per leader, retried after a metadata
    refresh while leaders move (the request must be safe to repeat); the first non-retriable
    error is raised."""
    name = ApiKey(api_key).name
    deadline = time.monotonic() + timeout_s
    remaining = dict(query)
    found: dict[TopicPartition, dict[str, Any]] = {}
    last_error: EmberError | None = None
    while remaining:
        if any(metadata.leader(tp.topic, tp.partition) is None for tp in remaining) or metadata.needs_refresh():
            try:
                metadata.refresh({tp.topic for tp in remaining})
            except EmberError as exc:
                if not exc.retriable:
                    raise
                last_error = exc
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in remaining:
            leader = metadata.leader(tp.topic, tp.partition)
            if leader is None:
                count = metadata.partition_count(tp.topic)
                if count is not None and tp.partition >= count:
                    raise UnknownTopicOrPartition(f"{tp.topic}-{tp.partition} does not exist ({count} partitions)")
                error_type = LeaderNotAvailable if count else UnknownTopicOrPartition
                last_error = error_type(f"no leader known for {tp.topic}-{tp.partition}")
                continue
            by_leader.setdefault(leader, []).append(tp)
        for leader, tps in by_leader.items():
            try:
                body = metadata.request(api_key, {**(request_fields or {}), "partitions": [
                    {"topic": tp.topic, "partition": tp.partition, **remaining[tp]} for tp in tps]},
                    broker_id=leader).body
                error = response_error(body)
                if error is not None:
                    raise error
            except EmberError as exc:
                if not exc.retriable:
                    raise
                last_error = exc
                metadata.mark_stale()
                continue
            for item in body.get("partitions", []):
                tp = TopicPartition(item["topic"], item["partition"])
                code = item.get("error_code", 0)
                if code:
                    error = error_for_code(code, item.get("error_message") or f"{name} for {tp.topic}-{tp.partition}")
                    if not error.retriable:
                        raise error
                    last_error = error
                    metadata.mark_stale()
                elif tp in remaining:
                    found[tp] = item
                    del remaining[tp]
        if remaining:
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"{name} of {len(remaining)} partition(s) not answered in {timeout_s:.1f}s"
                                        + (f"; last error: {type(last_error).__name__}: {last_error}" if last_error else ""))
            time.sleep(metadata.retry_backoff_s)
    return found
