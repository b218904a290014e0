"""The consumer with group membership: ``ember.client.Consumer``.

Without ``group_id`` it is exactly :class:`ember.client.assigned_consumer.AssignedConsumer`. With one, a
subscription is shared by the group's members: the coordinator assigns partitions (one member
per partition) and reassigns them when members join, leave or die; positions start at the
group's committed offsets (``auto_offset_reset`` only where none is committed); offsets are
committed explicitly (``commit``, ``commit_async``) or every ``auto_commit_interval_ms`` from
``poll``. Delivery is at least once: records returned after the last commit of a member that
dies are read again by the partition's next owner.
"""
from __future__ import annotations

import logging
import re
import time
from concurrent.futures import Future
from typing import Any, Callable, Iterable, Mapping, Optional, Protocol, Sequence

from ember.client.assigned_consumer import AssignedConsumer, Polled
from ember.client.coordinator_client import CoordinatorClient
from ember.client.group_metadata import ConsumerGroupMetadata
from ember.client.membership import Membership
from ember.errors import (
    CoordinatorNotAvailable,
    EmberError,
    IllegalGeneration,
    InvalidGroupId,
    NotCoordinator,
    UnknownMemberId,
    error_for_code,
)
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Response, response_error
from ember.wire.group_protocol import ASSIGNOR_NAMES
from ember.wire.types import OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

Offsets = Mapping[TopicPartition, OffsetAndMetadata]
CommitCallback = Callable[[Offsets, Optional[Exception]], None]
PATTERN_CHECK_S = 5.0


class ConsumerRebalanceListener(Protocol):
    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...
    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...


