"""Where request handling asks the authorizer: the principal and host of the current connection
(``current_session()``) against an operation on a resource, raising the typed error a client
sees (Kafka's TOPIC/GROUP/CLUSTER/TRANSACTIONAL_ID_AUTHORIZATION_FAILED) with a message that names
the principal, the operation, the resource and the command that grants it.

The shared broker core (produce, fetch, metadata, topic changes, groups) holds one :class:`Access`,
so both wire protocols check the same way. Without an authorizer (``authorizer.class.name``
unset) every check passes. Work outside any connection (none today) is not checked.
"""
from __future__ import annotations

import logging
import shlex
from typing import Optional

from ember.errors import (
    ClusterAuthorizationFailed,
    EmberError,
    GroupAuthorizationFailed,
    TopicAuthorizationFailed,
    TransactionalIdAuthorizationFailed,
)
from ember.security.authorizer.authorizer import Authorizer
from ember.security.authorizer.model import (
    CLUSTER,
    CONSUMER_OPERATIONS,
    PRODUCER_OPERATIONS,
    RESOURCE_FLAGS,
    Operation,
    Resource,
    ResourceType,
    operation_names,
)
from ember.security.log_limit import LogLimiter, suppressed_note
from ember.security.session import current_session

log = logging.getLogger(__name__)

#: A refusal of the same (principal, operation, resource) is logged at most once per this period.
REFUSAL_LOG_INTERVAL_S = 60.0

_ERRORS: dict[ResourceType, type[EmberError]] = {
    ResourceType.TOPIC: TopicAuthorizationFailed, ResourceType.GROUP: GroupAuthorizationFailed,
    ResourceType.CLUSTER: ClusterAuthorizationFailed,
    ResourceType.TRANSACTIONAL_ID: TransactionalIdAuthorizationFailed}



class Access:
    def __init__(self, authorizer: Optional[Authorizer] = None) -> None:
        self.authorizer = authorizer
        self._refusals = LogLimiter(REFUSAL_LOG_INTERVAL_S)

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def allowed(self, operation: Operation, resource: Resource, log_refusal: bool = True) -> bool:
        session = current_session()
        if self.authorizer is None or session is None:
            return True
        if self.authorizer.authorize(session.principal, session.host, operation, resource):
            return True
        if log_refusal:
            self._log_refusal(session.principal, session.host, operation, resource)
        return False

    def check(self, operation: Operation, resource: Resource) -> None:
        """Raise the resource type's authorization error unless the current principal may."""
        if not self.allowed(operation, resource):
            raise refusal(operation, resource)

    def check_topic(self, operation: Operation, topic: str) -> None:
        if self.authorizer is not None:     # without one, every check passes: no resource to build
            self.check(operation, Resource(ResourceType.TOPIC, topic))

    def check_group(self, operation: Operation, group: str) -> None:
        self.check(operation, Resource(ResourceType.GROUP, group))

    def check_cluster(self, operation: Operation) -> None:
        self.check(operation, CLUSTER)

    def follower_or_topic(self, replica_id: int, operation: Operation) -> Operation | None:
        """A request from a follower broker (``replica_id`` >= 0) needs ClusterAction (checked
        here; then None: no topic ACL applies); a client's needs ``operation`` on each topic."""
        if replica_id < 0:
            return operation
        self.check_cluster(Operation.CLUSTER_ACTION)
        return None

    def check_topic_or_cluster(self, operation: Operation, topic: str) -> None:
        """Kafka's rule for CreateTopics: ``operation`` on the cluster, or on the topic."""
        if not self.allowed(operation, CLUSTER, log_refusal=False):
            self.check_topic(operation, topic)

    def visible_topics(self, names: list[str]) -> list[str]:
        """The topics the current principal may Describe (Metadata lists no others)."""
        return [n for n in names if self.allowed(Operation.DESCRIBE, Resource(ResourceType.TOPIC, n),
                                                 log_refusal=False)]

    def check_idempotent_write(self) -> None:
        """InitProducerId without a transactional id, as Kafka 3+: IdempotentWrite on the cluster,
        or Write on some topic."""
        session = current_session()
        if self.authorizer is None or session is None:
            return
        if self.allowed(Operation.IDEMPOTENT_WRITE, CLUSTER, log_refusal=False) or \
                self.authorizer.authorize_any(session.principal, session.host, Operation.WRITE, ResourceType.TOPIC):
            return
        self.check_cluster(Operation.IDEMPOTENT_WRITE)

    def _log_refusal(self, principal: str, host: str, operation: Operation, resource: Resource) -> None:
        suppressed = self._refusals.admit((principal, operation, resource))
        if suppressed is None:
            return
        log.info("refused: principal %s from host %s may not %s %s (no ACL allows it, or one denies it)%s",
                 principal, host, operation.kafka_name, resource, suppressed_note(suppressed))


