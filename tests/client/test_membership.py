"""Membership against a scripted coordinator (unit tests of the one class): which heartbeat answers
make the member rejoin."""
from __future__ import annotations

import threading
import time
from typing import Any, Optional

from ember.client.membership import Membership
from ember.errors import IllegalGeneration, RebalanceInProgress
from ember.wire.api_keys import ApiKey


class ScriptedCoordinator:
    """Answers JoinGroup with the next generation; a heartbeat blocks until released, then raises
    the error it was given (the answer that arrives late, after the member rejoined)."""

    group_id = "g"
    request_timeout_s = 5.0

    def __init__(self) -> None:
        self.generation = 0
        self.heartbeat_sent = threading.Event()
        self.release = threading.Event()
        self.heartbeat_error: Optional[Exception] = None
        self.heartbeats: list[int] = []

    def request(self, api_key: int, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        if api_key == ApiKey.JOIN_GROUP:
            self.generation += 1
            return {"member_id": "m-1", "generation": self.generation, "protocol": "range", "assignment": []}
        if api_key == ApiKey.HEARTBEAT:
            self.heartbeats.append(body["generation"])
            self.heartbeat_sent.set()
            self.release.wait(5)
            if self.heartbeat_error is not None and body["generation"] < self.generation:
                raise self.heartbeat_error
            return {}
        return {}


def membership(coordinator: ScriptedCoordinator) -> Membership:
    return Membership(coordinator, "c", session_timeout_ms=3000, heartbeat_interval_ms=20,  # type: ignore[arg-type]
                      max_poll_interval_ms=60000)


def rejoin_after_a_late_heartbeat_answer(error: Exception) -> bool:
    """Join generation 1, let a heartbeat of generation 1 leave, rejoin (generation 2), then let
    the heartbeat's answer (``error``) arrive: is a rejoin asked for?"""
    coordinator = ScriptedCoordinator()
    coordinator.heartbeat_error = error
    member = membership(coordinator)
    try:
        member.join(["t"], ["range"])
        assert coordinator.heartbeat_sent.wait(5)             # a heartbeat of generation 1 is on its way
        member.join(["t"], ["range"])                          # the rebalance it would announce: done
        assert member.generation_info() == ("m-1", 2)
        coordinator.release.set()
        deadline = time.monotonic() + 5
        while len(coordinator.heartbeats) < 3 and time.monotonic() < deadline:   # the answer was handled
            time.sleep(0.01)
        return member.rejoin_needed.is_set() or not member.active
    finally:
        coordinator.release.set()
        member.close()


def test_a_late_rebalance_in_progress_for_an_older_generation_does_not_make_the_member_rejoin() -> None:
    assert not rejoin_after_a_late_heartbeat_answer(RebalanceInProgress("rebalancing"))


def test_a_late_illegal_generation_for_an_older_generation_does_not_make_the_member_rejoin() -> None:
    assert not rejoin_after_a_late_heartbeat_answer(IllegalGeneration("stale"))


def test_rebalance_in_progress_for_the_current_generation_makes_the_member_rejoin() -> None:
    coordinator = ScriptedCoordinator()
    coordinator.release.set()
    member = membership(coordinator)
    try:
        member.join(["t"], ["range"])
        coordinator.generation += 1                            # the group moved on: heartbeats of 1 fail
        coordinator.heartbeat_error = RebalanceInProgress("rebalancing")
        assert member.rejoin_needed.wait(5)
        assert member.active                                   # still a member until it rejoins
    finally:
        member.close()
