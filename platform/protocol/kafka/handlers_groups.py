"""Consumer groups over Kafka's protocol: FindCoordinator (of groups, and of transactional ids:
key type 1), JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit and OffsetFetch.
Translation only: the work is the shared group coordinator's (``ember.groups.coordinator``), so
a group joined by Kafka consumers shows in ``ember groups describe`` and committed offsets are the
same whichever protocol committed or reads them.

Kafka consumers assign partitions themselves (the classic protocol): the coordinator hands the
leader every member's subscription and distributes the leader's assignment through SyncGroup.
Subscriptions and assignments stay opaque bytes on the wire; the consumer protocol's are decoded
only to show topics and partitions (describe) and to store the assignment.
Static members (``group.instance.id``) are the coordinator's too: every request carrying an
instance id passes it on, so a replaced member's old id is fenced (FENCED_INSTANCE_ID).
Kafka clients reach the coordinator through the listener they use.
"""
from __future__ import annotations

from typing import Any

from ember.errors import CoordinatorNotAvailable, InvalidRequest, MemberIdRequired, UnstableOffsetCommit
from ember.ingest.core import BrokerCore
from ember.net.server import client_host
from ember.protocol.kafka.codec import KafkaRequest, build, millis, response_class
from ember.protocol.kafka.consumer_protocol import CONSUMER, assigned_partitions, subscribed_topics
from ember.protocol.kafka.dispatcher import Api
from ember.protocol.kafka.names import TopicNames
from ember.security.authorizer.access import refusal
from ember.security.authorizer.model import Operation, Resource, ResourceType
from ember.wire.api_keys import ApiKey
from ember.wire.reply import OK, error_fields
from ember.wire.types import TopicPartition

GROUP_KEY = 0
TRANSACTION_KEY = 1
NO_OFFSET = -1
#: JoinGroup v4+ clients join in two steps (MEMBER_ID_REQUIRED); older ones get an id at once.
TWO_STEP_JOIN_VERSION = 4


