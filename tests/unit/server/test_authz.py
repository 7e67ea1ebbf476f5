"""The shared authorization helpers (``tidelog.server.auth.authz``): name filtering with Kafka's
reference counts and log lines, authorized-operation bit fields (KIP-430), KIP-679's
"WRITE on any topic", transactional batch detection and the Metadata decisions."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from tidelog.client.records import Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.security.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tidelog.security.principal import KafkaPrincipal
from tidelog.server.auth import authz
from tidelog.server.auth.authorizer import AclAuthorizer, InMemoryAclStore
from tidelog.server.network.request_context import INTERNAL, RequestContext, set_request

Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER


def acl(
    principal: str, op: AclOperation, permission: AclPermissionType = ALLOW
) -> AccessControlEntry:
    return AccessControlEntry(principal, "*", op, permission)


def topic(name: str, pattern: PatternType = PatternType.LITERAL) -> ResourcePattern:
    return ResourcePattern(TOPIC, name, pattern)


def make_authorizer(
    table: dict[ResourcePattern, frozenset[AccessControlEntry]],
    *,
    allow_everyone: bool = False,
) -> AclAuthorizer:
    authorizer = AclAuthorizer(
        super_users=frozenset({"User:admin"}), allow_everyone_if_no_acl_found=allow_everyone
    )
    asyncio.run(authorizer.attach(InMemoryAclStore(table)))
    return authorizer


@pytest.fixture(autouse=True)
def as_alice() -> Iterator[None]:
    set_request(as_user("alice"))
    yield
    set_request(INTERNAL)


def as_user(name: str) -> RequestContext:
    return RequestContext(KafkaPrincipal.user(name), "10.0.0.1", "PLAINTEXT", "PLAINTEXT")


def test_no_authorizer_allows_everything() -> None:
    assert authz.allowed(None, Op.WRITE, TOPIC, "x", ApiKey.PRODUCE)
    assert authz.cluster_allowed(None, Op.CLUSTER_ACTION, ApiKey.FETCH)
    assert authz.denied_names(None, Op.READ, TOPIC, ["a", "b"], ApiKey.FETCH) == frozenset()
    assert authz.idempotent_write_allowed(None, ApiKey.INIT_PRODUCER_ID)
    assert (
        authz.metadata_access(
            None, ["a"], all_topics=False, missing=["a"], auto_create=True, api_key=3
        )
        is authz.EVERYTHING_ALLOWED
    )
    # Every supported operation (Kafka's answer without an authorizer).
    assert authz.authorized_operations(None, GROUP, "g", ApiKey.DESCRIBE_GROUPS) == (
        1 << 3 | 1 << 6 | 1 << 8
    )
    assert authz.authorized_operations(None, TOPIC, "t", ApiKey.METADATA) == 3576
    assert authz.cluster_authorized_operations(None, ApiKey.DESCRIBE_CLUSTER) == (
        1 << 5 | 1 << 7 | 1 << 8 | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 12
    )


def test_denied_names_asks_once_per_name_with_its_reference_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    authorizer = make_authorizer({topic("public"): frozenset({acl("User:alice", Op.READ)})})
    with caplog.at_level(logging.INFO, logger="tidelog.authorizer"):
        denied = authz.denied_names(
            authorizer, Op.READ, TOPIC, ["public", "secret", "secret", "public"], ApiKey.FETCH
        )
    assert denied == {"secret"}
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "Principal = User:alice is Denied Operation = Read from host = 10.0.0.1 on resource = "
        "Topic:LITERAL:secret for request = Fetch with resourceRefCount = 2"
    ]


def test_filters_do_not_log_denials(caplog: pytest.LogCaptureFixture) -> None:
    authorizer = make_authorizer({})
    with caplog.at_level(logging.INFO, logger="tidelog.authorizer"):
        assert authz.denied_names(
            authorizer, Op.DESCRIBE, TOPIC, ["a"], ApiKey.METADATA, log_if_denied=False
        ) == {"a"}
        assert authz.authorized_operations(authorizer, TOPIC, "a", ApiKey.METADATA) == 0
    assert caplog.records == []


def test_authorized_operations_bit_field_follows_implications() -> None:
    authorizer = make_authorizer(
        {
            topic("public"): frozenset({acl("User:alice", Op.READ), acl("User:alice", Op.WRITE)}),
            ResourcePattern(GROUP, "g"): frozenset({acl("User:alice", Op.READ)}),
            ResourcePattern(CLUSTER, CLUSTER_NAME): frozenset(
                {acl("User:alice", Op.DESCRIBE), acl("User:alice", Op.ALTER_CONFIGS)}
            ),
        }
    )
    # READ and WRITE imply DESCRIBE.
    assert authz.authorized_operations(authorizer, TOPIC, "public", 3) == 1 << 3 | 1 << 4 | 1 << 8
    assert authz.authorized_operations(authorizer, GROUP, "g", 15) == 1 << 3 | 1 << 8
    # ALTER_CONFIGS implies DESCRIBE_CONFIGS.
    assert authz.cluster_authorized_operations(authorizer, 60) == 1 << 8 | 1 << 10 | 1 << 11
    set_request(as_user("bob"))
    assert authz.cluster_authorized_operations(authorizer, 60) == 0  # no DESCRIBE: 0
    set_request(as_user("admin"))
    assert authz.authorized_operations(authorizer, TOPIC, "anything", 3) == 3576


@pytest.mark.parametrize(
    ("table", "allow_everyone", "expected"),
    [
        ({}, False, False),
        ({}, True, True),
        ({topic("orders"): frozenset({acl("User:alice", Op.WRITE)})}, False, True),
        ({topic("orders"): frozenset({acl("User:alice", Op.ALL)})}, False, True),
        ({topic("orders"): frozenset({acl("User:*", Op.WRITE)})}, False, True),
        ({topic("orders"): frozenset({acl("User:bob", Op.WRITE)})}, False, False),
        ({topic("orders"): frozenset({acl("User:alice", Op.READ)})}, False, False),
        # A LITERAL DENY of the same name, or a PREFIXED DENY of a prefix, dominates.
        (
            {
                topic("orders"): frozenset(
                    {acl("User:alice", Op.WRITE), acl("User:alice", Op.WRITE, DENY)}
                )
            },
            False,
            False,
        ),
        (
            {
                topic("orders"): frozenset({acl("User:alice", Op.WRITE)}),
                topic("ord", PatternType.PREFIXED): frozenset({acl("User:alice", Op.WRITE, DENY)}),
            },
            False,
            False,
        ),
        (
            {
                topic("ord-", PatternType.PREFIXED): frozenset({acl("User:alice", Op.WRITE)}),
                topic("ord-x"): frozenset({acl("User:alice", Op.WRITE, DENY)}),
            },
            False,
            True,  # a literal DENY does not dominate a prefix
        ),
        # A LITERAL "*" DENY refuses everything, even with allow.everyone.if.no.acl.found.
        ({topic("*"): frozenset({acl("User:alice", Op.WRITE, DENY)})}, True, False),
        # A LITERAL "*" ALLOW is never dominated.
        (
            {
                topic("*"): frozenset({acl("User:alice", Op.WRITE)}),
                topic("a", PatternType.PREFIXED): frozenset({acl("User:alice", Op.WRITE, DENY)}),
            },
            False,
            True,
        ),
    ],
)
def test_write_on_any_topic_kip_679(
    table: dict[ResourcePattern, frozenset[AccessControlEntry]],
    allow_everyone: bool,
    expected: bool,
) -> None:
    authorizer = make_authorizer(table, allow_everyone=allow_everyone)
    assert authz.authorize_by_resource_type(authorizer, Op.WRITE, TOPIC, 22) is expected


def test_idempotent_write_needs_cluster_permission_or_a_topic_write() -> None:
    cluster = ResourcePattern(CLUSTER, CLUSTER_NAME)
    authorizer = make_authorizer(
        {
            cluster: frozenset({acl("User:carol", Op.IDEMPOTENT_WRITE)}),
            topic("public"): frozenset({acl("User:alice", Op.WRITE)}),
        }
    )
    assert authz.idempotent_write_allowed(authorizer, 22)  # alice: WRITE on a topic
    set_request(as_user("carol"))
    assert authz.idempotent_write_allowed(authorizer, 22)
    set_request(as_user("bob"))
    assert not authz.idempotent_write_allowed(authorizer, 22)
    set_request(as_user("admin"))
    assert authz.idempotent_write_allowed(authorizer, 22)


def test_has_transactional_records() -> None:
    plain = build_batch([Record(value=b"v")], base_timestamp_ms=1)
    txn = build_batch(
        [Record(value=b"v")],
        base_timestamp_ms=1,
        producer_id=5,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    assert not authz.has_transactional_records(None)
    assert not authz.has_transactional_records(b"")
    assert not authz.has_transactional_records(plain)
    assert authz.has_transactional_records(txn)
    assert authz.has_transactional_records(plain + txn)  # any batch, not just the first
    assert not authz.has_transactional_records(plain[:10])  # truncated: no batch to read


def test_metadata_access() -> None:
    authorizer = make_authorizer(
        {
            topic("public"): frozenset({acl("User:alice", Op.DESCRIBE)}),
            topic("new-", PatternType.PREFIXED): frozenset(
                {acl("User:alice", Op.DESCRIBE), acl("User:alice", Op.CREATE)}
            ),
            topic("other"): frozenset({acl("User:alice", Op.DESCRIBE)}),
        }
    )
    access = authz.metadata_access(
        authorizer,
        ["public", "secret", "new-a", "other"],
        all_topics=False,
        missing=["new-a", "other", "secret"],
        auto_create=True,
        api_key=3,
    )
    assert access.hidden == {"secret"}
    assert access.not_creatable == {"other"}
    assert [access.refused(n) for n in ("public", "secret", "new-a", "other")] == [
        False,
        True,
        False,
        True,
    ]
    # Without auto-creation a missing topic is just unknown.
    access = authz.metadata_access(
        authorizer, ["other"], all_topics=False, missing=["other"], auto_create=False, api_key=3
    )
    assert not access.refused("other")


def test_config_resource_refusal() -> None:
    authorizer = make_authorizer(
        {topic("public"): frozenset({acl("User:alice", Op.ALTER_CONFIGS)})}
    )
    refuse = authz.config_resource_refusal
    assert refuse(authorizer, Op.DESCRIBE_CONFIGS, 2, "public", 32) is None  # implied
    assert refuse(authorizer, Op.DESCRIBE_CONFIGS, 2, "secret", 32) == (
        ErrorCode.TOPIC_AUTHORIZATION_FAILED
    )
    assert (
        refuse(authorizer, Op.ALTER_CONFIGS, 4, "1", 33) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )
    assert (
        refuse(authorizer, Op.ALTER_CONFIGS, 8, "1", 44) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )
    assert refuse(authorizer, Op.ALTER_CONFIGS, 99, "x", 44) is None  # the handler's business
