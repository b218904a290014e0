"""The authorization decision (Kafka's rules), the ACL model and the checks' errors and logging, without a broker."""
from __future__ import annotations

import contextvars
import json
import logging

import pytest

from ember.errors import (
    ClusterAuthorizationFailed,
    GroupAuthorizationFailed,
    InvalidConfig,
    InvalidRequest,
    TopicAuthorizationFailed,
)
from ember.security.authorizer.access import Access
from ember.security.authorizer.authorizer import Authorizer, authorizer_enabled, parse_super_users
from ember.security.authorizer.model import (
    CLUSTER,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourcePattern,
    ResourceType,
)
from ember.security.authorizer.store import acl_path, decode, decode_readable, encode
from ember.security.protocol import SecurityProtocol
from ember.security.session import Session, enter_session

ALICE, BOB = "User:CN=alice", "User:CN=bob"
HOST = "127.0.0.1"
ORDERS = Resource(ResourceType.TOPIC, "orders")


def acl(principal: str, operation: Operation, name: str = "orders", permission: Permission = Permission.ALLOW,
        resource_type: ResourceType = ResourceType.TOPIC, pattern: PatternType = PatternType.LITERAL,
        host: str = "*") -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, pattern), AccessControlEntry(principal, host, operation,
                                                                                        permission))


def test_no_acl_refuses_everyone_but_super_users():
    authorizer = Authorizer(super_users={"User:admin"})
    assert not authorizer.authorize(ALICE, HOST, Operation.READ, ORDERS)
    assert authorizer.authorize("User:admin", HOST, Operation.ALTER, CLUSTER)


def test_allow_everyone_if_no_acl_found_admits_only_resources_without_acls():
    authorizer = Authorizer(allow_everyone_if_no_acl_found=True, acls=[acl(BOB, Operation.READ)])
    assert authorizer.authorize(ALICE, HOST, Operation.WRITE, Resource(ResourceType.TOPIC, "other"))
    assert not authorizer.authorize(ALICE, HOST, Operation.READ, ORDERS)


def test_deny_wins_over_allow():
    authorizer = Authorizer(acls=[acl(ALICE, Operation.ALL), acl(ALICE, Operation.WRITE, permission=Permission.DENY)])
    assert authorizer.authorize(ALICE, HOST, Operation.READ, ORDERS)
    assert not authorizer.authorize(ALICE, HOST, Operation.WRITE, ORDERS)


def test_read_write_delete_alter_imply_describe_and_alter_configs_implies_describe_configs():
    for granted in (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER):
        authorizer = Authorizer(acls=[acl(ALICE, granted)])
        assert authorizer.authorize(ALICE, HOST, Operation.DESCRIBE, ORDERS)
        assert not authorizer.authorize(ALICE, HOST, Operation.CREATE, ORDERS)
    authorizer = Authorizer(acls=[acl(ALICE, Operation.ALTER_CONFIGS)])
    assert authorizer.authorize(ALICE, HOST, Operation.DESCRIBE_CONFIGS, ORDERS)
    assert not authorizer.authorize(ALICE, HOST, Operation.DESCRIBE, ORDERS)


def test_a_deny_of_read_does_not_deny_describe():
    authorizer = Authorizer(acls=[acl(ALICE, Operation.DESCRIBE), acl(ALICE, Operation.READ, permission=Permission.DENY)])
    assert authorizer.authorize(ALICE, HOST, Operation.DESCRIBE, ORDERS)
    assert not authorizer.authorize(ALICE, HOST, Operation.READ, ORDERS)


def test_prefixed_acls_match_only_their_prefix_and_the_literal_wildcard_matches_all():
    authorizer = Authorizer(acls=[acl(ALICE, Operation.READ, "sales-", pattern=PatternType.PREFIXED),
                                  acl(BOB, Operation.READ, "*")])
    assert authorizer.authorize(ALICE, HOST, Operation.READ, Resource(ResourceType.TOPIC, "sales-eu"))
    assert not authorizer.authorize(ALICE, HOST, Operation.READ, Resource(ResourceType.TOPIC, "salesx"))
    assert not authorizer.authorize(ALICE, HOST, Operation.READ, Resource(ResourceType.GROUP, "sales-eu"))
    assert authorizer.authorize(BOB, HOST, Operation.READ, Resource(ResourceType.TOPIC, "anything"))


