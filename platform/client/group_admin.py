"""Consumer-group operations of ``ember.client.Admin``: list, describe and delete groups, reset
and commit their offsets.

Used by ``ember groups`` and the Spark source. Describe joins three sources: the coordinator's view
(state, members, assignment), the committed offsets (OffsetFetch) and each partition's high
watermark (ListOffsets), so lag = high watermark - committed offset, exactly what the group has left
to read.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Iterable, Optional

from ember.client.coordinator_client import CoordinatorClient
from ember.client.metadata import MetadataClient
from ember.client.offsets import EARLIEST, LATEST, list_offsets
from ember.errors import EmberError, NonEmptyGroup, error_for_code
from ember.wire.api_keys import ApiKey
from ember.wire.frame import response_error
from ember.wire.types import TopicPartition


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    client_id: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class PartitionLag:
    partition: TopicPartition
    committed: Optional[int]      # None: nothing committed
    log_end: Optional[int]        # high watermark: one past the last readable record (None: the
                                  # partition no longer exists, e.g. its topic was deleted)
    lag: Optional[int]
    member_id: Optional[str]      # current owner, if any


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol: str
    generation: int
    members: tuple[MemberDescription, ...]
    partitions: tuple[PartitionLag, ...]


class GroupListing(dict[str, str]):
    """``{group id: state}``; ``unreachable`` maps the brokers that did not answer to why (the
    groups they coordinate are missing from the listing)."""

    def __init__(self, groups: dict[str, str], unreachable: dict[int, str]) -> None:
        super().__init__(groups)
        self.unreachable = unreachable


class GroupOperations:
    """The group half of :class:`ember.client.admin.Admin`, which inherits it: requests go through
    the Admin's metadata client (its brokers, security settings and request timeout), plus one
    coordinator client per group, kept until :meth:`_close_coordinators` (``Admin.close``)."""

    _metadata: MetadataClient
    request_timeout_s: float

    def __init__(self) -> None:
        self._coordinators: dict[str, CoordinatorClient] = {}
        self._coordinators_lock = threading.Lock()

    def list_groups(self) -> GroupListing:
        """``{group id: state}`` over the whole cluster (each broker lists the groups it
        coordinates); brokers that do not answer are skipped and named in ``.unreachable``."""
        self._metadata.refresh([])
        groups: dict[str, str] = {}
        unreachable: dict[int, str] = {}
        for broker_id in sorted(self._metadata.brokers):
            try:
                body = self._metadata.request(ApiKey.LIST_GROUPS, {}, broker_id=broker_id).body
                error = response_error(body)
                if error is not None:
                    raise error
            except EmberError as exc:
                unreachable[broker_id] = f"{type(exc).__name__}: {exc}"
                continue
            groups.update({g["group_id"]: g["state"] for g in body["groups"]})
        return GroupListing(dict(sorted(groups.items())), unreachable)

    def describe_group(self, group_id: str) -> GroupDescription:
        coordinator = self._coordinator(group_id)
        (doc,) = coordinator.request(ApiKey.DESCRIBE_GROUPS, {"groups": [group_id]})["groups"]
        if doc.get("error_code"):
            raise error_for_code(doc["error_code"], doc.get("error_message", ""))
        committed = self._committed(coordinator)
        members = tuple(MemberDescription(m["member_id"], m["client_id"],
                                          tuple(TopicPartition(a["topic"], a["partition"]) for a in m["assignment"]))
                        for m in doc["members"])
        owner = {tp: m.member_id for m in members for tp in m.assignment}
        tps = sorted(set(committed) | set(owner))
        self._metadata.refresh()    # every topic (never auto-creates a deleted one)
        existing = [tp for tp in tps if tp.partition < (self._metadata.partition_count(tp.topic) or 0)]
        ends: dict[TopicPartition, int] = dict(self._offsets(existing, LATEST))
        partitions = tuple(PartitionLag(tp, committed.get(tp), ends.get(tp),
                                        ends[tp] - committed[tp] if tp in committed and ends.get(tp) is not None
                                        else None, owner.get(tp))
                           for tp in tps)
        return GroupDescription(group_id, doc["state"], doc["protocol"], doc["generation"], members, partitions)

    def delete_group(self, group_id: str) -> None:
        """Delete the group's committed offsets and metadata (NonEmptyGroup while it has members)."""
        (doc,) = self._coordinator(group_id).request(ApiKey.DELETE_GROUPS, {"groups": [group_id]})["groups"]
        if doc.get("error_code"):
            raise error_for_code(doc["error_code"], doc.get("error_message", ""))

    def plan_reset(self, group_id: str, topics: Iterable[str | TopicPartition], to: str,
                   value: Optional[int] = None) -> dict[TopicPartition, tuple[Optional[int], int]]:
        """``{partition: (committed now, new offset)}`` for a reset of ``topics`` (names, or single
        partitions as TopicPartition; every topic the group has committed offsets for when empty)
        ``to`` "earliest", "latest", "current" (the committed offset, the log end where there is
        none), "offset" (value), "shift" (the committed offset + value; ValueError where there is
        none) or "timestamp" (value in ms: the first record at or after it, else the log end).
        Offsets are clamped to [log start, high watermark], as Kafka's kafka-consumer-groups does."""
        committed = self._committed(self._coordinator(group_id))
        tps = []
        for item in list(topics) or sorted({tp.topic for tp in committed}):
            name = item.topic if isinstance(item, TopicPartition) else item
            existing = [TopicPartition(name, p.partition)
                        for p in self._metadata.wait_for_topic(name, self.request_timeout_s).partitions]
            if not isinstance(item, TopicPartition):
                tps += existing
            elif item in existing:
                tps.append(item)
            else:
                raise ValueError(f"topic {name!r} has {len(existing)} partition(s); there is no partition {item.partition}")
        starts, ends = self._offsets(tps, EARLIEST), self._offsets(tps, LATEST)
        if to == "earliest":
            targets = starts
        elif to == "latest":
            targets = ends
        elif to == "current":
            targets = {tp: committed.get(tp, ends[tp]) for tp in tps}
        # "offset", "shift" and "timestamp" need ``value``: int(None) raises TypeError (hence the ignores).
        elif to == "offset":
            targets = {tp: int(value) for tp in tps}   # type: ignore[arg-type]
        elif to == "shift":
            uncommitted = [f"{tp.topic}-{tp.partition}" for tp in tps if tp not in committed]
            if uncommitted:
                raise ValueError(f"cannot shift the offsets of {', '.join(uncommitted)}: group {group_id!r} has no "
                                 f"committed offset there to shift from")
            targets = {tp: committed[tp] + int(value) for tp in tps}   # type: ignore[arg-type]
        elif to == "timestamp":
            found = list_offsets(self._metadata, {tp: int(value) for tp in tps}, self.request_timeout_s)  # type: ignore[arg-type]
            targets = {tp: found[tp][0] if found[tp][0] >= 0 else ends[tp] for tp in tps}
        else:
            raise ValueError(f"reset target must be earliest, latest, current, offset, shift or timestamp, not {to!r}")
        return {tp: (committed.get(tp), min(max(targets[tp], starts[tp]), ends[tp])) for tp in tps}

    def check_inactive(self, group_id: str) -> None:
        """NonEmptyGroup unless the group has no active member: Kafka's rule for resetting its
        offsets (consumers still running would commit over them)."""
        (doc,) = self._coordinator(group_id).request(ApiKey.DESCRIBE_GROUPS, {"groups": [group_id]})["groups"]
        if not doc.get("error_code") and doc["members"]:
            raise NonEmptyGroup(f"offsets of group {group_id!r} can only be reset while it is inactive, but its "
                                f"state is {doc['state']} with {len(doc['members'])} active member(s)")

    def reset_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """Commit ``offsets`` for a group without active members (NonEmptyGroup otherwise)."""
        self.check_inactive(group_id)
        _commit_standalone(self._coordinator(group_id), offsets)

    def commit_offsets(self, group_id: str, offsets: dict[TopicPartition, int], metadata: str = "") -> None:
        """Commit for a reader outside group membership (a Spark query): the broker refuses it with
        NonEmptyGroup while consumers are members of the group, so the two never fight."""
        _commit_standalone(self._coordinator(group_id), offsets, metadata)

    def _coordinator(self, group_id: str) -> CoordinatorClient:
        """The group's coordinator client, kept (with its connection) until ``close``: a Spark
        query commits every micro-batch through the same one."""
        with self._coordinators_lock:
            client = self._coordinators.get(group_id)
            if client is None:
                client = self._coordinators[group_id] = CoordinatorClient(self._metadata, group_id,
                                                                          self.request_timeout_s)
            return client

    @staticmethod
    def _committed(coordinator: CoordinatorClient) -> dict[TopicPartition, int]:
        """Every offset the group has committed."""
        body = coordinator.request(ApiKey.OFFSET_FETCH, {"group_id": coordinator.group_id, "partitions": None})
        return {TopicPartition(p["topic"], p["partition"]): p["offset"] for p in body["partitions"] if p["offset"] >= 0}

    def _offsets(self, tps: list[TopicPartition], where: int) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        return {tp: offset for tp, (offset, _) in
                list_offsets(self._metadata, {tp: where for tp in tps}, self.request_timeout_s).items()}

    def _close_coordinators(self) -> None:
        with self._coordinators_lock:
            clients, self._coordinators = list(self._coordinators.values()), {}
        for client in clients:
            client.close()


def _commit_standalone(coordinator: CoordinatorClient, offsets: dict[TopicPartition, int], metadata: str = "") -> None:
    """OffsetCommit with generation -1: the commit of a group with no active members."""
    coordinator.request(ApiKey.OFFSET_COMMIT, {
        "group_id": coordinator.group_id, "member_id": "", "generation": -1,
        "offsets": [{"topic": tp.topic, "partition": tp.partition, "offset": offset, "metadata": metadata}
                    for tp, offset in offsets.items()]})