class Consumer(AssignedConsumer):
    """A Consumer that can be a member of a consumer group (see docs/groups.md)."""

    def __init__(self, *topics: str, group_id: Optional[str] = None, client_id: str = "ember-consumer",
                 partition_assignment_strategy: Sequence[str] = ("range", "roundrobin"),
                 session_timeout_ms: int = 10000, heartbeat_interval_ms: int = 3000,
                 max_poll_interval_ms: int = 300000, auto_commit_interval_ms: int = 5000,
                 **options: Any) -> None:
        unknown = [name for name in partition_assignment_strategy if name not in ASSIGNOR_NAMES]
        if unknown or not partition_assignment_strategy:
            raise ValueError(f"partition_assignment_strategy must list assignors among {sorted(ASSIGNOR_NAMES)}, "
                             f"got {list(partition_assignment_strategy)}")
        self.partition_assignment_strategy = list(partition_assignment_strategy)
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self._listener: Optional[ConsumerRebalanceListener] = None
        self._pattern: Optional[re.Pattern[str]] = None
        self._pattern_checked = 0.0
        self._last_commit = time.monotonic()
        self._prefetched: dict[TopicPartition, Optional[int]] = {}
        self._membership: Optional[Membership] = None
        self._coordinator: Optional[CoordinatorClient] = None
        super().__init__(group_id=group_id, **options)
        if group_id is not None:
            self._coordinator = CoordinatorClient(self._metadata, group_id, self.request_timeout_s)
            self._membership = Membership(self._coordinator, client_id, session_timeout_ms,
                                          heartbeat_interval_ms, max_poll_interval_ms)
        if topics:
            self.subscribe(list(topics))

    # -- subscription ------------------------------------------------------------------------

    def subscribe(self, topics: Optional[Iterable[str]] = None, pattern: Optional[str] = None,
                  listener: Optional[ConsumerRebalanceListener] = None) -> None:
        """Consume ``topics``, or every topic matching the regex ``pattern`` (checked again every
        few seconds, so new matching topics join the subscription). ``listener`` hears
        ``on_partitions_revoked`` before a rebalance and ``on_partitions_assigned`` after it."""
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe() takes topics or pattern, not both and not neither")
        self._listener = listener
        self._pattern = re.compile(pattern) if pattern is not None else None
        super().subscribe(topics if topics is not None else self._matching_topics())

    def generation(self) -> int:
        """The generation of the group this consumer is a member of; -1 when it is not a member
        (no group, manual assignment, or between leaving and rejoining)."""
        return self._membership.generation_info()[1] if self._membership is not None else -1

    def member_id(self) -> str:
        """This consumer's member id in its group ("" when it is not a member)."""
        return self._membership.generation_info()[0] if self._membership is not None else ""

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group, member id and generation to pass to ``Producer.send_offsets_to_transaction``
        (Kafka's ``groupMetadata()``): offsets of a member no longer in the group are then refused."""
        if self.group_id is None:
            raise InvalidGroupId("group_metadata() needs a group: pass group_id= to the Consumer")
        member_id, generation = self._membership.generation_info() if self._membership is not None else ("", -1)
        return ConsumerGroupMetadata(self.group_id, generation, member_id)

    def _matching_topics(self) -> list[str]:
        assert self._pattern is not None   # a pattern subscription
        self._pattern_checked = time.monotonic()
        return sorted(t for t in self.topics() if self._pattern.fullmatch(t))

    def _assign_subscription(self) -> None:
        """With a group the coordinator assigns partitions: join (or rejoin) on the next poll."""
        if self._membership is None:
            super()._assign_subscription()
        else:
            self._membership.rejoin_needed.set()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Manual assignment: leaves the group if this consumer was a member."""
        if self._membership is not None and self._membership.active:
            self._revoke()
            self._membership.leave()
        if self._membership is not None:
            self._membership.rejoin_needed.clear()
        super().assign(partitions)

    def _set_assignment(self, partitions: list[TopicPartition]) -> None:
        """Start new partitions at the group's committed offsets (fetched in one request)."""
        new = [tp for tp in partitions if tp not in self._positions]
        if self.group_id is not None and new:
            self._prefetched = {tp: c.offset if c else None for tp, c in self._fetch_committed(new).items()}
        try:
            super()._set_assignment(partitions)
        finally:
            self._prefetched = {}

    def _committed_position(self, tp: TopicPartition) -> Optional[int]:
        return self._prefetched.get(tp)

    # -- the group's part of poll ------------------------------------------------------------

    def _poll(self, timeout_ms: float, drain: Callable[[], Polled]) -> Polled:
        membership = self._membership
        if membership is None:
            return super()._poll(timeout_ms, drain)
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._coordinate(membership)
            step = min(max(deadline - time.monotonic(), 0), membership.heartbeat_interval_s)
            out = super()._poll(step * 1000, drain)
            if out or time.monotonic() >= deadline:
                return out

    def _coordinate(self, membership: Membership) -> None:
        """Rejoin when the group rebalances or the subscription changed; auto-commit when due."""
        membership.polled()
        if self._pattern is not None and time.monotonic() - self._pattern_checked > PATTERN_CHECK_S:
            topics = self._matching_topics()
            if topics != sorted(self._subscription):
                self._subscription = topics
                membership.rejoin_needed.set()
        if self._subscription and (membership.rejoin_needed.is_set() or not membership.active):
            self._rejoin(membership)
        if self.enable_auto_commit and time.monotonic() - self._last_commit >= self.auto_commit_interval_s:
            self.commit_async(callback=_log_failed_auto_commit)

    def _rejoin(self, membership: Membership) -> None:
        if membership.active or self._positions:
            self._revoke()
        assigned = membership.join(self._subscription, self.partition_assignment_strategy)
        try:
            self._set_assignment(assigned)      # fetches the committed offsets: may fail
        except BaseException:
            membership.rejoin_needed.set()    # retried on the next poll, not left unconsumed
            raise
        if self._listener is not None:
            self._listener.on_partitions_assigned(set(assigned))

    def _revoke(self) -> None:
        """Before giving partitions up: commit what was consumed (auto commit), tell the listener."""
        if self.enable_auto_commit and self._positions:
            self._commit_quietly()
        if self._listener is not None:
            self._listener.on_partitions_revoked(set(self._positions))
        self._set_assignment([])

    # -- offsets -----------------------------------------------------------------------------

    def commit(self, offsets: Optional[Offsets] = None) -> None:
        """Commit ``offsets`` (default: the position of every assigned partition) and wait;
        retried while the coordinator moves, KafkaTimeoutError if it does not answer in time.

        Raises IllegalGeneration / UnknownMemberId when the group has rebalanced since this
        member joined: its partitions may belong to another member now (it rejoins on the next
        poll)."""
        offsets, body = self._commit_request(offsets)
        if not offsets:
            return
        try:
            self._require_group().request(ApiKey.OFFSET_COMMIT, body)
        except EmberError as exc:
            self._commit_failed(exc)
            raise

    def commit_async(self, offsets: Optional[Offsets] = None,
                     callback: Optional[CommitCallback] = None) -> Future[None]:
        """Commit without waiting (one attempt); ``callback(offsets, error_or_None)`` runs on a
        client thread. The returned future resolves to None or raises the commit's error."""
        done: Future[None] = Future()

        def finish(committed: Offsets, error: Optional[Exception]) -> None:
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)
            if callback is not None:
                callback(committed, error)

        try:
            offsets, body = self._commit_request(offsets)
            if not offsets:
                finish(offsets, None)
                return done
            sent = self._require_group().send(ApiKey.OFFSET_COMMIT, body)
        except EmberError as exc:
            finish(offsets or {}, exc)
            return done

        def answered(response_future: Future[Response]) -> None:
            try:
                # a done callback: the future is complete, result() never waits
                error: Optional[Exception] = response_error(response_future.result().body)
            except Exception as exc:
                error = exc
            if error is not None:
                self._commit_failed(error)
            finish(offsets, error)
        sent.add_done_callback(answered)
        return done

    def _commit_request(self, offsets: Optional[Offsets]) -> tuple[Offsets, dict[str, Any]]:
        """The offsets to commit (default: every position) and the OffsetCommit body. A member of
        the group (subscribed) always sends its last member id and generation, so after losing
        its membership the coordinator refuses the commit; only a manually assigned consumer
        commits as "no member" (generation -1, refused while the group has members)."""
        self._require_group()
        if offsets is None:
            offsets = {tp: OffsetAndMetadata(pos, "") for tp, pos in self._positions.items() if pos is not None}
        if self._subscription:
            assert self._membership is not None   # a consumer with a group has one
            member_id, generation = self._membership.last_generation_info()
            if not member_id and offsets:
                raise UnknownMemberId(f"not a member of group {self.group_id!r} yet (poll() joins it); "
                                      f"a subscribed consumer commits as a member")
        else:
            member_id, generation = "", -1
        body = {"group_id": self.group_id, "member_id": member_id, "generation": generation,
                "offsets": [{"topic": tp.topic, "partition": tp.partition, "offset": om.offset,
                             "metadata": om.metadata} for tp, om in offsets.items()]}
        self._last_commit = time.monotonic()
        return offsets, body

    def _commit_failed(self, error: BaseException) -> None:
        if isinstance(error, (IllegalGeneration, UnknownMemberId)):
            if self._subscription:
                assert self._membership is not None   # a consumer with a group has one
                self._membership.rejoin_needed.set()
        elif isinstance(error, (NotCoordinator, CoordinatorNotAvailable)):
            self._require_group().forget()
        # NonEmptyGroup (a manually assigned consumer while members run) and others: just raise

    def _commit_quietly(self) -> None:
        try:
            self.commit()
        except EmberError as exc:
            log.warning("group %s: committing before the rebalance failed (records since the last commit "
                        "will be read again): %s", self.group_id, exc)

    def committed(self, partition: TopicPartition, metadata: bool = False) -> Optional[int | OffsetAndMetadata]:
        """The group's committed offset of ``partition`` (None if none); with ``metadata=True``
        an OffsetAndMetadata."""
        tp = TopicPartition(*partition)
        found = self._fetch_committed([tp]).get(tp)
        if found is None:
            return None
        return found if metadata else found.offset

    def _fetch_committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, Optional[OffsetAndMetadata]]:
        body = self._require_group().request(ApiKey.OFFSET_FETCH, {
            "group_id": self.group_id, "partitions": [{"topic": tp.topic, "partition": tp.partition}
                                                      for tp in partitions]})
        out: dict[TopicPartition, Optional[OffsetAndMetadata]] = {}
        for item in body["partitions"]:
            if item.get("error_code"):
                raise error_for_code(item["error_code"], item.get("error_message", ""))
            tp = TopicPartition(item["topic"], item["partition"])
            out[tp] = OffsetAndMetadata(item["offset"], item.get("metadata", "")) if item["offset"] >= 0 else None
        return out

    def _require_group(self) -> CoordinatorClient:
        if self._coordinator is None:
            raise InvalidGroupId("committed offsets need a group: pass group_id= to the Consumer")
        return self._coordinator

    # -- shutdown ----------------------------------------------------------------------------

    def close(self, autocommit: bool = True) -> None:
        """Commit (with auto commit), leave the group so its partitions move at once, close."""
        if self._closed:
            return
        try:
            if self._membership is not None and self._coordinator is not None:   # both or neither (group_id)
                try:
                    if autocommit and self.enable_auto_commit and self._positions:
                        self._commit_quietly()      # members and manually assigned consumers alike
                finally:
                    try:
                        self._membership.close()    # leave the group even if the commit failed
                    finally:
                        self._coordinator.close()
        finally:
            super().close()


def _log_failed_auto_commit(offsets: Offsets, error: Optional[Exception]) -> None:
    if error is not None:
        log.warning("auto commit of %d partition(s) failed: %s", len(offsets), error)
