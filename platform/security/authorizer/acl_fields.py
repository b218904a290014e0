"""ACL bindings and filters as JSON fields of ember's protocol (shared by the broker's handlers and
``ember.client.Admin``): Kafka's spellings, ``{resource_type, resource_name, pattern_type,
principal, host, operation, permission}``; in a filter every field is optional (absent: any)."""
from __future__ import annotations

from typing import Any

from ember.security.authorizer.model import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from ember.wire import fields


def binding_fields(binding: AclBinding) -> dict[str, Any]:
    p, e = binding.pattern, binding.entry
    return {"resource_type": p.type.kafka_name, "resource_name": p.name, "pattern_type": p.pattern_type.name,
            "principal": e.principal, "host": e.host, "operation": e.operation.kafka_name,
            "permission": e.permission.kafka_name}


def filter_fields(acl_filter: AclBindingFilter) -> dict[str, Any]:
    f = acl_filter
    return {"resource_type": f.resource_type.kafka_name, "resource_name": f.name, "pattern_type": f.pattern_type.name,
            "principal": f.principal, "host": f.host, "operation": f.operation.kafka_name,
            "permission": f.permission.kafka_name}


def binding_from_fields(body: fields.Body) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType.parse(fields.string(body, "resource_type")), fields.string(body, "resource_name"),
                        PatternType.parse(fields.string(body, "pattern_type", "LITERAL"))),
        AccessControlEntry(fields.string(body, "principal"), fields.string(body, "host", "*"),
                           Operation.parse(fields.string(body, "operation")),
                           Permission.parse(fields.string(body, "permission", "Allow"))))


def filter_from_fields(body: fields.Body) -> AclBindingFilter:
    return AclBindingFilter(ResourceType.parse(fields.string(body, "resource_type", "Any")),
                            fields.string(body, "resource_name", None),
                            PatternType.parse(fields.string(body, "pattern_type", "ANY")),
                            fields.string(body, "principal", None), fields.string(body, "host", None),
                            Operation.parse(fields.string(body, "operation", "Any")),
                            Permission.parse(fields.string(body, "permission", "Any")))
