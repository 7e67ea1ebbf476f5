"""CreateAcls (30), DescribeAcls (29) and DeleteAcls (31) (``tidelog.server.apis.acl_apis``) over
an ``AclAuthorizer`` with an in-memory store, every error code of the three; and the
authorizer shell (``tidelog.server.auth.authorizer``): configuration, denial log, reloads."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any

import pytest
from kio.schema.create_acls.v1 import request as create_v1
from kio.schema.create_acls.v3 import request as create_v3
from kio.schema.delete_acls.v1 import request as delete_v1
from kio.schema.delete_acls.v3 import request as delete_v3
from kio.schema.describe_acls.v1 import request as describe_v1
from kio.schema.describe_acls.v3 import request as describe_v3

from tidelog.errors import ConfigError
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader, decode_request, encode_request, encode_response
from tidelog.security.acls import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from tidelog.security.principal import KafkaPrincipal
from tidelog.server.apis.acl_apis import (
    ACL_API_VERSIONS,
    CLUSTER_AUTHORIZATION_MESSAGE,
    SECURITY_DISABLED_MESSAGE,
    AclApis,
)
from tidelog.server.auth.authorizer import (
    AclAuthorizer,
    AclTable,
    Cancellable,
    InMemoryAclStore,
    authorizer_from_config,
    parse_super_users,
    request_name,
)
from tidelog.server.network.request_context import RequestContext, set_request

ADMIN = RequestContext(KafkaPrincipal.user("admin"), "127.0.0.1", "PLAINTEXT", "PLAINTEXT")
BOB = RequestContext(KafkaPrincipal.user("bob"), "10.0.0.9", "PLAINTEXT", "PLAINTEXT")
CREATE = {1: create_v1, 3: create_v3}
DELETE = {1: delete_v1, 3: delete_v3}
DESCRIBE = {1: describe_v1, 3: describe_v3}
VERSIONS = pytest.mark.parametrize("version", [1, 3])
ANY_ = 1
TOPIC, GROUP, CLUSTER = 2, 3, 4
LITERAL, PREFIXED, MATCH = 3, 4, 2
READ, WRITE, ALTER, DESCRIBE_OP = 3, 4, 7, 8
DENY, ALLOW = 2, 3


class FlakyStore(InMemoryAclStore):
    """An in-memory store whose writes fail on demand."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_names: set[str] = set()
        self.fail_remove = False

    async def add(self, bindings: Iterable[AclBinding]) -> AclTable:
        bindings = list(bindings)
        if any(b.pattern.name in self.fail_names for b in bindings):
            raise OSError("ZooKeeper is gone")
        return await super().add(bindings)

    async def remove(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        if self.fail_remove:
            raise OSError("ZooKeeper is gone")
        return await super().remove(filters)


def authorizer(store: FlakyStore | None = None) -> AclAuthorizer:
    return AclAuthorizer(super_users=frozenset({"User:admin"}), store=store)


def creation(
    module: ModuleType,
    name: str,
    *,
    resource_type: int = TOPIC,
    pattern: int = LITERAL,
    principal: str = "User:alice",
    host: str = "*",
    operation: int = READ,
    permission: int = ALLOW,
) -> Any:
    return module.AclCreation(
        resource_type=resource_type,
        resource_name=name,
        resource_pattern_type=pattern,
        principal=principal,
        host=host,
        operation=operation,
        permission_type=permission,
    )


def filter_fields(
    resource_type: int = ANY_,
    name: str | None = None,
    pattern: int = ANY_,
    *,
    principal: str | None = None,
    operation: int = ANY_,
    permission: int = ANY_,
) -> dict[str, Any]:
    return {
        "resource_type_filter": resource_type,
        "resource_name_filter": name,
        "pattern_type_filter": pattern,
        "principal_filter": principal,
        "host_filter": None,
        "operation": operation,
        "permission_type": permission,
    }


def call(
    apis: AclApis,
    api_key: ApiKey,
    version: int,
    body: Any,
    context: RequestContext = ADMIN,
) -> Any:
    """Run one request through the wire codec and its handler, as ``context``; the answer
    is encoded too (it must be a valid response of that version)."""
    header = RequestHeader(int(api_key), version, 7, "test")
    frame = encode_request(header, body)
    header, decoded = decode_request(frame[4:], ACL_API_VERSIONS)

    async def main() -> Any:
        set_request(context)
        result = apis.handlers()[api_key](header, decoded)
        if isinstance(result, asyncio.Future):
            result = await result
        return result

    answer = asyncio.run(main())
    encode_response(header, answer)
    return answer


def create(apis: AclApis, version: int, *creations: Any, context: RequestContext = ADMIN) -> Any:
    body = CREATE[version].CreateAclsRequest(creations=creations)
    return call(apis, ApiKey.CREATE_ACLS, version, body, context)


def describe(apis: AclApis, version: int, context: RequestContext = ADMIN, **fields: Any) -> Any:
    body = DESCRIBE[version].DescribeAclsRequest(**filter_fields(**fields))
    return call(apis, ApiKey.DESCRIBE_ACLS, version, body, context)


def delete(
    apis: AclApis, version: int, *filters: dict[str, Any], context: RequestContext = ADMIN
) -> Any:
    module = DELETE[version]
    body = module.DeleteAclsRequest(filters=tuple(module.DeleteAclsFilter(**f) for f in filters))
    return call(apis, ApiKey.DELETE_ACLS, version, body, context)


def codes(results: Iterable[Any]) -> list[int]:
    return [int(r.error_code) for r in results]


# --- SECURITY_DISABLED (54) -----------------------------------------------------------------


@VERSIONS
def test_no_authorizer_is_security_disabled(version: int) -> None:
    apis = AclApis(None)
    answer = create(apis, version, creation(CREATE[version], "t"), creation(CREATE[version], "u"))
    assert codes(answer.results) == [54, 54]
    assert {r.error_message for r in answer.results} == {SECURITY_DISABLED_MESSAGE}
    answer = describe(apis, version)
    assert (int(answer.error_code), answer.error_message) == (54, SECURITY_DISABLED_MESSAGE)
    assert answer.resources == ()
    answer = delete(apis, version, filter_fields(), filter_fields(TOPIC))
    assert codes(answer.filter_results) == [54, 54]
    assert answer.filter_results[0].error_message == SECURITY_DISABLED_MESSAGE


# --- CLUSTER_AUTHORIZATION_FAILED (31) ------------------------------------------------------


@VERSIONS
def test_without_cluster_acls_every_api_is_refused(
    version: int, caplog: pytest.LogCaptureFixture
) -> None:
    apis = AclApis(authorizer())
    with caplog.at_level(logging.INFO, logger="tidelog.authorizer"):
        answer = create(apis, version, creation(CREATE[version], "t"), context=BOB)
    assert codes(answer.results) == [31]
    assert answer.results[0].error_message == CLUSTER_AUTHORIZATION_MESSAGE
    assert [r.getMessage() for r in caplog.records] == [
        "Principal = User:bob is Denied Operation = Alter from host = 10.0.0.9 on resource = "
        "Cluster:LITERAL:kafka-cluster for request = CreateAcls with resourceRefCount = 1"
    ]
    answer = describe(apis, version, context=BOB)
    assert (int(answer.error_code), answer.error_message) == (31, CLUSTER_AUTHORIZATION_MESSAGE)
    answer = delete(apis, version, filter_fields(), context=BOB)
    assert codes(answer.filter_results) == [31]
    assert apis.authorizer is not None
    assert apis.authorizer.acls() == []  # nothing was created


@VERSIONS
def test_cluster_alter_lets_a_non_super_user_manage_acls(version: int) -> None:
    apis = AclApis(authorizer())
    grant = [
        creation(
            CREATE[version],
            "kafka-cluster",
            resource_type=CLUSTER,
            principal="User:bob",
            operation=ALTER,
        )
    ]
    assert codes(create(apis, version, *grant).results) == [0]
    assert codes(create(apis, version, creation(CREATE[version], "t"), context=BOB).results) == [0]
    # ALTER implies DESCRIBE (the implied-operation rule).
    assert int(describe(apis, version, context=BOB).error_code) == 0
    assert codes(delete(apis, version, filter_fields(TOPIC), context=BOB).filter_results) == [0]


# --- CreateAcls ---------------------------------------------------------------------------


@VERSIONS
def test_create_validates_each_binding_and_applies_the_rest_at_once(version: int) -> None:
    apis = AclApis(authorizer())
    m = CREATE[version]
    answer = create(
        apis,
        version,
        creation(m, "orders"),
        creation(m, "orders", resource_type=ANY_),
        creation(m, "orders-", pattern=PREFIXED, principal="User:bob", permission=DENY),
        creation(m, "x", pattern=MATCH),
        creation(m, "x", operation=ANY_),
        creation(m, "x", permission=ANY_),
        creation(m, "other", resource_type=CLUSTER),
        creation(m, ""),
        creation(m, "x", principal="alice"),
        creation(m, "x", resource_type=99),
    )
    assert codes(answer.results) == [0, 42, 0, 42, 42, 42, 42, 42, 42, 42]
    assert [r.error_message for r in answer.results] == [
        None,
        "Invalid resourceType ANY",
        None,
        "Invalid patternType MATCH",
        "Invalid operation ANY",
        "Invalid permissionType ANY",
        "The only valid name for the CLUSTER resource is kafka-cluster",
        "Invalid empty resource name",
        "Could not parse principal from `alice` (no colon is present separating the principal "
        "type from the principal name)",
        "Invalid resourceType UNKNOWN",
    ]
    auth = apis.authorizer
    assert auth is not None
    # Visible to this broker's authorizer as soon as the response exists.
    alice = RequestContext(KafkaPrincipal.user("alice"), "1.1.1.1", "L", "PLAINTEXT")
    assert auth.authorize(AclOperation.READ, ResourceType.TOPIC, "orders", alice)
    assert not auth.authorize(AclOperation.WRITE, ResourceType.TOPIC, "orders", alice)
    bob = RequestContext(KafkaPrincipal.user("bob"), "1.1.1.1", "L", "PLAINTEXT")
    assert not auth.authorize(AclOperation.READ, ResourceType.TOPIC, "orders-eu", bob)


@VERSIONS
def test_a_failed_write_fails_only_its_resource(version: int) -> None:
    store = FlakyStore()
    store.fail_names = {"bad"}
    apis = AclApis(authorizer(store))
    m = CREATE[version]
    answer = create(
        apis, version, creation(m, "bad"), creation(m, "good"), creation(m, "bad", operation=WRITE)
    )
    assert codes(answer.results) == [-1, 0, -1]
    assert answer.results[0].error_message == "ZooKeeper is gone"
    assert apis.authorizer is not None
    assert [b.pattern.name for b in apis.authorizer.acls()] == ["good"]


# --- DescribeAcls -------------------------------------------------------------------------


def seeded(version: int, store: FlakyStore | None = None) -> AclApis:
    apis = AclApis(authorizer(store))
    m = CREATE[version]
    answer = create(
        apis,
        version,
        creation(m, "orders"),
        creation(m, "orders", principal="User:bob", operation=WRITE, host="10.0.0.9"),
        creation(m, "ord", pattern=PREFIXED, permission=DENY),
        creation(m, "*", principal="User:*", operation=DESCRIBE_OP),
        creation(m, "g", resource_type=GROUP),
    )
    assert codes(answer.results) == [0] * 5
    return apis


@VERSIONS
def test_describe_groups_by_resource(version: int) -> None:
    apis = seeded(version)
    answer = describe(apis, version)
    assert (int(answer.error_code), answer.error_message) == (0, None)
    assert [(r.resource_type, r.resource_name, r.pattern_type) for r in answer.resources] == [
        (TOPIC, "*", LITERAL),
        (TOPIC, "ord", PREFIXED),
        (TOPIC, "orders", LITERAL),
        (GROUP, "g", LITERAL),
    ]
    orders = answer.resources[2]
    assert [(a.principal, a.host, a.operation, a.permission_type) for a in orders.acls] == [
        ("User:alice", "*", READ, ALLOW),
        ("User:bob", "10.0.0.9", WRITE, ALLOW),
    ]


@VERSIONS
def test_describe_filters(version: int) -> None:
    apis = seeded(version)

    def names(**fields: Any) -> list[tuple[str, int]]:
        answer = describe(apis, version, **fields)
        return [(r.resource_name, r.pattern_type) for r in answer.resources]

    assert names(resource_type=TOPIC, name="orders", pattern=MATCH) == [
        ("*", LITERAL),
        ("ord", PREFIXED),
        ("orders", LITERAL),
    ]
    assert names(resource_type=TOPIC, name="orders", pattern=LITERAL) == [("orders", LITERAL)]
    assert names(principal="User:bob") == [("orders", LITERAL)]
    assert names(permission=DENY) == [("ord", PREFIXED)]
    assert names(resource_type=GROUP) == [("g", LITERAL)]
    assert names(resource_type=ResourceType.USER) == []


@VERSIONS
def test_describe_unknown_filter_is_invalid_request(version: int) -> None:
    apis = seeded(version)
    answer = describe(apis, version, operation=0)
    assert (int(answer.error_code), answer.error_message) == (
        42,
        "Filter contains UNKNOWN elements",
    )
    assert answer.resources == ()


# --- DeleteAcls ---------------------------------------------------------------------------


@VERSIONS
def test_delete_reports_each_binding_under_its_first_filter(version: int) -> None:
    apis = seeded(version)
    answer = delete(
        apis,
        version,
        filter_fields(TOPIC, "orders", LITERAL),
        filter_fields(pattern=0),
        filter_fields(TOPIC, principal="User:alice"),
        filter_fields(ResourceType.USER),
    )
    assert codes(answer.filter_results) == [0, 42, 0, 0]
    first, unknown, second, nothing = answer.filter_results
    assert unknown.error_message == "Filter contains UNKNOWN elements"
    assert [(m.resource_name, m.principal, m.operation) for m in first.matching_acls] == [
        ("orders", "User:alice", READ),
        ("orders", "User:bob", WRITE),
    ]
    assert codes(first.matching_acls) == [0, 0]
    assert [(m.resource_name, m.pattern_type) for m in second.matching_acls] == [("ord", PREFIXED)]
    assert nothing.matching_acls == ()
    assert apis.authorizer is not None
    assert sorted(b.pattern.name for b in apis.authorizer.acls()) == ["*", "g"]


@VERSIONS
def test_delete_store_failure_is_unknown_server_error(version: int) -> None:
    store = FlakyStore()
    apis = seeded(version, store)
    store.fail_remove = True
    answer = delete(apis, version, filter_fields(), filter_fields(operation=0))
    assert codes(answer.filter_results) == [-1, 42]
    assert answer.filter_results[0].error_message == "ZooKeeper is gone"
    assert apis.authorizer is not None
    assert len(apis.authorizer.acls()) == 5


# --- the authorizer shell -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "kafka.security.authorizer.AclAuthorizer",
        "kafka.security.auth.SimpleAclAuthorizer",
        "tidelog.security.AclAuthorizer",
    ],
)
def test_authorizer_class_names(name: str) -> None:
    auth = authorizer_from_config(name, " User:admin ; User:broker;", allow_everyone=True)
    assert auth is not None
    assert auth.core.super_users == {"User:admin", "User:broker"}
    assert auth.core.allow_everyone_if_no_acl_found