class GroupHandlers:
    def __init__(self, core: BrokerCore, listener: str) -> None:
        self.core = core
        self.listener = listener

    def apis(self) -> dict[int, Api]:
        return {ApiKey.FIND_COORDINATOR: Api(0, 6, self.find_coordinator),
                ApiKey.OFFSET_COMMIT: Api(2, 10, self.offset_commit),
                ApiKey.OFFSET_FETCH: Api(1, 10, self.offset_fetch),
                ApiKey.JOIN_GROUP: Api(2, 9, self.join_group), ApiKey.SYNC_GROUP: Api(0, 5, self.sync_group),
                ApiKey.HEARTBEAT: Api(0, 4, self.heartbeat), ApiKey.LEAVE_GROUP: Api(0, 5, self.leave_group)}

    # -- FindCoordinator -----------------------------------------------------------------------

    async def find_coordinator(self, request: KafkaRequest) -> Any:
        body = request.body
        key_type = getattr(body, "key_type", GROUP_KEY)
        keys = list(getattr(body, "coordinator_keys", ())) or [getattr(body, "key", "")]
        coordinators = [{"key": key, **self._coordinator(key, key_type)} for key in keys]
        cls = response_class(ApiKey.FIND_COORDINATOR, request.api_version)
        if request.api_version >= 4:
            return build(cls, {"coordinators": coordinators})
        return build(cls, coordinators[0])

    def _coordinator(self, key: str, key_type: int) -> dict[str, Any]:
        try:
            if key_type == GROUP_KEY:
                broker = self.core.groups.coordinator_broker(key)
            elif key_type == TRANSACTION_KEY:
                broker = self.core.transactions.coordinator_broker(key)
            else:
                raise InvalidRequest(f"coordinator key type {key_type} is unknown (0 = group, 1 = transaction)")
            endpoint = broker.endpoint(self.listener)
            if endpoint is None:
                raise CoordinatorNotAvailable(f"broker {broker.id} coordinates {key!r} but has no "
                                              f"{self.listener} listener")
            return {**OK, "error_message": None, "node_id": broker.id, "host": endpoint[0], "port": endpoint[1]}
        except Exception as exc:
            return {**error_fields(exc), "node_id": -1, "host": "", "port": -1}

    # -- membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup ------------------------------

    async def join_group(self, request: KafkaRequest) -> Any:
        body = request.body
        cls = response_class(ApiKey.JOIN_GROUP, request.api_version)
        protocols = [(p.name, p.metadata) for p in body.protocols]
        session_ms = millis(body.session_timeout)
        rebalance_ms = millis(getattr(body, "rebalance_timeout", body.session_timeout))
        join = (body.group_id, body.member_id, request.client_id or "", session_ms,
                rebalance_ms if rebalance_ms >= 0 else session_ms,
                subscribed_topics(body.protocol_type, protocols), [name for name, _ in protocols])
        member = {"metadata": dict(protocols), "protocol_type": body.protocol_type,
                  "instance_id": getattr(body, "group_instance_id", None), "client_host": client_host()}
        try:
            try:
                result = await self.core.groups.join(*join, **member)
            except MemberIdRequired as exc:
                if request.api_version >= TWO_STEP_JOIN_VERSION:
                    raise
                result = await self.core.groups.join(body.group_id, exc.member_id, *join[2:], **member)
        except Exception as exc:
            return build(cls, {**error_fields(exc), "generation_id": -1, "protocol_name": "", "leader": "",
                               "member_id": getattr(exc, "member_id", body.member_id) or body.member_id,
                               "members": []})
        return build(cls, {**OK, "generation_id": result.generation, "protocol_type": body.protocol_type,
                           "protocol_name": result.protocol, "leader": result.leader, "member_id": result.member_id,
                           "skip_assignment": result.skip_assignment,
                           "members": [{"member_id": m, "group_instance_id": instance, "metadata": data}
                                       for m, instance, data in result.members]})

    async def sync_group(self, request: KafkaRequest) -> Any:
        body = request.body
        cls = response_class(ApiKey.SYNC_GROUP, request.api_version)
        protocol_type = getattr(body, "protocol_type", None) or CONSUMER
        try:
            assignments = {a.member_id: (a.assignment, assigned_partitions(protocol_type, a.assignment))
                           for a in body.assignments}
            data = await self.core.groups.sync(body.group_id, body.member_id, body.generation_id, assignments,
                                               getattr(body, "group_instance_id", None))
        except Exception as exc:
            return build(cls, {**error_fields(exc), "assignment": b""})
        return build(cls, {**OK, "protocol_type": getattr(body, "protocol_type", None),
                           "protocol_name": getattr(body, "protocol_name", None), "assignment": data})

    async def heartbeat(self, request: KafkaRequest) -> Any:
        body = request.body
        try:
            await self.core.groups.heartbeat(body.group_id, body.member_id, body.generation_id,
                                             getattr(body, "group_instance_id", None))
            outcome = dict(OK)
        except Exception as exc:
            outcome = error_fields(exc)
        return build(response_class(ApiKey.HEARTBEAT, request.api_version), outcome)

    async def leave_group(self, request: KafkaRequest) -> Any:
        """One member (v0-2) or several (v3+, static ones possibly named by instance id alone);
        each gets its own error code."""
        body = request.body
        leaving = [(m.member_id, m.group_instance_id) for m in body.members] if hasattr(body, "members") \
            else [(body.member_id, None)]
        members = []
        for member_id, instance_id in leaving:
            try:
                await self.core.groups.leave(body.group_id, member_id, instance_id)
                members.append({"member_id": member_id, "group_instance_id": instance_id, **OK})
            except Exception as exc:
                members.append({"member_id": member_id, "group_instance_id": instance_id, **error_fields(exc)})
        top = members[0] if not hasattr(body, "members") and members else OK
        return build(response_class(ApiKey.LEAVE_GROUP, request.api_version),
                     {"error_code": top["error_code"], "members": members})

    # -- OffsetCommit --------------------------------------------------------------------------

    async def offset_commit(self, request: KafkaRequest) -> Any:
        body = request.body
        names = TopicNames(self.core.cache.topics())
        offsets: dict[TopicPartition, tuple[int, str]] = {}
        slots: list[tuple[dict[str, Any], int, Exception | None]] = []
        access = self.core.access
        # Kafka's order: Read on the group or every partition fails; then Read per topic, and only the
        # refused topics' partitions fail while the others are committed.
        group = Resource(ResourceType.GROUP, body.group_id)
        group_refused = None if access.allowed(Operation.READ, group) else refusal(Operation.READ, group)
        for topic in body.topics:
            try:
                if group_refused is not None:
                    raise group_refused
                ref = names.ref(names.name_of(topic))
                access.check_topic(Operation.READ, ref["name"])
            except Exception as exc:
                name = getattr(topic, "name", None)
                ref = {"name": name} if name is not None else {"topic_id": topic.topic_id}
                slots += [(ref, p.partition_index, exc) for p in topic.partitions]
                continue
            for part in topic.partitions:
                offsets[TopicPartition(ref["name"], part.partition_index)] = (part.committed_offset,
                                                                              part.committed_metadata or "")
                slots.append((ref, part.partition_index, None))
        generation = getattr(body, "generation_id_or_member_epoch", getattr(body, "generation_id", -1))
        outcome: dict[str, Any] = dict(OK)
        try:
            if offsets:
                await self.core.groups.commit(body.group_id, body.member_id, generation, offsets,
                                              getattr(body, "group_instance_id", None))
        except Exception as exc:
            outcome = error_fields(exc)
        topics: dict[int, dict[str, Any]] = {}
        for ref, index, error in slots:
            fields = error_fields(error) if error is not None else outcome
            topics.setdefault(id(ref), {**ref, "partitions": []})["partitions"].append(
                {"partition_index": index, "error_code": fields["error_code"]})
        return build(response_class(ApiKey.OFFSET_COMMIT, request.api_version), {"topics": list(topics.values())})

    # -- OffsetFetch ---------------------------------------------------------------------------

    async def offset_fetch(self, request: KafkaRequest) -> Any:
        body = request.body
        names = TopicNames(self.core.cache.topics())
        cls = response_class(ApiKey.OFFSET_FETCH, request.api_version)
        if request.api_version >= 8:   # each group once (its first entry), as DescribeGroups: no answer per repeat
            first: dict[str, Any] = {}
            for group in body.groups:
                first.setdefault(group.group_id, group)
            stable = getattr(body, "require_stable", False)
            groups = [{"group_id": g.group_id, **await self._fetch_group(g.group_id, g.topics, names, stable)}
                      for g in first.values()]
            return build(cls, {"groups": groups})
        return build(cls, await self._fetch_group(body.group_id, body.topics, names,
                                                  getattr(body, "require_stable", False)))

    async def _fetch_group(self, group_id: str, topics: Any, names: TopicNames,
                           require_stable: bool) -> dict[str, Any]:
        """One group's committed offsets: of the listed topics' partitions, or (null) all of them.
        With ``require_stable`` (KIP-447), a partition whose offset an open transaction is
        committing gets UNSTABLE_OFFSET_COMMIT (the client retries) instead of a stale offset."""
        wanted: list[TopicPartition] | None = None
        unstable: set[TopicPartition] = set()
        try:
            if topics is not None:
                wanted = [TopicPartition(names.name_of(t), index) for t in topics for index in t.partition_indexes]
            found = await self.core.groups.fetch(group_id, wanted)
            if require_stable:
                unstable = await self.core.groups.unstable(group_id)
            status = dict(OK)
        except Exception as exc:
            found, status = {}, error_fields(exc)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp in sorted(found) if wanted is None else wanted:
            committed = None if tp in unstable else found.get(tp)
            code = int(UnstableOffsetCommit.code) if tp in unstable else status["error_code"]
            by_topic.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "error_code": code,
                "committed_offset": committed.offset if committed else NO_OFFSET, "committed_leader_epoch": -1,
                "metadata": committed.metadata if committed else ""})
        return {"error_code": status["error_code"],
                "topics": [{**names.ref(topic), "partitions": parts} for topic, parts in by_topic.items()]}
