"""The authorization decision, Kafka's rules, with no I/O: given the ACLs it holds (a snapshot the
ZooKeeper store replaces whole), may ``principal`` from ``host`` do ``operation`` on ``resource``?

1. a super user (``super.users``) may do everything;
2. a matching Deny ACL refuses (deny wins);
3. a matching Allow ACL admits (Read, Write, Delete and Alter imply Describe; AlterConfigs implies
   DescribeConfigs; All implies everything);
4. no ACL at all on the resource: ``allow.everyone.if.no.acl.found`` decides (default false).
"""
from __future__ import annotations

from typing import Iterable

from ember.errors import InvalidConfig
from ember.security.authorizer.model import (
    IMPLIED_BY,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    Operation,
    Permission,
    Resource,
    ResourceType,
)

#: Values of ``authorizer.class.name`` that turn ember's ZooKeeper-backed authorizer on: its own
#: name and Kafka's two (ZooKeeper's AclAuthorizer, KRaft's StandardAuthorizer), so a Kafka
#: broker configuration keeps working.
AUTHORIZER_NAMES = ("ember.security.authorizer.AclAuthorizer", "kafka.security.authorizer.AclAuthorizer",
                    "org.apache.kafka.metadata.authorizer.StandardAuthorizer")


def authorizer_enabled(class_name: str | None) -> bool:
    """Whether ``authorizer.class.name`` turns authorization on (empty: off, Kafka's default)."""
    if not class_name:
        return False
    if class_name not in AUTHORIZER_NAMES:
        raise InvalidConfig(f"authorizer.class.name={class_name!r} is not available; use one of "
                            f"{', '.join(AUTHORIZER_NAMES)} (all are ember's ZooKeeper-backed ACL authorizer)")
    return True


def parse_super_users(value: str | None) -> frozenset[str]:
    """Kafka's ``super.users``: principals separated by semicolons (``User:admin;User:CN=broker,O=x``:
    a certificate subject holds commas, so commas cannot separate)."""
    users = frozenset(p.strip() for p in (value or "").split(";") if p.strip())
    for principal in users:
        if ":" not in principal:
            raise InvalidConfig(f"super.users entry {principal!r} must be a principal TYPE:NAME, e.g. User:admin")
    return users


class Authorizer:
    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False,
                 acls: Iterable[AclBinding] = ()) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._by_type: dict[ResourceType, tuple[AclBinding, ...]] = {}
        self.replace(acls)

    def replace(self, acls: Iterable[AclBinding]) -> None:
        """Install a new snapshot of every ACL (one assignment: readers see the old or the new one)."""
        by_type: dict[ResourceType, list[AclBinding]] = {}
        for binding in acls:
            by_type.setdefault(binding.pattern.type, []).append(binding)
        self._by_type = {t: tuple(b) for t, b in by_type.items()}

    def acls(self) -> list[AclBinding]:
        return sorted(b for bindings in self._by_type.values() for b in bindings)

    def authorize(self, principal: str, host: str, operation: Operation, resource: Resource) -> bool:
        if principal in self.super_users:
            return True
        matching = [b for b in self._by_type.get(resource.type, ()) if b.pattern.matches(resource)]
        if not matching:
            return self.allow_everyone_if_no_acl_found
        mine = [b.entry for b in matching if _applies(b, principal, host)]
        if any(e.permission == Permission.DENY and e.operation in (operation, Operation.ALL) for e in mine):
            return False
        granted_by = {operation, Operation.ALL} | IMPLIED_BY.get(operation, frozenset())
        return any(e.permission == Permission.ALLOW and e.operation in granted_by for e in mine)

    def authorize_any(self, principal: str, host: str, operation: Operation, resource_type: ResourceType) -> bool:
        """Whether ``principal`` may do ``operation`` on *some* resource of the type (Kafka's
        authorizeByResourceType: an idempotent producer needs Write on some topic): an Allow ACL
        that no Deny on every resource (literal ``*``) cancels."""
        if principal in self.super_users:
            return True
        bindings = self._by_type.get(resource_type, ())
        if not bindings:
            return self.allow_everyone_if_no_acl_found
        mine = [b for b in bindings if _applies(b, principal, host)]
        if any(b.entry.permission == Permission.DENY and b.entry.operation in (operation, Operation.ALL)
               and b.pattern.name == WILDCARD for b in mine):
            return False
        return any(b.entry.permission == Permission.ALLOW and b.entry.operation in (operation, Operation.ALL)
                   for b in mine)


def _applies(binding: AclBinding, principal: str, host: str) -> bool:
    entry = binding.entry
    return entry.principal in (principal, WILDCARD_PRINCIPAL) and entry.host in (host, WILDCARD)