def test_authorizer_config_errors() -> None:
    assert authorizer_from_config("") is None
    assert authorizer_from_config("  ") is None
    with pytest.raises(ConfigError) as error:
        authorizer_from_config("org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    assert error.value.key == "authorizer.class.name"
    with pytest.raises(ConfigError) as error:
        parse_super_users("User:admin;broker")
    assert error.value.key == "super.users"


def test_request_names() -> None:
    assert request_name(ApiKey.PRODUCE) == "Produce"
    assert request_name(ApiKey.DESCRIBE_CONFIGS) == "DescribeConfigs"
    assert request_name(999) == "999"


def test_authorize_defaults_to_the_current_request_and_logs_each_denial_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    auth = authorizer()
    auth.core.add(
        [
            AclBinding(
                ResourcePattern(ResourceType.TOPIC, "public"),
                AccessControlEntry("User:*", "*", AclOperation.ALL, AclPermissionType.ALLOW),
            )
        ]
    )

    async def main() -> tuple[bool, bool]:
        set_request(BOB)
        return (
            auth.authorize(AclOperation.WRITE, ResourceType.TOPIC, "public", api_key=0),
            auth.authorize(AclOperation.WRITE, ResourceType.TOPIC, "secret", api_key=0),
        )

    with caplog.at_level(logging.INFO, logger="tidelog.authorizer"):
        assert asyncio.run(main()) == (True, False)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.INFO,
            "Principal = User:bob is Denied Operation = Write from host = 10.0.0.9 on "
            "resource = Topic:LITERAL:secret for request = Produce with resourceRefCount = 1",
        )
    ]


