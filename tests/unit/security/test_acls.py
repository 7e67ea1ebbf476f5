"""ACL values, filters, CreateAcls validation and the ACL authorizer's decision
(``tidelog.security.acls``), including a property test against a naive reading of Kafka's
``AclAuthorizer``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.security.acls import (
    MATCH_ALL,
    AccessControlEntry,
    AclAuthorizerCore,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    binding_error,
    filter_error,
)
from tidelog.security.principal import KafkaPrincipal

ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
TOPIC = ResourceType.TOPIC
LITERAL = PatternType.LITERAL
PREFIXED = PatternType.PREFIXED
ALICE = KafkaPrincipal.user("alice")
BOB = KafkaPrincipal.user("bob")
HOST = "10.0.0.7"


def acl(
    name: str,
    principal: str = "User:alice",
    operation: AclOperation = AclOperation.READ,
    permission: AclPermissionType = ALLOW,
    *,
    host: str = "*",
    resource_type: ResourceType = TOPIC,
    pattern_type: PatternType = LITERAL,
) -> AclBinding:
    return AclBinding(
        ResourcePattern(resource_type, name, pattern_type),
        AccessControlEntry(principal, host, operation, permission),
    )


def core(
    *bindings: AclBinding,
    super_users: frozenset[str] = frozenset(),
    allow_everyone_if_no_acl_found: bool = False,
) -> AclAuthorizerCore:
    table = AclAuthorizerCore(
        super_users=super_users, allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found
    )
    table.add(bindings)
    return table


# --- enums ----------------------------------------------------------------------------------


def test_wire_codes_are_kafkas() -> None:
    assert [int(t) for t in ResourceType] == list(range(8))
    assert (TOPIC, ResourceType.CLUSTER, ResourceType.USER) == (2, 4, 7)
    assert (PatternType.MATCH, LITERAL, PREFIXED) == (2, 3, 4)
    assert (AclOperation.ALL, AclOperation.IDEMPOTENT_WRITE, AclOperation.DESCRIBE_TOKENS) == (
        2,
        12,
        14,
    )
    assert (DENY, ALLOW) == (2, 3)


def test_kafka_spellings() -> None:
    assert TOPIC.kafka_name == "Topic"
    assert ResourceType.TRANSACTIONAL_ID.kafka_name == "TransactionalId"
    assert ResourceType.DELEGATION_TOKEN.kafka_name == "DelegationToken"
    assert AclOperation.IDEMPOTENT_WRITE.kafka_name == "IdempotentWrite"
    assert AclOperation.CLUSTER_ACTION.kafka_name == "ClusterAction"
    assert ALLOW.kafka_name == "Allow"
    for text in ("TransactionalId", "TRANSACTIONAL_ID", "transactionalid"):
        assert ResourceType.from_name(text) == ResourceType.TRANSACTIONAL_ID
    assert AclOperation.from_name("DescribeConfigs") == AclOperation.DESCRIBE_CONFIGS
    assert AclOperation.from_name("Fly") == AclOperation.UNKNOWN
    assert ResourceType.from_code(99) == ResourceType.UNKNOWN
    assert PatternType.from_code(4) == PREFIXED


def test_pattern_prints_as_kafkas_authorizer_log() -> None:
    assert str(ResourcePattern(TOPIC, "secret")) == "Topic:LITERAL:secret"
    assert str(ResourcePattern(ResourceType.GROUP, "g-", PREFIXED)) == "Group:PREFIXED:g-"


# --- filters --------------------------------------------------------------------------------


def test_filter_any_matches_everything() -> None:
    assert MATCH_ALL.matches(acl("t"))
    assert MATCH_ALL.matches(acl("t-", pattern_type=PREFIXED, permission=DENY))


def test_filter_exact_and_of() -> None:
    binding = acl("orders")
    assert AclBindingFilter.of(binding).matches(binding)
    assert not AclBindingFilter.of(binding).matches(acl("orders", "User:bob"))
    assert not AclBindingFilter.of(binding).matches(acl("orders", pattern_type=PREFIXED))


def test_filter_named_with_any_pattern_type_needs_the_same_name() -> None:
    f = AclBindingFilter(TOPIC, "orders", PatternType.ANY)
    assert f.matches(acl("orders"))
    assert f.matches(acl("orders", pattern_type=PREFIXED))
    assert not f.matches(acl("ord", pattern_type=PREFIXED))
    assert not f.matches(acl("*"))


def test_filter_match_finds_every_pattern_applying_to_a_name() -> None:
    f = AclBindingFilter(TOPIC, "orders", PatternType.MATCH)
    assert f.matches(acl("orders"))
    assert f.matches(acl("*"))
    assert f.matches(acl("ord", pattern_type=PREFIXED))
    assert f.matches(acl("orders", pattern_type=PREFIXED))
    assert not f.matches(acl("ordersx", pattern_type=PREFIXED))
    assert not f.matches(acl("ord"))
    assert not f.matches(acl("orders", resource_type=ResourceType.GROUP))


def test_filter_entry_fields() -> None:
    binding = acl("t", "User:alice", AclOperation.WRITE, DENY, host="1.2.3.4")
    assert AclBindingFilter(principal="User:alice", host="1.2.3.4").matches(binding)
    assert not AclBindingFilter(principal="User:*").matches(binding)
    assert not AclBindingFilter(host="*").matches(binding)
    assert AclBindingFilter(operation=AclOperation.WRITE, permission=DENY).matches(binding)
    assert not AclBindingFilter(operation=AclOperation.ALL).matches(binding)
    assert not AclBindingFilter(permission=ALLOW).matches(binding)


def test_filter_error_on_unknown_elements() -> None:
    assert filter_error(MATCH_ALL) is None
    for bad in (
        AclBindingFilter(resource_type=ResourceType.UNKNOWN),
        AclBindingFilter(pattern_type=PatternType.UNKNOWN),
        AclBindingFilter(operation=AclOperation.UNKNOWN),
        AclBindingFilter(permission=AclPermissionType.UNKNOWN),
    ):
        assert filter_error(bad) == "Filter contains UNKNOWN elements"


# --- CreateAcls validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        (acl("t", resource_type=ResourceType.ANY), "Invalid resourceType ANY"),
        (acl("t", resource_type=ResourceType.UNKNOWN), "Invalid resourceType UNKNOWN"),
        (acl("t", pattern_type=PatternType.MATCH), "Invalid patternType MATCH"),
        (acl("t", pattern_type=PatternType.ANY), "Invalid patternType ANY"),
        (acl("t", operation=AclOperation.ANY), "Invalid operation ANY"),
        (acl("t", operation=AclOperation.UNKNOWN), "Invalid operation UNKNOWN"),
        (acl("t", permission=AclPermissionType.ANY), "Invalid permissionType ANY"),
        (acl(""), "Invalid empty resource name"),
        (
            acl("my-cluster", resource_type=ResourceType.CLUSTER),
            "The only valid name for the CLUSTER resource is kafka-cluster",
        ),
        (
            acl("*", pattern_type=PREFIXED),
            "Invalid resource name '*' for pattern type PREFIXED: use a LITERAL '*'",
        ),
        (
            acl("t", "alice"),
            "Could not parse principal from `alice` (no colon is present separating the "
            "principal type from the principal name)",
        ),
        (acl("t", "User:"), "Could not parse principal from `User:`"),
    ],
)
def test_binding_errors(binding: AclBinding, message: str) -> None:
    assert binding_error(binding) == message


def test_valid_bindings() -> None:
    assert binding_error(acl("kafka-cluster", resource_type=ResourceType.CLUSTER)) is None
    assert binding_error(acl("*", "User:*", AclOperation.ALL)) is None
    assert binding_error(acl("t-", pattern_type=PREFIXED, permission=DENY)) is None


# --- the decision ---------------------------------------------------------------------------


def test_super_users_are_always_allowed() -> None:
    table = core(acl("t", "User:admin", permission=DENY), super_users=frozenset({"User:admin"}))
    assert table.authorize(KafkaPrincipal.user("admin"), HOST, AclOperation.READ, TOPIC, "t")
    assert not table.authorize(ALICE, HOST, AclOperation.READ, TOPIC, "t")


def test_no_acl_at_all_follows_allow_everyone() -> None:
    assert not core().authorize(ALICE, HOST, AclOperation.READ, TOPIC, "t")
    everyone = core(allow_everyone_if_no_acl_found=True)
    assert everyone.authorize(ALICE, HOST, AclOperation.READ, TOPIC, "t")
    # An ACL for someone else on the resource: no longer "no ACL found".
    guarded = core(acl("t", "User:bob"), allow_everyone_if_no_acl_found=True)
    assert not guarded.authorize(ALICE, HOST, AclOperation.READ, TOPIC, "t")
    # ACLs on other resources do not count.
    assert guarded.authorize(ALICE, HOST, AclOperation.READ, TOPIC, "other")


def test_allow_and_operation_must_match() -> None:
    table = core(acl("t"))
    assert table.authorize(ALICE, HOST, AclOperation.READ, TOPIC, "t")
    assert not table.authorize(ALICE, HOST, AclOperation.WRITE, TOPIC, "t")
    assert not table.authorize(BOB, HOST, AclOperation.READ, TOPIC, "t")
    assert not table.authorize(ALICE, HOST, AclOperation.READ, ResourceType.GROUP, "t")


def test_deny_beats_allow() -> None:
    table = core(acl("t", "User:*", AclOperation.ALL), acl("t", "User:bob", permission=DENY))
    assert table.authorize(ALICE, HOST, AclOperation.READ, TOPIC, "t")
    assert not table.authorize(BOB, HOST, AclOperation.READ, TOPIC, "t")
    assert table.authorize(BOB, HOST, AclOperation.WRITE, TOPIC, "t")
    # A DENY of ALL denies everything; a prefixed DENY beats a literal ALLOW.
    table.add([acl("t", "User:bob", AclOperation.ALL, DENY)])
    assert not table.authorize(BOB, HOST, AclOperation.WRITE, TOPIC, "t")
    table.add(
        [acl("t", "User:carol"), acl("", "User:carol", permission=DENY, pattern_type=PREFIXED)]
    )
    assert not table.authorize(KafkaPrincipal.user("carol"), HOST, AclOperation.READ, TOPIC, "t")


def test_wildcard_principal_host_and_resource() -> None:
    table = core(acl("*", "User:*", host="*"))
    assert table.authorize(ALICE, HOST, AclOperation.READ, TOPIC, "anything")
    assert table.authorize(BOB, "::1", AclOperation.READ, TOPIC, "*")
    # As in Kafka, User:* is the wildcard of every principal, whatever its type.
    assert table.authorize(KafkaPrincipal("Group", "x"), HOST, AclOperation.READ, TOPIC, "a")
    assert not table.authorize(ALICE, HOST, AclOperation.WRITE, TOPIC, "a")


def test_host_must_match() -> None:
    table = core(acl("t", host="10.0.0.7"))
    assert table.authorize(ALICE, "10.0.0.7", AclOperation.READ, TOPIC, "t")
    assert not table.authorize(ALICE, "10.0.0.8", AclOperation.READ, TOPIC, "t")


def test_prefixed_patterns() -> None:
    table = core(acl("orders-", pattern_type=PREFIXED))
    assert table.authorize(ALICE, HOST, AclOperation.READ, TOPIC, "orders-eu")
    assert table.authorize(ALICE, HOST, AclOperation.READ, TOPIC, "orders-")
    assert not table.authorize(ALICE, HOST, AclOperation.READ, TOPIC, "orders")
    assert not table.authorize(ALICE, HOST, AclOperation.READ, TOPIC, "x-orders-eu")
    # Many prefixes (the index walks the name's prefixes instead of the table).
    for i in range(20):
        table.add([acl(f"zz{i}", "User:bob", pattern_type=PREFIXED)])
    assert table.authorize(BOB, HOST, AclOperation.READ, TOPIC, "zz7x")
    assert not table.authorize(BOB, HOST, AclOperation.READ, TOPIC, "z")


@pytest.mark.parametrize(
    "granted",
    [AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER],
)
def test_describe_is_implied(granted: AclOperation) -> None:
    table = core(acl("t", operation=granted))
    assert table.authorize(ALICE, HOST, AclOperation.DESCRIBE, TOPIC, "t")
    assert not table.authorize(ALICE, HOST, AclOperation.DESCRIBE_CONFIGS, TOPIC, "t")


def test_describe_configs_is_implied_by_alter_configs_only() -> None:
    table = core(acl("t", operation=AclOperation.ALTER_CONFIGS))
    assert table.authorize(ALICE, HOST, AclOperation.DESCRIBE_CONFIGS, TOPIC, "t")
    assert not table.authorize(ALICE, HOST, AclOperation.DESCRIBE, TOPIC, "t")
    assert not core(acl("t", operation=AclOperation.DESCRIBE)).authorize(
        ALICE, HOST, AclOperation.READ, TOPIC, "t"
    )


def test_implication_never_extends_a_deny() -> None:
    table = core(acl("t", operation=AclOperation.DESCRIBE), acl("t", permission=DENY))
    assert table.authorize(ALICE, HOST, AclOperation.DESCRIBE, TOPIC, "t")
    assert not table.authorize(ALICE, HOST, AclOperation.READ, TOPIC, "t")


def test_table_add_remove_and_bindings() -> None:
    a, b = acl("t"), acl("t", "User:bob", AclOperation.WRITE)
    p = acl("t-", pattern_type=PREFIXED)
    table = core(a, b, p)
    assert table.bindings() == sorted([a, b, p])
    assert table.bindings(AclBindingFilter(pattern_type=PREFIXED)) == [p]
    table.remove([a, b])
    assert a.pattern not in table.acls  # rule 4: no empty sets
    assert table.bindings() == [p]
    table.set_acls(p.pattern, [])
    assert table.acls == {}
    with pytest.raises(ValueError, match="MATCH"):
        table.set_acls(ResourcePattern(TOPIC, "t", PatternType.MATCH), [a.entry])


# --- property: the indexed core equals a naive reading of Kafka's rules ---------------------

NAMES = st.sampled_from(["", "a", "ab", "abc", "b", "*"])
PRINCIPALS = st.sampled_from(["User:alice", "User:bob", "User:*", "Group:alice"])
HOSTS = st.sampled_from(["*", "h1", "h2"])
OPS = st.sampled_from(
    [
        AclOperation.ALL,
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DESCRIBE,
        AclOperation.ALTER,
        AclOperation.ALTER_CONFIGS,
        AclOperation.DESCRIBE_CONFIGS,
    ]
)
TYPES = st.sampled_from([TOPIC, ResourceType.GROUP])
BINDINGS = st.builds(
    lambda name, principal, op, perm, host, rtype, ptype: acl(
        name or "x", principal, op, perm, host=host, resource_type=rtype, pattern_type=ptype
    ),
    NAMES,
    PRINCIPALS,
    OPS,
    st.sampled_from([ALLOW, DENY]),
    HOSTS,
    TYPES,
    st.sampled_from([LITERAL, PREFIXED]),
)


def naive(
    bindings: list[AclBinding],
    *,
    principal: KafkaPrincipal,
    host: str,
    op: AclOperation,
    rtype: ResourceType,
    name: str,
    allow_everyone: bool,
) -> bool:
    def applies(b: AclBinding) -> bool:
        p = b.pattern
        if p.resource_type != rtype:
            return False
        if p.pattern_type == LITERAL:
            return p.name in {name, "*"}
        return name.startswith(p.name)

    def fits(b: AclBinding, ops: set[AclOperation], perm: AclPermissionType) -> bool:
        e = b.entry
        return (
            e.permission == perm
            and e.principal in (str(principal), "User:*")
            and e.host in (host, "*")
            and (e.operation in ops or e.operation == AclOperation.ALL)
        )

    relevant = [b for b in bindings if applies(b)]
    if not relevant:
        return allow_everyone
    if any(fits(b, {op}, DENY) for b in relevant):
        return False
    implied = {op}
    if op == AclOperation.DESCRIBE:
        implied |= {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    if op == AclOperation.DESCRIBE_CONFIGS:
        implied.add(AclOperation.ALTER_CONFIGS)
    return any(fits(b, implied, ALLOW) for b in relevant)


@settings(max_examples=400, deadline=None)
@given(
    bindings=st.lists(BINDINGS, max_size=8),
    principal=st.sampled_from([ALICE, BOB, KafkaPrincipal("Group", "alice")]),
    host=st.sampled_from(["h1", "h2"]),
    op=OPS,
    rtype=TYPES,
    name=st.sampled_from(["a", "ab", "abc", "b", "*", "x"]),
    allow_everyone=st.booleans(),
)
def test_core_agrees_with_naive_reference(
    *,
    bindings: list[AclBinding],
    principal: KafkaPrincipal,
    host: str,
    op: AclOperation,
    rtype: ResourceType,
    name: str,
    allow_everyone: bool,
) -> None:
    table = core(*bindings, allow_everyone_if_no_acl_found=allow_everyone)
    expected = naive(
        bindings,
        principal=principal,
        host=host,
        op=op,
        rtype=rtype,
        name=name,
        allow_everyone=allow_everyone,
    )
    assert table.authorize(principal, host, op, rtype, name) == expected
