"""``tidelog acls`` without a cluster: option checks and their messages, the bindings and
filters built, kafka-acls.sh's output, and whole commands against a fake broker that
decodes our requests from the wire and answers through the wire (an ACL table in
``AclAuthorizerCore``)."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from kio.index import load_response_schema

from tidelog.cli import acls
from tidelog.cli.main import build_parser, main
from tidelog.cli.output import UsageError
from tidelog.client import security_admin as sa
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from tidelog.protocol.messages import build
from tidelog.security.acls import (
    AccessControlEntry,
    AclAuthorizerCore,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
TOPIC_T = ResourcePattern(ResourceType.TOPIC, "t", PatternType.LITERAL)


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["acls", *argv])


def entry(
    principal: str, op: AclOperation, permission: AclPermissionType = ALLOW, host: str = "*"
) -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, permission)


# --- argument types ----------------------------------------------------------------------------


def test_operation_names_are_kafkas_in_any_case() -> None:
    args = parse(
        "add",
        "--topic",
        "t",
        "--allow-principal",
        "User:a",
        "--operation",
        "read",
        "--operation",
        "DescribeConfigs",
        "--operation",
        "alter_configs",
    )
    assert args.operation == [
        AclOperation.READ,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["add", "--operation", "Fly"],
            "argument --operation: 'Fly' is not an operation; valid operation names are: "
            "Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
            "AlterConfigs, IdempotentWrite, CreateTokens, DescribeTokens, All",
        ),
        (["add", "--operation", "any"], "'any' is not an operation"),
        (
            ["add", "--allow-principal", "alice"],
            "argument --allow-principal: expected a string in format "
            "principalType:principalName (User:alice) but got 'alice'",
        ),
        (["remove", "--deny-principal", "User:"], "but got 'User:'"),
        (["list", "--principal", ":bob"], "but got ':bob'"),
        (
            ["list", "--resource-pattern-type", "glob"],
            "'glob' is not a pattern type; use one of: literal, prefixed, match, any",
        ),
        (["list", "--topic", ""], "argument --topic: the name is empty"),
    ],
)
def test_bad_arguments_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as info:
        parse(*argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


# --- add: bindings -----------------------------------------------------------------------------


def test_add_defaults_host_star_and_operation_all() -> None:
    bindings = acls.add_bindings(parse("add", "--topic", "t", "--allow-principal", "User:alice"))
    assert bindings == [AclBinding(TOPIC_T, entry("User:alice", AclOperation.ALL))]


def test_add_principals_hosts_operations_and_resources() -> None:
    args = parse(
        "add",
        "--topic",
        "t",
        "--group",
        "g",
        "--resource-pattern-type",
        "PREFIXED",
        "--allow-principal",
        "User:a",
        "--allow-host",
        "10.0.0.1",
        "--allow-host",
        "10.0.0.2",
        "--deny-principal",
        "User:b",
        "--operation",
        "Read",
        "--operation",
        "Describe",
    )
    bindings = acls.add_bindings(args)
    assert len(bindings) == 2 * (2 + 1) * 2
    topic = ResourcePattern(ResourceType.TOPIC, "t", PatternType.PREFIXED)
    assert AclBinding(topic, entry("User:a", AclOperation.READ, ALLOW, "10.0.0.2")) in bindings
    assert AclBinding(topic, entry("User:b", AclOperation.DESCRIBE, DENY, "*")) in bindings
    assert not any(b.entry.host == "*" and b.entry.permission == ALLOW for b in bindings)


def _ops(bindings: list[AclBinding]) -> dict[tuple[ResourceType, str], set[str]]:
    result: dict[tuple[ResourceType, str], set[str]] = {}
    for b in bindings:
        result.setdefault((b.pattern.resource_type, b.pattern.name), set()).add(
            b.entry.operation.name
        )
    return result


def test_producer_consumer_and_idempotent_conveniences() -> None:
    producer = acls.add_bindings(
        parse(
            "add",
            "--producer",
            "--idempotent",
            "--topic",
            "t",
            "--transactional-id",
            "tx",
            "--allow-principal",
            "User:p",
        )
    )
    assert _ops(producer) == {
        (ResourceType.TOPIC, "t"): {"WRITE", "DESCRIBE", "CREATE"},
        (ResourceType.TRANSACTIONAL_ID, "tx"): {"WRITE", "DESCRIBE"},
        (ResourceType.CLUSTER, "kafka-cluster"): {"IDEMPOTENT_WRITE"},
    }
    consumer = acls.add_bindings(
        parse("add", "--consumer", "--topic", "t", "--group", "g", "--allow-principal", "User:c")
    )
    assert _ops(consumer) == {
        (ResourceType.TOPIC, "t"): {"READ", "DESCRIBE"},
        (ResourceType.GROUP, "g"): {"READ"},
    }
    both = acls.add_bindings(
        parse(
            "add",
            "--producer",
            "--consumer",
            "--topic",
            "t",
            "--group",
            "g",
            "--allow-principal",
            "User:pc",
        )
    )
    assert _ops(both)[(ResourceType.TOPIC, "t")] == {"WRITE", "DESCRIBE", "CREATE", "READ"}
    assert len(both) == len(set(both))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--topic", "t"],
            "you must specify one of: --allow-principal, --deny-principal when trying to add ACLs",
        ),
        (
            ["--allow-principal", "User:a"],
            "you must provide at least one resource: --topic <topic> or --cluster or --group "
            "<group> or --transactional-id <id>",
        ),
        (
            ["--topic", "t", "--allow-principal", "User:a", "--resource-pattern-type", "match"],
            "a '--resource-pattern-type' value of 'match' is not valid when adding acls",
        ),
        (
            ["--topic", "t", "--allow-principal", "User:a", "--resource-pattern-type", "any"],
            "a '--resource-pattern-type' value of 'any' is not valid when adding acls",
        ),
        (
            ["--group", "g", "--allow-principal", "User:a", "--operation", "Write"],
            "ResourceType GROUP only supports operations Read, Delete, Describe, All",
        ),
        (
            ["--cluster", "--allow-principal", "User:a", "--operation", "Read"],
            "ResourceType CLUSTER only supports operations Create, Alter, Describe, "
            "ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All",
        ),
        (["--topic", "t", "--allow-host", "h"], "--allow-host needs --allow-principal"),
        (
            ["--topic", "t", "--allow-principal", "User:a", "--deny-host", "h"],
            "--deny-host needs --deny-principal",
        ),
        (
            ["--producer", "--topic", "t", "--allow-principal", "User:a", "--operation", "Read"],
            "--operation cannot be used with --producer or --consumer",
        ),
        (
            ["--producer", "--group", "g", "--allow-principal", "User:a"],
            "with --producer you must specify a --topic",
        ),
        (
            ["--producer", "--topic", "t", "--group", "g", "--allow-principal", "User:a"],
            "--group and --cluster need --consumer or --operation",
        ),
        (
            ["--consumer", "--topic", "t", "--allow-principal", "User:a"],
            "with --consumer you must specify a --topic and a --group and no --cluster or "
            "--transactional-id option should be specified",
        ),
        (
            ["--consumer", "--topic", "t", "--group", "g", "--cluster", "--allow-principal", "U:a"],
            "with --consumer you must specify a --topic and a --group",
        ),
        (
            ["--idempotent", "--topic", "t", "--allow-principal", "User:a"],
            "the --idempotent option is only available if --producer is set",
        ),
        (
            [
                "--topic",
                "*",
                "--resource-pattern-type",
                "prefixed",
                "--allow-principal",
                "User:a",
            ],
            "Invalid resource name '*' for pattern type PREFIXED: use a LITERAL '*'",
        ),
    ],
)
def test_add_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as info:
        acls.add_bindings(parse("add", *argv))
    assert message in info.value.message
    assert info.value.exit_code == 2


# --- remove and list: filters ------------------------------------------------------------------


def test_remove_without_principal_matches_every_acl_of_the_resource() -> None:
    assert acls.remove_filters(parse("remove", "--topic", "t")) == [
        AclBindingFilter(ResourceType.TOPIC, "t", PatternType.ANY)
    ]


def test_remove_matches_only_what_is_given() -> None:
    filters = acls.remove_filters(
        parse(
            "remove",
            "--topic",
            "t",
            "--resource-pattern-type",
            "literal",
            "--allow-principal",
            "User:a",
            "--operation",
            "Read",
            "--force",
        )
    )
    assert filters == [
        AclBindingFilter(
            ResourceType.TOPIC,
            "t",
            PatternType.LITERAL,
            "User:a",
            None,
            AclOperation.READ,
            ALLOW,
        )
    ]
    any_op = acls.remove_filters(parse("remove", "--group", "g", "--deny-principal", "User:b"))
    assert any_op == [
        AclBindingFilter(
            ResourceType.GROUP, "g", PatternType.ANY, "User:b", None, AclOperation.ANY, DENY
        )
    ]


def test_remove_usage_errors() -> None:
    with pytest.raises(UsageError, match="you must provide at least one resource"):
        acls.remove_filters(parse("remove", "--allow-principal", "User:a"))
    with pytest.raises(UsageError, match="--producer and --consumer need --allow-principal"):
        acls.remove_filters(parse("remove", "--producer", "--topic", "t"))


def test_list_filters() -> None:
    assert acls.list_filters(parse("list")) == [AclBindingFilter()]
    assert acls.list_filters(
        parse("list", "--topic", "t", "--resource-pattern-type", "match", "--principal", "User:a")
    ) == [AclBindingFilter(ResourceType.TOPIC, "t", PatternType.MATCH, "User:a")]


# --- output ----------------------------------------------------------------------------------


def test_kafka_acls_layout() -> None:
    group = ResourcePattern(ResourceType.GROUP, "g", PatternType.PREFIXED)
    text = acls.format_bindings(
        [
            AclBinding(TOPIC_T, entry("User:bob", AclOperation.WRITE)),
            AclBinding(group, entry("User:alice", AclOperation.READ, DENY, "10.0.0.1")),
            AclBinding(TOPIC_T, entry("User:alice", AclOperation.READ)),
        ],
        "Current ACLs for resource",
    )
    assert text == (
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, "
        "patternType=LITERAL)`:\n"
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:bob, host=*, operation=WRITE, permissionType=ALLOW)\n"
        "\n"
        "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=g, "
        "patternType=PREFIXED)`:\n"
        "\t(principal=User:alice, host=10.0.0.1, operation=READ, permissionType=DENY)\n"
    )


# --- requests on the wire ----------------------------------------------------------------------


def _round_trip_request(body: Any, version: int) -> Any:
    api_key = ApiKey(int(body.__api_key__))
    frame = encode_request(RequestHeader(int(api_key), version, 7, "test"), body)
    _header, decoded = decode_request(frame[4:], {api_key: (version, version)})
    return decoded


@pytest.mark.parametrize("version", [1, 2, 3])
def test_requests_encode_at_every_version(version: int) -> None:
    binding = AclBinding(
        ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx-", PatternType.PREFIXED),
        entry("User:a", AclOperation.WRITE, DENY, "10.1.1.1"),
    )
    created = _round_trip_request(sa.create_acls_request([binding], version), version)
    (creation,) = created.creations
    assert (
        creation.resource_type,
        creation.resource_name,
        creation.resource_pattern_type,
        creation.principal,
        creation.host,
        creation.operation,
        creation.permission_type,
    ) == (5, "tx-", 4, "User:a", "10.1.1.1", 4, 2)
    wanted = AclBindingFilter(ResourceType.TOPIC, None, PatternType.MATCH, "User:a")
    described = _round_trip_request(sa.describe_acls_request(wanted, version), version)
    assert (described.resource_type_filter, described.resource_name_filter) == (2, None)
    assert (described.pattern_type_filter, described.host_filter, described.operation) == (
        2,
        None,
        1,
    )
    deleted = _round_trip_request(sa.delete_acls_request([AclBindingFilter()], version), version)
    assert deleted.filters[0].resource_type_filter == 1
    assert deleted.filters[0].principal_filter is None


# --- whole commands against a fake broker ------------------------------------------------------


class FakeBroker:
    """Decodes each request from its bytes, answers as Kafka's AclApis would (or with
    ``refuse``) and hands back the decoded response bytes."""

    def __init__(self, versions: dict[ApiKey, tuple[int, int]] | None = None) -> None:
        self.api_versions = (
            versions
            if versions is not None
            else {
                ApiKey.CREATE_ACLS: (1, 3),
                ApiKey.DESCRIBE_ACLS: (1, 3),
                ApiKey.DELETE_ACLS: (1, 3),
            }
        )
        self.core = AclAuthorizerCore()
        self.refuse: tuple[ErrorCode, str] | None = None
        self.address = "fake:9092"
        self.requests: list[Any] = []

    def pick_version(self, api_key: ApiKey, preferred: tuple[int, ...]) -> int | None:
        low, high = self.api_versions.get(api_key, (0, -1))
        return next((v for v in preferred if low <= v <= high), None)

    async def send(self, body: Any, *, timeout_s: float | None = None) -> Any:
        api_key = ApiKey(int(body.__api_key__))
        version = int(body.__version__)
        header = RequestHeader(int(api_key), version, 1, "test")
        _h, request = decode_request(encode_request(header, body)[4:], self.api_versions)
        self.requests.append(request)
        data = self.answer(api_key, request)
        response = build(load_response_schema(api_key, version), data)
        _cid, decoded = decode_response(
            int(api_key), version, encode_response(header, response)[4:]
        )
        return decoded

    def answer(self, api_key: ApiKey, request: Any) -> dict[str, Any]:
        error = (
            {"error_code": int(self.refuse[0]), "error_message": self.refuse[1]}
            if self.refuse
            else None
        )
        if api_key == ApiKey.CREATE_ACLS:
            results = []
            for c in request.creations:
                if error is None:
                    self.core.add([sa._binding(c, c)])
                results.append(error or {"error_code": 0, "error_message": None})
            return {"results": results}
        if api_key == ApiKey.DESCRIBE_ACLS:
            if error is not None:
                return error
            wanted = _filter(request)
            by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
            for b in self.core.bindings(wanted):
                by_pattern.setdefault(b.pattern, []).append(b.entry)
            return {
                "error_code": 0,
                "resources": [
                    {
                        "resource_type": int(p.resource_type),
                        "resource_name": p.name,
                        "pattern_type": int(p.pattern_type),
                        "acls": [
                            {
                                "principal": e.principal,
                                "host": e.host,
                                "operation": int(e.operation),
                                "permission_type": int(e.permission),
                            }
                            for e in entries
                        ],
                    }
                    for p, entries in by_pattern.items()
                ],
            }
        assert api_key == ApiKey.DELETE_ACLS
        results = []
        for raw in request.filters:
            if error is not None:
                results.append({**error, "matching_acls": []})
                continue
            gone = self.core.bindings(_filter(raw))
            self.core.remove(gone)
            results.append(
                {
                    "error_code": 0,
                    "matching_acls": [
                        {
                            "error_code": 0,
                            "resource_type": int(b.pattern.resource_type),
                            "resource_name": b.pattern.name,
                            "pattern_type": int(b.pattern.pattern_type),
                            "principal": b.entry.principal,
                            "host": b.entry.host,
                            "operation": int(b.entry.operation),
                            "permission_type": int(b.entry.permission),
                        }
                        for b in gone
                    ],
                }
            )
        return {"filter_results": results}


def _filter(raw: Any) -> AclBindingFilter:
    return AclBindingFilter(
        ResourceType.from_code(raw.resource_type_filter),
        raw.resource_name_filter,
        PatternType.from_code(raw.pattern_type_filter),
        raw.principal_filter,
        raw.host_filter,
        AclOperation.from_code(raw.operation),
        AclPermissionType.from_code(raw.permission_type),
    )


class FakeClient:
    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker

    async def connection(self, node_id: int | None = None) -> FakeBroker:
        return self.broker


class FakeBlockingClient:
    def __init__(self, broker: FakeBroker, **kwargs: Any) -> None:
        self.client = FakeClient(broker)
        self.kwargs = kwargs

    def __enter__(self) -> FakeBlockingClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    def run(self, coro: Any) -> Any:
        return asyncio.run(coro)


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> FakeBroker:
    fake = FakeBroker()

    def factory(bootstrap: str, **kwargs: Any) -> FakeBlockingClient:
        return FakeBlockingClient(fake, **kwargs)

    monkeypatch.setattr(acls, "BlockingClient", factory)
    return fake


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], broker: FakeBroker) -> Run:
    def go(*argv: str) -> tuple[int, str, str]:
        code = main(["acls", *argv, "--bootstrap-server", "fake:9092"])
        out, err = capsys.readouterr()
        return code, out, err

    return go


def test_add_list_remove(run: Run, broker: FakeBroker) -> None:
    code, out, err = run(
        "add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "t"
    )
    assert (code, err) == (0, "")
    assert out == (
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, "
        "patternType=LITERAL)`:\n"
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
    )
    run("add", "--consumer", "--topic", "t", "--group", "g", "--allow-principal", "User:bob")
    code, out, _ = run("list", "--topic", "t")
    assert code == 0
    assert out.splitlines() == [
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, "
        "patternType=LITERAL)`:",
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)",
        "\t(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)",
        "\t(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW)",
    ]
    code, out, _ = run("list", "--json", "--principal", "User:bob", "--group", "g")
    assert json.loads(out) == [
        {
            "resource_type": "GROUP",
            "name": "g",
            "pattern_type": "LITERAL",
            "principal": "User:bob",
            "host": "*",
            "operation": "READ",
            "permission_type": "ALLOW",
        }
    ]
    code, out, _ = run("remove", "--topic", "t", "--allow-principal", "User:bob", "--force")
    assert code == 0
    assert out.splitlines()[0].startswith("Removed ACLs for resource `ResourcePattern(")
    assert len(out.splitlines()) == 3
    assert len(broker.core.bindings()) == 2
    code, out, _ = run("remove", "--topic", "nothing")
    assert (code, out) == (0, "No ACLs matched: nothing removed.\n")


def test_add_sends_one_create_acls_with_every_binding(run: Run, broker: FakeBroker) -> None:
    run("add", "--producer", "--topic", "a", "--topic", "b", "--allow-principal", "User:p")
    (request,) = broker.requests
    assert len(request.creations) == 6


@pytest.mark.parametrize(
    ("action", "refusal", "expected"),
    [
        (
            ["add", "--topic", "t", "--allow-principal", "User:a"],
            (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker"),
            "tidelog acls: error: SECURITY_DISABLED: No Authorizer is configured on the broker"
            "\nhint: the brokers run without an authorizer",
        ),
        (
            ["list"],
            (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."),
            "tidelog acls: error: CLUSTER_AUTHORIZATION_FAILED: Cluster authorization failed."
            "\nhint: the principal of --command-config needs an ACL on the cluster",
        ),
        (
            ["remove", "--cluster"],
            (ErrorCode.INVALID_REQUEST, "Filter contains UNKNOWN elements"),
            "tidelog acls: error: INVALID_REQUEST: Filter contains UNKNOWN elements",
        ),
    ],
)
def test_broker_refusals_print_its_message_and_exit_1(
    run: Run, broker: FakeBroker, action: list[str], refusal: tuple[ErrorCode, str], expected: str
) -> None:
    broker.refuse = refusal
    status, out, err = run(*action)
    assert status == 1
    assert out == ""
    assert err.startswith(expected)


def test_mixed_failures_are_listed_each(run: Run, broker: FakeBroker) -> None:
    error = acls.failure_error(
        [
            ("a", ErrorCode.INVALID_REQUEST, "bad"),
            ("b", ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None),
        ]
    )
    assert error.message == "a: INVALID_REQUEST: bad; b: CLUSTER_AUTHORIZATION_FAILED"
    assert error.code is None


def test_usage_error_sends_nothing(run: Run, broker: FakeBroker) -> None:
    status, _out, err = run("add", "--topic", "t")
    assert status == 2
    assert err.startswith("tidelog acls: error: you must specify one of: --allow-principal")
    assert broker.requests == []


def test_broker_without_acl_apis(run: Run, broker: FakeBroker) -> None:
    broker.api_versions = {}
    status, _out, err = run("list")
    assert status == 1
    assert err.startswith(
        "tidelog acls: error: UNSUPPORTED_VERSION: fake:9092 does not support DESCRIBE_ACLS"
    )


def test_json_add_and_remove(run: Run) -> None:
    _code, out, _ = run("add", "--json", "--cluster", "--allow-principal", "User:a")
    assert json.loads(out)["added"][0]["resource_type"] == "CLUSTER"
    assert json.loads(out)["added"][0]["name"] == "kafka-cluster"
    _code, out, _ = run("remove", "--json", "--cluster")
    assert [b["operation"] for b in json.loads(out)["removed"]] == ["ALL"]
