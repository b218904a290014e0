"""The transactional harness's librdkafka consumers: telling an instance librdkafka wedged
(librdkafka #5476) from one the cluster starves, and replacing it without losing or repeating a read."""
from __future__ import annotations

import threading
from typing import Optional

from .txn_history import Poll, TxnConsumerLog, TxnFinal, TxnHistory
from .txn_runner import _await_consumers
from .txn_workload import TxnConsumer


def consumer(log: Optional[TxnConsumerLog] = None) -> TxnConsumer:
    return TxnConsumer(log or TxnConsumerLog("librdkafka read_committed", "read_committed"), "127.0.0.1:1", "t", 3)


def parked_thread(wait: str) -> int:
    """A thread blocked for good on a lock ("lock") or in a wait with a timeout ("timed"): its id."""
    started, lock = threading.Event(), threading.Lock()
    lock.acquire()
    ids: list[int] = []

    def park() -> None:
        ids.append(threading.get_native_id())
        started.set()
        lock.acquire() if wait == "lock" else threading.Event().wait(60)
    threading.Thread(target=park, daemon=True).start()
    started.wait(5)
    return ids[0]


def test_a_main_thread_blocked_on_a_lock_is_wedged_and_one_in_a_timed_wait_is_not() -> None:
    wedged, working = consumer(), consumer()
    wedged.main_thread, working.main_thread = parked_thread("lock"), parked_thread("timed")
    assert wedged.wedged(samples=3, interval_s=0.05)
    assert not working.wedged(samples=3, interval_s=0.05)
    assert not consumer().wedged(samples=1)          # not started: no main thread known


def test_a_successor_reads_on_after_its_predecessor_which_appends_nothing_more() -> None:
    first = consumer()
    first.reached = {0: 41, 2: 7}
    second = first.successor()
    assert first.retired and second.log is first.log
    assert second.start_offsets == {0: 42, 1: 0, 2: 8}


class _Fake:
    """A consumer that reaches what it is told when started, wedged or not."""

    def __init__(self, log: TxnConsumerLog, reaches: dict[int, int], wedged: bool,
                 successor: Optional["_Fake"] = None) -> None:
        self.log, self.name, self.reached = log, log.name, {}
        self._reaches, self._wedged, self._successor = reaches, wedged, successor

    def start(self) -> None:
        self.reached = dict(self._reaches)

    def wedged(self) -> bool:
        return self._wedged

    def successor(self) -> "_Fake":
        assert self._successor is not None
        return self._successor


def run_await(first: _Fake) -> tuple[list[_Fake], TxnHistory]:
    log = first.log
    final = TxnFinal({0: 10}, {0: 10}, TxnConsumerLog("c", "read_committed", [Poll(0, 9, b"v")]),
                     TxnConsumerLog("u", "read_uncommitted", [Poll(0, 9, b"v")]))
    history = TxnHistory(delivery_bound_s=0.0)
    consumers = [first]
    first.start()
    assert log.isolation == "read_committed"
    _await_consumers(consumers, final, history, bound_s=0.3)   # type: ignore[arg-type]
    return consumers, history


def test_a_wedged_consumer_is_replaced_and_its_successor_must_catch_up() -> None:
    log = TxnConsumerLog("librdkafka read_committed", "read_committed")
    successor = _Fake(log, {0: 9}, wedged=False)
    consumers, history = run_await(_Fake(log, {0: 3}, wedged=True, successor=successor))
    assert consumers == [successor] and len(history.client_restarts) == 1
    [timing] = history.timings
    assert timing.seconds is not None


def test_a_starved_consumer_is_a_liveness_failure_not_replaced() -> None:
    log = TxnConsumerLog("librdkafka read_committed", "read_committed")
    stuck = _Fake(log, {0: 3}, wedged=False)
    consumers, history = run_await(stuck)
    assert consumers == [stuck] and history.client_restarts == []
    [timing] = history.timings
    assert timing.seconds is None
