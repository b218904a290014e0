"""TransactionManager alone: Kafka's state machine, error classes and coordinator requests, against a
fake coordinator (the real ones: test_transactional_producer.py)."""
from __future__ import annotations

from typing import Any, Optional

import pytest

from ember.client.group_metadata import ConsumerGroupMetadata
from ember.client.transaction_manager import TransactionManager, TransactionState
from ember.errors import (
    ConcurrentTransactions,
    ErrorCode,
    IllegalStateError,
    InvalidProducerEpoch,
    KafkaTimeoutError,
    ProducerFenced,
    TopicAuthorizationFailed,
)
from ember.wire.api_keys import ApiKey
from ember.wire.types import OffsetAndMetadata, TopicPartition

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


class FakeCoordinator:
    """Answers each request with the next scripted answer for its API (an exception is raised)."""

    def __init__(self, **answers: list[Any]) -> None:
        self.answers = {ApiKey[name.upper()]: list(items) for name, items in answers.items()}
        self.sent: list[tuple[ApiKey, dict[str, Any]]] = []
        self.closed = False

    def request(self, api_key: int, body: dict[str, Any], timeout_s: Optional[float] = None,
                deadline_s: Optional[float] = None) -> dict[str, Any]:
        self.sent.append((ApiKey(api_key), body))
        queue = self.answers.get(ApiKey(api_key), [])
        answer = queue.pop(0) if queue else self.default(ApiKey(api_key), body)
        if isinstance(answer, Exception):
            raise answer
        return answer

    @staticmethod
    def default(api_key: ApiKey, body: dict[str, Any]) -> dict[str, Any]:
        """OK; an EndTxn's at the next epoch, as ember's coordinators answer one with bump_epoch."""
        if api_key == ApiKey.END_TXN:
            return {"error_code": 0, "producer_id": body["producer_id"], "producer_epoch": body["producer_epoch"] + 1}
        return {"error_code": 0}

    def forget(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def apis(self) -> list[ApiKey]:
        return [api for api, _ in self.sent]


def manager(coordinator: FakeCoordinator, group: Optional[FakeCoordinator] = None) -> TransactionManager:
    groups = group or FakeCoordinator()
    return TransactionManager("tx", 60000, coordinator, lambda _: groups, request_timeout_s=1.0,
                              retry_backoff_s=0.001)


def ready(coordinator: Optional[FakeCoordinator] = None) -> TransactionManager:
    coordinator = coordinator or FakeCoordinator()
    coordinator.answers.setdefault(ApiKey.INIT_PRODUCER_ID, []).insert(
        0, {"error_code": 0, "producer_id": 7, "producer_epoch": 3})
    tm = manager(coordinator)
    assert tm.init_transactions(1.0) == (7, 3)
    return tm


def test_init_asks_with_the_transactional_id_and_retries_concurrent_transactions():
    coordinator = FakeCoordinator(init_producer_id=[ConcurrentTransactions("completing"),
                                                    {"error_code": 0, "producer_id": 7, "producer_epoch": 3}])
    tm = manager(coordinator)
    assert tm.init_transactions(1.0) == (7, 3)
    assert tm.state == TransactionState.READY
    assert coordinator.sent[-1] == (ApiKey.INIT_PRODUCER_ID, {"transactional_id": "tx", "transaction_timeout_ms": 60000})


def test_illegal_calls_name_the_state():
    tm = manager(FakeCoordinator())
    with pytest.raises(IllegalStateError, match="before init_transactions"):
        tm.begin_transaction()
    tm = ready()
    with pytest.raises(IllegalStateError, match="READY"):
        tm.check_send()
    with pytest.raises(IllegalStateError, match="READY"):
        tm.begin_commit()
    tm.begin_transaction()
    with pytest.raises(IllegalStateError, match="IN_TRANSACTION"):
        tm.begin_transaction()


def test_partitions_are_added_once_before_their_batches_and_the_commit_ends_it_at_the_next_epoch():
    coordinator = FakeCoordinator(end_txn=[{"error_code": 0, "producer_id": 7, "producer_epoch": 4}])
    tm = ready(coordinator)
    assert tm.sendable([TP0]) == []                # no transaction: nothing goes
    tm.begin_transaction()
    assert tm.sendable([TP0, TP1]) == [TP0, TP1]
    assert tm.sendable([TP0]) == [TP0]
    assert coordinator.apis().count(ApiKey.ADD_PARTITIONS_TO_TXN) == 1
    tm.begin_commit()
    assert tm.end_transaction(True, 1.0) == (7, 4)
    assert coordinator.sent[-1] == (ApiKey.END_TXN, {"transactional_id": "tx", "producer_id": 7,
                                                     "producer_epoch": 3, "commit": True, "bump_epoch": True})
    assert tm.state == TransactionState.READY and tm.partitions == set()
    assert (tm.producer_id, tm.producer_epoch) == (7, 4)      # the next transaction runs at the new epoch


def test_an_empty_transaction_ends_without_end_txn():
    coordinator = FakeCoordinator()
    tm = ready(coordinator)
    tm.begin_transaction()
    tm.begin_commit()
    tm.end_transaction(True, 1.0)
    assert ApiKey.END_TXN not in coordinator.apis()


def test_a_refused_partition_makes_the_transaction_abortable():
    refusal = {"error_code": 0, "partitions": [
        {"topic": "t", "partition": 0, "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)},
        {"topic": "t", "partition": 1, "error_code": int(ErrorCode.OPERATION_NOT_ATTEMPTED)}]}
    coordinator = FakeCoordinator(add_partitions_to_txn=[refusal])
    tm = ready(coordinator)
    tm.begin_transaction()
    assert tm.sendable([TP0, TP1]) == []
    assert tm.state == TransactionState.ABORTABLE_ERROR
    assert isinstance(tm.error(), TopicAuthorizationFailed)
    with pytest.raises(TopicAuthorizationFailed):
        tm.begin_commit()
    tm.begin_abort()
    tm.end_transaction(False, 1.0)
    assert tm.state == TransactionState.READY


@pytest.mark.parametrize("fatal", [ProducerFenced("fenced"), InvalidProducerEpoch("old epoch")])
def test_fencing_errors_are_fatal(fatal):
    coordinator = FakeCoordinator(end_txn=[fatal])
    tm = ready(coordinator)
    tm.begin_transaction()
    tm.sendable([TP0])
    tm.begin_commit()
    with pytest.raises(type(fatal)):
        tm.end_transaction(True, 1.0)
    assert tm.state == TransactionState.FATAL_ERROR
    for call in (tm.begin_transaction, tm.begin_abort, tm.check_send):
        with pytest.raises(type(fatal), match="can only be closed"):
            call()


def test_a_failed_batch_makes_the_transaction_abortable():
    tm = ready()
    tm.begin_transaction()
    tm.fail(TopicAuthorizationFailed("no write"))
    assert tm.state == TransactionState.ABORTABLE_ERROR
    with pytest.raises(TopicAuthorizationFailed):
        tm.check_send()


def test_offsets_go_to_both_coordinators_with_the_group_metadata():
    coordinator, group = FakeCoordinator(), FakeCoordinator()
    coordinator.answers[ApiKey.INIT_PRODUCER_ID] = [{"error_code": 0, "producer_id": 7, "producer_epoch": 3}]
    tm = manager(coordinator, group)
    tm.init_transactions(1.0)
    tm.begin_transaction()
    tm.send_offsets_to_transaction({TP0: OffsetAndMetadata(5, "m"), TP1: 9},
                                   ConsumerGroupMetadata("g", 4, "member-1"), 1.0)
    assert coordinator.sent[-1] == (ApiKey.ADD_OFFSETS_TO_TXN, {"transactional_id": "tx", "producer_id": 7,
                                                                "producer_epoch": 3, "group_id": "g"})
    assert group.sent == [(ApiKey.TXN_OFFSET_COMMIT, {
        "transactional_id": "tx", "producer_id": 7, "producer_epoch": 3, "group_id": "g", "member_id": "member-1",
        "generation": 4, "offsets": [{"topic": "t", "partition": 0, "offset": 5, "metadata": "m"},
                                     {"topic": "t", "partition": 1, "offset": 9, "metadata": ""}]})]
    assert tm.started and not group.closed
    tm.close()
    assert group.closed and coordinator.closed


def test_a_commit_that_timed_out_can_be_called_again():
    coordinator = FakeCoordinator(end_txn=[ConcurrentTransactions("busy")] * 1000)
    ended = {"error_code": 0, "producer_id": 7, "producer_epoch": 4}
    tm = ready(coordinator)
    tm.begin_transaction()
    tm.sendable([TP0])
    tm.begin_commit()
    with pytest.raises(KafkaTimeoutError, match="commit_transaction"):
        tm.end_transaction(True, 0.05)
    assert tm.state == TransactionState.COMMITTING_TRANSACTION
    coordinator.answers[ApiKey.END_TXN] = [ended]
    tm.begin_commit()
    tm.end_transaction(True, 1.0)
    assert tm.state == TransactionState.READY


def test_bump_epoch_names_the_current_producer():
    coordinator = FakeCoordinator()
    tm = ready(coordinator)
    coordinator.answers[ApiKey.INIT_PRODUCER_ID] = [{"error_code": 0, "producer_id": 7, "producer_epoch": 4}]
    assert tm.bump_epoch(1.0) == (7, 4)
    assert coordinator.sent[-1] == (ApiKey.INIT_PRODUCER_ID, {"transactional_id": "tx", "transaction_timeout_ms": 60000,
                                                              "producer_id": 7, "producer_epoch": 3})
    tm.begin_transaction()
    with pytest.raises(IllegalStateError, match="IN_TRANSACTION"):
        tm.bump_epoch(1.0)


def test_an_add_partitions_answered_after_the_transaction_ended_does_not_fail_the_next():
    """The sender's AddPartitionsToTxn is on its way when the application aborts: the abort's EndTxn
    bumps the epoch, and the late answer (fenced: it named the old epoch) is about the transaction
    that ended, not the next one (under load it made the producer fatal)."""
    class Racing(FakeCoordinator):
        raced = False

        def request(self, api_key: int, body: dict[str, Any], timeout_s: Optional[float] = None,
                    deadline_s: Optional[float] = None) -> dict[str, Any]:
            if ApiKey(api_key) == ApiKey.ADD_PARTITIONS_TO_TXN and body["partitions"][0]["partition"] == 0 \
                    and not self.raced:
                self.raced = True
                # the application's abort ended the transaction at epoch 4 while the sender got this
                # request ready (EndTxn went first: the manager sends one request at a time)
                tm.producer_epoch, tm.partitions, tm.started = 4, set(), False
                tm.state = TransactionState.READY
                self.sent.append((ApiKey(api_key), body))
                raise ProducerFenced(f"producer 7 epoch {body['producer_epoch']} was fenced (current epoch 4)")
            return super().request(api_key, body, timeout_s, deadline_s)

    coordinator = Racing()
    tm = ready(coordinator)
    tm.begin_transaction()
    assert tm.sendable([TP1]) == [TP1]
    assert tm.sendable([TP0]) == []
    assert tm.state == TransactionState.READY and (tm.producer_id, tm.producer_epoch) == (7, 4)
    assert tm.partitions == set()
    tm.begin_transaction()                           # the next transaction starts, at the new epoch
    assert tm.sendable([TP0]) == [TP0]
    assert coordinator.sent[-1][1]["producer_epoch"] == 4