class NotifyingStore(InMemoryAclStore):
    """A store whose change notifications the test fires by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.callback: Callable[[list[ResourcePattern]], None] | None = None
        self.loads: list[ResourcePattern] = []

    async def load(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        self.loads.append(pattern)
        return await super().load(pattern)

    async def watch(self, callback: Callable[[list[ResourcePattern]], None]) -> Cancellable:
        self.callback = callback
        return await super().watch(callback)


def test_attach_loads_everything_and_reloads_only_notified_patterns() -> None:
    topic = ResourcePattern(ResourceType.TOPIC, "t")
    other = ResourcePattern(ResourceType.TOPIC, "u")
    entry = AccessControlEntry("User:bob", "*", AclOperation.READ, AclPermissionType.ALLOW)
    store = NotifyingStore()

    async def main() -> None:
        await store.add([AclBinding(topic, entry)])
        auth = authorizer()
        await auth.attach(store)
        assert auth.acls() == [AclBinding(topic, entry)]
        # Another broker changed both patterns; only ``other`` was notified so far.
        store.table.set_acls(topic, [])
        store.table.set_acls(other, [entry])
        assert store.callback is not None
        store.callback([other])
        await asyncio.sleep(0.01)
        assert store.loads == [other]
        assert {b.pattern for b in auth.acls()} == {topic, other}
        store.callback([topic])
        await asyncio.sleep(0.01)
        assert {b.pattern for b in auth.acls()} == {other}
        await auth.close()

    asyncio.run(main())
