"""CreateAcls, DescribeAcls and DeleteAcls over Kafka's protocol (``kafka-acls``, Admin clients):
translation only, the work is :class:`ember.security.authorizer.acl_admin.AclAdmin`'s. Versions
are Kafka 4's (KIP-896 dropped CreateAcls v0-1, DescribeAcls v0 and DeleteAcls v0)."""
from __future__ import annotations

from typing import Any, Optional

from ember.errors import InvalidRequest
from ember.ingest.core import BrokerCore
from ember.protocol.kafka.codec import KafkaRequest, build, response_class
from ember.protocol.kafka.dispatcher import Api
from ember.security.authorizer.acl_admin import AclAdmin
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
from ember.wire.api_keys import ApiKey
from ember.wire.reply import OK, error_fields


def _filter(item: Any) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter as a filter (null strings match anything);
    InvalidRequest for a code this broker does not know."""
    try:
        return AclBindingFilter(ResourceType(item.resource_type_filter), item.resource_name_filter,
                                PatternType(getattr(item, "pattern_type_filter", PatternType.LITERAL)),
                                item.principal_filter, item.host_filter, Operation(item.operation),
                                Permission(item.permission_type))
    except ValueError as exc:
        raise InvalidRequest(f"ACL filter: {exc}") from None


def _entry(binding: AclBinding) -> dict[str, Any]:
    e = binding.entry
    return {"principal": e.principal, "host": e.host, "operation": int(e.operation),
            "permission_type": int(e.permission)}


def _pattern(binding: AclBinding) -> dict[str, Any]:
    p = binding.pattern
    return {"resource_type": int(p.type), "resource_name": p.name, "pattern_type": int(p.pattern_type)}


class AclHandlers:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    @property
    def admin(self) -> AclAdmin:
        return AclAdmin(self.core.access, self.core.acls)

    def apis(self) -> dict[int, Api]:
        return {ApiKey.DESCRIBE_ACLS: Api(1, 3, self.describe_acls), ApiKey.CREATE_ACLS: Api(2, 3, self.create_acls),
                ApiKey.DELETE_ACLS: Api(1, 3, self.delete_acls)}

    async def create_acls(self, request: KafkaRequest) -> Any:
        bindings: list[Optional[AclBinding]] = []
        parse_errors: dict[int, Exception] = {}
        for position, c in enumerate(request.body.creations):
            try:
                bindings.append(AclBinding(
                    ResourcePattern(ResourceType(c.resource_type), c.resource_name, PatternType(c.resource_pattern_type)),
                    AccessControlEntry(c.principal, c.host, Operation(c.operation), Permission(c.permission_type))))
            except ValueError as exc:     # a code this broker does not know
                parse_errors[position] = InvalidRequest(str(exc))
                bindings.append(None)
        outcomes = iter(await self.admin.create([b for b in bindings if b is not None]))
        results = []
        for position, binding in enumerate(bindings):
            error = parse_errors.get(position) if binding is None else next(outcomes)
            results.append(error_fields(error) if error is not None else {**OK, "error_message": None})
        return build(response_class(ApiKey.CREATE_ACLS, request.api_version), {"results": results})

    async def describe_acls(self, request: KafkaRequest) -> Any:
        cls = response_class(ApiKey.DESCRIBE_ACLS, request.api_version)
        try:
            found = self.admin.describe(_filter(request.body))
        except Exception as exc:
            return build(cls, {**error_fields(exc), "resources": []})
        resources: dict[tuple[int, str, int], dict[str, Any]] = {}
        for binding in found:
            pattern = _pattern(binding)
            resources.setdefault(tuple(pattern.values()), {**pattern, "acls": []})["acls"].append(_entry(binding))
        return build(cls, {**OK, "error_message": None, "resources": list(resources.values())})

    async def delete_acls(self, request: KafkaRequest) -> Any:
        filters: list[AclBindingFilter | Exception] = []
        for item in request.body.filters:
            try:
                filters.append(_filter(item))
            except InvalidRequest as exc:
                filters.append(exc)
        outcomes = iter(await self.admin.delete([f for f in filters if not isinstance(f, Exception)]))
        results = []
        for acl_filter in filters:
            outcome = acl_filter if isinstance(acl_filter, Exception) else next(outcomes)
            if isinstance(outcome, Exception):
                results.append({**error_fields(outcome), "matching_acls": []})
            else:
                results.append({**OK, "error_message": None, "matching_acls": [
                    {**OK, "error_message": None, **_pattern(b), **_entry(b)} for b in outcome]})
        return build(response_class(ApiKey.DELETE_ACLS, request.api_version), {"filter_results": results})
