"""Kafka's ACL model: who (principal, host) may or may not do what (operation) to which resources
(a resource type and a name pattern). The enums carry Kafka's wire codes (CreateAcls, DescribeAcls,
DeleteAcls) and Kafka's names (ZooKeeper layout, ``kafka-acls``), so both protocols and the store
share one vocabulary."""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Optional, Self

from ember.errors import InvalidRequest

#: The one Cluster resource's name (Kafka's).
CLUSTER_NAME = "kafka-cluster"
#: A literal ACL on this name matches every resource of its type; as principal or host, anyone.
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class _Named(IntEnum):
    """An enum with Kafka's wire code as value and Kafka's spelling as ``kafka_name``."""

    @property
    def kafka_name(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def parse(cls, text: str) -> Self:
        """From Kafka's spelling in any case and with or without ``-``/``_`` (``describe-configs``,
        ``DescribeConfigs``, ``DESCRIBE_CONFIGS``)."""
        key = text.replace("-", "").replace("_", "").lower()
        for member in cls:
            if member.name.replace("_", "").lower() == key:
                return member
        choices = ", ".join(m.kafka_name for m in cls if m.name not in ("UNKNOWN", "ANY", "MATCH"))
        raise InvalidRequest(f"{text!r} is not a known {cls.__name__} name; use one of {choices}")


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5

    @property
    def kafka_name(self) -> str:
        return "TransactionalId" if self is ResourceType.TRANSACTIONAL_ID else self.name.capitalize()


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class Permission(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: Kafka's implications for Allow ACLs: an operation is also granted by these (and by All).
#: Deny ACLs deny only their own operation (or All).
IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.ALTER_CONFIGS}),
}

#: The ``ember acls``/``kafka-acls`` flag that names a resource of each type.
RESOURCE_FLAGS = {ResourceType.TOPIC: "--topic", ResourceType.GROUP: "--group", ResourceType.CLUSTER: "--cluster",
                  ResourceType.TRANSACTIONAL_ID: "--transactional-id"}

#: What ``kafka-acls --producer`` grants (``ember acls add --producer``): Write, Describe and Create
#: on each topic, Write and Describe on each transactional id; with ``--idempotent`` also
#: IdempotentWrite on the cluster.
PRODUCER_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.WRITE, Operation.DESCRIBE, Operation.CREATE),
    ResourceType.TRANSACTIONAL_ID: (Operation.WRITE, Operation.DESCRIBE),
}
IDEMPOTENT_PRODUCER_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.CLUSTER: (Operation.IDEMPOTENT_WRITE,)}
#: What ``kafka-acls --consumer`` grants: Read and Describe on each topic, Read on each group.
CONSUMER_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.READ, Operation.DESCRIBE),
    ResourceType.GROUP: (Operation.READ,),
}


def operation_names(operations: tuple[Operation, ...]) -> str:
    """``Write, Describe and Create``."""
    names = [o.kafka_name for o in operations]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


@dataclass(frozen=True, order=True)
class Resource:
    """A concrete resource a request acts on (``Cluster`` has the one name ``kafka-cluster``)."""
    type: ResourceType
    name: str

    def __str__(self) -> str:
        return f"{self.type.kafka_name}:{self.name}"


CLUSTER = Resource(ResourceType.CLUSTER, CLUSTER_NAME)


@dataclass(frozen=True, order=True)
class ResourcePattern:
    """The resources an ACL applies to: one name (LITERAL; ``*`` = all of the type) or every
    name starting with it (PREFIXED)."""
    type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def matches(self, resource: Resource) -> bool:
        if self.type != resource.type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return resource.name.startswith(self.name)
        return self.name in (WILDCARD, resource.name)

    def validate(self) -> None:
        """Refuse what cannot be stored (as Kafka's CreateAcls does)."""
        if self.type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise InvalidRequest(f"an ACL needs a concrete resource type, not {self.type.kafka_name}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidRequest(f"an ACL's pattern type is LITERAL or PREFIXED, not {self.pattern_type.name}")
        if not self.name:
            raise InvalidRequest("an ACL needs a resource name")
        if self.type == ResourceType.CLUSTER and (self.name != CLUSTER_NAME or
                                                  self.pattern_type != PatternType.LITERAL):
            raise InvalidRequest(f"the Cluster resource is LITERAL {CLUSTER_NAME!r}")
        if self.pattern_type == PatternType.PREFIXED and self.name == WILDCARD:
            raise InvalidRequest("a PREFIXED ACL on '*' makes no sense: use LITERAL '*' for every resource")

    def __str__(self) -> str:
        return f"{self.type.kafka_name}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def validate(self) -> None:
        if ":" not in self.principal:
            raise InvalidRequest(f"principal {self.principal!r} must be TYPE:NAME, e.g. User:alice")
        if self.operation in (Operation.ANY, Operation.UNKNOWN):
            raise InvalidRequest(f"an ACL needs a concrete operation, not {self.operation.name}")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise InvalidRequest(f"an ACL's permission is ALLOW or DENY, not {self.permission.name}")

    def to_json(self) -> dict[str, str]:
        """Kafka's ZooKeeper form of one entry."""
        return {"principal": self.principal, "permissionType": self.permission.kafka_name,
                "operation": self.operation.kafka_name, "host": self.host}

    @classmethod
    def from_json(cls, entry: dict[str, str]) -> "AccessControlEntry":
        return cls(entry["principal"], entry["host"], Operation.parse(entry["operation"]),
                   Permission.parse(entry["permissionType"]))


@dataclass(frozen=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def validate(self) -> None:
        self.pattern.validate()
        self.entry.validate()

    def __str__(self) -> str:
        e = self.entry
        return (f"{e.permission.kafka_name} {e.principal} {e.operation.kafka_name} from host {e.host} "
                f"on {self.pattern}")


@dataclass(frozen=True)
class AclBindingFilter:
    """What DescribeAcls lists and DeleteAcls removes; None (Kafka's null / ANY) matches anything.
    ``pattern_type`` MATCH selects the patterns that would apply to the named resource."""
    resource_type: ResourceType = ResourceType.ANY
    name: Optional[str] = None
    pattern_type: PatternType = PatternType.ANY
    principal: Optional[str] = None
    host: Optional[str] = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, binding: AclBinding) -> bool:
        pattern, entry = binding.pattern, binding.entry
        if self.resource_type != ResourceType.ANY and pattern.type != self.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.name is not None and not pattern.matches(Resource(pattern.type, self.name)):
                return False
        else:
            if self.pattern_type != PatternType.ANY and pattern.pattern_type != self.pattern_type:
                return False
            if self.name is not None and pattern.name != self.name:
                return False
        return ((self.principal is None or entry.principal == self.principal)
                and (self.host is None or entry.host == self.host)
                and self.operation in (Operation.ANY, entry.operation)
                and self.permission in (Permission.ANY, entry.permission))
