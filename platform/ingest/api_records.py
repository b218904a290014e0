"""Produce, Fetch and ListOffsets: the record path. The broker never decodes record payloads;
batches arrive and leave as raw bytes (fetches via ``sendfile`` from segment files)."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable

from ember.errors import InvalidRequiredAcks, OffsetOutOfRange
from ember.ingest import fields
from ember.ingest.dispatcher import Handler
from ember.ingest.partition import CONSUMER_REPLICA_ID, Partition
from ember.ingest.protocol import ApiKey, Request, split_payload
from ember.ingest.reply import OK, CloseConnection, FileRegion, Reply, error_fields
from ember.ingest.replica_manager import ReplicaManager
from ember.ingest.signals import wait_any
from ember.log import FetchSlice

DEFAULT_PRODUCE_TIMEOUT_MS = 30000
DEFAULT_FETCH_MAX_BYTES = 50 * 1024 * 1024
DEFAULT_PARTITION_MAX_BYTES = 1024 * 1024


def _produce_error(exc: BaseException) -> dict[str, Any]:
    return {**error_fields(exc), "base_offset": -1, "log_append_time": -1, "log_start_offset": -1}


@dataclass
class _FetchTarget:
    topic: str
    index: int
    offset: int
    max_bytes: int
    leader_epoch: int | None


@dataclass
class _FetchResult:
    fields: dict[str, Any]
    slice: FetchSlice | None = None
    partition: Partition | None = None

    @property
    def size(self) -> int:
        return self.slice.size if self.slice is not None else 0


class RecordApis:
    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.PRODUCE: self.produce, ApiKey.FETCH: self.fetch,
                ApiKey.LIST_OFFSETS: self.list_offsets}

    # -- Produce -------------------------------------------------------------------------------

    async def produce(self, request: Request) -> Reply | None:
        """Append every partition's batch, then (acks=all) wait for all of them to replicate at
        once, so one slow partition does not delay the next one's append."""
        body = request.body
        acks = fields.integer(body, "acks", 1, bits=fields.INT16)
        timeout_s = fields.integer(body, "timeout_ms", DEFAULT_PRODUCE_TIMEOUT_MS) / 1000
        # The same partition may appear more than once: a producer sends consecutive batches together.
        entries = [(*fields.topic_partition(e), fields.integer(e, "size")) for e in fields.objects(body, "partitions")]
        batches = split_payload(request.payload, [size for _, _, size in entries])
        deadline = asyncio.get_running_loop().time() + timeout_s
        results: list[dict[str, Any]] = []
        waits: list[tuple[dict[str, Any], Awaitable[None]]] = []
        for (topic, index, _), raw in zip(entries, batches):
            answer: dict[str, Any] = {"topic": topic, "partition": index}
            try:
                produced, wait = await self._append_one(topic, index, raw, acks, deadline)
                answer.update(produced)
                if wait is not None:
                    waits.append((answer, wait))
            except Exception as exc:
                answer.update(_produce_error(exc))
            results.append(answer)
        outcomes = await asyncio.gather(*(wait for _, wait in waits), return_exceptions=True)
        for (answer, _), outcome in zip(waits, outcomes):
            if isinstance(outcome, BaseException):
                answer.update(_produce_error(outcome))
        if acks == 0:
            failed = [r for r in results if r["error_code"]]
            if failed:
                raise CloseConnection(f"acks=0 produce failed: {failed[0].get('error_message')}")
            return None
        return Reply({**OK, "partitions": results})

    async def _append_one(self, topic: str, index: int, raw: memoryview, acks: int,
                          deadline: float) -> tuple[dict[str, Any], Awaitable[None] | None]:
        """Append as leader: the response fields and, for acks=all, the replication wait."""
        if acks not in (0, 1, -1):
            raise InvalidRequiredAcks(f"acks={acks}; use 0, 1 or -1 (all)")
        partition = self.replicas.leader_partition(topic, index)
        leader_epoch = partition.leader_epoch
        result = await partition.append(raw, acks)
        wait = partition.wait_replicated(result.last_offset + 1, leader_epoch, deadline) if acks == -1 else None
        log_append_time = result.max_timestamp \
            if partition.config.message_timestamp_type == "LogAppendTime" else -1
        return {**OK, "base_offset": result.first_offset, "log_append_time": log_append_time,
                "log_start_offset": partition.log.log_start_offset}, wait

    # -- Fetch ---------------------------------------------------------------------------------

    async def fetch(self, request: Request) -> Reply:
        """Long poll: answer once ``min_bytes`` are readable, an error occurs, or ``max_wait_ms``
        passes; waiting parks on the partitions' ``changed`` signals (woken by appends)."""
        body = request.body
        replica_id = fields.integer(body, "replica_id", CONSUMER_REPLICA_ID)
        min_bytes = fields.integer(body, "min_bytes", 1)
        max_bytes = fields.integer(body, "max_bytes", DEFAULT_FETCH_MAX_BYTES)
        max_wait_ms = fields.integer(body, "max_wait_ms", 500)
        targets = [_FetchTarget(*fields.topic_partition(e), fields.integer(e, "fetch_offset", bits=fields.INT64),
                                fields.integer(e, "max_bytes", DEFAULT_PARTITION_MAX_BYTES),
                                fields.integer(e, "current_leader_epoch", None))
                   for e in fields.partitions(body)]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        while True:
            results = await self._read_all(targets, replica_id, max_bytes)
            total = sum(r.size for r in results)
            remaining = deadline - loop.time()
            if total >= min_bytes or remaining <= 0 or any(r.fields["error_code"] for r in results):
                break
            await wait_any([r.partition.changed for r in results if r.partition is not None], remaining)
        reply = self._fetch_reply(results)
        for result in results:
            if result.partition is not None and result.partition.stats is not None and result.fields["size"]:
                result.partition.stats.sent(result.fields["size"], replica_id >= 0)
        return reply

    async def _read_all(self, targets: list[_FetchTarget], replica_id: int,
                        max_bytes: int) -> list[_FetchResult]:
        results, room = [], max_bytes
        for target in targets:
            answer: dict[str, Any] = {"topic": target.topic, "partition": target.index}
            try:
                partition = self.replicas.leader_partition(target.topic, target.index)
                partition.check_leader(target.leader_epoch)
                if replica_id >= 0:
                    await self.replicas.follower_fetched(partition, replica_id, target.offset)
                piece, offsets = await partition.read(
                    target.offset, min(target.max_bytes, room), not any(r.size for r in results),
                    replica_id)
            except Exception as exc:
                results.append(_FetchResult({**answer, **error_fields(exc), "high_watermark": -1,
                                             "log_start_offset": -1, "log_end_offset": -1}))
                continue
            result = _FetchResult({**answer, **OK, **offsets}, piece, partition)
            room = max(0, room - result.size)
            results.append(result)
        return results

    @staticmethod
    def _fetch_reply(results: list[_FetchResult]) -> Reply:
        """Open each slice's segment file before anything is written, so a segment removed by
        retention meanwhile becomes OFFSET_OUT_OF_RANGE for that partition, not a broken frame."""
        payload: list[bytes | memoryview | FileRegion] = []
        for result in results:
            size = 0
            if result.slice is not None:
                try:
                    region = FileRegion(result.slice.open(), result.slice.position, result.slice.size)
                    payload.append(region)
                    size = region.size
                except OffsetOutOfRange as exc:
                    result.fields.update(error_fields(exc))
            result.fields["size"] = size
        return Reply({**OK, "partitions": [r.fields for r in results]}, payload)

    # -- ListOffsets ---------------------------------------------------------------------------

    async def list_offsets(self, request: Request) -> Reply:
        replica_id = fields.integer(request.body, "replica_id", CONSUMER_REPLICA_ID)

        async def offset(partition: Partition, timestamp: int) -> dict[str, Any]:
            found, found_timestamp = await partition.offset_for_timestamp(timestamp, replica_id)
            return {"offset": found, "timestamp": found_timestamp}
        results = await self.replicas.answer_at_leader(
            fields.partitions(request.body), lambda e: fields.integer(e, "timestamp", bits=fields.INT64), offset,
            {"offset": -1, "timestamp": -1})
        return Reply({**OK, "partitions": results})