def test_wildcard_principal_and_exact_host():
    authorizer = Authorizer(acls=[acl("User:*", Operation.READ, host="10.0.0.1")])
    assert authorizer.authorize(ALICE, "10.0.0.1", Operation.READ, ORDERS)
    assert not authorizer.authorize(ALICE, HOST, Operation.READ, ORDERS)


def test_write_on_some_topic_allows_an_idempotent_producer_unless_denied_everywhere():
    authorizer = Authorizer(acls=[acl(ALICE, Operation.WRITE, "logs-", pattern=PatternType.PREFIXED)])
    assert authorizer.authorize_any(ALICE, HOST, Operation.WRITE, ResourceType.TOPIC)
    assert not authorizer.authorize_any(BOB, HOST, Operation.WRITE, ResourceType.TOPIC)
    authorizer.replace(authorizer.acls() + [acl(ALICE, Operation.WRITE, "*", permission=Permission.DENY)])
    assert not authorizer.authorize_any(ALICE, HOST, Operation.WRITE, ResourceType.TOPIC)


def test_super_users_use_kafkas_semicolon_syntax():
    assert parse_super_users("User:admin; User:CN=ember-broker,O=ember") == {"User:admin", "User:CN=ember-broker,O=ember"}
    with pytest.raises(InvalidConfig, match="TYPE:NAME"):
        parse_super_users("admin")