def refusal(operation: Operation, resource: Resource) -> EmberError:
    """The typed error for a refused operation, naming who, what, and how to grant it: when the
    operation is one a producer or a consumer needs, every operation it needs and the one
    ``ember acls add --producer``/``--consumer`` command that grants them all (else the one operation)."""
    session = current_session()
    principal = session.principal if session is not None else "?"
    # Describe on a topic is asked before its existence is looked up, and the answer must not reveal
    # it (Kafka's TOPIC_AUTHORIZATION_FAILED, existing or not): say both, never "does not exist" alone.
    hidden = " (or it does not exist)" if (resource.type, operation) == (ResourceType.TOPIC, Operation.DESCRIBE) else ""
    return _ERRORS[resource.type](f"principal {principal} is not authorized to {operation.kafka_name} {resource}"
                                  f"{hidden}; {_grant_hint(shlex.quote(principal), operation, resource)}")


def _grant_hint(principal: str, operation: Operation, resource: Resource) -> str:
    grant = f"ember acls add --allow-principal {principal}"
    name = shlex.quote(resource.name)
    on_topic = resource.type == ResourceType.TOPIC
    topic, group = (name, "GROUP") if on_topic else ("TOPIC", name)
    producer = (f"a producer needs {operation_names(PRODUCER_OPERATIONS[ResourceType.TOPIC])} on the topic",
                f"`{grant} --producer --topic {topic}`")
    consumer = (f"a consumer needs {operation_names(CONSUMER_OPERATIONS[ResourceType.TOPIC])} on "
                f"{'the topic' if on_topic else 'its topics'} and "
                f"{operation_names(CONSUMER_OPERATIONS[ResourceType.GROUP])} on {'its' if on_topic else 'the'} group",
                f"`{grant} --consumer --topic {topic} --group {group}`")
    roles = _ROLES.get((resource.type, operation), ())
    if roles == ("producer",):
        needs, commands = producer
    elif roles == ("consumer",):
        needs, commands = consumer
    elif roles:
        needs, commands = f"{producer[0]}; {consumer[0]}", f"{producer[1]} or {consumer[1]}"
    else:
        target = "" if resource.type == ResourceType.CLUSTER else f" {name}"
        return (f"an operator grants it with `{grant} --operation {operation.kafka_name} "
                f"{RESOURCE_FLAGS[resource.type]}{target}`")
    return f"{needs}: an operator grants them with {commands}"


#: Refusals a producer or a consumer meets, and whose every operation the hint names.
_ROLES: dict[tuple[ResourceType, Operation], tuple[str, ...]] = {
    (ResourceType.TOPIC, Operation.WRITE): ("producer",),
    (ResourceType.TOPIC, Operation.CREATE): ("producer",),
    (ResourceType.TOPIC, Operation.READ): ("consumer",),
    (ResourceType.TOPIC, Operation.DESCRIBE): ("producer", "consumer"),
    (ResourceType.GROUP, Operation.READ): ("consumer",),
    (ResourceType.GROUP, Operation.DESCRIBE): ("consumer",),
}


#: No authorizer: every check passes (the default, as Kafka without authorizer.class.name).
ALLOW_ALL = Access()
