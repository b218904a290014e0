"""``AssignedConsumer``: pull records from partitions at offsets the caller controls; the base of
``ember.client.Consumer``.

The consumer keeps a *position* per assigned partition (the next offset to return), long-polls
partition leaders with Fetch (one request in flight per broker, issued again as soon as a
partition's buffer is empty, so the next ``poll`` usually finds data waiting), and decodes the
Arrow payloads. ``poll`` returns per-record Python objects; ``poll_batches`` returns the Arrow
columns untouched apart from slicing off records before the position.

Group membership is not here: without ``group_id`` topics given to the constructor or to
``subscribe`` are assigned whole. The group client extends this class by overriding
:meth:`_assign_subscription` (assignment) and :meth:`_committed_position` (start positions).
"""
from __future__ import annotations

import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, TypeVar, cast

import pyarrow as pa

from ember.client.metadata import STALE_METADATA, MetadataClient
from ember.client.offsets import EARLIEST, LATEST, list_offsets
from ember.errors import EmberError, ErrorCode, OffsetOutOfRange, error_for_code
from ember.record.batch import check_batch, decode_payload, slice_offsets
from ember.record.control import AbortedFilter, is_control
from ember.record.header import HEADER_SIZE, BatchHeader
from ember.security.client import ClientSecurity
from ember.wire.api_keys import ApiKey
from ember.wire.fetch_session import NO_SESSION, FetchSessionHandler
from ember.wire.frame import Response, response_error, split_payload
from ember.wire.isolation import isolation_level as wire_isolation_level
from ember.wire.types import ConsumerRecord, OffsetAndTimestamp, TopicPartition

Deserializer = Optional[Callable[[Optional[bytes]], Any]]
_RESET = {"earliest": EARLIEST, "latest": LATEST, "none": None}
#: What a poll returns: records or record batches per partition.
Polled = TypeVar("Polled", bound=dict[TopicPartition, Any])


