"""Produce, Fetch, ListOffsets and DeleteRecords of the ember protocol: the record path. The broker never
decodes record payloads; batches arrive and leave as raw bytes (fetches via ``sendfile`` from
segment files). The work is shared with the Kafka protocol (``ember.ingest.produce``,
``ember.ingest.fetch``); this module is the JSON wire format only."""
from __future__ import annotations

from typing import Any

from ember.errors import OffsetOutOfRange
from ember.ingest.fetch import FetchResult, FetchTarget, fetch
from ember.ingest.partition import CONSUMER_REPLICA_ID, Partition
from ember.ingest.produce import Produced, ProduceEntry, append_at_leaders
from ember.ingest.replica_manager import ReplicaManager
from ember.ingest.txn_verification import TxnVerifier
from ember.protocol.ember.dispatcher import Handler
from ember.protocol.ember.leader_fields import answer_fields, leader_queries
from ember.security.authorizer.model import Operation
from ember.wire import fields
from ember.wire.api_keys import ApiKey
from ember.wire.fetch_session import FINAL_EPOCH, NO_SESSION
from ember.wire.frame import Request, split_payload
from ember.wire.isolation import READ_COMMITTED, READ_UNCOMMITTED
from ember.wire.reply import OK, CloseConnection, FileRegion, Reply, error_fields

DEFAULT_PRODUCE_TIMEOUT_MS = 30000
DEFAULT_FETCH_MAX_BYTES = 50 * 1024 * 1024
DEFAULT_PARTITION_MAX_BYTES = 1024 * 1024


def _produce_fields(outcome: Produced | Exception) -> dict[str, Any]:
    if isinstance(outcome, Exception):
        return {**error_fields(outcome), "base_offset": -1, "log_append_time": -1, "log_start_offset": -1}
    return {**OK, "base_offset": outcome.base_offset, "log_append_time": outcome.log_append_time,
            "log_start_offset": outcome.log_start_offset}


