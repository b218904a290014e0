"""ember's wire form of the per-partition questions a leader answers (ListOffsets, DeleteRecords,
OffsetForLeaderEpoch): each partition entry read into a :class:`LeaderQuery`, each
:class:`LeaderAnswer` written back as ``topic``/``partition``/error fields plus its own."""
from __future__ import annotations

from typing import Any, Callable, TypeVar, cast

from ember.ingest.replica_manager import LeaderAnswer, LeaderQuery
from ember.wire import fields
from ember.wire.reply import OK, error_fields

T = TypeVar("T")
R = TypeVar("R")


def leader_queries(body: fields.Body, argument: Callable[[fields.Body], T]) -> list[LeaderQuery[T]]:
    """Every entry of ``body``'s ``partitions`` (all read before any is answered: a malformed one
    refuses the whole request)."""
    return [LeaderQuery(*fields.topic_partition(entry), fields.integer(entry, "current_leader_epoch", None),
                        argument(entry))
            for entry in fields.partitions(body)]


def answer_fields(answers: list[LeaderAnswer[R]], to_fields: Callable[[R], dict[str, Any]],
                  failed: dict[str, Any]) -> list[dict[str, Any]]:
    """The response's ``partitions``: ``to_fields(value)`` per answer, ``failed`` after an error."""
    results = []
    for answer in answers:
        result: dict[str, Any] = {"topic": answer.topic, "partition": answer.partition}
        if answer.error is None:
            result.update(OK, **to_fields(cast(R, answer.value)))
        else:
            result.update(error_fields(answer.error), **failed)
        results.append(result)
    return results
