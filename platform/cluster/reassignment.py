"""Moving a partition to new replicas, as pure steps on the topic record and partition state.

1. :func:`start_reassignment`: the assignment becomes target + removed replicas (so every
   broker of either set hosts the partition) and the record notes who is added and removed.
   New replicas open the log and follow the leader; the leader never admits a replica that is
   being removed back into the ISR.
2. Once every target replica is in the ISR (:func:`reassignment_ready`), :func:`completion_state`
   keeps the leader if it stays (else elects the first live target ISR member, epoch bumped) and
   drops the removed replicas from the ISR.
3. :func:`finish_reassignment`: the assignment becomes the target; removed brokers delete their
   copy when they see it.

Each step is idempotent, so a controller that takes over mid-way just runs them again.

:func:`cancel_reassignment` turns a move in progress around: the original replicas become the
target and the ones it was adding are removed, through the same steps (Kafka's cancellation).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Collection

from ember.cluster.assignment import check_replicas
from ember.cluster.records import PartitionState, Reassignment, TopicRecord
from ember.errors import InvalidReplicationFactor, NoReassignmentInProgress, ReassignmentInProgress, UnknownTopicOrPartition


def start_reassignment(name: str, record: TopicRecord, index: int, target: list[int],
                       live: Collection[int], allow_replication_factor_change: bool = True) -> TopicRecord:
    """The record with partition ``index`` moving to ``target``; a mere reordering (a new
    preferred leader) takes effect at once. Raises for invalid targets, a move in progress, or
    (unless allowed) a target of another size than the current replicas."""
    if index not in record.assignment:
        raise UnknownTopicOrPartition(f"{name}-{index} does not exist")
    if index in record.reassignments:
        raise ReassignmentInProgress(f"{name}-{index} is already being reassigned")
    check_replicas(f"{name}-{index}", target, live)
    original = record.assignment[index]
    if not allow_replication_factor_change and len(target) != len(original):
        raise InvalidReplicationFactor(f"{name}-{index}: {len(target)} replicas {target} would change its "
                                       f"replication factor {len(original)}, which the request does not allow")
    adding = [b for b in target if b not in original]
    removing = [b for b in original if b not in target]
    reassignments = dict(record.reassignments)
    if adding or removing:
        reassignments[index] = Reassignment(adding, removing)
    return replace(record, assignment={**record.assignment, index: list(target) + removing},
                   reassignments=dict(sorted(reassignments.items())))


def cancel_reassignment(name: str, record: TopicRecord, index: int) -> TopicRecord:
    """The record with partition ``index``'s move turned back to its original replicas (in
    their order within the current assignment, as Kafka keeps them). Raises
    NoReassignmentInProgress when the partition is not moving."""
    if index not in record.assignment:
        raise UnknownTopicOrPartition(f"{name}-{index} does not exist")
    move = record.reassignments.get(index)
    if move is None:
        raise NoReassignmentInProgress(f"{name}-{index} is not being reassigned")
    original = [b for b in record.assignment[index] if b not in move.adding]
    reassignments = {p: r for p, r in record.reassignments.items() if p != index}
    if move.adding:
        reassignments[index] = Reassignment([], list(move.adding))
    return replace(record, assignment={**record.assignment, index: original + list(move.adding)},
                   reassignments=dict(sorted(reassignments.items())))


def reassignment_ready(state: PartitionState, target: list[int], live: Collection[int]) -> bool:
    """Every target replica has caught up (is in the ISR) and one of them can lead."""
    return all(b in state.isr for b in target) and any(b in live for b in target)


def reassignment_complete(state: PartitionState, target: list[int]) -> bool:
    """The partition state is the end state of a move to ``target``."""
    return state.leader in target and sorted(state.isr) == sorted(target)


def completion_state(state: PartitionState, target: list[int], live: Collection[int],
                     controller_epoch: int) -> PartitionState | None:
    """The state that ends a ready move: leader within the target, ISR without the removed
    replicas; None when the state is that already."""
    isr = [b for b in state.isr if b in target]
    if state.leader in target and state.leader in live:
        if isr == state.isr:
            return None
        return PartitionState(state.leader, state.leader_epoch, isr, controller_epoch)
    leader = next(b for b in target if b in isr and b in live)
    return PartitionState(leader, state.leader_epoch + 1, isr, controller_epoch)


def completion_if_ready(state: PartitionState, target: list[int], live: Collection[int],
                        controller_epoch: int) -> PartitionState | None:
    """:func:`completion_state` once the move is ready (:func:`reassignment_ready`), else None."""
    return completion_state(state, target, live, controller_epoch) if reassignment_ready(state, target, live) else None


def finish_reassignment(record: TopicRecord, index: int) -> TopicRecord:
    """The record with partition ``index`` on its target replicas only."""
    move = record.reassignments[index]
    return replace(record, assignment={**record.assignment, index: move.target(record.assignment[index])},
                   reassignments={p: r for p, r in record.reassignments.items() if p != index})