def test_kafkas_authorizer_class_names_are_aliases_and_others_are_refused():
    assert not authorizer_enabled(None)
    assert authorizer_enabled("kafka.security.authorizer.AclAuthorizer")
    assert authorizer_enabled("org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    with pytest.raises(InvalidConfig, match="authorizer.class.name"):
        authorizer_enabled("com.example.MyAuthorizer")


def test_filters_select_by_pattern_principal_and_match():
    bindings = [acl(ALICE, Operation.READ), acl(ALICE, Operation.READ, "ord", pattern=PatternType.PREFIXED),
                acl(BOB, Operation.WRITE, "payments")]
    assert [b.entry.principal for b in bindings if AclBindingFilter(principal=BOB).matches(b)] == [BOB]
    matching = [b for b in bindings if AclBindingFilter(ResourceType.TOPIC, "orders", PatternType.MATCH).matches(b)]
    assert len(matching) == 2
    literal = [b for b in bindings if AclBindingFilter(ResourceType.TOPIC, "ord", PatternType.LITERAL).matches(b)]
    assert literal == []


def test_invalid_bindings_are_refused():
    with pytest.raises(InvalidRequest, match="Cluster"):
        acl(ALICE, Operation.ALTER, "other", resource_type=ResourceType.CLUSTER).validate()
    with pytest.raises(InvalidRequest, match="TYPE:NAME"):
        acl("alice", Operation.READ).validate()
    with pytest.raises(InvalidRequest, match="is not a known Operation name"):
        Operation.parse("Fly")
    assert Operation.parse("describe-configs") is Operation.DESCRIBE_CONFIGS


def test_zookeeper_layout_and_json_are_kafkas():
    literal = acl(ALICE, Operation.READ)
    assert acl_path(literal.pattern) == "/kafka-acl/Topic/orders"
    prefixed = acl(ALICE, Operation.READ, "sales-", resource_type=ResourceType.GROUP, pattern=PatternType.PREFIXED)
    assert acl_path(prefixed.pattern) == "/kafka-acl-extended/prefixed/Group/sales-"
    assert acl_path(acl(ALICE, Operation.WRITE, "a/b", resource_type=ResourceType.TRANSACTIONAL_ID).pattern) \
        == "/kafka-acl/TransactionalId/a%2Fb"
    data = encode([literal.entry])
    assert data == (b'{"version": 1, "acls": [{"principal": "User:CN=alice", "permissionType": "Allow", '
                    b'"operation": "Read", "host": "*"}]}')
    assert decode(data) == {literal.entry}



def test_an_acl_entry_a_broker_cannot_read_is_skipped_and_the_others_still_apply():
    deny = acl(ALICE, Operation.READ, permission=Permission.DENY)
    data = json.dumps({"version": 1, "acls": [
        json.loads(encode([deny.entry]))["acls"][0],
        {"principal": "User:CN=alice", "permissionType": "Allow", "operation": "CreateTokens", "host": "*"},
        {"principal": "User:CN=alice", "permissionType": "Allow"}]}).encode()
    assert decode_readable(data, "/kafka-acl/Topic/orders") == {deny.entry}   # the deny keeps applying
    with pytest.raises(ValueError):
        decode_readable(b"not json", "/kafka-acl/Topic/orders")

def _in_session(principal: str, check) -> None:
    """Run ``check`` as a connection of ``principal`` would (its own context, like a connection's task)."""
    def run() -> None:
        enter_session(Session(principal, "EMBER", SecurityProtocol.SSL, HOST, 50000))
        check()
    contextvars.copy_context().run(run)


def test_a_refusal_names_principal_operation_resource_and_the_grant_command_and_is_logged_once(caplog):
    access = Access(Authorizer())
    caplog.set_level(logging.INFO, logger="ember.security.authorizer.access")
    for _ in range(3):
        with pytest.raises(TopicAuthorizationFailed) as refused:
            _in_session("User:CN=app,O=Acme Inc", lambda: access.check_topic(Operation.WRITE, "orders"))
    assert str(refused.value) == (
        "principal User:CN=app,O=Acme Inc is not authorized to Write Topic:orders; a producer needs Write, Describe "
        "and Create on the topic: an operator grants them with "
        "`ember acls add --allow-principal 'User:CN=app,O=Acme Inc' --producer --topic orders`")
    assert [r.getMessage() for r in caplog.records] == [
        "refused: principal User:CN=app,O=Acme Inc from host 127.0.0.1 may not Write Topic:orders "
        "(no ACL allows it, or one denies it)"]
    with pytest.raises(ClusterAuthorizationFailed, match="--cluster`"):
        _in_session(ALICE, lambda: access.check_cluster(Operation.ALTER))
    with pytest.raises(TopicAuthorizationFailed, match="--operation Delete --topic orders`$"):
        _in_session(ALICE, lambda: access.check_topic(Operation.DELETE, "orders"))


def test_a_refusal_a_producer_or_consumer_meets_names_every_operation_it_needs_and_the_shortcut():
    access = Access(Authorizer())
    grant = "`ember acls add --allow-principal User:CN=alice"
    consumer = "a consumer needs Read and Describe on the topic and Read on its group"
    for operation, hint in [
            (Operation.DESCRIBE, f"a producer needs Write, Describe and Create on the topic; {consumer}: an operator "
                                 f"grants them with {grant} --producer --topic orders` or "
                                 f"{grant} --consumer --topic orders --group GROUP`"),
            (Operation.READ, f"{consumer}: an operator grants them with {grant} --consumer --topic orders --group GROUP`")]:
        with pytest.raises(TopicAuthorizationFailed) as refused:
            _in_session(ALICE, lambda op=operation: access.check_topic(op, "orders"))
        hidden = " (or it does not exist)" if operation == Operation.DESCRIBE else ""
        assert str(refused.value) == f"principal User:CN=alice is not authorized to {operation.kafka_name} " \
                                     f"Topic:orders{hidden}; {hint}"
    for operation in (Operation.READ, Operation.DESCRIBE):
        with pytest.raises(GroupAuthorizationFailed) as refused:
            _in_session(ALICE, lambda op=operation: access.check_group(op, "g1"))
        assert str(refused.value).endswith(
            "; a consumer needs Read and Describe on its topics and Read on the group: an operator grants them with "
            f"{grant} --consumer --topic TOPIC --group g1`")


def test_a_refused_describe_of_a_topic_says_not_authorized_and_never_whether_it_exists():
    """Describe is checked before the topic is looked up (Kafka answers TOPIC_AUTHORIZATION_FAILED
    for an existing and a missing topic alike), so the text says both, with the grant."""
    access = Access(Authorizer())
    with pytest.raises(TopicAuthorizationFailed) as refused:
        _in_session(ALICE, lambda: access.check_topic(Operation.DESCRIBE, "secret"))
    text = str(refused.value)
    assert text.startswith("principal User:CN=alice is not authorized to Describe Topic:secret (or it does not exist); ")
    assert "--consumer --topic secret --group GROUP`" in text and "--producer --topic secret`" in text
    with pytest.raises(TopicAuthorizationFailed) as refused:
        _in_session(ALICE, lambda: access.check_topic(Operation.READ, "secret"))
    assert "does not exist" not in str(refused.value)     # a Read refusal comes after the topic was found


def test_without_an_authorizer_every_check_passes():
    _in_session(ALICE, lambda: Access().check_cluster(Operation.ALTER))
