"""DescribeConfigs, (Incremental)AlterConfigs, ListConfigResources and DescribeTopicPartitions
driven in-process on one broker (``KafkaApis``): real sources and synonyms, dynamic broker
configs through a ZooKeeper store stand-in that delivers writes as the watch does, and
every refusal with Kafka's error code and message."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema

from tidelog.controller.topic_admin import replica_assignment_error
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.protocol.apis import SUPPORTED_VERSIONS, ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.protocol.messages import build
from tidelog.security.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from tidelog.security.principal import KafkaPrincipal
from tidelog.server.apis.config_apis import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT
from tidelog.server.apis.kafka_apis import KafkaApis
from tidelog.server.auth.authorizer import AclAuthorizer, InMemoryAclStore
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.docs import ConfigSource
from tidelog.server.config.keys import ConfigType
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.metadata.local import MetadataStore
from tidelog.server.network.request_context import INTERNAL, RequestContext, set_request
from tidelog.server.replica.manager import ReplicaManager, log_config_for, now_ms
from tidelog.storage.log_manager import LogManager

E = ErrorCode
S = ConfigSource
TOPIC, BROKER = 2, 4


class FakeStore:
    """``ZkBrokerConfigStore`` without ZooKeeper: a write is delivered back as the data
    watch would deliver it."""

    def __init__(self, deliver: Callable[[str, dict[str, str]], None]) -> None:
        self.data: dict[str, dict[str, str]] = {}
        self.writes = 0
        self._deliver = deliver

    async def alter(self, entity: str, change: Any, *, write: bool = True) -> Any:
        new, answer = change(dict(self.data.get(entity, {})))
        if new is not None and write:
            self.data[entity] = new
            self.writes += 1
            self._deliver(entity, new)
        return answer


@pytest.fixture
def apis(tmp_path: Path) -> Iterator[KafkaApis]:
    config = load_broker_config(
        {
            "log.dirs": str(tmp_path),
            "broker.id": "0",
            "log.retention.hours": "1",
            "ssl.key.password": "secret",
            "listener.name.plaintext.plain.sasl.jaas.config": "jaas-secret",
            "num.io.threads": "8",
        }
    )
    logs = LogManager(
        [tmp_path], log_config_for(effective_topic_config(config, {})), now_ms=now_ms()
    )
    apis = KafkaApis.alone(config, MetadataStore(tmp_path), ReplicaManager(config, logs), {})
    apis.create_topic("t", 3, {"retention.ms": 5000})
    apis.create_topic("u", 2, {})
    yield apis
    logs.close()


def with_store(apis: KafkaApis) -> FakeStore:
    store = FakeStore(apis.config_apis._on_zk_change)
    apis.config_apis.store = store  # type: ignore[assignment]
    return store


def call(apis: KafkaApis, api: ApiKey, version: int, data: dict[str, Any]) -> Any:
    low, high = SUPPORTED_VERSIONS[api]
    assert low <= version <= high

    async def inside() -> Any:
        body = build(load_request_schema(api, version), data)
        answer = apis.handlers[api](RequestHeader(int(api), version, 1, "test"), body)
        return await answer if isinstance(answer, asyncio.Future) else answer

    return asyncio.run(inside())


def describe(
    apis: KafkaApis, rtype: int, name: str, *, synonyms: bool = True, version: int = 4
) -> Any:
    data: dict[str, Any] = {
        "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": None}],
        "include_synonyms": synonyms,
        "include_documentation": True,
    }
    return call(apis, ApiKey.DESCRIBE_CONFIGS, version, data).results[0]


def entries(result: Any) -> dict[str, Any]:
    return {c.name: c for c in result.configs}


def chain(entry: Any) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, int(s.source)) for s in entry.synonyms]


def incremental(
    apis: KafkaApis,
    rtype: int,
    name: str,
    ops: list[tuple[str, int, str | None]],
    *,
    validate_only: bool = False,
) -> tuple[ErrorCode, str | None]:
    answer = call(
        apis,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": rtype,
                    "resource_name": name,
                    "configs": [
                        {"name": k, "config_operation": op, "value": v} for k, op, v in ops
                    ],
                }
            ],
            "validate_only": validate_only,
        },
    )
    r = answer.responses[0]
    return E(int(r.error_code)), r.error_message


def legacy(apis: KafkaApis, rtype: int, name: str, configs: dict[str, str | None]) -> Any:
    answer = call(
        apis,
        ApiKey.ALTER_CONFIGS,
        2,
        {
            "resources": [
                {
                    "resource_type": rtype,
                    "resource_name": name,
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
            ],
            "validate_only": False,
        },
    )
    r = answer.responses[0]
    return E(int(r.error_code)), r.error_message


# --- DescribeConfigs: sources, synonyms, types, documentation, sensitivity -------------------


def test_topic_sources_and_synonyms(apis: KafkaApis) -> None:
    t = entries(describe(apis, TOPIC, "t"))
    retention = t["retention.ms"]
    assert (retention.value, retention.config_source, retention.read_only) == ("5000", 1, False)
    assert chain(retention) == [
        ("retention.ms", "5000", S.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.hours", "1", S.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", S.DEFAULT_CONFIG),
    ]
    assert retention.config_type == ConfigType.LONG
    assert retention.documentation
    u = entries(describe(apis, TOPIC, "u"))
    # Not overridden: the static log.retention.hours decides (rule 5 of dynamic_config).
    assert (u["retention.ms"].value, u["retention.ms"].config_source) == (
        "3600000",
        S.STATIC_BROKER_CONFIG,
    )
    seg = u["segment.bytes"]
    assert (seg.config_source, chain(seg)) == (
        S.DEFAULT_CONFIG,
        [("log.segment.bytes", "1073741824", S.DEFAULT_CONFIG)],
    )
    assert u["cleanup.policy"].config_type == ConfigType.LIST
    assert u["unclean.leader.election.enable"].config_type == ConfigType.BOOLEAN
    assert all(e.config_type != ConfigType.UNKNOWN for e in u.values())


def test_without_synonyms_or_documentation(apis: KafkaApis) -> None:
    answer = call(
        apis,
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {
                    "resource_type": TOPIC,
                    "resource_name": "t",
                    "configuration_keys": ["retention.ms"],
                }
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    (only,) = answer.results[0].configs
    assert (only.name, only.synonyms, only.documentation, only.config_source) == (
        "retention.ms",
        (),
        None,
        S.DYNAMIC_TOPIC_CONFIG,
    )


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_every_version_is_served(apis: KafkaApis, version: int) -> None:
    result = describe(apis, BROKER, "0", version=version)
    assert result.error_code == 0
    assert entries(result)["log.retention.hours"].config_source == S.STATIC_BROKER_CONFIG


def test_broker_sources_types_and_sensitive_values(apis: KafkaApis) -> None:
    b = entries(describe(apis, BROKER, "0"))
    hours = b["log.retention.hours"]
    assert (hours.value, hours.config_source, hours.read_only) == ("1", 4, False)
    assert chain(hours) == [
        ("log.retention.hours", "1", S.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", S.DEFAULT_CONFIG),
    ]
    # Kafka's default of log.retention.ms is null: no value, no DEFAULT synonym.
    ms = b["log.retention.ms"]
    assert (ms.value, ms.config_source, chain(ms)) == (None, S.DEFAULT_CONFIG, [])
    partitions = b["num.partitions"]
    assert (partitions.value, partitions.config_source, partitions.read_only) == ("1", 5, True)
    assert partitions.config_type == ConfigType.INT
    for name in ("ssl.key.password", "listener.name.plaintext.plain.sasl.jaas.config"):
        secret = b[name]
        assert (secret.value, secret.is_sensitive, secret.config_type) == (
            None,
            True,
            ConfigType.PASSWORD,
        )
        assert all(s.value is None for s in secret.synonyms)
        assert secret.config_source == S.STATIC_BROKER_CONFIG
    assert b["ssl.keystore.password"].is_sensitive
    assert b["ssl.enabled.protocols"].config_type == ConfigType.LIST
    assert b["offsets.topic.replication.factor"].config_type == ConfigType.SHORT
    # An ignored Kafka key given in server.properties is listed, read-only.
    assert (b["num.io.threads"].value, b["num.io.threads"].config_source) == ("8", 4)
    assert "secret" not in repr(describe(apis, BROKER, "0"))


def test_broker_resource_names(apis: KafkaApis) -> None:
    other = describe(apis, BROKER, "7")
    assert (E(other.error_code), other.error_message, other.configs) == (
        E.INVALID_REQUEST,
        "Unexpected broker id, expected 0 or empty string, but received 7",
        (),
    )
    bad = describe(apis, BROKER, "x")
    assert (E(bad.error_code), bad.error_message) == (
        E.INVALID_REQUEST,
        "Broker id must be an integer, but it is: x",
    )
    default = describe(apis, BROKER, "")
    assert (E(default.error_code), default.configs) == (E.NONE, ())
    missing = describe(apis, TOPIC, "nope")
    assert E(missing.error_code) == E.UNKNOWN_TOPIC_OR_PARTITION
    logger = describe(apis, 8, "0")
    assert E(logger.error_code) == E.INVALID_REQUEST


# --- dynamic broker configs -----------------------------------------------------------------


def test_dynamic_precedence_and_live_application(apis: KafkaApis) -> None:
    store = with_store(apis)
    assert incremental(apis, BROKER, "", [("log.retention.ms", OP_SET, "60000")]) == (E.NONE, None)
    assert store.data == {"<default>": {"log.retention.ms": "60000"}}
    # Applied without a restart: topic u (no override) follows, topic t keeps its own.
    hosted = apis.replica_manager.partitions
    assert hosted[TopicPartition("u", 0)].log.config.retention_ms == 60000
    assert hosted[TopicPartition("t", 0)].log.config.retention_ms == 5000
    u = entries(describe(apis, TOPIC, "u"))["retention.ms"]
    assert (u.value, u.config_source) == ("60000", S.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert chain(u)[:2] == [
        ("log.retention.ms", "60000", S.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", "1", S.STATIC_BROKER_CONFIG),
    ]
    # This broker's own value beats the default.
    assert incremental(apis, BROKER, "0", [("log.retention.ms", OP_SET, "120000")])[0] == E.NONE
    b = entries(describe(apis, BROKER, "0"))["log.retention.ms"]
    assert (b.value, b.config_source) == ("120000", S.DYNAMIC_BROKER_CONFIG)
    assert chain(b) == [
        ("log.retention.ms", "120000", S.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "60000", S.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", "1", S.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", S.DEFAULT_CONFIG),
    ]
    assert hosted[TopicPartition("u", 1)].log.config.retention_ms == 120000
    # The default resource lists the default entries only, without the per-broker layer.
    default = entries(describe(apis, BROKER, ""))
    assert list(default) == ["log.retention.ms"]
    assert (default["log.retention.ms"].value, chain(default["log.retention.ms"])) == (
        "60000",
        [
            ("log.retention.ms", "60000", S.DYNAMIC_DEFAULT_BROKER_CONFIG),
            ("log.retention.hours", "1", S.STATIC_BROKER_CONFIG),
            ("log.retention.hours", "168", S.DEFAULT_CONFIG),
        ],
    )
    # DELETE falls back to the default layer, then to the static config.
    assert incremental(apis, BROKER, "0", [("log.retention.ms", OP_DELETE, None)])[0] == E.NONE
    assert hosted[TopicPartition("u", 0)].log.config.retention_ms == 60000
    assert legacy(apis, BROKER, "", {})[0] == E.NONE
    assert hosted[TopicPartition("u", 0)].log.config.retention_ms == 3_600_000
    assert apis.config.get_int("log.retention.ms") == -2


def test_dynamic_message_max_bytes_and_min_isr(apis: KafkaApis) -> None:
    with_store(apis)
    ops = [("message.max.bytes", OP_SET, "2000"), ("min.insync.replicas", OP_SET, "2")]
    assert incremental(apis, BROKER, "", ops) == (E.NONE, None)
    hosted = apis.replica_manager.partitions[TopicPartition("u", 0)]
    assert hosted.log.config.max_message_bytes == 2000
    assert hosted.partition.min_insync_replicas == 2


def test_validate_only_writes_nothing(apis: KafkaApis) -> None:
    store = with_store(apis)
    ops = [("log.segment.bytes", OP_SET, "100000")]
    assert incremental(apis, BROKER, "0", ops, validate_only=True) == (E.NONE, None)
    assert store.writes == 0
    assert incremental(apis, TOPIC, "u", [("retention.ms", OP_SET, "9")], validate_only=True)[
        0
    ] == (E.NONE)
    assert apis.metadata.topics["u"].configs == {}


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        (
            [("num.partitions", OP_SET, "3")],
            (
                E.INVALID_REQUEST,
                "Invalid config value for resource ConfigResource(type=BROKER, name='0'): "
                "Cannot update these configs dynamically: Set(num.partitions)",
            ),
        ),
        (
            [("broker.id", OP_SET, "3"), ("listeners", OP_SET, "PLAINTEXT://:1")],
            (
                E.INVALID_REQUEST,
                "Invalid config value for resource ConfigResource(type=BROKER, name='0'): "
                "Cannot update these configs dynamically: Set(broker.id, listeners)",
            ),
        ),
        (
            [("no.such.key", OP_SET, "1")],
            (E.INVALID_CONFIG, "Unknown broker config name: no.such.key"),
        ),
        (
            [("log.segment.bytes", OP_SET, "1")],
            (
                E.INVALID_CONFIG,
                "Invalid value 1 for configuration log.segment.bytes: must be at least 14",
            ),
        ),
        (
            [("message.max.bytes", OP_SET, "big")],
            (
                E.INVALID_CONFIG,
                "Invalid value big for configuration message.max.bytes: invalid literal for "
                "int() with base 10: 'big'",
            ),
        ),
        (
            [("log.retention.ms", OP_APPEND, "1")],
            (
                E.INVALID_CONFIG,
                "Config value append is not allowed for config key: log.retention.ms",
            ),
        ),
        (
            [("log.retention.ms", OP_SUBTRACT, "1")],
            (
                E.INVALID_CONFIG,
                "Config value subtract is not allowed for config key: log.retention.ms",
            ),
        ),
        (
            [("sasl.enabled.mechanisms", OP_APPEND, "PLAIN")],
            (
                E.INVALID_REQUEST,
                "Invalid config value for resource ConfigResource(type=BROKER, name='0'): "
                "Cannot update these configs dynamically: Set(sasl.enabled.mechanisms)",
            ),
        ),
        (
            [("log.retention.ms", OP_SET, "1"), ("log.retention.ms", OP_DELETE, None)],
            (E.INVALID_REQUEST, "Error due to duplicate config keys"),
        ),
        (
            [("log.retention.ms", OP_SET, None), ("message.max.bytes", OP_APPEND, None)],
            (
                E.INVALID_REQUEST,
                "Null value not supported for : log.retention.ms,message.max.bytes",
            ),
        ),
        (
            [("log.retention.ms", 7, "1")],
            (E.INVALID_REQUEST, "Unknown config operation 7 for log.retention.ms"),
        ),
    ],
)
def test_broker_alteration_errors(
    apis: KafkaApis, ops: list[tuple[str, int, str | None]], expected: tuple[E, str]
) -> None:
    store = with_store(apis)
    assert incremental(apis, BROKER, "0", ops) == expected
    assert store.writes == 0


def test_broker_alteration_names_and_standalone(apis: KafkaApis) -> None:
    ops = [("log.retention.ms", OP_SET, "1000")]
    assert incremental(apis, BROKER, "3", ops) == (
        E.INVALID_REQUEST,
        "Unexpected broker id, expected 0 or empty string, but received 3",
    )
    # Without ZooKeeper there is nowhere to keep a dynamic config.
    error, message = incremental(apis, BROKER, "0", ops)
    assert error == E.INVALID_REQUEST
    assert message is not None
    assert "zookeeper.connect" in message
    assert incremental(apis, BROKER, "0", ops, validate_only=True) == (E.NONE, None)
    assert incremental(apis, BROKER, "0", [("num.partitions", OP_SET, "3")])[0] == (
        E.INVALID_REQUEST
    )
    assert apis.config.get_int("log.retention.ms") == -2


def test_dynamic_entries_from_zookeeper_that_do_not_apply_are_ignored(apis: KafkaApis) -> None:
    dynamic = apis.config_apis.dynamic
    changed = dynamic.update(
        per_broker=True,
        raw={"num.partitions": "9", "log.segment.bytes": "x", "log.roll.hours": "2"},
    )
    assert changed
    assert apis.config.get_int("num.partitions") == 1
    assert apis.config.get_int("log.roll.hours") == 2
    assert dynamic.dynamic_broker == {"log.roll.hours": "2"}
    assert not dynamic.update(per_broker=True, raw={"log.roll.hours": "2"})


# --- topic alterations ----------------------------------------------------------------------


def test_topic_incremental_operations(apis: KafkaApis) -> None:
    assert incremental(apis, TOPIC, "u", [("cleanup.policy", OP_APPEND, "delete")]) == (
        E.NONE,
        None,
    )
    assert apis.metadata.topics["u"].configs == {"cleanup.policy": "delete"}
    assert incremental(apis, TOPIC, "u", [("cleanup.policy", OP_APPEND, "shred")]) == (
        E.INVALID_CONFIG,
        "Invalid value delete,shred for configuration cleanup.policy: "
        "must be a list of delete and compact",
    )
    assert incremental(apis, TOPIC, "u", [("retention.ms", OP_APPEND, "1")]) == (
        E.INVALID_CONFIG,
        "Config value append is not allowed for config key: retention.ms",
    )
    assert incremental(apis, TOPIC, "u", [("no.such", OP_SET, "1")]) == (
        E.INVALID_CONFIG,
        "Unknown topic config name: no.such",
    )
    ops = [("retention.ms", OP_SET, "1000"), ("segment.bytes", OP_SET, "100000")]
    assert incremental(apis, TOPIC, "u", ops)[0] == E.NONE
    assert incremental(apis, TOPIC, "u", [("retention.ms", OP_DELETE, None)])[0] == E.NONE
    assert apis.metadata.topics["u"].configs == {
        "cleanup.policy": "delete",
        "segment.bytes": 100000,
    }
    assert apis.replica_manager.partitions[TopicPartition("u", 0)].log.config.segment_bytes == (
        100000
    )
    assert incremental(apis, TOPIC, "nope", ops)[0] == E.UNKNOWN_TOPIC_OR_PARTITION


def test_legacy_alter_replaces_and_refuses_nulls(apis: KafkaApis) -> None:
    assert legacy(apis, TOPIC, "t", {"segment.bytes": "100000"}) == (E.NONE, None)
    assert apis.metadata.topics["t"].configs == {"segment.bytes": 100000}
    assert legacy(apis, TOPIC, "t", {"segment.bytes": None}) == (
        E.INVALID_REQUEST,
        "Null value not supported for : segment.bytes",
    )
    store = with_store(apis)
    assert legacy(apis, BROKER, "0", {"log.retention.ms": "1000"}) == (E.NONE, None)
    assert legacy(apis, BROKER, "0", {"log.segment.bytes": "100000"}) == (E.NONE, None)
    assert store.data["0"] == {"log.segment.bytes": "100000"}


# --- ListConfigResources (74) and DescribeTopicPartitions (75) ---------------------------------


def test_list_config_resources(apis: KafkaApis) -> None:
    answer = call(apis, ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": []})
    assert answer.error_code == 0
    assert [(r.resource_type, r.resource_name) for r in answer.config_resources] == [
        (TOPIC, "t"),
        (TOPIC, "u"),
        (BROKER, "0"),
    ]
    brokers = call(apis, ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": [BROKER]})
    assert [r.resource_name for r in brokers.config_resources] == ["0"]
    # v0 is KIP-714's client-metrics listing: none here.
    assert call(apis, ApiKey.LIST_CONFIG_RESOURCES, 0, {}).config_resources == ()
    odd = call(apis, ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": [3]})
    assert (E(odd.error_code), odd.config_resources) == (E.UNSUPPORTED_VERSION, ())


def pages(
    apis: KafkaApis, topics: list[str], limit: int, cursor: dict[str, Any] | None = None
) -> Any:
    return call(
        apis,
        ApiKey.DESCRIBE_TOPIC_PARTITIONS,
        0,
        {
            "topics": [{"name": n} for n in topics],
            "response_partition_limit": limit,
            "cursor": cursor,
        },
    )


def test_describe_topic_partitions_pages(apis: KafkaApis) -> None:
    seen: list[tuple[str, int]] = []
    cursor = None
    rounds = 0
    while True:
        answer = pages(apis, [], 2, cursor)
        rounds += 1
        for topic in answer.topics:
            assert topic.error_code == 0
            seen += [(topic.name, p.partition_index) for p in topic.partitions]
            assert all(p.leader_id == 0 and p.isr_nodes == (0,) for p in topic.partitions)
        if answer.next_cursor is None:
            break
        cursor = {
            "topic_name": answer.next_cursor.topic_name,
            "partition_index": answer.next_cursor.partition_index,
        }
    assert seen == [("t", 0), ("t", 1), ("t", 2), ("u", 0), ("u", 1)]
    assert rounds == 3
    # The limit reached exactly at a topic's end: the cursor names the next topic.
    first = pages(apis, ["t", "u"], 3)
    assert [t.name for t in first.topics] == ["t"]
    assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == ("u", 0)


def test_describe_topic_partitions_errors(apis: KafkaApis) -> None:
    answer = pages(apis, ["u", "nope", "bad name"], 100)
    by_name = {t.name: E(t.error_code) for t in answer.topics}
    assert by_name == {
        "u": E.NONE,
        "nope": E.UNKNOWN_TOPIC_OR_PARTITION,
        "bad name": E.INVALID_TOPIC_EXCEPTION,
    }
    stray = pages(apis, ["u"], 100, {"topic_name": "t", "partition_index": 0})
    assert [E(t.error_code) for t in stray.topics] == [E.INVALID_REQUEST]
    assert stray.next_cursor is None


# --- CreatePartitions with explicit assignments ------------------------------------------------


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ({2: [1, 1]}, "Duplicate brokers not allowed in replica assignment: 2 -> 1,1"),
        (
            {2: [1], 3: [1, 2, 3]},
            "Inconsistent replication factor between partitions, partition 0 has 2 while "
            "partitions [2, 3] have replication factors [1, 3], respectively.",
        ),
        ({2: [1, 9], 3: [8, 2]}, "Unknown broker(s) in replica assignment: 8, 9."),
        ({2: [2, 1]}, None),
    ],
)
def test_replica_assignment_errors(assignment: dict[int, list[int]], message: str | None) -> None:
    typed = {p: [BrokerId(b) for b in rs] for p, rs in assignment.items()}
    assert replica_assignment_error(typed, 2, [BrokerId(1), BrokerId(2), BrokerId(3)]) == message


# --- authorization (Kafka's KafkaApis checks) ---------------------------------------------------


def test_authorization_of_the_new_apis(apis: KafkaApis) -> None:
    def allow(op: AclOperation) -> frozenset[AccessControlEntry]:
        return frozenset({AccessControlEntry("User:alice", "*", op, AclPermissionType.ALLOW)})

    acls = {
        ResourcePattern(ResourceType.TOPIC, "u"): allow(AclOperation.DESCRIBE),
        ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME): allow(AclOperation.DESCRIBE_CONFIGS),
    }
    authorizer = AclAuthorizer(super_users=frozenset())
    asyncio.run(authorizer.attach(InMemoryAclStore(acls)))
    apis.authorizer = authorizer
    alice = RequestContext(KafkaPrincipal.user("alice"), "10.0.0.7", "PLAINTEXT", "PLAINTEXT")
    bob = RequestContext(KafkaPrincipal.user("bob"), "10.0.0.8", "PLAINTEXT", "PLAINTEXT")

    def as_user(who: RequestContext, api: ApiKey, version: int, data: dict[str, Any]) -> Any:
        async def inside() -> Any:
            set_request(who)
            body = build(load_request_schema(api, version), data)
            answer = apis.handlers[api](RequestHeader(int(api), version, 1, "test"), body)
            return await answer if isinstance(answer, asyncio.Future) else answer

        try:
            return asyncio.run(inside())
        finally:
            set_request(INTERNAL)

    listed = as_user(alice, ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": [BROKER]})
    assert [r.resource_name for r in listed.config_resources] == ["0"]
    refused = as_user(bob, ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": []})
    assert (E(refused.error_code), refused.config_resources) == (
        E.CLUSTER_AUTHORIZATION_FAILED,
        (),
    )
    request = {
        "topics": [{"name": "t"}, {"name": "u"}],
        "response_partition_limit": 10,
        "cursor": None,
    }
    answer = as_user(alice, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, request)
    assert [(t.name, E(t.error_code), len(t.partitions)) for t in answer.topics] == [
        ("u", E.NONE, 2),
        ("t", E.TOPIC_AUTHORIZATION_FAILED, 0),
    ]
    every = as_user(alice, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {**request, "topics": []})
    assert [t.name for t in every.topics] == ["u"]  # topics it may not describe: left out
    # A broker alteration needs ALTER_CONFIGS on the cluster: nothing reaches the store.
    store = with_store(apis)
    altered = as_user(
        alice,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": BROKER,
                    "resource_name": "",
                    "configs": [
                        {"name": "log.retention.ms", "config_operation": OP_SET, "value": "1"}
                    ],
                }
            ],
            "validate_only": False,
        },
    )
    assert (E(altered.responses[0].error_code), store.writes) == (
        E.CLUSTER_AUTHORIZATION_FAILED,
        0,
    )
