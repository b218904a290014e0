"""``ember acls add|list|remove``: Kafka's ACLs, with ``kafka-acls``' flags (``--allow-principal``,
``--deny-principal``, ``--operation``, ``--topic``, ``--group``, ``--cluster``,
``--transactional-id``, ``--resource-pattern-type``, ``--allow-host``, ``--deny-host``, and ``add``'s
shortcuts ``--producer`` (with ``--idempotent``) and ``--consumer``)."""
from __future__ import annotations

import argparse
import itertools

from ember.client.admin import Admin
from ember.commands.topics import add_bootstrap, client_options
from ember.errors import InvalidConfig
from ember.security.authorizer.model import (
    CLUSTER_NAME,
    CONSUMER_OPERATIONS,
    IDEMPOTENT_PRODUCER_OPERATIONS,
    PRODUCER_OPERATIONS,
    RESOURCE_FLAGS,
    WILDCARD,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    operation_names,
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("acls", help="add, list and remove ACLs (needs an authorizer on the brokers)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="allow or deny principals operations on resources")
    add.set_defaults(func=add_acls)
    add.add_argument("--producer", action="store_true",
                     help="the ACLs a producer needs (kafka-acls' shortcut): " + _shortcut_help(PRODUCER_OPERATIONS)
                          + "; needs --topic")
    add.add_argument("--idempotent", action="store_true",
                     help="with --producer: also " + _shortcut_help(IDEMPOTENT_PRODUCER_OPERATIONS))
    add.add_argument("--consumer", action="store_true",
                     help="the ACLs a consumer needs (kafka-acls' shortcut): " + _shortcut_help(CONSUMER_OPERATIONS)
                          + "; needs --topic and --group")
    listing = actions.add_parser("list", help="the ACLs on the named resources (default: all)")
    listing.add_argument("--principal", help="only this principal's ACLs")
    listing.set_defaults(func=list_acls)
    remove = actions.add_parser("remove", help="remove the matching ACLs (naming no principal or operation: "
                                               "every ACL of the resources)")
    remove.set_defaults(func=remove_acls)
    for action in (add, listing, remove):
        action.add_argument("--topic", action="append", default=[], help="topic (repeatable; '*': all topics)")
        action.add_argument("--group", action="append", default=[], help="consumer group (repeatable; '*': all)")
        action.add_argument("--transactional-id", action="append", default=[], help="transactional id (repeatable)")
        action.add_argument("--cluster", action="store_true", help="the cluster (topic creation, replication, ...)")
        action.add_argument("--resource-pattern-type", default=None, metavar="TYPE",
                            help="literal (default) or prefixed; list/remove also take any and match")
        add_bootstrap(action)
    for action in (add, remove):
        action.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL",
                            help="e.g. User:alice or User:CN=app,O=acme (repeatable)")
        action.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
        action.add_argument("--allow-host", action="append", default=[], metavar="IP",
                            help="host of the allowed principals (default: *)")
        action.add_argument("--deny-host", action="append", default=[], metavar="IP",
                            help="host of the denied principals (default: *)")
        action.add_argument("--operation", action="append", default=[], metavar="OP",
                            help="Read, Write, Create, Delete, Alter, Describe, DescribeConfigs, AlterConfigs, "
                                 "ClusterAction, IdempotentWrite or All (repeatable)")


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    return ([(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group]
            + [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
            + ([(ResourceType.CLUSTER, CLUSTER_NAME)] if args.cluster else []))


def _entries(args: argparse.Namespace) -> list[tuple[str, str, Permission]]:
    """(principal, host, permission) of every principal flag."""
    return [(p, h, Permission.ALLOW) for p in args.allow_principal for h in args.allow_host or [WILDCARD]] + \
           [(p, h, Permission.DENY) for p in args.deny_principal for h in args.deny_host or [WILDCARD]]


def _shortcut_help(operations: dict[ResourceType, tuple[Operation, ...]]) -> str:
    return ", ".join(f"{operation_names(ops)} on {RESOURCE_FLAGS[rtype]}" for rtype, ops in operations.items())


def _shortcut_grants(args: argparse.Namespace) -> list[tuple[tuple[ResourceType, str], Operation]]:
    """(resource, operation) of ``--producer``/``--consumer``, with kafka-acls' rules for them."""
    if args.idempotent and not args.producer:
        raise InvalidConfig("--idempotent is only available with --producer")
    if args.operation or args.deny_principal or args.deny_host or args.cluster:
        raise InvalidConfig("--producer and --consumer grant their own operations: give no --operation, "
                            "--deny-principal, --deny-host or --cluster with them")
    if not args.topic:
        raise InvalidConfig("with --producer or --consumer you must give a --topic")
    if args.consumer and not args.group:
        raise InvalidConfig("with --consumer you must give a --group (the consumer group it reads with)")
    if args.consumer and not args.producer and args.transactional_id:
        raise InvalidConfig("--transactional-id goes with --producer, not --consumer alone")
    operations: dict[ResourceType, list[Operation]] = {}
    for role, given in ((PRODUCER_OPERATIONS, args.producer), (IDEMPOTENT_PRODUCER_OPERATIONS, args.idempotent),
                        (CONSUMER_OPERATIONS, args.consumer)):
        for rtype, ops in role.items() if given else ():
            granted = operations.setdefault(rtype, [])
            granted += [o for o in ops if o not in granted]
    resources = _resources(args) + ([(ResourceType.CLUSTER, CLUSTER_NAME)] if args.idempotent else [])
    return [(resource, op) for resource in resources for op in operations.get(resource[0], [])]


def add_acls(args: argparse.Namespace) -> int:
    if args.producer or args.consumer or args.idempotent:
        grants = _shortcut_grants(args)
    else:
        resources = _resources(args)
        operations = [Operation.parse(o) for o in args.operation]
        if not resources or not operations or not (args.allow_principal or args.deny_principal):
            raise InvalidConfig("ember acls add needs a resource (--topic, --group, --transactional-id, --cluster), "
                                "--operation (or --producer / --consumer) and --allow-principal or --deny-principal")
        grants = list(itertools.product(resources, operations))
    if not (args.allow_principal or args.deny_principal):
        raise InvalidConfig("ember acls add needs --allow-principal (or --deny-principal)")
    pattern_type = PatternType.parse(args.resource_pattern_type or "literal")
    bindings = [AclBinding(ResourcePattern(rtype, name, PatternType.LITERAL if rtype == ResourceType.CLUSTER
                                           and args.idempotent else pattern_type),
                           AccessControlEntry(principal, host, op, perm))
                for ((rtype, name), op), (principal, host, perm) in itertools.product(grants, _entries(args))]
    with Admin(args.bootstrap, **client_options(args)) as admin:
        admin.create_acls(bindings)
    for binding in bindings:
        print(f"added: {binding}")
    return 0


def list_acls(args: argparse.Namespace) -> int:
    pattern_type = PatternType.parse(args.resource_pattern_type or "any")
    filters = [AclBindingFilter(rtype, name, pattern_type, args.principal) for rtype, name in _resources(args)] \
        or [AclBindingFilter(principal=args.principal)]
    with Admin(args.bootstrap, **client_options(args)) as admin:
        found = sorted({b for f in filters for b in admin.describe_acls(f)})
    for binding in found:
        print(binding)
    return 0


def remove_acls(args: argparse.Namespace) -> int:
    pattern_type = PatternType.parse(args.resource_pattern_type or "literal")
    resources = _resources(args)
    if not resources:
        raise InvalidConfig("ember acls remove needs a resource (--topic, --group, --transactional-id, --cluster)")
    operations = [Operation.parse(o) for o in args.operation] or [Operation.ANY]
    principals: list[tuple[str | None, str | None, Permission]] = list(_entries(args)) or [(None, None, Permission.ANY)]
    filters = [AclBindingFilter(rtype, name, pattern_type, principal,
                                host if args.allow_host or args.deny_host else None, op, perm)
               for (rtype, name), op, (principal, host, perm) in itertools.product(resources, operations, principals)]
    with Admin(args.bootstrap, **client_options(args)) as admin:
        removed = admin.delete_acls(filters)
    for binding in removed:
        print(f"removed: {binding}")
    if not removed:
        print("no ACL matched")
    return 0
