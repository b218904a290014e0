"""Produce, Fetch, ListOffsets and OffsetForLeaderEpoch over Kafka's protocol: translation only. Kafka's record
batches are stored as they came, ember's are served as Kafka's (:mod:`ember.protocol.kafka.records`); appending, long-poll
reading, offset lookups and the leader-epoch cache are the broker core's (``ember.ingest.produce``,
``ember.ingest.fetch``, ``ReplicaManager.answer_at_leader``, ``Partition.end_offset_for_epoch``), the
same code the ember protocol runs."""
from __future__ import annotations

import asyncio
import functools
import struct
from typing import Any, cast

from ember.errors import (
    ErrorCode,
    FetchSessionIdNotFound,
    InvalidFetchSessionEpoch,
    InvalidRequest,
    UnsupportedVersion,
)
from ember.ingest.core import BrokerCore
from ember.ingest.fetch import FetchResult, FetchTarget, fetch
from ember.ingest.log_manager import IO_THREADS
from ember.ingest.partition import (
    CONSUMER_REPLICA_ID,
    IN_MEMORY_TIMESTAMPS,
    LATEST_TIERED_TIMESTAMP,
    LogOffsets,
    Partition,
)
from ember.ingest.produce import Produced, ProduceEntry, append_at_leaders
from ember.ingest.replica_manager import LeaderAnswer, LeaderQuery
from ember.log.txn_index import AbortedTxn
from ember.protocol.kafka.codec import KafkaRequest, build, millis, nested_class, response_class
from ember.protocol.kafka.dispatcher import Api
from ember.protocol.kafka.list_offsets_response import PartitionOffset, encode_list_offsets
from ember.protocol.kafka.names import ZERO_UUID, TopicNames
from ember.protocol.kafka.records import fetched_batches, produced_batch
from ember.record.header import Buffer
from ember.security.authorizer.model import Operation
from ember.wire.api_keys import ApiKey
from ember.wire.fetch_session import FINAL_EPOCH, NO_SESSION
from ember.wire.isolation import READ_COMMITTED, READ_UNCOMMITTED
from ember.wire.reply import OK, CloseConnection, error_fields

#: A fetch's records of at most this many bytes, at their logs' ends, are converted on the event
#: loop (``_small_at_log_ends``).
INLINE_CONVERT_BYTES = 64 * 1024
#: Produce v0-2 (magic 0/1 message sets) are advertised, as Kafka 4 does because librdkafka before
#: 2.11.1 turns compression off when Produce starts at v3, and rejected per request.
FIRST_PRODUCE_VERSION = 3
#: Produce v12 is transaction version 2's (KIP-890 part 2): its leaders add partitions to transactions.
TV2_PRODUCE_VERSION = 12
_NO_RECORDS = b""


def _produce_fields(outcome: Produced | Exception) -> dict[str, Any]:
    if isinstance(outcome, Exception):
        return {**error_fields(outcome), "base_offset": -1, "log_append_time": -1, "log_start_offset": -1}
    return {**OK, "base_offset": outcome.base_offset, "log_append_time": outcome.log_append_time,
            "log_start_offset": outcome.log_start_offset}


