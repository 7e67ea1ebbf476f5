"""Every API checks what Kafka's KafkaApis checks (issue 20): the handlers of one broker
(``KafkaApis``, the group and transaction coordinators, the transaction admin APIs, the
marker writer) and of a cluster broker's control plane, driven in-process with an ACL
authorizer on an in-memory store and the request's principal set as the dispatcher sets it.
Each test asserts the exact error per topic / partition / group and that nothing was
written when refused."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema

from tidelog.client.records import Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol import control
from tidelog.protocol.apis import SUPPORTED_VERSIONS, ApiKey
from tidelog.protocol.codec import RequestHeader, decode_response
from tidelog.protocol.messages import build
from tidelog.security.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tidelog.security.principal import KafkaPrincipal
from tidelog.server.apis.client_quota_apis import ClientQuotaApis
from tidelog.server.apis.control_apis import ControlApis
from tidelog.server.apis.feature_apis import FeatureApis
from tidelog.server.apis.find_coordinator import FindCoordinatorApis
from tidelog.server.apis.kafka_apis import KafkaApis
from tidelog.server.apis.txn_admin import TxnAdmin
from tidelog.server.auth.authorizer import AclAuthorizer, InMemoryAclStore
from tidelog.server.cluster.backend import ZkBackend
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.coordinators.group import OFFSETS_TOPIC, GroupCoordinator
from tidelog.server.coordinators.txn import TXN_TOPIC, TransactionCoordinator
from tidelog.server.metadata.local import MetadataStore
from tidelog.server.metadata.local_backend import LocalBackend
from tidelog.server.network.connection import CloseConnection, Response
from tidelog.server.network.request_context import INTERNAL, RequestContext, set_request
from tidelog.server.quotas.configs import QuotaConfigs
from tidelog.server.quotas.manager import ClientQuotas
from tidelog.server.replica.manager import ReplicaManager, log_config_for, now_ms
from tidelog.storage.log_manager import LogManager

from .coordinators import group_coordinator, transaction_coordinator
from .nodes import cluster_node

Op = AclOperation
TOPIC, GROUP, CLUSTER, TXN = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
E = ErrorCode
PUBLIC, SECRET = "public", "secret"
MISSING = -(2**31)


def allow(principal: str, *ops: AclOperation) -> frozenset[AccessControlEntry]:
    return frozenset(AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW) for op in ops)


#: alice: READ/WRITE on topic ``public``, READ on group ``g``, WRITE on transactional id
#: ``tx``; carol: IDEMPOTENT_WRITE on the cluster and CREATE on ``made-*`` topics; bob:
#: nothing. ``User:admin`` is a super user; no ACL means no access.
ACLS: dict[ResourcePattern, frozenset[AccessControlEntry]] = {
    ResourcePattern(TOPIC, PUBLIC): allow("User:alice", Op.READ, Op.WRITE),
    ResourcePattern(GROUP, "g"): allow("User:alice", Op.READ),
    ResourcePattern(TXN, "tx"): allow("User:alice", Op.WRITE),
    ResourcePattern(CLUSTER, CLUSTER_NAME): allow("User:carol", Op.IDEMPOTENT_WRITE),
    ResourcePattern(TOPIC, "made-", PatternType.PREFIXED): allow("User:carol", Op.CREATE),
}


def err(value: Any) -> ErrorCode:
    """An answer's error code as tidelog's enum (readable assertion failures)."""
    return ErrorCode._value2member_map_[int(value)]  # type: ignore[return-value]


def user(name: str) -> RequestContext:
    return RequestContext(KafkaPrincipal.user(name), "10.0.0.7", "PLAINTEXT", "PLAINTEXT")


@dataclass
class Broker:
    apis: KafkaApis
    groups: GroupCoordinator
    transactions: TransactionCoordinator
    handlers: dict[int, Callable[[RequestHeader, Any], Any]]

    def log_end(self, topic: str, partition: int = 0) -> int:
        hosted = self.apis.replica_manager.partitions[TopicPartition(topic, partition)]
        return hosted.log.log_end_offset

    def call(self, who: str, api: ApiKey, version: int, data: dict[str, Any]) -> Any:
        """The handler's answer to ``who``'s request built from ``data``: awaited when
        parked, decoded when it is a ready frame (Produce, Fetch)."""
        low, high = SUPPORTED_VERSIONS[api]
        assert low <= version <= high

        async def inside() -> Any:
            set_request(user(who))
            body = build(load_request_schema(api, version), data)
            header = RequestHeader(int(api), version, 1, "test")
            answer = self.handlers[api](header, body)
            if isinstance(answer, asyncio.Future):
                answer = await answer
            if isinstance(answer, Response):
                frame = b"".join(
                    part if isinstance(part, bytes) else part.read_bytes()  # type: ignore[attr-defined]
                    for part in answer.parts
                )
                return decode_response(api, version, frame[4:])[1]
            return answer

        return asyncio.run(inside())


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    """One broker wired as ``Broker._open`` wires it, with an ACL authorizer: topics
    ``public`` (2 partitions) and ``secret`` (1), one-partition internal topics."""
    config = load_broker_config(
        {
            "log.dirs": str(tmp_path),
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.num.partitions": "1",
        }
    )
    logs = LogManager(
        [tmp_path], log_config_for(effective_topic_config(config, {})), now_ms=now_ms()
    )
    replica_manager = ReplicaManager(config, logs)
    backend = LocalBackend(config, MetadataStore(tmp_path), replica_manager)
    apis = KafkaApis(config, backend, replica_manager, {})
    for name, count in ((OFFSETS_TOPIC, 1), (TXN_TOPIC, 1), (PUBLIC, 2), (SECRET, 1)):
        apis.create_topic(name, count, {"retention.ms": -1})
    groups = group_coordinator(apis)
    apis.handlers.update(groups.handlers())

    async def allocate() -> int:
        return 1000

    transactions = transaction_coordinator(
        apis, groups, allocate, apis.producer_ids.handle_init_producer_id
    )
    apis.handlers.update(transactions.handlers())
    apis.handlers.update(TxnAdmin(apis.helper, apis.replica_manager, transactions).handlers())
    apis.handlers.update(FindCoordinatorApis.serving(groups, transactions, apis.helper).handlers())
    authorizer = AclAuthorizer(super_users=frozenset({"User:admin"}))
    asyncio.run(authorizer.attach(InMemoryAclStore(ACLS)))
    apis.authorizer = authorizer
    yield Broker(apis, groups, transactions, apis.handlers)
    set_request(INTERNAL)
    logs.close()


def batch(value: bytes = b"v", *, transactional: bool = False) -> bytes:
    if transactional:
        return build_batch(
            [Record(value=value)],
            base_timestamp_ms=now_ms(),
            producer_id=1000,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        )
    return build_batch([Record(value=value)], base_timestamp_ms=now_ms())


def produce(
    broker: Broker, who: str, topics: list[str], *, acks: int = 1, txn: str | None = None
) -> dict[tuple[str, int], ErrorCode]:
    answer = broker.call(
        who,
        ApiKey.PRODUCE,
        9,
        {
            "transactional_id": txn,
            "acks": acks,
            "timeout": 5000,
            "topic_data": [
                {
                    "name": t,
                    "partition_data": [{"index": 0, "records": batch(transactional=bool(txn))}],
                }
                for t in topics
            ],
        },
    )
    return {
        (t.name, int(p.index)): err(p.error_code)
        for t in answer.responses
        for p in t.partition_responses
    }


def by_partition(topics: Any, name_attr: str, parts_attr: str, index_attr: str) -> dict[Any, E]:
    return {
        (getattr(t, name_attr), int(getattr(p, index_attr))): err(p.error_code)
        for t in topics
        for p in getattr(t, parts_attr)
    }


# --- Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, DescribeProducers ----------------


def test_produce_writes_only_the_topics_allowed(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="tidelog.authorizer"):
        assert produce(broker, "alice", [PUBLIC, SECRET]) == {
            (PUBLIC, 0): E.NONE,
            (SECRET, 0): E.TOPIC_AUTHORIZATION_FAILED,
        }
    assert (broker.log_end(PUBLIC), broker.log_end(SECRET)) == (1, 0)
    assert any(
        "User:alice is Denied Operation = Write" in r.getMessage()
        and "Topic:LITERAL:secret for request = Produce" in r.getMessage()
        for r in caplog.records
    )
    assert produce(broker, "bob", [PUBLIC]) == {(PUBLIC, 0): E.TOPIC_AUTHORIZATION_FAILED}
    assert produce(broker, "admin", [SECRET]) == {(SECRET, 0): E.NONE}
    assert (broker.log_end(PUBLIC), broker.log_end(SECRET)) == (1, 1)


def test_produce_with_acks_0_closes_the_connection_after_writing_the_allowed(
    broker: Broker,
) -> None:
    with pytest.raises(CloseConnection):
        produce(broker, "alice", [PUBLIC, SECRET], acks=0)
    assert (broker.log_end(PUBLIC), broker.log_end(SECRET)) == (1, 0)


def test_transactional_produce_needs_write_on_the_transactional_id(broker: Broker) -> None:
    denied = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # bob: no WRITE on "tx"; alice: none on "other"; both refuse every partition.
    assert produce(broker, "bob", [PUBLIC], txn="tx") == {(PUBLIC, 0): denied}
    assert produce(broker, "alice", [PUBLIC, SECRET], txn="other") == {
        (PUBLIC, 0): denied,
        (SECRET, 0): denied,
    }
    assert broker.log_end(PUBLIC) == 0


def fetch(
    broker: Broker, who: str, topics: list[str], *, replica_id: int = -1, version: int = 12
) -> dict[Any, E]:
    info = broker.apis.metadata.topics
    answer = broker.call(
        who,
        ApiKey.FETCH,
        version,
        {
            "replica_id": replica_id,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "topics": [
                {
                    "topic": t,
                    "topic_id": info[t].topic_id,
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
                for t in topics
            ],
        },
    )
    key = "topic_id" if version >= 13 else "topic"
    return by_partition(answer.responses, key, "partitions", "partition_index")


def test_fetch_needs_read_per_topic(broker: Broker) -> None:
    produce(broker, "admin", [PUBLIC, SECRET])
    assert fetch(broker, "alice", [PUBLIC, SECRET]) == {
        (PUBLIC, 0): E.NONE,
        (SECRET, 0): E.TOPIC_AUTHORIZATION_FAILED,
    }
    ids = {t: broker.apis.metadata.topics[t].topic_id for t in (PUBLIC, SECRET)}
    assert fetch(broker, "bob", [PUBLIC, SECRET], version=13) == {
        (ids[PUBLIC], 0): E.TOPIC_AUTHORIZATION_FAILED,
        (ids[SECRET], 0): E.TOPIC_AUTHORIZATION_FAILED,
    }


def test_follower_fetch_needs_cluster_action(broker: Broker) -> None:
    # Kafka answers a follower without CLUSTER_ACTION per partition, with
    # TOPIC_AUTHORIZATION_FAILED, READ on the topic notwithstanding.
    assert fetch(broker, "alice", [PUBLIC], replica_id=2) == {
        (PUBLIC, 0): E.TOPIC_AUTHORIZATION_FAILED
    }
    assert fetch(broker, "admin", [PUBLIC, SECRET], replica_id=2) != {}
    assert (
        E.TOPIC_AUTHORIZATION_FAILED
        not in fetch(broker, "admin", [PUBLIC, SECRET], replica_id=2).values()
    )


def test_list_offsets_needs_describe(broker: Broker) -> None:
    answer = broker.call(
        "alice",
        ApiKey.LIST_OFFSETS,
        7,
        {
            "replica_id": -1,
            "topics": [
                {"name": t, "partitions": [{"partition_index": 0, "timestamp": -1}]}
                for t in (PUBLIC, SECRET)
            ],
        },
    )
    assert by_partition(answer.topics, "name", "partitions", "partition_index") == {
        (PUBLIC, 0): E.NONE,  # READ implies DESCRIBE
        (SECRET, 0): E.TOPIC_AUTHORIZATION_FAILED,
    }
    refused = answer.topics[1].partitions[0]
    assert (refused.offset, refused.timestamp, refused.leader_epoch) == (-1, -1, -1)


def test_offset_for_leader_epoch_needs_cluster_action_or_describe(broker: Broker) -> None:
    def ask(who: str) -> dict[Any, E]:
        answer = broker.call(
            who,
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            4,
            {
                "replica_id": -1,
                "topics": [
                    {"topic": t, "partitions": [{"partition": 0, "leader_epoch": 0}]}
                    for t in (PUBLIC, SECRET)
                ],
            },
        )
        return by_partition(answer.topics, "topic", "partitions", "partition")

    assert ask("alice") == {(PUBLIC, 0): E.NONE, (SECRET, 0): E.TOPIC_AUTHORIZATION_FAILED}
    assert ask("admin") == {(PUBLIC, 0): E.NONE, (SECRET, 0): E.NONE}


def test_describe_producers_needs_read(broker: Broker) -> None:
    answer = broker.call(
        "alice",
        ApiKey.DESCRIBE_PRODUCERS,
        0,
        {"topics": [{"name": t, "partition_indexes": [0]} for t in (PUBLIC, SECRET)]},
    )
    assert by_partition(answer.topics, "name", "partitions", "partition_index") == {
        (PUBLIC, 0): E.NONE,
        (SECRET, 0): E.TOPIC_AUTHORIZATION_FAILED,
    }
    assert answer.topics[1].partitions[0].error_message == "Topic authorization failed."


# --- Metadata, DescribeCluster ------------------------------------------------------------


def metadata(broker: Broker, who: str, topics: list[str] | None, **extra: Any) -> Any:
    return broker.call(
        who,
        ApiKey.METADATA,
        10,
        {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": True,
            **extra,
        },
    )


def test_metadata_lists_only_describable_topics(broker: Broker) -> None:
    assert [t.name for t in metadata(broker, "alice", None).topics] == [PUBLIC]
    assert metadata(broker, "bob", None).topics == ()
    assert {t.name for t in metadata(broker, "admin", None).topics} == {
        OFFSETS_TOPIC,
        TXN_TOPIC,
        PUBLIC,
        SECRET,
    }


def test_metadata_refuses_named_topics_and_their_auto_creation(broker: Broker) -> None:
    answer = metadata(broker, "alice", [PUBLIC, SECRET, "unknown"])
    found = {t.name: t for t in answer.topics}
    assert err(found[PUBLIC].error_code) == E.NONE
    for name in (SECRET, "unknown"):
        # Refused: nothing says whether it exists; not created.
        assert err(found[name].error_code) == E.TOPIC_AUTHORIZATION_FAILED
        assert found[name].partitions == ()
        assert found[name].topic_id.int == 0
    assert "unknown" not in broker.apis.metadata.topics
    # carol may create made-* topics (but not describe them: DESCRIBE is not implied by
    # CREATE), admin anything.
    answer = metadata(broker, "admin", ["made-by-admin"])
    assert err(answer.topics[0].error_code) == E.NONE
    assert "made-by-admin" in broker.apis.metadata.topics


def test_metadata_authorized_operations(broker: Broker) -> None:
    answer = metadata(
        broker,
        "alice",
        [PUBLIC],
        include_topic_authorized_operations=True,
        include_cluster_authorized_operations=True,
    )
    assert answer.topics[0].topic_authorized_operations == 1 << 3 | 1 << 4 | 1 << 8
    assert answer.cluster_authorized_operations == 0  # no DESCRIBE on the cluster
    plain = metadata(broker, "alice", [PUBLIC])
    assert plain.topics[0].topic_authorized_operations == MISSING
    assert plain.cluster_authorized_operations == MISSING


def test_describe_cluster_authorized_operations(broker: Broker) -> None:
    def ops(who: str, asked: bool = True) -> int:
        answer = broker.call(
            who, ApiKey.DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": asked}
        )
        assert err(answer.error_code) == E.NONE
        return int(answer.cluster_authorized_operations)

    assert ops("alice") == 0
    assert ops("admin") == sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
    assert ops("admin", asked=False) == MISSING


# --- topic administration ------------------------------------------------------------------


def create_topics(broker: Broker, who: str, names: list[str]) -> dict[str, Any]:
    answer = broker.call(
        who,
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {
                    "name": n,
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
                for n in names
            ],
            "timeout": 5000,
        },
    )
    return {t.name: t for t in answer.topics}


def test_create_topics_needs_create_on_the_cluster_or_topic(broker: Broker) -> None:
    found = create_topics(broker, "carol", ["made-1", "other"])
    refused = found["other"]
    assert (err(refused.error_code), refused.error_message) == (
        E.TOPIC_AUTHORIZATION_FAILED,
        "Authorization failed.",
    )
    assert "other" not in broker.apis.metadata.topics
    # Created, but carol may not describe its configs: Kafka hides them.
    made = found["made-1"]
    assert err(made.error_code) == E.NONE
    assert err(made.topic_config_error_code) == E.TOPIC_AUTHORIZATION_FAILED
    assert (made.num_partitions, made.replication_factor, made.configs) == (-1, -1, ())
    assert "made-1" in broker.apis.metadata.topics
    admin = create_topics(broker, "admin", ["other"])["other"]
    assert err(admin.error_code) == E.NONE
    assert err(admin.topic_config_error_code) == E.NONE
    assert admin.num_partitions == 1
    assert admin.configs


def test_delete_topics_needs_delete(broker: Broker) -> None:
    secret_id = broker.apis.metadata.topics[SECRET].topic_id
    answer = broker.call(
        "alice",
        ApiKey.DELETE_TOPICS,
        6,
        {"topics": [{"name": PUBLIC, "topic_id": None}, {"name": None, "topic_id": secret_id}]},
    )
    by_public, by_id = answer.responses
    assert (by_public.name, err(by_public.error_code)) == (
        PUBLIC,
        E.TOPIC_AUTHORIZATION_FAILED,
    )
    # Asked by id without DESCRIBE: the name is not told.
    assert (by_id.name, by_id.topic_id, err(by_id.error_code)) == (
        None,
        secret_id,
        E.TOPIC_AUTHORIZATION_FAILED,
    )
    assert {PUBLIC, SECRET} <= set(broker.apis.metadata.topics)


def test_create_partitions_needs_alter(broker: Broker) -> None:
    answer = broker.call(
        "alice",
        ApiKey.CREATE_PARTITIONS,
        3,
        {"topics": [{"name": PUBLIC, "count": 5, "assignments": None}], "timeout": 5000},
    )
    (result,) = answer.results
    assert (err(result.error_code), result.error_message) == (
        E.TOPIC_AUTHORIZATION_FAILED,
        "The topic authorization is failed.",
    )
    assert broker.apis.metadata.topics[PUBLIC].num_partitions == 2


def test_delete_records_needs_delete(broker: Broker) -> None:
    produce(broker, "admin", [PUBLIC])
    answer = broker.call(
        "alice",
        ApiKey.DELETE_RECORDS,
        2,
        {
            "topics": [{"name": PUBLIC, "partitions": [{"partition_index": 0, "offset": -1}]}],
            "timeout": 5000,
        },
    )
    part = answer.topics[0].partitions[0]
    assert (err(part.error_code), part.low_watermark) == (E.TOPIC_AUTHORIZATION_FAILED, -1)
    hosted = broker.apis.replica_manager.partitions[TopicPartition(PUBLIC, 0)]
    assert hosted.log.log_start_offset == 0


def test_describe_configs_needs_describe_configs(broker: Broker) -> None:
    answer = broker.call(
        "alice",
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {"resource_type": 2, "resource_name": PUBLIC, "configuration_keys": None},
                {"resource_type": 4, "resource_name": "0", "configuration_keys": None},
            ]
        },
    )
    topic, broker_resource = answer.results
    assert (err(topic.error_code), topic.error_message, topic.configs) == (
        E.TOPIC_AUTHORIZATION_FAILED,
        "Topic authorization failed.",
        (),
    )
    assert (err(broker_resource.error_code), broker_resource.error_message) == (
        E.CLUSTER_AUTHORIZATION_FAILED,
        "Cluster authorization failed.",
    )


@pytest.mark.parametrize("api", [ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS])
def test_alter_configs_need_alter_configs(broker: Broker, api: ApiKey) -> None:
    config = {"name": "retention.ms", "value": "1000"}
    if api == ApiKey.INCREMENTAL_ALTER_CONFIGS:
        config["config_operation"] = 0  # type: ignore[assignment]
    answer = broker.call(
        "alice",
        api,
        1,
        {
            "resources": [
                {"resource_type": 2, "resource_name": PUBLIC, "configs": [config]},
                {"resource_type": 4, "resource_name": "0", "configs": [config]},
            ],
            "validate_only": False,
        },
    )
    assert [(err(r.error_code), r.error_message) for r in answer.responses] == [
        (E.TOPIC_AUTHORIZATION_FAILED, None),
        (E.CLUSTER_AUTHORIZATION_FAILED, None),
    ]
    assert broker.apis.metadata.topics[PUBLIC].configs == {"retention.ms": -1}


# --- InitProducerId and the transactional APIs -------------------------------------------


def init_producer_id(broker: Broker, who: str, txn: str | None) -> tuple[E, int]:
    answer = broker.call(
        who,
        ApiKey.INIT_PRODUCER_ID,
        4,
        {
            "transactional_id": txn,
            "transaction_timeout": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    return err(answer.error_code), int(answer.producer_id)


def test_idempotent_producer_needs_idempotent_write_or_a_topic_write(broker: Broker) -> None:
    assert init_producer_id(broker, "bob", None) == (E.CLUSTER_AUTHORIZATION_FAILED, -1)
    assert init_producer_id(broker, "alice", None)[0] == E.NONE  # KIP-679: WRITE on public
    assert init_producer_id(broker, "carol", None)[0] == E.NONE  # IDEMPOTENT_WRITE


def test_transactional_producer_needs_write_on_its_id(broker: Broker) -> None:
    assert init_producer_id(broker, "bob", "tx") == (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
    assert init_producer_id(broker, "alice", "other")[0] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert broker.log_end(TXN_TOPIC) == 0  # nothing recorded
    assert init_producer_id(broker, "alice", "tx") == (E.NONE, 1000)


def add_partitions(broker: Broker, who: str, topics: list[str]) -> dict[Any, E]:
    answer = broker.call(
        who,
        ApiKey.ADD_PARTITIONS_TO_TXN,
        3,
        {
            "v3_and_below_transactional_id": "tx",
            "v3_and_below_producer_id": 1000,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": t, "partitions": [0]} for t in topics],
        },
    )
    return {
        (t.name, int(p.partition_index)): err(p.partition_error_code)
        for t in answer.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def test_add_partitions_to_txn(broker: Broker) -> None:
    assert add_partitions(broker, "bob", [PUBLIC]) == {
        (PUBLIC, 0): E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    }
    # One refused topic fails the request; the others were not attempted. A client may
    # never add an internal topic.
    assert add_partitions(broker, "alice", [PUBLIC, SECRET, OFFSETS_TOPIC]) == {
        (PUBLIC, 0): E.OPERATION_NOT_ATTEMPTED,
        (SECRET, 0): E.TOPIC_AUTHORIZATION_FAILED,
        (OFFSETS_TOPIC, 0): E.TOPIC_AUTHORIZATION_FAILED,
    }
    assert broker.log_end(TXN_TOPIC) == 0


def test_add_offsets_and_end_txn(broker: Broker) -> None:
    def add_offsets(who: str, group: str) -> E:
        answer = broker.call(
            who,
            ApiKey.ADD_OFFSETS_TO_TXN,
            3,
            {"transactional_id": "tx", "producer_id": 1000, "producer_epoch": 0, "group_id": group},
        )
        return err(answer.error_code)

    assert add_offsets("bob", "g") == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert add_offsets("alice", "h") == E.GROUP_AUTHORIZATION_FAILED
    answer = broker.call(
        "bob",
        ApiKey.END_TXN,
        3,
        {"transactional_id": "tx", "producer_id": 1000, "producer_epoch": 0, "committed": True},
    )
    assert err(answer.error_code) == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert broker.log_end(TXN_TOPIC) == 0


def test_write_txn_markers_needs_cluster_action(broker: Broker) -> None:
    def markers(who: str) -> dict[Any, E]:
        answer = broker.call(
            who,
            ApiKey.WRITE_TXN_MARKERS,
            1,
            {
                "markers": [
                    {
                        "producer_id": 1000,
                        "producer_epoch": 0,
                        "transaction_result": False,
                        "topics": [{"name": PUBLIC, "partition_indexes": [0, 1]}],
                        "coordinator_epoch": 0,
                    }
                ]
            },
        )
        return by_partition(answer.markers[0].topics, "name", "partitions", "partition_index")

    assert markers("alice") == {
        (PUBLIC, 0): E.CLUSTER_AUTHORIZATION_FAILED,
        (PUBLIC, 1): E.CLUSTER_AUTHORIZATION_FAILED,
    }
    assert broker.log_end(PUBLIC, 0) == broker.log_end(PUBLIC, 1) == 0
    assert markers("admin") == {(PUBLIC, 0): E.NONE, (PUBLIC, 1): E.NONE}
    assert broker.log_end(PUBLIC, 0) == 1


def test_describe_and_list_transactions(broker: Broker) -> None:
    assert init_producer_id(broker, "alice", "tx")[0] == E.NONE
    answer = broker.call("bob", ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx"]})
    assert err(answer.transaction_states[0].error_code) == (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    answer = broker.call("alice", ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx"]})
    assert err(answer.transaction_states[0].error_code) == E.NONE  # WRITE implies DESCRIBE
    assert [
        t.transactional_id
        for t in broker.call("alice", ApiKey.LIST_TRANSACTIONS, 0, {}).transaction_states
    ] == ["tx"]
    assert broker.call("bob", ApiKey.LIST_TRANSACTIONS, 0, {}).transaction_states == ()


def test_describe_transactions_shows_only_describable_topics(broker: Broker) -> None:
    assert init_producer_id(broker, "alice", "tx")[0] == E.NONE
    assert add_partitions(broker, "admin", [PUBLIC, SECRET]) == {
        (PUBLIC, 0): E.NONE,
        (SECRET, 0): E.NONE,
    }
    answer = broker.call("alice", ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx"]})
    assert [t.topic for t in answer.transaction_states[0].topics] == [PUBLIC]
    answer = broker.call("admin", ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx"]})
    assert [t.topic for t in answer.transaction_states[0].topics] == [PUBLIC, SECRET]


# --- groups ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [3, 4])
def test_find_coordinator_needs_describe(broker: Broker, version: int) -> None:
    def find(who: str, key: str, key_type: int) -> tuple[E, str | None, int]:
        data: dict[str, Any] = {"key_type": key_type}
        if version >= 4:
            data["coordinator_keys"] = [key]
        else:
            data["key"] = key
        answer = broker.call(who, ApiKey.FIND_COORDINATOR, version, data)
        found = answer.coordinators[0] if version >= 4 else answer
        return err(found.error_code), found.error_message, int(found.node_id)

    message = "Group authorization failed." if version < 4 else None
    assert find("bob", "g", 0) == (E.GROUP_AUTHORIZATION_FAILED, message, -1)
    txn_message = "Transactional Id authorization failed." if version < 4 else None
    assert find("bob", "tx", 1) == (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, txn_message, -1)
    assert find("alice", "g", 0)[0] == E.NONE  # READ implies DESCRIBE
    assert find("alice", "tx", 1)[0] == E.NONE


def test_group_membership_needs_read_on_the_group(broker: Broker) -> None:
    join = broker.call(
        "bob",
        ApiKey.JOIN_GROUP,
        5,
        {
            "group_id": "g",
            "session_timeout": 10000,
            "rebalance_timeout": 10000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        },
    )
    assert (err(join.error_code), join.generation_id) == (E.GROUP_AUTHORIZATION_FAILED, -1)
    assert 0 not in broker.groups.loaded  # the coordinator was not even asked
    sync = broker.call(
        "bob",
        ApiKey.SYNC_GROUP,
        3,
        {"group_id": "g", "generation_id": 1, "member_id": "m", "assignments": []},
    )
    assert err(sync.error_code) == E.GROUP_AUTHORIZATION_FAILED
    heartbeat = broker.call(
        "bob", ApiKey.HEARTBEAT, 3, {"group_id": "g", "generation_id": 1, "member_id": "m"}
    )
    assert err(heartbeat.error_code) == E.GROUP_AUTHORIZATION_FAILED
    leave = broker.call(
        "bob", ApiKey.LEAVE_GROUP, 3, {"group_id": "g", "members": [{"member_id": "m"}]}
    )
    assert (err(leave.error_code), leave.members) == (E.GROUP_AUTHORIZATION_FAILED, ())


def commit(broker: Broker, who: str, group: str, topics: list[str]) -> dict[Any, E]:
    answer = broker.call(
        who,
        ApiKey.OFFSET_COMMIT,
        8,
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {
                    "name": t,
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}
                    ],
                }
                for t in topics
            ],
        },
    )
    return by_partition(answer.topics, "name", "partitions", "partition_index")


def test_offset_commit_needs_read_on_group_and_topics(broker: Broker) -> None:
    assert commit(broker, "bob", "g", [PUBLIC]) == {(PUBLIC, 0): E.GROUP_AUTHORIZATION_FAILED}
    assert commit(broker, "alice", "g", [PUBLIC, SECRET]) == {
        (PUBLIC, 0): E.NONE,
        (SECRET, 0): E.TOPIC_AUTHORIZATION_FAILED,
    }
    committed = broker.groups.loaded[0].manager.committed("g")
    assert set(committed) == {TopicPartition(PUBLIC, 0)}
    # Only refused topics: the coordinator is not even asked.
    assert commit(broker, "alice", "g", [SECRET]) == {(SECRET, 0): E.TOPIC_AUTHORIZATION_FAILED}


def test_offset_fetch_needs_describe_and_hides_topics(broker: Broker) -> None:
    assert commit(broker, "admin", "g", [PUBLIC, SECRET]) == {
        (PUBLIC, 0): E.NONE,
        (SECRET, 0): E.NONE,
    }

    def offsets(who: str, topics: list[str] | None, version: int = 7) -> Any:
        return broker.call(
            who,
            ApiKey.OFFSET_FETCH,
            version,
            {
                "group_id": "g",
                "topics": None
                if topics is None
                else [{"name": t, "partition_indexes": [0]} for t in topics],
            },
        )

    named = offsets("alice", [PUBLIC, SECRET])
    assert err(named.error_code) == E.NONE
    assert {
        (t.name, int(p.committed_offset), err(p.error_code))
        for t in named.topics
        for p in t.partitions
    } == {(PUBLIC, 5, E.NONE), (SECRET, -1, E.TOPIC_AUTHORIZATION_FAILED)}
    every = offsets("alice", None)
    assert [t.name for t in every.topics] == [PUBLIC]  # secret left out
    refused = offsets("bob", [PUBLIC])
    assert (err(refused.error_code), refused.topics) == (E.GROUP_AUTHORIZATION_FAILED, ())
    # v1 has no top-level error: each partition carries it.
    v1 = offsets("bob", [PUBLIC], version=1)
    assert [(t.name, err(p.error_code)) for t in v1.topics for p in t.partitions] == [
        (PUBLIC, E.GROUP_AUTHORIZATION_FAILED)
    ]
    multi = broker.call(
        "bob",
        ApiKey.OFFSET_FETCH,
        8,
        {"groups": [{"group_id": "g", "topics": None}], "require_stable": False},
    )
    assert err(multi.groups[0].error_code) == E.GROUP_AUTHORIZATION_FAILED


def test_txn_offset_commit(broker: Broker) -> None:
    def txn_commit(who: str, group: str, topics: list[str]) -> dict[Any, E]:
        answer = broker.call(
            who,
            ApiKey.TXN_OFFSET_COMMIT,
            3,
            {
                "transactional_id": "tx",
                "group_id": group,
                "producer_id": 1000,
                "producer_epoch": 0,
                "generation_id": -1,
                "member_id": "",
                "topics": [
                    {
                        "name": t,
                        "partitions": [{"partition_index": 0, "committed_offset": 3}],
                    }
                    for t in topics
                ],
            },
        )
        return by_partition(answer.topics, "name", "partitions", "partition_index")

    assert txn_commit("bob", "g", [PUBLIC]) == {
        (PUBLIC, 0): E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    }
    assert txn_commit("alice", "h", [PUBLIC]) == {(PUBLIC, 0): E.GROUP_AUTHORIZATION_FAILED}
    assert txn_commit("alice", "g", [SECRET]) == {(SECRET, 0): E.TOPIC_AUTHORIZATION_FAILED}
    assert broker.log_end(OFFSETS_TOPIC) == 0  # nothing written


def test_describe_list_and_delete_groups(broker: Broker) -> None:
    assert commit(broker, "admin", "g", [PUBLIC])[(PUBLIC, 0)] == E.NONE
    assert commit(broker, "admin", "h", [PUBLIC])[(PUBLIC, 0)] == E.NONE
    answer = broker.call(
        "alice",
        ApiKey.DESCRIBE_GROUPS,
        5,
        {"groups": ["g", "h"], "include_authorized_operations": True},
    )
    g, h = answer.groups
    assert (err(g.error_code), g.authorized_operations) == (E.NONE, 1 << 3 | 1 << 8)
    assert (err(h.error_code), h.group_state, h.authorized_operations) == (
        E.GROUP_AUTHORIZATION_FAILED,
        "",
        MISSING,
    )
    plain = broker.call("admin", ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g"]})
    assert plain.groups[0].authorized_operations == MISSING

    def listed(who: str) -> list[str]:
        answer = broker.call(who, ApiKey.LIST_GROUPS, 4, {"states_filter": []})
        return sorted(str(x.group_id) for x in answer.groups)

    assert listed("alice") == ["g"]
    assert listed("bob") == []
    assert listed("admin") == ["g", "h"]

    deleted = broker.call("alice", ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g"]})
    assert err(deleted.results[0].error_code) == E.GROUP_AUTHORIZATION_FAILED
    assert broker.groups.loaded[0].manager.committed("g")  # still there
    answer = broker.call(
        "alice",
        ApiKey.OFFSET_DELETE,
        0,
        {"group_id": "g", "topics": [{"name": PUBLIC, "partitions": [{"partition_index": 0}]}]},
    )
    assert (err(answer.error_code), answer.topics) == (E.GROUP_AUTHORIZATION_FAILED, ())


def test_offset_delete_needs_read_on_each_topic(broker: Broker) -> None:
    assert broker.apis.authorizer is not None
    broker.apis.authorizer.core.add(
        AclBinding(ResourcePattern(GROUP, "g"), e) for e in allow("User:alice", Op.DELETE)
    )
    assert commit(broker, "admin", "g", [PUBLIC, SECRET]) == {
        (PUBLIC, 0): E.NONE,
        (SECRET, 0): E.NONE,
    }
    answer = broker.call(
        "alice",
        ApiKey.OFFSET_DELETE,
        0,
        {
            "group_id": "g",
            "topics": [
                {"name": t, "partitions": [{"partition_index": 0}]} for t in (PUBLIC, SECRET)
            ],
        },
    )
    assert err(answer.error_code) == E.NONE
    assert by_partition(answer.topics, "name", "partitions", "partition_index") == {
        (PUBLIC, 0): E.NONE,
        (SECRET, 0): E.TOPIC_AUTHORIZATION_FAILED,
    }
    assert set(broker.groups.loaded[0].manager.committed("g")) == {TopicPartition(SECRET, 0)}


# --- no authorizer: nothing changes ------------------------------------------------------


def test_without_an_authorizer_everything_is_allowed(broker: Broker) -> None:
    broker.apis.authorizer = None
    assert produce(broker, "bob", [PUBLIC, SECRET]) == {(PUBLIC, 0): E.NONE, (SECRET, 0): E.NONE}
    assert fetch(broker, "bob", [SECRET], replica_id=2) == {(SECRET, 0): E.NONE}
    assert len(metadata(broker, "bob", None).topics) == 4
    assert init_producer_id(broker, "bob", None)[0] == E.NONE
    assert commit(broker, "bob", "g", [SECRET]) == {(SECRET, 0): E.NONE}
    # Asked for, authorized operations are every supported one (Kafka's answer).
    answer = metadata(broker, "bob", [SECRET], include_topic_authorized_operations=True)
    assert answer.topics[0].topic_authorized_operations == 3576


# --- a cluster broker's control plane --------------------------------------------------------


@pytest.fixture
def cluster_apis(tmp_path: Path) -> Iterator[KafkaApis]:
    node = cluster_node(tmp_path)
    apis = KafkaApis(node.config, ZkBackend(node.config, node), node.replica_manager, {})
    apis.handlers.update(ControlApis(apis.helper, node, node.replica_manager).handlers())
    authorizer = AclAuthorizer(super_users=frozenset({"User:broker"}))
    asyncio.run(authorizer.attach(InMemoryAclStore(ACLS)))
    apis.authorizer = authorizer
    yield apis
    set_request(INTERNAL)


def control_call(apis: KafkaApis, who: str, api: ApiKey, body: Any, version: int = 0) -> Any:
    async def inside() -> Any:
        set_request(user(who))
        answer = apis.handlers[api](RequestHeader(int(api), version, 1, "test"), body)
        return await answer if isinstance(answer, asyncio.Future) else answer

    return asyncio.run(inside())


def test_control_plane_needs_cluster_action(cluster_apis: KafkaApis) -> None:
    denied = E.CLUSTER_AUTHORIZATION_FAILED
    state = control.LeaderAndIsrPartitionState(
        topic_name="t",
        partition_index=0,
        controller_epoch=1,
        leader=1,
        leader_epoch=0,
        isr=(1,),
        partition_epoch=0,
        replicas=(1,),
        is_new=True,
    )
    leader_and_isr = control.LeaderAndIsrRequest(
        controller_id=2, controller_epoch=1, partition_states=(state,), live_leaders=()
    )
    answer = control_call(cluster_apis, "alice", ApiKey.LEADER_AND_ISR, leader_and_isr)
    assert answer.error_code == denied
    assert [(e.topic_name, e.partition_index, e.error_code) for e in answer.partition_errors] == [
        ("t", 0, denied)
    ]
    assert TopicPartition("t", 0) not in cluster_apis.replica_manager.partitions
    stop = control.StopReplicaRequest(
        controller_id=2,
        controller_epoch=1,
        partitions=(control.StopReplicaPartition(topic_name="t", partition_index=0),),
    )
    answer = control_call(cluster_apis, "alice", ApiKey.STOP_REPLICA, stop)
    assert (answer.error_code, answer.partition_errors[0].error_code) == (denied, denied)
    update = control.UpdateMetadataRequest(
        controller_id=2, controller_epoch=1, partition_states=(), live_brokers=()
    )
    assert control_call(cluster_apis, "alice", ApiKey.UPDATE_METADATA, update).error_code == denied
    shutdown = control.ControlledShutdownRequest(broker_id=2)
    assert (
        control_call(cluster_apis, "alice", ApiKey.CONTROLLED_SHUTDOWN, shutdown).error_code
        == denied
    )
    # A broker (super user) gets through to the node: here the controller's epoch is news.
    assert control_call(cluster_apis, "broker", ApiKey.UPDATE_METADATA, update).error_code == E.NONE


def test_requests_to_the_controller(cluster_apis: KafkaApis) -> None:
    denied = E.CLUSTER_AUTHORIZATION_FAILED
    alter = build(
        load_request_schema(ApiKey.ALTER_PARTITION, 2),
        {"broker_id": 2, "broker_epoch": 1, "topics": []},
    )
    answer = control_call(cluster_apis, "alice", ApiKey.ALTER_PARTITION, alter, 2)
    assert err(answer.error_code) == denied
    elect = build(
        load_request_schema(ApiKey.ELECT_LEADERS, 2),
        {
            "election_type": 0,
            "topic_partitions": [{"topic": PUBLIC, "partitions": [0, 1]}],
            "timeout": 1000,
        },
    )
    answer = control_call(cluster_apis, "alice", ApiKey.ELECT_LEADERS, elect, 2)
    assert err(answer.error_code) == denied
    assert [
        (r.topic, int(p.partition_id), err(p.error_code))
        for r in answer.replica_election_results
        for p in r.partition_result
    ] == [(PUBLIC, 0, denied), (PUBLIC, 1, denied)]
    quorum = build(load_request_schema(ApiKey.DESCRIBE_QUORUM, 1), {"topics": []})
    answer = control_call(cluster_apis, "alice", ApiKey.DESCRIBE_QUORUM, quorum, 1)
    assert err(answer.error_code) == denied
    # The broker's own principal passes: not the controller here.
    answer = control_call(cluster_apis, "broker", ApiKey.ALTER_PARTITION, alter, 2)
    assert err(answer.error_code) == E.NOT_CONTROLLER
    # UpdateFeatures needs ALTER on the cluster (Kafka's handleUpdateFeatures).
    cluster_apis.handlers.update(FeatureApis(cluster_apis.helper, cluster_apis.backend).handlers())
    features = build(
        load_request_schema(ApiKey.UPDATE_FEATURES, 1),
        {"feature_updates": [{"feature": "group.version", "max_version_level": 1}]},
    )
    answer = control_call(cluster_apis, "alice", ApiKey.UPDATE_FEATURES, features, 1)
    assert (err(answer.error_code), answer.error_message, answer.results) == (
        denied,
        "Cluster authorization failed.",
        (),
    )
    answer = control_call(cluster_apis, "broker", ApiKey.UPDATE_FEATURES, features, 1)
    assert err(answer.error_code) == E.NOT_CONTROLLER


def test_cluster_broker_metadata_and_topic_admin(cluster_apis: KafkaApis) -> None:
    """The cluster's own Metadata / CreateTopics / DeleteTopics / CreatePartitions paths
    refuse before anything reaches ZooKeeper (none is reachable here)."""
    states = tuple(
        control.UpdateMetadataPartitionState(
            topic_name=t,
            partition_index=0,
            controller_epoch=1,
            leader=1,
            leader_epoch=0,
            isr=(1,),
            partition_epoch=0,
            replicas=(1,),
        )
        for t in (PUBLIC, SECRET)
    )
    update = control.UpdateMetadataRequest(
        controller_id=1,
        controller_epoch=1,
        partition_states=states,
        live_brokers=(control.UpdateMetadataBroker(id=1, host="127.0.0.1", port=9092),),
    )
    assert control_call(cluster_apis, "broker", ApiKey.UPDATE_METADATA, update).error_code == 0

    def call(who: str, api: ApiKey, version: int, data: dict[str, Any]) -> Any:
        body = build(load_request_schema(api, version), data)
        return control_call(cluster_apis, who, api, body, version)

    listed = call("alice", ApiKey.METADATA, 12, {"topics": None})
    assert [t.name for t in listed.topics] == [PUBLIC]
    named = call(
        "alice",
        ApiKey.METADATA,
        12,
        {"topics": [{"name": SECRET}, {"name": "absent"}], "allow_auto_topic_creation": True},
    )
    assert [(t.name, err(t.error_code)) for t in named.topics] == [
        (SECRET, E.TOPIC_AUTHORIZATION_FAILED),
        ("absent", E.TOPIC_AUTHORIZATION_FAILED),
    ]
    created = call(
        "bob",
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [{"name": "new", "num_partitions": 1, "replication_factor": 1}],
            "timeout": 1000,
        },
    )
    assert [(t.name, err(t.error_code)) for t in created.topics] == [
        ("new", E.TOPIC_AUTHORIZATION_FAILED)
    ]
    deleted = call("alice", ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": PUBLIC}]})
    assert err(deleted.responses[0].error_code) == E.TOPIC_AUTHORIZATION_FAILED
    grown = call(
        "alice",
        ApiKey.CREATE_PARTITIONS,
        3,
        {"topics": [{"name": PUBLIC, "count": 3, "assignments": None}], "timeout": 1000},
    )
    assert err(grown.results[0].error_code) == E.TOPIC_AUTHORIZATION_FAILED
    assert cluster_apis.metadata.topics[PUBLIC].num_partitions == 1


# --- client quotas (KIP-546) --------------------------------------------------------------


def test_client_quotas_need_describe_configs_and_alter_configs_on_the_cluster(
    broker: Broker,
) -> None:
    authorizer = broker.apis.authorizer
    assert authorizer is not None
    quotas = ClientQuotaApis(
        QuotaConfigs(ClientQuotas()),
        # As BrokerSecurity.authorize_cluster: the operation on the cluster resource.
        authorize_cluster=lambda op: authorizer.authorize(Op[op], CLUSTER, CLUSTER_NAME),
    )
    broker.handlers.update(quotas.handlers())
    alter = {
        "entries": [
            {
                "entity": [{"entity_type": "client-id", "entity_name": "c"}],
                "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}],
            }
        ],
        "validate_only": False,
    }
    answer = broker.call("alice", ApiKey.ALTER_CLIENT_QUOTAS, 1, alter)
    assert [(err(e.error_code), e.error_message) for e in answer.entries] == [
        (E.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    ]
    describe = {"components": [], "strict": False}
    answer = broker.call("alice", ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, describe)
    assert (err(answer.error_code), answer.error_message, answer.entries) == (
        E.CLUSTER_AUTHORIZATION_FAILED,
        "Cluster authorization failed.",
        None,
    )
    answer = broker.call("admin", ApiKey.ALTER_CLIENT_QUOTAS, 1, alter)
    assert err(answer.entries[0].error_code) == E.NONE
    answer = broker.call("admin", ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, describe)
    assert [(e.entity[0].entity_name, e.values[0].value) for e in answer.entries] == [("c", 1024.0)]
