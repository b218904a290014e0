"""The fetcher's side of a fetch session (``FetchSessionHandler``): which partitions each fetch
names and forgets, and how answers, session-less brokers and resets move it."""
from __future__ import annotations

from ember.wire.fetch_session import INITIAL_EPOCH, NO_SESSION, FetchSessionHandler


def test_after_the_full_fetch_only_moved_partitions_are_named_and_dropped_ones_forgotten() -> None:
    handler: FetchSessionHandler[str] = FetchSessionHandler()
    wanted = {"a": 0, "b": 0, "c": 0}
    listed, forgotten = handler.next_fetch(wanted)
    assert (listed, forgotten, handler.fields()) == (["a", "b", "c"], [], {"session_id": 0, "session_epoch": 0})
    handler.answered(7, wanted, listed, forgotten)
    assert handler.fields() == {"session_id": 7, "session_epoch": 1} and handler.holds("c")
    wanted = {"a": 5, "b": 0}
    listed, forgotten = handler.next_fetch(wanted)
    assert (listed, forgotten) == (["a"], ["c"])
    handler.answered(7, wanted, listed, forgotten)
    assert handler.fields()["session_epoch"] == 2 and not handler.holds("c")
    assert handler.next_fetch(wanted) == ([], [])


def test_a_broker_without_a_slot_keeps_the_fetches_full() -> None:
    handler: FetchSessionHandler[str] = FetchSessionHandler()
    listed, forgotten = handler.next_fetch({"a": 0})
    handler.answered(NO_SESSION, {"a": 0}, listed, forgotten)
    assert handler.fields() == {"session_id": 0, "session_epoch": INITIAL_EPOCH}
    assert handler.next_fetch({"a": 3}) == (["a"], [])


def test_a_reset_while_a_fetch_is_in_flight_still_makes_the_next_fetch_full() -> None:
    handler: FetchSessionHandler[str] = FetchSessionHandler()
    listed, forgotten = handler.next_fetch({"a": 0, "b": 0})
    handler.answered(9, {"a": 0, "b": 0}, listed, forgotten)
    listed, forgotten = handler.next_fetch({"a": 0, "b": 0})      # epoch 1 in flight ...
    handler.reset()                                               # ... when a partition is followed anew
    handler.answered(9, {"a": 0, "b": 0}, listed, forgotten)
    assert handler.fields() == {"session_id": 9, "session_epoch": 0}   # a full fetch that closes session 9
    assert handler.next_fetch({"a": 0, "b": 0}) == (["a", "b"], [])


def test_a_fetcher_that_tracks_what_moved_names_only_those_partitions() -> None:
    """A follower of thousands of partitions hands over only those that may have moved (and
    those it dropped) instead of every position it holds."""
    handler: FetchSessionHandler[str] = FetchSessionHandler()
    wanted = {"a": 0, "b": 0, "c": 0}
    listed, forgotten = handler.next_fetch(wanted)
    handler.answered(7, wanted, listed, forgotten)
    moved = {"a": 0, "b": 4}                       # "a" fired but is where the session has it
    listed, forgotten = handler.next_changes(moved, ["c", "z"])   # "z" was never in the session
    assert (listed, forgotten) == (["b"], ["c"])
    handler.answered(7, moved, listed, forgotten)
    assert handler.holds_any() and not handler.holds("c")
    assert handler.next_changes({"b": 4}, []) == ([], [])
    listed, forgotten = handler.next_changes({}, ["a", "b"])
    handler.answered(7, {}, listed, forgotten)
    assert forgotten == ["a", "b"] and not handler.holds_any()