class RecordApis:
    def __init__(self, replicas: ReplicaManager, verifier: TxnVerifier | None = None) -> None:
        self.replicas = replicas
        self.verifier = verifier

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.PRODUCE: self.produce, ApiKey.FETCH: self.fetch,
                ApiKey.LIST_OFFSETS: self.list_offsets, ApiKey.DELETE_RECORDS: self.delete_records}

    async def produce(self, request: Request) -> Reply | None:
        body = request.body
        acks = fields.integer(body, "acks", 1, bits=fields.INT16)
        timeout_s = fields.integer(body, "timeout_ms", DEFAULT_PRODUCE_TIMEOUT_MS) / 1000
        # The same partition may appear more than once: a producer sends consecutive batches together.
        listed = [(*fields.topic_partition(e), fields.integer(e, "size")) for e in fields.objects(body, "partitions")]
        batches = split_payload(request.payload, [size for _, _, size in listed])
        entries = [ProduceEntry(topic, index, raw) for (topic, index, _), raw in zip(listed, batches)]
        outcomes = await append_at_leaders(self.replicas, entries, acks, timeout_s,
                                           fields.string(body, "transactional_id", None), self.verifier)
        results = [{"topic": e.topic, "partition": e.partition, **_produce_fields(o)}
                   for e, o in zip(entries, outcomes)]
        if acks == 0:
            failed = [r for r in results if r["error_code"]]
            if failed:
                raise CloseConnection(f"acks=0 produce failed: {failed[0].get('error_message')}")
            return None
        return Reply({**OK, "partitions": results})

    async def fetch(self, request: Request) -> Reply:
        """A sessionless fetch (``session_epoch`` -1, the default), or one of a fetch session
        (``ember.ingest.fetch_session``): epoch 0 opens one, 1, 2, ... continue it, naming only
        partitions whose position changed and ``forgotten`` ones; the answer says ``session_id``."""
        body = request.body
        targets = [FetchTarget(*fields.topic_partition(e), fields.integer(e, "fetch_offset", bits=fields.INT64),
                               fields.integer(e, "max_bytes", DEFAULT_PARTITION_MAX_BYTES),
                               fields.integer(e, "current_leader_epoch", None))
                   for e in fields.partitions(body)]
        replica_id = fields.integer(body, "replica_id", CONSUMER_REPLICA_ID)
        min_bytes = fields.integer(body, "min_bytes", 1)
        max_bytes = fields.integer(body, "max_bytes", DEFAULT_FETCH_MAX_BYTES)
        max_wait_s = fields.integer(body, "max_wait_ms", 500) / 1000
        forgotten = [fields.topic_partition(e) for e in fields.partitions(body, "forgotten", [])]
        results, session_id = await fetch(
            self.replicas, targets, replica_id, min_bytes, max_bytes, max_wait_s,
            fields.integer(body, "session_id", NO_SESSION), fields.integer(body, "session_epoch", FINAL_EPOCH),
            forgotten, committed=fields.integer(body, "isolation_level", READ_UNCOMMITTED) == READ_COMMITTED)
        return self._fetch_reply(results, session_id)

    @staticmethod
    def _fetch_reply(results: list[FetchResult], session_id: int) -> Reply:
        """Open each slice's segment file before anything is written, so a segment removed by
        retention meanwhile becomes OFFSET_OUT_OF_RANGE for that partition, not a broken frame."""
        payload: list[bytes | memoryview | FileRegion] = []
        partitions = []
        for result in results:
            offsets = result.offsets
            fields: dict[str, Any] = {"topic": result.target.topic, "partition": result.target.partition,
                                      **(error_fields(result.error) if result.error else OK),
                                      "high_watermark": offsets.high_watermark,
                                      "log_start_offset": offsets.log_start_offset,
                                      "log_end_offset": offsets.log_end_offset,
                                      "last_stable_offset": offsets.last_stable_offset}
            if result.aborted is not None:
                fields["aborted_transactions"] = [{"producer_id": a.producer_id, "first_offset": a.first_offset}
                                                  for a in result.aborted]
            size = 0
            if result.slice is not None:
                try:
                    region = FileRegion(result.slice.open(), result.slice.position, result.slice.size)
                    payload.append(region)
                    size = region.size
                except OffsetOutOfRange as exc:
                    fields.update(error_fields(exc))
            partitions.append({**fields, "size": size})
        return Reply({**OK, "session_id": session_id, "partitions": partitions}, payload)

    async def list_offsets(self, request: Request) -> Reply:
        replica_id = fields.integer(request.body, "replica_id", CONSUMER_REPLICA_ID)
        committed = fields.integer(request.body, "isolation_level", READ_UNCOMMITTED) == READ_COMMITTED

        async def offset(partition: Partition, timestamp: int) -> tuple[int, int]:
            return await partition.offset_for_timestamp(timestamp, replica_id, committed)
        operation = self.replicas.access.follower_or_topic(replica_id, Operation.DESCRIBE)
        queries = leader_queries(request.body, lambda e: fields.integer(e, "timestamp", bits=fields.INT64))
        answers = await self.replicas.answer_at_leader(queries, offset, operation)
        return Reply({**OK, "partitions": answer_fields(
            answers, lambda found: {"offset": found[0], "timestamp": found[1]}, {"offset": -1, "timestamp": -1})})

    async def delete_records(self, request: Request) -> Reply:
        """Move each partition's log start up to ``offset`` (-1: the high watermark) at its leader."""
        queries = leader_queries(request.body, lambda e: fields.integer(e, "offset", bits=fields.INT64))
        answers = await self.replicas.answer_at_leader(queries, Partition.delete_records, Operation.DELETE)
        return Reply({**OK, "partitions": answer_fields(
            answers, lambda low_watermark: {"low_watermark": low_watermark}, {"low_watermark": -1})})