class AssignedConsumer:
    """Read records from ember topics (see docs/clients.md for every option)."""

    def __init__(self, *topics: str, bootstrap_servers: str | Iterable[str] = "127.0.0.1:9092",
                 group_id: Optional[str] = None, auto_offset_reset: str = "latest", fetch_min_bytes: int = 1,
                 fetch_max_wait_ms: int = 500, fetch_max_bytes: int = 50 * 1024 * 1024,
                 max_partition_fetch_bytes: int = 1024 * 1024, max_poll_records: int = 500,
                 enable_auto_commit: bool = True, consumer_timeout_ms: float = float("inf"),
                 request_timeout_ms: int = 30000, retry_backoff_ms: int = 100, check_crcs: bool = True,
                 key_deserializer: Deserializer = None, value_deserializer: Deserializer = None,
                 isolation_level: str = "read_uncommitted", **security: Any) -> None:
        """``security``: ``security_protocol``, ``ssl_cafile``, ``sasl_mechanism`` and the other security keywords of
        :class:`ember.security.client.SecurityOptions` (kafka-python's names). ``isolation_level="read_committed"``
        reads each partition only up to its last stable offset and leaves out aborted transactions' records."""
        if auto_offset_reset not in _RESET:
            raise ValueError(f"auto_offset_reset must be earliest, latest or none, not {auto_offset_reset!r}")
        self.group_id = group_id
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_offset_reset = auto_offset_reset
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.consumer_timeout_s = consumer_timeout_ms / 1000
        self.request_timeout_s = request_timeout_ms / 1000
        self.check_crcs = check_crcs
        self.isolation_level = isolation_level
        self._isolation = wire_isolation_level(isolation_level)
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._metadata = MetadataClient(bootstrap_servers, request_timeout_ms=request_timeout_ms,
                                        retry_backoff_ms=retry_backoff_ms,
                                        security=ClientSecurity.from_options(security, type(self).__name__))
        self._positions: dict[TopicPartition, Optional[int]] = {}
        self._pending_reset: dict[TopicPartition, Optional[int]] = {}
        self._buffers: dict[TopicPartition, deque[pa.RecordBatch]] = {}
        #: One past the last offset the buffered batches span: the position once they are all
        #: returned, past the offsets a log cleaning removed from their ends.
        self._buffer_ends: dict[TopicPartition, int] = {}
        self._fetches: dict[int, tuple[Future[Response], dict[TopicPartition, int]]] = {}
        #: The fetch session with each leader, and what the fetch in flight named and forgot.
        self._sessions: dict[int, FetchSessionHandler[TopicPartition]] = {}
        self._session_fetches: dict[int, tuple[list[TopicPartition], list[TopicPartition]]] = {}
        self._subscription: list[str] = []
        self._closed = False
        if topics:
            self.subscribe(list(topics))

    # -- assignment --------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Consume ``topics``; without a group every partition of them is assigned to this consumer."""
        self._subscription = list(topics)
        self._assign_subscription()

    def subscription(self) -> set[str]:
        return set(self._subscription)

    def _assign_subscription(self) -> None:
        """Without a group: all partitions of the subscribed topics. The group client overrides this."""
        self._metadata.refresh(self._subscription)
        partitions = []
        for topic in self._subscription:
            info = self._metadata.wait_for_topic(topic, self.request_timeout_s)
            partitions += [TopicPartition(topic, p.partition) for p in info.partitions]
        self._set_assignment(partitions)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (manual assignment; replaces any subscription)."""
        self._subscription = []
        self._set_assignment([TopicPartition(*tp) for tp in partitions])

    def _set_assignment(self, partitions: list[TopicPartition]) -> None:
        keep = set(partitions)
        for tp in list(self._positions):
            if tp not in keep:
                self._forget(tp)
                del self._positions[tp]
        for tp in partitions:
            if tp not in self._positions:
                self._positions[tp] = self._committed_position(tp)
                if self._positions[tp] is None:
                    self._pending_reset[tp] = _RESET[self.auto_offset_reset]

    def _committed_position(self, tp: TopicPartition) -> Optional[int]:
        """Where a newly assigned partition starts, or None for auto_offset_reset. Groups override."""
        return None

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    # -- positions ---------------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next record ``poll`` returns for ``partition``."""
        tp = self._assigned(partition)
        if offset < 0:
            raise ValueError("offset must be >= 0")
        self._forget(tp)
        self._positions[tp] = offset

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._seek_to(partitions, EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._seek_to(partitions, LATEST)

    def _seek_to(self, partitions: tuple[TopicPartition, ...], where: int) -> None:
        for tp in [self._assigned(p) for p in partitions] or list(self._positions):
            self._forget(tp)
            self._positions[tp] = None
            self._pending_reset[tp] = where

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record ``poll`` returns for ``partition``."""
        tp = self._assigned(partition)
        self._reset_positions()
        return cast(int, self._positions[tp])   # _reset_positions() gave it one (or raised)

    def _assigned(self, partition: TopicPartition) -> TopicPartition:
        tp = TopicPartition(*partition)
        if tp not in self._positions:
            raise ValueError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        return tp

    def _forget(self, tp: TopicPartition) -> None:
        """Drop buffered records of ``tp``; in-flight fetches for it are ignored when they land."""
        self._buffers.pop(tp, None)
        self._buffer_ends.pop(tp, None)
        self._pending_reset.pop(tp, None)

    def _reset_positions(self) -> None:
        pending = {tp: where for tp, where in self._pending_reset.items() if self._positions.get(tp) is None}
        if not pending:
            return
        unresettable = [tp for tp, where in pending.items() if where is None]
        if unresettable:
            raise OffsetOutOfRange(f"no position for {_names(unresettable)} and auto_offset_reset='none'; "
                                   f"call seek() or seek_to_beginning() first")
        resets = {tp: where for tp, where in pending.items() if where is not None}   # all of pending: None raised above
        for tp, (offset, _) in list_offsets(self._metadata, resets, self.request_timeout_s, self._isolation).items():
            self._positions[tp] = offset
            self._pending_reset.pop(tp, None)

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._offsets(partitions, EARLIEST)

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """One past the last offset this consumer can read in each partition: the high watermark, or
        the last stable offset with ``isolation_level="read_committed"`` (as Kafka's consumer)."""
        return self._offsets(partitions, LATEST)

    def _offsets(self, partitions: Iterable[TopicPartition], where: int) -> dict[TopicPartition, int]:
        found = list_offsets(self._metadata, {TopicPartition(*tp): where for tp in partitions}, self.request_timeout_s,
                             self._isolation)
        return {tp: offset for tp, (offset, _) in found.items()}

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, Optional[OffsetAndTimestamp]]:
        """The first offset whose timestamp is >= the given ms timestamp, per partition (None if none)."""
        for ts in timestamps.values():
            if ts < 0:
                raise ValueError("timestamps must be >= 0 (ms since the epoch)")
        found = list_offsets(self._metadata, {TopicPartition(*tp): ts for tp, ts in timestamps.items()},
                             self.request_timeout_s)
        return {tp: OffsetAndTimestamp(offset, ts) if offset >= 0 else None for tp, (offset, ts) in found.items()}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {p.partition for p in self._metadata.wait_for_topic(topic, self.request_timeout_s).partitions}

    def topics(self) -> set[str]:
        return set(self._metadata.refresh(None))

    # -- polling -----------------------------------------------------------------------------

    def poll(self, timeout_ms: float = 0, max_records: Optional[int] = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records after each partition's position, waiting up to ``timeout_ms`` for some to arrive."""
        limit = max_records or self.max_poll_records
        return self._poll(timeout_ms, lambda: self._drain_records(limit))

    def poll_batches(self, timeout_ms: float = 0) -> dict[TopicPartition, pa.RecordBatch]:
        """Like ``poll`` but columnar: one Arrow record batch per partition (columns offset,
        timestamp, key, value, headers), with no per-record Python work."""
        return self._poll(timeout_ms, self._drain_batches)

    def _poll(self, timeout_ms: float, drain: Callable[[], Polled]) -> Polled:
        if self._closed:
            raise RuntimeError("poll() on a closed Consumer")
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._reset_positions()
            out = drain()
            self._send_fetches()
            remaining = deadline - time.monotonic()
            if out or remaining <= 0:
                return out
            in_flight = [future for future, _ in self._fetches.values()]
            if in_flight:
                wait(in_flight, remaining, return_when=FIRST_COMPLETED)
            else:
                time.sleep(min(remaining, self._metadata.retry_backoff_s))
            self._collect_fetches()

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records one by one; stops after ``consumer_timeout_ms`` without new records."""
        idle_since = time.monotonic()
        while True:
            records = self.poll(min(1000.0, self.consumer_timeout_s * 1000))
            if records:
                idle_since = time.monotonic()
                for batch in records.values():
                    yield from batch
            elif time.monotonic() - idle_since >= self.consumer_timeout_s:
                return

    def _drain_records(self, limit: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for tp, buffer in list(self._buffers.items()):
            while buffer and limit > 0:
                batch = buffer[0]
                if batch.num_rows > limit:
                    buffer[0] = batch.slice(limit)
                    batch = batch.slice(0, limit)
                else:
                    buffer.popleft()
                out.setdefault(tp, []).extend(self._records(tp, batch))
                limit -= batch.num_rows
                self._positions[tp] = out[tp][-1].offset + 1
            if not buffer:
                del self._buffers[tp]
                self._positions[tp] = self._buffer_ends.pop(tp)
        return out

    def _records(self, tp: TopicPartition, batch: pa.RecordBatch) -> list[ConsumerRecord]:
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        if self._key_deserializer is not None:
            keys = [self._key_deserializer(k) for k in keys]
        if self._value_deserializer is not None:
            values = [self._value_deserializer(v) for v in values]
        headers_col = batch.column("headers")
        if headers_col.null_count == len(headers_col):
            headers: list[list[tuple[str, bytes]]] = [[]] * batch.num_rows
        else:
            headers = [[(h["key"], h["value"]) for h in row] if row else [] for row in headers_col.to_pylist()]
        topic, partition = tp
        return [ConsumerRecord(topic, partition, o, t, k, v, h) for o, t, k, v, h in zip(
            batch.column("offset").to_pylist(), batch.column("timestamp").to_pylist(), keys, values, headers)]

    def _drain_batches(self) -> dict[TopicPartition, pa.RecordBatch]:
        out = {}
        for tp, buffer in self._buffers.items():
            batch = pa.concat_batches(list(buffer)) if len(buffer) > 1 else buffer[0]
            out[tp] = batch
            self._positions[tp] = self._buffer_ends.pop(tp)
        self._buffers.clear()
        return out

    # -- fetching ----------------------------------------------------------------------------

    def _send_fetches(self) -> None:
        """One Fetch per leader for the partitions with a position, no buffered data and none in flight."""
        busy = {tp for _, offsets in self._fetches.values() for tp in offsets}
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        for tp, position in self._positions.items():
            if position is None or tp in self._buffers or tp in busy:
                continue
            leader = self._metadata.leader(tp.topic, tp.partition)
            if leader is None:
                self._metadata.mark_stale()
            elif leader not in self._fetches:
                by_leader.setdefault(leader, {})[tp] = position
        if self._metadata.needs_refresh():
            self._refresh_metadata()
        for leader, offsets in by_leader.items():
            # a fetch session per leader (KIP-227): only partitions whose position moved are named
            session = self._sessions.setdefault(leader, FetchSessionHandler())
            listed, forgotten = session.next_fetch(dict(offsets))
            body = {"replica_id": -1, "max_wait_ms": self.fetch_max_wait_ms, "min_bytes": self.fetch_min_bytes,
                    "max_bytes": self.fetch_max_bytes, "isolation_level": self._isolation, **session.fields(),
                    "partitions": [{"topic": tp.topic, "partition": tp.partition, "fetch_offset": offsets[tp],
                                    "max_bytes": self.max_partition_fetch_bytes} for tp in listed],
                    "forgotten": [{"topic": tp.topic, "partition": tp.partition} for tp in forgotten]}
            try:
                future = self._metadata.connection(leader).request(
                    ApiKey.FETCH, body, timeout_s=self.request_timeout_s + self.fetch_max_wait_ms / 1000)
            except EmberError:
                session.reset()
                self._metadata.mark_stale()
                continue
            self._fetches[leader] = (future, offsets)
            self._session_fetches[leader] = (listed, forgotten)

    def _refresh_metadata(self) -> None:
        try:
            self._metadata.refresh({tp.topic for tp in self._positions})
        except EmberError:
            pass   # retried on the next poll; leaders stay unknown meanwhile

    def _collect_fetches(self) -> None:
        for leader, (future, offsets) in list(self._fetches.items()):
            if not future.done():
                continue
            del self._fetches[leader]
            listed, forgotten = self._session_fetches.pop(leader)
            session = self._sessions[leader]
            error = future.exception()
            if error is not None:
                session.reset()       # the broker may or may not have taken this epoch
                self._metadata.mark_stale()
                continue
            response = future.result()   # done (checked above): never waits
            error = response_error(response.body)
            if error is not None:
                session.reset()       # FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, or another
                if not error.retriable:
                    raise error
                self._metadata.mark_stale()
                continue
            session.answered(response.body.get("session_id", NO_SESSION), dict(offsets), listed, forgotten)
            items = response.body.get("partitions", [])
            payloads = split_payload(response.payload, [item.get("size", 0) for item in items])
            for item, payload in zip(items, payloads):
                tp = TopicPartition(item["topic"], item["partition"])
                if offsets.get(tp) is None or self._positions.get(tp) != offsets[tp] or tp in self._buffers:
                    continue   # seeked or unassigned meanwhile
                self._handle_partition(tp, offsets[tp], item, payload)

    def _handle_partition(self, tp: TopicPartition, fetch_offset: int, item: dict[str, Any], payload: memoryview) -> None:
        code = item.get("error_code", 0)
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            where = _RESET[self.auto_offset_reset]
            if where is None:
                raise OffsetOutOfRange(
                    f"offset {fetch_offset} is out of range for {tp.topic}-{tp.partition} (log start "
                    f"{item.get('log_start_offset', '?')}, high watermark {item.get('high_watermark', '?')}) "
                    f"and auto_offset_reset='none'", {tp: fetch_offset})
            self._positions[tp] = None
            self._pending_reset[tp] = where
            return
        if code:
            error = error_for_code(code, item.get("error_message") or f"fetching {tp.topic}-{tp.partition}")
            if code in STALE_METADATA or error.retriable:
                self._metadata.mark_stale()
                return
            raise error
        aborted = item.get("aborted_transactions")
        keep = None if aborted is None else AbortedFilter((a["producer_id"], a["first_offset"]) for a in aborted)
        batches, end = _decode(payload, fetch_offset, self.check_crcs, keep)
        if batches:
            self._buffers[tp] = deque(batches)
            self._buffer_ends[tp] = end
        elif end > fetch_offset:    # whole batches whose records a log cleaning removed
            self._positions[tp] = end

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._metadata.close()

    def __enter__(self) -> "AssignedConsumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _decode(payload: memoryview, fetch_offset: int, verify_crc: bool,
            keep: AbortedFilter | None = None) -> tuple[list[pa.RecordBatch], int]:
    """Record batches of a fetch payload without the records before ``fetch_offset`` (nor, with
    ``keep``, those of aborted transactions), and one past the last offset the whole batches span
    (``fetch_offset`` if none): the next fetch offset, also where a log cleaning removed the last
    records of a batch or a transaction marker ends the payload, as Kafka's consumer does.

    A truncated batch at the end (a broker may cut the last one at max_bytes) is skipped."""
    pos, batches, end = 0, [], fetch_offset
    while len(payload) - pos >= HEADER_SIZE:
        header = BatchHeader.parse(payload, pos)
        if pos + header.size > len(payload):
            break
        check_batch(payload, pos, verify_crc=verify_crc)
        if header.base_offset + header.last_offset_delta >= fetch_offset:
            raw = payload[pos:pos + header.size]
            # a transaction marker has no record to hand out, but an offset to pass
            if (keep.keep(header, raw) if keep is not None else not is_control(header)):
                batch = slice_offsets(decode_payload(header, raw), fetch_offset)
                if batch.num_rows:
                    batches.append(batch)
            end = max(end, header.last_offset + 1)
        pos += header.size
    return batches, end


def _names(partitions: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}" for tp in partitions)

