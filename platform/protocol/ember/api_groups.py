"""Consumer-group APIs: FindCoordinator (of groups, ``key_type`` 0, and of transactional ids, 1),
JoinGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, DescribeGroups, ListGroups, DeleteGroups. Wire format only: the work is in
``ember.groups.coordinator``. SyncGroup is not served: JoinGroup answers with the member's
assignment, which the coordinator computes (docs/groups.md)."""
from __future__ import annotations

from typing import Any, Iterable

from ember.cluster.records import BrokerInfo
from ember.errors import InvalidRequest, MemberIdRequired
from ember.groups.coordinator import GroupCoordinator
from ember.groups.group import Group
from ember.ingest.transactions.coordinator import TransactionCoordinator
from ember.net.server import client_host
from ember.protocol.ember.dispatcher import Handler
from ember.wire import fields
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Request
from ember.wire.reply import OK, Reply, error_fields
from ember.wire.types import TopicPartition


def _tps(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]


def _parse_tps(items: Iterable[dict[str, Any]]) -> list[TopicPartition]:
    return [TopicPartition(*fields.topic_partition(item)) for item in items]


GROUP_KEY = 0
TRANSACTION_KEY = 1


class GroupApis:
    def __init__(self, coordinator: GroupCoordinator, transactions: TransactionCoordinator | None = None) -> None:
        self.coordinator = coordinator
        self.transactions = transactions

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.FIND_COORDINATOR: self.find_coordinator, ApiKey.JOIN_GROUP: self.join_group,
                ApiKey.HEARTBEAT: self.heartbeat, ApiKey.LEAVE_GROUP: self.leave_group,
                ApiKey.OFFSET_COMMIT: self.offset_commit, ApiKey.OFFSET_FETCH: self.offset_fetch,
                ApiKey.DESCRIBE_GROUPS: self.describe_groups, ApiKey.LIST_GROUPS: self.list_groups,
                ApiKey.DELETE_GROUPS: self.delete_groups}

    async def find_coordinator(self, request: Request) -> Reply:
        key = fields.string(request.body, "key")
        key_type = fields.integer(request.body, "key_type", GROUP_KEY, bits=fields.INT8)
        broker: BrokerInfo
        if key_type == GROUP_KEY:
            broker = self.coordinator.coordinator_broker(key)
        elif key_type == TRANSACTION_KEY and self.transactions is not None:
            broker = self.transactions.coordinator_broker(key)
        else:
            raise InvalidRequest(f"coordinator key type {key_type} is unknown (0 = group, 1 = transaction)")
        return Reply({**OK, "node_id": broker.id, "host": broker.host, "port": broker.port})

    async def join_group(self, request: Request) -> Reply:
        body = request.body
        session_timeout_ms = fields.integer(body, "session_timeout_ms")
        try:
            result = await self.coordinator.join(
                fields.string(body, "group_id"), fields.string(body, "member_id", ""),
                fields.string(body, "client_id", ""), session_timeout_ms,
                fields.integer(body, "rebalance_timeout_ms", session_timeout_ms),
                fields.strings(body, "topics"), fields.strings(body, "protocols"), client_host=client_host())
        except MemberIdRequired as exc:     # first step of a join: the id to join with
            return Reply({**error_fields(exc), "member_id": exc.member_id})
        return Reply({**OK, "member_id": result.member_id, "generation": result.generation,
                      "protocol": result.protocol, "leader": result.leader,
                      "assignment": _tps(result.assignment)})

    async def heartbeat(self, request: Request) -> Reply:
        body = request.body
        await self.coordinator.heartbeat(fields.string(body, "group_id"), fields.string(body, "member_id"),
                                         fields.integer(body, "generation"))
        return Reply(dict(OK))

    async def leave_group(self, request: Request) -> Reply:
        await self.coordinator.leave(fields.string(request.body, "group_id"), fields.string(request.body, "member_id"))
        return Reply(dict(OK))

    async def offset_commit(self, request: Request) -> Reply:
        body = request.body
        offsets = {}
        for item in fields.partitions(body, "offsets"):
            tp = TopicPartition(*fields.topic_partition(item))
            offset = fields.integer(item, "offset", bits=fields.INT64)
            if offset < 0:
                raise InvalidRequest(f"offset {offset} for {tp.topic}-{tp.partition} is negative")
            offsets[tp] = (offset, fields.string(item, "metadata", ""))
        await self.coordinator.commit(fields.string(body, "group_id"), fields.string(body, "member_id", ""),
                                      fields.integer(body, "generation", -1), offsets)
        return Reply({**OK, "partitions": [{**tp, **OK} for tp in _tps(offsets)]})

    async def offset_fetch(self, request: Request) -> Reply:
        body = request.body
        listed = fields.partitions(body, default=None)
        wanted = None if listed is None else _parse_tps(listed)
        found = await self.coordinator.fetch(fields.string(body, "group_id"), wanted)
        partitions = []
        for tp in (sorted(found) if wanted is None else wanted):
            committed = found.get(tp)
            partitions.append({"topic": tp.topic, "partition": tp.partition, **OK,
                               "offset": committed.offset if committed else -1,
                               "metadata": committed.metadata if committed else "",
                               "commit_timestamp": committed.commit_timestamp if committed else -1})
        return Reply({**OK, "partitions": partitions})

    async def describe_groups(self, request: Request) -> Reply:
        results = []
        for group_id in fields.strings(request.body, "groups"):
            try:
                results.append({**OK, **_describe(await self.coordinator.describe(group_id))})
            except Exception as exc:
                results.append({"group_id": group_id, **error_fields(exc)})
        return Reply({**OK, "groups": results})

    async def list_groups(self, _request: Request) -> Reply:
        return Reply({**OK, "groups": await self.coordinator.list_groups()})

    async def delete_groups(self, request: Request) -> Reply:
        results = []
        for group_id in fields.strings(request.body, "groups"):
            try:
                await self.coordinator.delete(group_id)
                results.append({"group_id": group_id, **OK})
            except Exception as exc:
                results.append({"group_id": group_id, **error_fields(exc)})
        return Reply({**OK, "groups": results})


def _describe(group: Group) -> dict[str, Any]:
    return {"group_id": group.group_id, "state": group.state, "protocol_type": "consumer",
            "protocol": group.protocol, "generation": group.generation, "leader": group.leader,
            "members": [{"member_id": m.member_id, "client_id": m.client_id, "topics": m.topics,
                         "assignment": _tps(m.assignment)} for m in group.members.values()]}
