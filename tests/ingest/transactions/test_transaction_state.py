"""Transaction metadata: Kafka's legal transitions, what each keeps or clears, its JSON form, and
(hypothesis) the state machine's invariants over any sequence of operations."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ember.errors import InvalidTxnState
from ember.ingest.transactions.state import VALID_PREVIOUS, TransactionMetadata, TxnState

META = TransactionMetadata("tx", producer_id=7, producer_epoch=0, timeout_ms=60000, update_ms=1)


def test_a_transaction_begins_collects_partitions_and_groups_and_commits() -> None:
    ongoing = META.begin_or_add(10, [("t", 0)]).begin_or_add(20, [("t", 1)], ["g"])
    assert ongoing.state == TxnState.ONGOING
    assert ongoing.partitions == {("t", 0), ("t", 1)} and ongoing.groups == {"g"}
    assert ongoing.start_ms == 10 and ongoing.update_ms == 20
    prepared = ongoing.prepare(True, 30)
    assert prepared.state == TxnState.PREPARE_COMMIT and prepared.committing
    assert prepared.partitions == ongoing.partitions        # the markers need them
    done = prepared.complete(40)
    assert done.state == TxnState.COMPLETE_COMMIT
    assert done.partitions == frozenset() and done.groups == frozenset() and done.start_ms == -1


def test_the_next_transaction_starts_empty() -> None:
    first = META.begin_or_add(10, [("t", 0)], ["g"]).prepare(False, 20).complete(30)
    assert first.state == TxnState.COMPLETE_ABORT
    second = first.begin_or_add(40, [("u", 3)])
    assert second.partitions == {("u", 3)} and second.groups == frozenset() and second.start_ms == 40


@pytest.mark.parametrize("state", [TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT])
def test_nothing_to_end_without_an_open_transaction(state: TxnState) -> None:
    meta = TransactionMetadata("tx", 7, 0, 1000, state=state)
    with pytest.raises(InvalidTxnState):
        meta.prepare(True, 1)
    with pytest.raises(InvalidTxnState):
        meta.complete(1)


def test_a_prepared_transaction_takes_no_partitions_and_no_new_producer() -> None:
    prepared = META.begin_or_add(10, [("t", 0)]).prepare(True, 20)
    with pytest.raises(InvalidTxnState):
        prepared.begin_or_add(30, [("t", 1)])
    with pytest.raises(InvalidTxnState):
        prepared.with_producer(7, 1, 30, 1000)
    with pytest.raises(InvalidTxnState):
        prepared.prepare(False, 30)


def test_a_producer_bumping_its_own_epoch_is_remembered_a_new_instance_is_not() -> None:
    bumped = META.with_producer(7, 1, 50, 2000, continuing=True)
    assert (bumped.producer_id, bumped.producer_epoch) == (7, 1)
    assert (bumped.last_producer_id, bumped.last_producer_epoch) == (7, 0)
    assert bumped.timeout_ms == 2000 and bumped.state == TxnState.EMPTY
    assert META.with_producer(7, 1, 50, 2000).last_producer_epoch == -1


def test_json_round_trip() -> None:
    meta = META.begin_or_add(10, [("a/b", 2), ("t", 0)], ["g 1"]).prepare(True, 20)
    assert TransactionMetadata.from_bytes(meta.to_bytes()) == meta


# -- the state machine under any sequence of operations ------------------------------------------

OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.sets(st.tuples(st.sampled_from("tu"), st.integers(0, 3)), max_size=3),
              st.sets(st.sampled_from(["g", "h"]), max_size=1)),
    st.tuples(st.just("end"), st.booleans()),
    st.tuples(st.just("complete")),
    st.tuples(st.just("bump")),
), max_size=30)


@given(OPERATIONS)
def test_invariants_hold_whatever_the_operations(operations: list[tuple]) -> None:
    """Every accepted step is a transition Kafka allows; partitions and groups exist only in an
    open or deciding transaction; a decision keeps the partitions it must mark; the clock and the
    epoch never go back; a refused step changes nothing."""
    meta, now = META, 1
    for op in operations:
        now += 1
        before = meta
        try:
            if op[0] == "add":
                meta = meta.begin_or_add(now, op[1], op[2])
            elif op[0] == "end":
                meta = meta.prepare(op[1], now)
            elif op[0] == "complete":
                meta = meta.complete(now)
            else:
                meta = meta.with_producer(meta.producer_id, meta.producer_epoch + 1, now, meta.timeout_ms)
        except InvalidTxnState:
            assert meta is before
            continue
        assert before.state in VALID_PREVIOUS[meta.state]
        assert meta.update_ms == now >= before.update_ms
        assert meta.producer_epoch >= before.producer_epoch
        if meta.state.ended:
            assert not meta.partitions and not meta.groups and meta.start_ms == -1
        else:
            assert meta.start_ms >= 0
        if meta.state.preparing:
            assert meta.partitions == before.partitions and meta.groups == before.groups
        if meta.state == TxnState.ONGOING and before.state == TxnState.ONGOING:
            assert meta.partitions >= before.partitions and meta.start_ms == before.start_ms
        assert TransactionMetadata.from_bytes(meta.to_bytes()) == meta
