"""ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments over Kafka's protocol.

Elections and reassignments are the controller's (``ember.cluster.controller``, the same calls
the ember protocol makes): the broker that is the active controller runs them on its controller
thread, any other answers NOT_CONTROLLER and Kafka's admin clients retry at the controller
Metadata names. Listing reassignments reads the metadata cache, so any broker answers it.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, TypeVar

from ember.cluster.controller import PREFERRED, UNCLEAN
from ember.errors import ElectionNotNeeded, EmberError, InvalidRequest
from ember.ingest.core import BrokerCore
from ember.protocol.kafka.codec import KafkaRequest, build, response_class
from ember.protocol.kafka.dispatcher import Api
from ember.security.authorizer.model import Operation
from ember.wire.api_keys import ApiKey
from ember.wire.reply import OK, error_fields

T = TypeVar("T")


def _by_topic(results: list[tuple[str, dict[str, Any]]], topic_key: str, partitions_key: str) -> list[dict[str, Any]]:
    """(topic, partition result) pairs as Kafka's per-topic arrays, in first-seen order."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, result in results:
        topics.setdefault(topic, []).append(result)
    return [{topic_key: topic, partitions_key: partitions} for topic, partitions in topics.items()]


class LeadershipHandlers:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    def apis(self) -> dict[int, Api]:
        return {ApiKey.ELECT_LEADERS: Api(0, 2, self.elect_leaders),
                ApiKey.ALTER_PARTITION_REASSIGNMENTS: Api(0, 1, self.alter_partition_reassignments),
                ApiKey.LIST_PARTITION_REASSIGNMENTS: Api(0, 0, self.list_partition_reassignments)}

    async def _at_controller(self, job: Callable[[], T]) -> T:
        controller = self.core.controller
        return await asyncio.wrap_future(controller.call(job))

    async def elect_leaders(self, request: KafkaRequest) -> Any:
        """Preferred or unclean election; with every partition asked (null), only the partitions
        whose leader changed or could not be elected are listed, as Kafka answers."""
        body = request.body
        cls = response_class(ApiKey.ELECT_LEADERS, request.api_version)
        election_type = getattr(body, "election_type", PREFERRED)    # v1+
        listed = None if body.topic_partitions is None else \
            list(dict.fromkeys((t.topic, p) for t in body.topic_partitions for p in t.partitions))
        try:
            if election_type not in (PREFERRED, UNCLEAN):
                raise InvalidRequest(f"election type {election_type} is unknown: 0 = preferred, 1 = unclean")
            self.core.access.check_cluster(Operation.ALTER)
            elected = await self._at_controller(
                lambda: self.core.controller.elect(listed, unclean=election_type == UNCLEAN))
        except EmberError as exc:
            failed = [(topic, {**error_fields(exc), "partition_id": index}) for topic, index in listed or ()]
            return build(cls, {**error_fields(exc), "replica_election_results": _by_topic(
                failed, "topic", "partition_result")})
        results = [(r.topic, {**(error_fields(r.error) if r.error is not None else {**OK, "error_message": None}),
                              "partition_id": r.partition})
                   for r in elected if listed is not None or not isinstance(r.error, ElectionNotNeeded)]
        return build(cls, {**OK, "replica_election_results": _by_topic(results, "topic", "partition_result")})

    async def alter_partition_reassignments(self, request: KafkaRequest) -> Any:
        """Start moving partitions to new replicas; null replicas cancel a partition's move."""
        body = request.body
        cls = response_class(ApiKey.ALTER_PARTITION_REASSIGNMENTS, request.api_version)
        moves = [(t.name, p.partition_index, None if p.replicas is None else list(p.replicas))
                 for t in body.topics for p in t.partitions]
        allow = getattr(body, "allow_replication_factor_change", True)      # v1+
        try:
            self.core.access.check_cluster(Operation.ALTER)
            errors = await self._at_controller(lambda: self.core.controller.reassign(moves, allow))
        except EmberError as exc:
            return build(cls, {**error_fields(exc), "allow_replication_factor_change": allow, "responses": []})
        results = [(topic, {**(error_fields(error) if error is not None else {**OK, "error_message": None}),
                            "partition_index": index}) for (topic, index, _), error in zip(moves, errors)]
        return build(cls, {**OK, "error_message": None, "allow_replication_factor_change": allow,
                           "responses": _by_topic(results, "name", "partitions")})

    async def list_partition_reassignments(self, request: KafkaRequest) -> Any:
        """Partitions being reassigned (all, or those of the listed ones that are): their
        replicas (target, then those being removed) and who is being added and removed. Unknown
        topics and partitions are left out, as Kafka does."""
        body = request.body
        cls = response_class(ApiKey.LIST_PARTITION_REASSIGNMENTS, request.api_version)
        try:
            self.core.access.check_cluster(Operation.DESCRIBE)
        except EmberError as exc:
            return build(cls, {**error_fields(exc), "topics": []})
        topics = self.core.cache.topics()
        wanted = {name: None for name in topics} if body.topics is None else \
            {t.name: set(t.partition_indexes) for t in body.topics}
        results = []
        for name, indexes in wanted.items():
            meta = topics.get(name)
            if meta is None:
                continue
            for index, move in meta.record.reassignments.items():
                if indexes is None or index in indexes:
                    results.append((name, {"partition_index": index, "replicas": meta.partitions[index],
                                           "adding_replicas": move.adding, "removing_replicas": move.removing}))
        return build(cls, {**OK, "error_message": None, "topics": _by_topic(results, "name", "partitions")})