class RecordHandlers:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    def apis(self) -> dict[int, Api]:
        return {ApiKey.PRODUCE: Api(0, 13, self.produce), ApiKey.FETCH: Api(4, 18, self.fetch),
                ApiKey.LIST_OFFSETS: Api(1, 10, self.list_offsets, now=self.list_offsets_now),
                ApiKey.OFFSET_FOR_LEADER_EPOCH: Api(2, 4, self.offset_for_leader_epoch)}

    # -- Produce -------------------------------------------------------------------------------

    async def produce(self, request: KafkaRequest) -> Any:
        """Produce v12+ is transaction version 2's: a transactional batch's partition joins the
        transaction at its leader (no AddPartitionsToTxn from the client, KIP-890)."""
        if request.api_version < FIRST_PRODUCE_VERSION:
            return _reject_old_produce(request)
        body = request.body
        names = TopicNames(self.core.cache.topics())
        listed: list[tuple[dict[str, Any], int, Buffer | Exception]] = []   # topic ref, partition, batch
        for topic in body.topic_data:
            try:
                ref = names.ref(names.name_of(topic))
                self.core.access.check_topic(Operation.WRITE, ref["name"])   # before any batch is decoded, as Kafka
            except Exception as exc:
                ref, error = {"name": getattr(topic, "name", None), "topic_id": getattr(topic, "topic_id", ZERO_UUID)}, exc
                listed += [(ref, p.index, error) for p in topic.partition_data]
                continue
            for part in topic.partition_data:
                try:
                    listed.append((ref, part.index, produced_batch(part.records)))
                except Exception as exc:
                    listed.append((ref, part.index, exc))
        entries = [ProduceEntry(ref["name"], index, batch) for ref, index, batch in listed
                   if not isinstance(batch, Exception)]
        appended = iter(await append_at_leaders(self.core.replicas, entries, body.acks, millis(body.timeout) / 1000,
                                                body.transactional_id, self.core.txn_verifier,
                                                add_partitions=request.api_version >= TV2_PRODUCE_VERSION))
        outcomes = [batch if isinstance(batch, Exception) else next(appended) for _, _, batch in listed]
        if body.acks == 0:
            failed = next((o for o in outcomes if isinstance(o, Exception)), None)
            if failed is not None:
                raise CloseConnection(f"acks=0 produce failed: {failed}")
            return None
        topics: dict[int, dict[str, Any]] = {}
        for (ref, index, _), outcome in zip(listed, outcomes):
            topic = topics.setdefault(id(ref), {**ref, "partition_responses": []})
            topic["partition_responses"].append({"index": index, **_produce_fields(outcome), "record_errors": []})
        return build(response_class(ApiKey.PRODUCE, request.api_version), {"responses": list(topics.values())})

    # -- Fetch ---------------------------------------------------------------------------------

    async def fetch(self, request: KafkaRequest) -> Any:
        """Fetch with KIP-227's sessions (v7+; ``ember.ingest.fetch.fetch``): epoch 0 opens one, the
        Java client's next fetches name only what moved and get only what changed; librdkafka and
        older versions fetch sessionless (epoch -1: every partition named and answered)."""
        body = request.body
        cls = response_class(ApiKey.FETCH, request.api_version)
        names = TopicNames(self.core.cache.topics())
        targets: list[FetchTarget] = []
        failed: dict[tuple[object, int], tuple[dict[str, Any], Exception]] = {}   # unknown topic ids
        # Each partition once (its last entry's values at its first entry's place, as Kafka's fetch map): a request
        # naming a partition 10^4 times neither reads it 10^4 times nor gets that many answers.
        seen: dict[tuple[str, int], int] = {}
        for topic in body.topics:
            try:
                ref: dict[str, Any] = names.ref(names.name_of(topic))
            except Exception as exc:
                ref = {"topic": getattr(topic, "topic", None), "topic_id": getattr(topic, "topic_id", ZERO_UUID)}
                for p in topic.partitions:
                    failed.setdefault((ref["topic"] or ref["topic_id"], p.partition), (ref, exc))
                continue
            for part in topic.partitions:
                epoch = getattr(part, "current_leader_epoch", -1)
                target = FetchTarget(ref["name"], part.partition, part.fetch_offset,
                                     part.partition_max_bytes, epoch if epoch >= 0 else None)
                index = seen.setdefault((ref["name"], part.partition), len(targets))
                if index < len(targets):
                    targets[index] = target
                else:
                    targets.append(target)
        forgotten = [(name, index) for topic in getattr(body, "forgotten_topics_data", ())
                     for name in _known_names(names, topic) for index in topic.partitions]
        # A topic id this broker does not know yet (its metadata lags) cannot be held in a session: such a fetch
        # runs sessionless and closes the session it names, so the client starts over with full fetches (which
        # name every partition again) instead of leaving the partition out of its incremental ones for good.
        epoch = FINAL_EPOCH if failed else getattr(body, "session_epoch", FINAL_EPOCH)
        try:
            results, session_id = await fetch(
                self.core.replicas, targets, CONSUMER_REPLICA_ID, body.min_bytes, body.max_bytes,
                millis(body.max_wait) / 1000, getattr(body, "session_id", NO_SESSION), epoch, forgotten,
                committed=getattr(body, "isolation_level", READ_UNCOMMITTED) == READ_COMMITTED)
        except (FetchSessionIdNotFound, InvalidFetchSessionEpoch) as exc:
            return build(cls, {**error_fields(exc), "session_id": NO_SESSION, "responses": []})
        converted = await _fetch_partitions(results, request.api_version)
        topics: dict[object, dict[str, Any]] = {}
        for (_, index), (ref, error) in failed.items():
            topics.setdefault(id(ref), {**ref, "partitions": []})["partitions"].append(_fetch_fields(index, error))
        for result, fields in zip(results, converted):
            name = result.target.topic
            topic = topics.get(name)
            if topic is None:
                topic = topics[name] = {**names.ref(name), "partitions": []}
            topic["partitions"].append(fields)
        return build(cls, {**OK, "session_id": session_id, "responses": list(topics.values())})

    # -- ListOffsets ---------------------------------------------------------------------------

    async def list_offsets(self, request: KafkaRequest) -> Any:
        body = request.body
        committed = _read_committed(body)

        async def offset(partition: Partition, wanted: int) -> tuple[int, int]:
            if wanted < LATEST_TIERED_TIMESTAMP:
                raise UnsupportedVersion(f"ListOffsets timestamp {wanted} (a special offset of "
                                         f"ListOffsets v11+) is not supported")
            return await partition.offset_for_timestamp(wanted, CONSUMER_REPLICA_ID, committed)
        topics: list[tuple[str, list[PartitionOffset]]] = []
        for topic in body.topics:
            answers = await self.core.replicas.answer_at_leader(_offset_queries(topic), offset)
            topics.append((topic.name, [_partition_offset(a) for a in answers]))
        return encode_list_offsets(request.api_version, topics)

    def list_offsets_now(self, request: KafkaRequest) -> Any | None:
        """ListOffsets answered as it arrives (:mod:`ember.net.immediate`) when it asks only for
        offsets held in memory (earliest, latest: what Spark's connector asks after every poll);
        None when a partition asks for a timestamp, which reads the time index."""
        body = request.body
        if not all(p.timestamp in IN_MEMORY_TIMESTAMPS for topic in body.topics for p in topic.partitions):
            return None
        committed = _read_committed(body)

        def offset(partition: Partition, wanted: int) -> tuple[int, int]:
            return partition.offset_in_memory(wanted, CONSUMER_REPLICA_ID, committed)
        topics = [(topic.name, [_partition_offset(a) for a in
                                self.core.replicas.answer_at_leader_now(_offset_queries(topic), offset)])
                  for topic in body.topics]
        return encode_list_offsets(request.api_version, topics)


    # -- OffsetForLeaderEpoch ------------------------------------------------------------------

    async def offset_for_leader_epoch(self, request: KafkaRequest) -> Any:
        """Where a leader epoch ended in the leader's log: a Java consumer validates its position
        with it after a leader change (a position past the end of its epoch was truncated away)."""
        topics = []
        try:
            operation = self.core.replicas.access.follower_or_topic(getattr(request.body, "replica_id", -1),
                                                                    Operation.DESCRIBE)
        except Exception as exc:    # a follower without ClusterAction: every partition refused
            return build(response_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, request.api_version), {"topics": [
                {"topic": t.topic, "partitions": [{"partition": p.partition, **error_fields(exc), "leader_epoch": -1,
                                                   "end_offset": -1} for p in t.partitions]}
                for t in request.body.topics]})
        for topic in request.body.topics:
            queries = [LeaderQuery(topic.topic, p.partition, p.current_leader_epoch, p.leader_epoch)
                       for p in topic.partitions]
            answers = await self.core.replicas.answer_at_leader(queries, Partition.end_offset_for_epoch, operation)
            topics.append({"topic": topic.topic, "partitions": [
                {"partition": a.partition, **_answer_fields(a, ("leader_epoch", "end_offset"))} for a in answers]})
        return build(response_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, request.api_version), {"topics": topics})


