"""FindCoordinator, OffsetCommit and OffsetFetch over Kafka's protocol: translation only, the work
is the shared group coordinator's (``ember.groups.coordinator``), so a group's committed offsets
are the same whichever protocol committed or reads them.

Kafka clients reach the coordinator through the listener they use. Group membership over Kafka's
protocol (JoinGroup/SyncGroup, client-side assignment) is not served yet: Kafka consumers use
``assign()`` and commit as a group without members (generation -1), which these APIs support.
"""
from __future__ import annotations

from typing import Any

from ember.errors import CoordinatorNotAvailable, InvalidRequest
from ember.ingest.client_types import TopicPartition
from ember.ingest.core import BrokerCore
from ember.ingest.protocol import ApiKey
from ember.ingest.reply import OK, error_fields
from ember.kafka.codec import KafkaRequest, build, response_class
from ember.kafka.dispatcher import Api
from ember.kafka.names import TopicNames

GROUP_KEY = 0
NO_OFFSET = -1


class GroupHandlers:
    def __init__(self, core: BrokerCore, listener: str) -> None:
        self.core = core
        self.listener = listener

    def apis(self) -> dict[int, Api]:
        return {ApiKey.FIND_COORDINATOR: Api(0, 6, self.find_coordinator),
                ApiKey.OFFSET_COMMIT: Api(2, 10, self.offset_commit),
                ApiKey.OFFSET_FETCH: Api(1, 10, self.offset_fetch)}

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
            if key_type != GROUP_KEY:
                raise InvalidRequest("only group coordinators exist (ember has no transactions)")
            broker = self.core.groups.coordinator_broker(key)
            endpoint = broker.endpoint(self.listener)
            if endpoint is None:
                raise CoordinatorNotAvailable(f"broker {broker.id} coordinates {key!r} but has no "
                                              f"{self.listener} listener")
            return {**OK, "error_message": None, "node_id": broker.id, "host": endpoint[0], "port": endpoint[1]}
        except Exception as exc:
            return {**error_fields(exc), "node_id": -1, "host": "", "port": -1}

    # -- OffsetCommit --------------------------------------------------------------------------

    async def offset_commit(self, request: KafkaRequest) -> Any:
        body = request.body
        names = TopicNames(self.core.cache.topics())
        offsets: dict[TopicPartition, tuple[int, str]] = {}
        slots: list[tuple[dict[str, Any], int, Exception | None]] = []
        for topic in body.topics:
            try:
                ref = names.ref(names.name_of(topic))
            except Exception as exc:
                ref = {"topic_id": topic.topic_id}
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
                await self.core.groups.commit(body.group_id, body.member_id, generation, offsets)
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
        if request.api_version >= 8:
            groups = [{"group_id": g.group_id, **await self._fetch_group(g.group_id, g.topics, names)}
                      for g in body.groups]
            return build(cls, {"groups": groups})
        return build(cls, await self._fetch_group(body.group_id, body.topics, names))

    async def _fetch_group(self, group_id: str, topics: Any, names: TopicNames) -> dict[str, Any]:
        """One group's committed offsets: of the listed topics' partitions, or (null) all of them."""
        wanted: list[TopicPartition] | None = None
        try:
            if topics is not None:
                wanted = [TopicPartition(names.name_of(t), index) for t in topics for index in t.partition_indexes]
            found = await self.core.groups.fetch(group_id, wanted)
            status = dict(OK)
        except Exception as exc:
            found, status = {}, error_fields(exc)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp in sorted(found) if wanted is None else wanted:
            committed = found.get(tp)
            by_topic.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "error_code": status["error_code"],
                "committed_offset": committed.offset if committed else NO_OFFSET, "committed_leader_epoch": -1,
                "metadata": committed.metadata if committed else ""})
        return {"error_code": status["error_code"],
                "topics": [{**names.ref(topic), "partitions": parts} for topic, parts in by_topic.items()]}
