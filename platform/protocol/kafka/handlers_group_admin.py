"""Consumer-group administration over Kafka's protocol: DescribeGroups, ListGroups, DeleteGroups
and OffsetDelete, what ``kafka-consumer-groups`` and the admin clients use. Translation only: the
groups are the shared coordinator's (``ember.groups.coordinator``), so Kafka's tools see ember's
own groups and the offsets a Spark query commits with ``groupId`` as they see Kafka consumers'.

All groups are Kafka's "classic" type with Kafka's state names. A member is described with the
subscription and assignment bytes its Kafka client sent; ember's own members (whose subscriptions
and assignments are lists) are described in the consumer protocol's encoding, which Kafka's tools
decode. As in Kafka, only a Stable group shows its protocol, subscriptions and assignments.
"""
from __future__ import annotations

from typing import Any

from ember.errors import GroupIdNotFound, UnknownTopicOrPartition
from ember.groups.group import STABLE, Group, Member
from ember.ingest.core import BrokerCore
from ember.protocol.kafka import consumer_protocol
from ember.protocol.kafka.codec import KafkaRequest, build, response_class
from ember.protocol.kafka.dispatcher import Api
from ember.wire.api_keys import ApiKey
from ember.wire.reply import OK, error_fields
from ember.wire.types import TopicPartition

DEAD = "Dead"
CLASSIC = "classic"
#: DescribeGroups v6+ answers GROUP_ID_NOT_FOUND for an unknown group (KIP-1043); older
#: versions answer it as an error-free group in state Dead.
GROUP_NOT_FOUND_VERSION = 6


class GroupAdminHandlers:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    def apis(self) -> dict[int, Api]:
        return {ApiKey.DESCRIBE_GROUPS: Api(0, 6, self.describe_groups),
                ApiKey.LIST_GROUPS: Api(0, 5, self.list_groups),
                ApiKey.DELETE_GROUPS: Api(0, 2, self.delete_groups),
                ApiKey.OFFSET_DELETE: Api(0, 0, self.offset_delete)}

    async def describe_groups(self, request: KafkaRequest) -> Any:
        """Each named group once, in the order first named: a group's description holds every
        member's subscription and assignment, so a 75 KB request naming one group 7,500 times made
        the broker build 220 MB of answers (found by the Kafka fuzzer). Clients match the answers
        by group id (Kafka's Admin keeps them in a map)."""
        described = []
        for group_id in dict.fromkeys(request.body.groups):
            try:
                described.append({**OK, **_described(await self.core.groups.describe(group_id))})
            except GroupIdNotFound as exc:
                found = error_fields(exc) if request.api_version >= GROUP_NOT_FOUND_VERSION else OK
                described.append({**found, **_no_group(group_id)})
            except Exception as exc:
                described.append({**error_fields(exc), **_no_group(group_id), "group_state": ""})
        return build(response_class(ApiKey.DESCRIBE_GROUPS, request.api_version), {"groups": described})

    async def list_groups(self, request: KafkaRequest) -> Any:
        """The groups this broker coordinates (clients ask every broker), filtered by state (v4+)
        and type (v5+), both case-insensitive as in Kafka."""
        body = request.body
        states = {s.lower() for s in getattr(body, "states_filter", ())}
        types = {t.lower() for t in getattr(body, "types_filter", ())}
        cls = response_class(ApiKey.LIST_GROUPS, request.api_version)
        try:
            groups = [] if types and CLASSIC not in types else await self.core.groups.list_groups()
        except Exception as exc:
            return build(cls, {**error_fields(exc), "groups": []})
        return build(cls, {**OK, "groups": [
            {"group_id": g["group_id"], "protocol_type": g["protocol_type"], "group_state": g["state"],
             "group_type": CLASSIC} for g in groups if not states or g["state"].lower() in states]})

    async def delete_groups(self, request: KafkaRequest) -> Any:
        results = []
        for group_id in request.body.groups_names:
            try:
                await self.core.groups.delete(group_id)
                results.append({"group_id": group_id, **OK})
            except Exception as exc:
                results.append({"group_id": group_id, **error_fields(exc)})
        return build(response_class(ApiKey.DELETE_GROUPS, request.api_version), {"results": results})

    async def offset_delete(self, request: KafkaRequest) -> Any:
        """Forget a group's committed offsets of some partitions; refused per partition for topics
        the group's members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC) and for unknown partitions."""
        body = request.body
        cls = response_class(ApiKey.OFFSET_DELETE, request.api_version)
        topics = self.core.cache.topics()
        errors: dict[TopicPartition, Exception] = {}
        wanted: list[TopicPartition] = []
        for topic in body.topics:
            for part in topic.partitions:
                tp = TopicPartition(topic.name, part.partition_index)
                if topic.name in topics and tp.partition in topics[topic.name].partitions:
                    wanted.append(tp)
                else:
                    errors[tp] = UnknownTopicOrPartition(f"{tp.topic}-{tp.partition} does not exist")
        try:
            errors.update(await self.core.groups.delete_offsets(body.group_id, wanted))
        except Exception as exc:
            return build(cls, {**error_fields(exc), "topics": []})
        answers: dict[str, list[dict[str, Any]]] = {}
        for topic in body.topics:
            for part in topic.partitions:
                error = errors.get(TopicPartition(topic.name, part.partition_index))
                answers.setdefault(topic.name, []).append(
                    {"partition_index": part.partition_index, **(error_fields(error) if error else OK)})
        return build(cls, {**OK, "topics": [{"name": name, "partitions": parts} for name, parts in answers.items()]})


def _no_group(group_id: str) -> dict[str, Any]:
    return {"group_id": group_id, "group_state": DEAD, "protocol_type": "", "protocol_data": "", "members": []}


def _described(group: Group) -> dict[str, Any]:
    stable = group.state == STABLE
    return {"group_id": group.group_id, "group_state": group.state, "protocol_type": group.protocol_type,
            "protocol_data": group.protocol if stable else "",
            "members": [_member(group, m, stable) for m in group.members.values()]}


def _member(group: Group, member: Member, stable: bool) -> dict[str, Any]:
    metadata, assignment = b"", b""
    if stable and member.metadata is not None:      # a Kafka client's, as it sent them
        metadata, assignment = member.metadata.get(group.protocol, b""), member.assignment_data
    elif stable:                                    # an ember member's, in the consumer protocol
        metadata = consumer_protocol.subscription(member.topics)
        assignment = consumer_protocol.assignment(member.assignment)
    return {"member_id": member.member_id, "group_instance_id": member.instance_id, "client_id": member.client_id,
            "client_host": member.client_host, "member_metadata": metadata, "member_assignment": assignment}