def _partition_offset(answer: LeaderAnswer[tuple[int, int]]) -> PartitionOffset:
    """A ListOffsets answer: (partition, error code, timestamp, offset), -1 for both after an error."""
    fields = _answer_fields(answer, ("offset", "timestamp"))
    return answer.partition, fields["error_code"], fields["timestamp"], fields["offset"]


def _answer_fields(answer: LeaderAnswer[tuple[int, int]], names: tuple[str, str]) -> dict[str, Any]:
    """A leader's answer as Kafka's fields: the error code, then ``names`` (-1 each after an error)."""
    if answer.error is not None:
        return {**error_fields(answer.error), names[0]: -1, names[1]: -1}
    first, second = cast(tuple[int, int], answer.value)
    return {**OK, names[0]: first, names[1]: second}


def _known_names(names: TopicNames, topic: Any) -> list[str]:
    """The name of a forgotten topic, or none (an unknown id: none of it is in any session)."""
    try:
        return [names.name_of(topic)]
    except Exception:
        return []


def _fetch_fields(index: int, error: Exception | None, offsets: LogOffsets = LogOffsets(),
                  records: Buffer | None = _NO_RECORDS, aborted: list[AbortedTxn] | None = None) -> dict[str, Any]:
    """A partition's Fetch response entry; ``aborted`` (read_committed) lists the aborted
    transactions in what it holds, which every Kafka consumer filters by producer id and offset."""
    return {"partition_index": index, **(error_fields(error) if error is not None else OK),
            "high_watermark": offsets.high_watermark, "last_stable_offset": offsets.last_stable_offset,
            "log_start_offset": offsets.log_start_offset,
            "aborted_transactions": None if aborted is None else
            [{"producer_id": a.producer_id, "first_offset": a.first_offset} for a in aborted],
            "preferred_read_replica": -1, "records": records}


