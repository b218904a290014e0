"""A consumer's membership in its group: join (and rejoin), heartbeat in the background, leave.

The heartbeat thread keeps the member's session alive while the application processes records
and turns the coordinator's answers into a *rejoin needed* flag; the rejoin itself happens on
the application's thread, in ``poll``, because it revokes and assigns partitions (Kafka's eager
protocol). If ``poll`` is not called for ``max_poll_interval_ms`` the thread leaves the group, so
a stuck consumer gives its partitions to the others instead of holding them.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Sequence

from ember.client.coordinator_client import MEMBER_ID_REQUIRED, CoordinatorClient
from ember.errors import EmberError, IllegalGeneration, KafkaTimeoutError, RebalanceInProgress, UnknownMemberId
from ember.wire.api_keys import ApiKey
from ember.wire.types import TopicPartition

log = logging.getLogger(__name__)

NO_GENERATION = -1


class Membership:
    def __init__(self, coordinator: CoordinatorClient, client_id: str, session_timeout_ms: int,
                 heartbeat_interval_ms: int, max_poll_interval_ms: int) -> None:
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be lower than session_timeout_ms")
        self.coordinator = coordinator
        self.group_id = coordinator.group_id
        self.client_id = client_id
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.max_poll_interval_ms = max_poll_interval_ms
        self.member_id = ""
        self.generation = NO_GENERATION
        # the member id and generation of the last successful join, kept after the membership is
        # lost so a group member's commit is judged by the coordinator (never sent as generation -1)
        self.last_member_id = ""
        self.last_generation = NO_GENERATION
        self.rejoin_needed = threading.Event()
        self._lock = threading.Lock()           # member id / generation vs. the heartbeat thread
        self._last_poll = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._heartbeat_loop, name=f"ember-heartbeat-{self.group_id}",
                                        daemon=True)
        self._thread.start()

    @property
    def active(self) -> bool:
        return self.generation != NO_GENERATION

    def polled(self) -> None:
        """The application called poll: it is alive (max_poll_interval_ms)."""
        self._last_poll = time.monotonic()

    def join(self, topics: Sequence[str], assignors: Sequence[str]) -> list[TopicPartition]:
        """Join (or rejoin) and wait for the rebalance to end; returns this member's partitions."""
        rebalance_timeout_s = self.max_poll_interval_ms / 1000
        deadline = time.monotonic() + rebalance_timeout_s + self.coordinator.request_timeout_s
        with self._lock:
            self.generation = NO_GENERATION     # no heartbeats while joining
        self.rejoin_needed.clear()
        while True:
            body = {"group_id": self.group_id, "member_id": self.member_id, "client_id": self.client_id,
                    "session_timeout_ms": self.session_timeout_ms, "rebalance_timeout_ms": self.max_poll_interval_ms,
                    "protocol_type": "consumer", "topics": list(topics), "protocols": list(assignors)}
            try:
                reply = self.coordinator.request(ApiKey.JOIN_GROUP, body, timeout_s=rebalance_timeout_s + 5,
                                                 deadline_s=max(deadline - time.monotonic(), 0.1),
                                                 accept=(MEMBER_ID_REQUIRED,))
            except UnknownMemberId:
                self.member_id = ""             # the coordinator forgot us (expired, or it moved)
            except RebalanceInProgress:
                pass
            else:
                if reply.get("error_code") == MEMBER_ID_REQUIRED:
                    self.member_id = reply["member_id"]     # two-step join: now join with this id
                    continue
                with self._lock:
                    self.member_id, self.generation = reply["member_id"], reply["generation"]
                    self.last_member_id, self.last_generation = self.member_id, self.generation
                log.info("group %s: joined generation %d as %s (%s, %d partition(s))", self.group_id,
                         self.generation, self.member_id, reply["protocol"], len(reply["assignment"]))
                return [TopicPartition(a["topic"], a["partition"]) for a in reply["assignment"]]
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"could not join group {self.group_id!r} in {rebalance_timeout_s:.0f}s")

    def generation_info(self) -> tuple[str, int]:
        """(member id, generation) of the current membership; ("", -1) when not a member."""
        with self._lock:
            return (self.member_id, self.generation) if self.active else ("", NO_GENERATION)

    def last_generation_info(self) -> tuple[str, int]:
        """(member id, generation) of the last join, even if the membership was lost since."""
        with self._lock:
            return self.last_member_id, self.last_generation

    def lost(self, generation: int) -> None:
        """The coordinator rejected ``generation``: rejoin on the next poll (unless that already
        happened: a late heartbeat answer must not undo a newer join)."""
        with self._lock:
            if self.generation != generation:
                return
            self.generation = NO_GENERATION
        self.rejoin_needed.set()

    def rebalancing(self, generation: int) -> None:
        """The group rebalances while this member is in ``generation``: rejoin on the next poll.
        An answer to a heartbeat of an older generation is ignored: it predates the join that
        already took part in that rebalance, and would make the member rejoin (revoking and
        reassigning its partitions) for nothing."""
        with self._lock:
            if self.generation != generation:
                return
        self.rejoin_needed.set()

    def leave(self) -> None:
        """Leave the group now (its partitions move to the others at once, not after a session timeout)."""
        with self._lock:
            member_id, self.generation = self.member_id, NO_GENERATION
            self.member_id = ""
        if not member_id:
            return
        try:
            self.coordinator.request(ApiKey.LEAVE_GROUP, {"group_id": self.group_id, "member_id": member_id})
        except EmberError as exc:
            log.info("group %s: leaving failed (the session timeout will remove %s): %s", self.group_id, member_id, exc)

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_interval_s):
            member_id, generation = self.generation_info()
            if generation == NO_GENERATION:
                continue
            if (time.monotonic() - self._last_poll) * 1000 > self.max_poll_interval_ms:
                log.warning("group %s: poll() not called for %d ms (max_poll_interval_ms); leaving the group",
                            self.group_id, self.max_poll_interval_ms)
                self.leave()
                self.rejoin_needed.set()
                continue
            try:
                self.coordinator.request(ApiKey.HEARTBEAT, {"group_id": self.group_id, "member_id": member_id,
                                                            "generation": generation},
                                         deadline_s=self.session_timeout_ms / 1000)
            except RebalanceInProgress:
                self.rebalancing(generation)
            except (IllegalGeneration, UnknownMemberId):
                self.lost(generation)
            except EmberError as exc:
                log.debug("group %s: heartbeat failed: %s", self.group_id, exc)

    def close(self) -> None:
        """Leave the group and stop the heartbeat thread."""
        self._stop.set()
        self.leave()
        self._thread.join(self.coordinator.request_timeout_s)
