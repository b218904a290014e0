"""CreateAcls, DescribeAcls and DeleteAcls of the ember protocol (``ember acls``, ``Admin``): the JSON
format only; the work is :class:`ember.security.authorizer.acl_admin.AclAdmin`'s, shared with the
Kafka protocol. A binding is ``{resource_type, resource_name, pattern_type, principal, host,
operation, permission}`` in Kafka's spellings (``Topic``, ``PREFIXED``, ``Read``, ``Allow``); a
filter has the same fields, each optional (absent: any; ``pattern_type`` ``MATCH``: the patterns
that apply to ``resource_name``)."""
from __future__ import annotations

from ember.protocol.ember.dispatcher import Handler
from ember.security.authorizer.acl_admin import AclAdmin
from ember.security.authorizer.acl_fields import binding_fields, binding_from_fields, filter_from_fields
from ember.wire import fields
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Request
from ember.wire.reply import OK, Reply, error_fields


class AclApis:
    def __init__(self, admin: AclAdmin) -> None:
        self.admin = admin

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.CREATE_ACLS: self.create_acls, ApiKey.DESCRIBE_ACLS: self.describe_acls,
                ApiKey.DELETE_ACLS: self.delete_acls}

    async def create_acls(self, request: Request) -> Reply:
        bindings = [binding_from_fields(item) for item in fields.objects(request.body, "acls")]
        outcomes = await self.admin.create(bindings)
        return Reply({**OK, "results": [{**binding_fields(b), **(error_fields(e) if e is not None else OK)}
                                        for b, e in zip(bindings, outcomes)]})

    async def describe_acls(self, request: Request) -> Reply:
        return Reply({**OK, "acls": [binding_fields(b) for b in self.admin.describe(filter_from_fields(request.body))]})

    async def delete_acls(self, request: Request) -> Reply:
        outcomes = await self.admin.delete([filter_from_fields(item) for item in fields.objects(request.body, "filters")])
        return Reply({**OK, "results": [
            {**error_fields(o), "acls": []} if isinstance(o, Exception)
            else {**OK, "acls": [binding_fields(b) for b in o]} for o in outcomes]})