@functools.cache
def _partition_class(version: int) -> type:
    """The class of one entry of a Fetch response's ``partitions`` arrays."""
    return nested_class(nested_class(response_class(ApiKey.FETCH, version), "responses"), "partitions")


@functools.lru_cache(maxsize=1 << 16)
def _idle_partition(cls: type, index: int, high_watermark: int, log_start_offset: int, last_stable_offset: int) -> Any:
    """A Fetch response entry without records or error (most of a sessionless fetch's, at many
    partitions): kio entities are immutable, so one is shared by every response showing the same
    offsets; building them took as long as the rest of a 333-partition fetch."""
    return build(cls, _fetch_fields(index, None, LogOffsets(high_watermark, log_start_offset, -1, last_stable_offset)))


def _read_committed(body: Any) -> bool:
    return bool(getattr(body, "isolation_level", READ_UNCOMMITTED) == READ_COMMITTED)


def _offset_queries(topic: Any) -> list[LeaderQuery[int]]:
    """A ListOffsets topic's partitions as queries for their leader (the timestamp each asks)."""
    return [LeaderQuery(topic.name, p.partition_index, getattr(p, "current_leader_epoch", -1), p.timestamp)
            for p in topic.partitions]


async def _fetch_partitions(results: list[FetchResult], version: int) -> list[Any]:
    """Each result's response entry (its fields, or the entry itself); only those with records
    to convert go to the I/O pool, in at most one job per pool thread: a fetch of 1,000
    partitions, most of them without news, made 1,000 tasks, and a consumer starting on all of
    them a job per partition. An entry without records is built once per offsets it shows."""
    idle = _partition_class(version)
    fields: list[Any] = [
        None if r.error is None and r.slice is not None and r.leader is not None else
        _fetch_fields(r.target.partition, r.error) if r.error is not None else
        _idle_partition(idle, r.target.partition, r.offsets.high_watermark, r.offsets.log_start_offset,
                        r.offsets.last_stable_offset)
        for r in results]
    reading = [results[i] for i, f in enumerate(fields) if f is None]
    if not reading:
        return fields
    if _small_at_log_ends(reading):
        entries = _records_fields(reading, version)
    else:            # contiguous chunks, one job each: the pool's threads convert side by side
        step = -(-len(reading) // IO_THREADS)
        chunks = [reading[i:i + step] for i in range(0, len(reading), step)]
        converted = await asyncio.gather(*(_leader(chunk[0]).run(_records_fields, chunk, version) for chunk in chunks))
        entries = [entry for chunk in converted for entry in chunk]
    read = iter(entries)
    return [next(read) if f is None else f for f in fields]


def _leader(result: FetchResult) -> Partition:
    assert result.leader is not None
    return result.leader


def _small_at_log_ends(results: list[FetchResult]) -> bool:
    """Whether ``_records_fields`` of these results runs on the event loop: at most
    INLINE_CONVERT_BYTES in all, each read from data written since its log's last fsync (in the
    page cache), as a consumer at the end of a log reads: the I/O pool's two thread hand-offs cost
    more than copying (and, for batches ember's own producers wrote, building) so few bytes."""
    return sum(r.size for r in results) <= INLINE_CONVERT_BYTES and \
        all(_leader(r).unflushed_from(r.target.offset) for r in results)


def _records_fields(results: list[FetchResult], version: int) -> list[dict[str, Any]]:
    """The response fields of each result with records (on an I/O-pool thread: reads the segment
    files; or on the event loop, see ``_small_at_log_ends``), its batches as Kafka v2 batches."""
    fields = []
    for result in results:
        assert result.slice is not None
        try:
            records = fetched_batches(result.slice.read_bytes(), version)
        except Exception as exc:   # retention removed the segment meanwhile, or it is corrupt
            fields.append(_fetch_fields(result.target.partition, exc))
            continue
        fields.append(_fetch_fields(result.target.partition, None, result.offsets, records, result.aborted))
    return fields


def _reject_old_produce(request: KafkaRequest) -> bytes | None:
    """UNSUPPORTED_VERSION for every partition of a Produce v0-2 request, in that version's layout
    (kio has no schema for these versions, so the few fields needed are read and written here)."""
    reader = _Reader(request.raw)
    acks = reader.unpack(_INT16)
    reader.unpack(_INT32)                                     # timeout
    topics = []
    for _ in range(reader.unpack(_INT32)):
        name = reader.take(reader.unpack(_INT16))
        partitions = []
        for _ in range(reader.unpack(_INT32)):
            partitions.append(reader.unpack(_INT32))
            reader.take(max(reader.unpack(_INT32), 0))        # the message set
        topics.append((name, partitions))
    if acks == 0:
        raise CloseConnection(f"acks=0 Produce v{request.api_version} is not supported (Produce v3+ only)")
    out = [_INT32.pack(len(topics))]
    for name, partitions in topics:
        out += [_INT16.pack(len(name)), name, _INT32.pack(len(partitions))]
        for index in partitions:
            out.append(_OLD_PARTITION.pack(index, ErrorCode.UNSUPPORTED_VERSION, -1))
            if request.api_version == 2:
                out.append(_INT64.pack(-1))                   # log_append_time
    if request.api_version >= 1:
        out.append(_INT32.pack(0))                            # throttle_time_ms
    return b"".join(out)


_INT16, _INT32, _INT64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_OLD_PARTITION = struct.Struct(">ihq")                        # partition, error_code, base_offset


class _Reader:
    def __init__(self, data: memoryview) -> None:
        self.data, self.pos = data, 0

    def take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise InvalidRequest("Produce v0-2 request ends early")
        chunk = self.data[self.pos:self.pos + size].tobytes()
        self.pos += size
        return chunk

    def unpack(self, fmt: struct.Struct) -> int:
        return fmt.unpack(self.take(fmt.size))[0]
