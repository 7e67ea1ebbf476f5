"""API behaviour the client libraries do not expose directly, checked with exact requests."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from tests.harness import BrokerProcess
from tests.integration.rawclient import METADATA_V, Raw, batch, create, fetch, produce
from tidelog.client.records import Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey

pytestmark = pytest.mark.integration


def new_topic(raw: Raw) -> str:
    name = f"api-{uuid.uuid4().hex[:8]}"
    assert create(raw, name).error_code == ErrorCode.NONE
    return name


def list_offset(raw: Raw, topic: str, timestamp: int, partition: int = 0) -> tuple[int, int, int]:
    body = raw.call(
        ApiKey.LIST_OFFSETS,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [{"partition_index": partition, "timestamp": timestamp}],
                }
            ],
        },
    )
    p = body.topics[0].partitions[0]
    return int(p.error_code), int(p.offset), int(p.timestamp)


def test_fetch_inside_a_batch_returns_the_whole_batch(broker: BrokerProcess) -> None:
    raw = Raw(broker)
    topic = new_topic(raw)
    assert produce(raw, topic, 0, batch(b"a", b"b", b"c")).base_offset == 0
    assert produce(raw, topic, 0, batch(b"d", b"e")).base_offset == 3
    part = fetch(raw, topic, 0, 4)
    # The slice starts at the batch holding offset 4, whose base offset is 3.
    assert int.from_bytes(part.records[:8], "big") == 3
    assert b"d" in part.records
    assert b"a" not in part.records
    part = fetch(raw, topic, 0, 1)
    assert int.from_bytes(part.records[:8], "big") == 0
    assert part.high_watermark == 5
    raw.close()


def test_list_offsets_earliest_latest_max_timestamp_and_delete_records(
    broker: BrokerProcess,
) -> None:
    raw = Raw(broker)
    topic = new_topic(raw)
    for ts in (1000, 5000, 3000):
        records = build_batch([Record(value=b"v%d" % ts)], base_timestamp_ms=ts)
        assert produce(raw, topic, 0, records).error_code == ErrorCode.NONE
    assert list_offset(raw, topic, -2) == (0, 0, -1)
    assert list_offset(raw, topic, -1) == (0, 3, -1)
    assert list_offset(raw, topic, -3) == (0, 1, 5000)  # max timestamp (KIP-734)
    assert list_offset(raw, topic, 2000) == (0, 1, 5000)  # first record with ts >= 2000
    assert list_offset(raw, topic, 9999) == (0, -1, -1)
    assert list_offset(raw, topic, -1, partition=9)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    deleted = raw.call(
        ApiKey.DELETE_RECORDS,
        2,
        {
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": 0, "offset": 2},
                        {"partition_index": 3, "offset": 0},
                    ],
                }
            ],
            "timeout": 5000,
        },
    )
    results = [(p.error_code, p.low_watermark) for p in deleted.topics[0].partitions]
    assert results == [(ErrorCode.NONE, 2), (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]
    assert list_offset(raw, topic, -2) == (0, 2, -1)
    assert fetch(raw, topic, 0, 0).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert fetch(raw, topic, 0, 2).records.count(b"v3000") == 1
    beyond = raw.call(
        ApiKey.DELETE_RECORDS,
        2,
        {
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 99}]}],
            "timeout": 5000,
        },
    )
    assert beyond.topics[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    raw.close()


def test_describe_cluster_metadata_by_topic_id_and_no_auto_create(broker: BrokerProcess) -> None:
    raw = Raw(broker)
    cluster = raw.call(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False})
    assert cluster.error_code == ErrorCode.NONE
    assert cluster.controller_id == broker.broker_id
    assert [(b.broker_id, b.port) for b in cluster.brokers] == [(broker.broker_id, broker.port)]
    topic = new_topic(raw)
    md = raw.call(ApiKey.METADATA, METADATA_V, {"topics": [{"name": topic}]})
    topic_id = md.topics[0].topic_id
    assert md.cluster_id == cluster.cluster_id
    by_id = raw.call(ApiKey.METADATA, METADATA_V, {"topics": [{"topic_id": topic_id}]})
    assert by_id.topics[0].name == topic
    missing = f"missing-{uuid.uuid4().hex[:6]}"
    md = raw.call(
        ApiKey.METADATA,
        METADATA_V,
        {"topics": [{"name": missing}], "allow_auto_topic_creation": False},
    )
    assert md.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # Fetch v13+ addresses topics by id.
    assert produce(raw, topic, 0, batch(b"by-id")).error_code == ErrorCode.NONE
    fetched = raw.call(
        ApiKey.FETCH,
        13,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    assert fetched.responses[0].topic_id == topic_id
    assert b"by-id" in fetched.responses[0].partitions[0].records
    raw.close()


def test_alter_configs_replaces_incremental_merges(broker: BrokerProcess) -> None:
    raw = Raw(broker)
    topic = f"cfg-{uuid.uuid4().hex[:8]}"
    assert create(raw, topic, **{"retention.ms": "1000", "segment.bytes": "100000"}).error_code == 0

    def describe() -> dict[str, tuple[str, int]]:
        body = raw.call(
            ApiKey.DESCRIBE_CONFIGS,
            4,
            {
                "resources": [
                    {"resource_type": 2, "resource_name": topic, "configuration_keys": None}
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )
        return {c.name: (c.value, c.config_source) for c in body.results[0].configs}

    before = describe()
    assert before["retention.ms"] == ("1000", 1)  # TOPIC_CONFIG
    assert before["segment.bytes"] == ("100000", 1)
    assert before["cleanup.policy"] == ("delete", 5)  # DEFAULT_CONFIG
    body = raw.call(
        ApiKey.ALTER_CONFIGS,
        2,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": topic,
                    "configs": [{"name": "retention.ms", "value": "2000"}],
                }
            ],
            "validate_only": False,
        },
    )
    assert body.responses[0].error_code == ErrorCode.NONE
    after = describe()
    assert after["retention.ms"] == ("2000", 1)
    assert after["segment.bytes"][1] == 5  # legacy AlterConfigs replaced the whole set
    body = raw.call(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": topic,
                    "configs": [
                        {"name": "retention.ms", "config_operation": 1, "value": None},
                        {"name": "max.message.bytes", "config_operation": 0, "value": "2048"},
                    ],
                }
            ],
            "validate_only": False,
        },
    )
    assert body.responses[0].error_code == ErrorCode.NONE
    final = describe()
    assert final["retention.ms"][1] == 5
    assert final["max.message.bytes"] == ("2048", 1)
    assert produce(raw, topic, 0, batch(b"x" * 3000)).error_code == ErrorCode.MESSAGE_TOO_LARGE
    # num.partitions cannot change at runtime (Kafka's answer, KIP-226): refused, not ignored.
    body = raw.call(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": 4,
                    "resource_name": str(broker.broker_id),
                    "configs": [{"name": "num.partitions", "config_operation": 0, "value": "3"}],
                }
            ],
            "validate_only": False,
        },
    )
    assert body.responses[0].error_code == ErrorCode.INVALID_REQUEST
    assert "Cannot update these configs dynamically" in body.responses[0].error_message
    raw.close()


def test_acks_all_long_poll_timeout_and_init_producer_id(broker: BrokerProcess) -> None:
    raw = Raw(broker)
    topic = new_topic(raw)
    # acks=all on one broker: the ISR is the leader alone, the HW moves with the append.
    result = produce(raw, topic, 0, batch(b"all"), acks=-1)
    assert (result.error_code, result.base_offset) == (ErrorCode.NONE, 0)
    # A long poll with nothing to read answers after max_wait_ms with empty records.
    part = fetch(raw, topic, 0, 1, max_wait_ms=200)
    assert (part.error_code, part.high_watermark, part.records) == (ErrorCode.NONE, 1, b"")
    pid = raw.call(
        ApiKey.INIT_PRODUCER_ID,
        4,
        {"transactional_id": None, "transaction_timeout": 60000},
    )
    pid2 = raw.call(
        ApiKey.INIT_PRODUCER_ID,
        4,
        {"transactional_id": None, "transaction_timeout": 60000},
    )
    assert pid.error_code == ErrorCode.NONE
    assert pid2.producer_id > pid.producer_id >= 0
    # CreatePartitions errors; DeleteTopics of an unknown topic.
    body = raw.call(
        ApiKey.CREATE_PARTITIONS,
        3,
        {
            "topics": [
                {"name": topic, "count": 1, "assignments": None},
                {"name": "no-such-topic", "count": 2, "assignments": None},
            ],
            "timeout": 5000,
            "validate_only": False,
        },
    )
    assert [r.error_code for r in body.results] == [
        ErrorCode.INVALID_PARTITIONS,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    body = raw.call(
        ApiKey.DELETE_TOPICS,
        6,
        {"topics": [{"name": "no-such-topic", "topic_id": uuid.UUID(int=0)}], "timeout": 5000},
    )
    assert body.responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    raw.close()


def test_min_insync_replicas_above_the_isr_refuses_acks_all_only(broker: BrokerProcess) -> None:
    raw = Raw(broker)
    topic = f"minisr-{uuid.uuid4().hex[:8]}"
    assert create(raw, topic, **{"min.insync.replicas": "2"}).error_code == ErrorCode.NONE
    refused = produce(raw, topic, 0, batch(b"all"), acks=-1)
    assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS  # the ISR is this broker alone
    assert produce(raw, topic, 0, batch(b"one"), acks=1).base_offset == 0
    part = fetch(raw, topic, 0, 0)
    assert b"one" in part.records
    assert b"all" not in part.records  # refused before the append: nothing written
    raw.close()


def test_lone_broker_features_and_no_describe_quorum(broker: BrokerProcess) -> None:
    raw = Raw(broker)
    try:
        versions = raw.call(ApiKey.API_VERSIONS, 4, {})
        assert ApiKey.DESCRIBE_QUORUM not in {int(k.api_key) for k in versions.api_keys}
        assert [f.name for f in versions.supported_features] == [
            "group.version",
            "transaction.version",
        ]
        assert (versions.finalized_features, versions.finalized_features_epoch) == ((), 0)
        # Its own controller: UpdateFeatures is answered here, and refused as Kafka does.
        update = {"feature": "transaction.version", "max_version_level": 2, "upgrade_type": 1}
        answer = raw.call(ApiKey.UPDATE_FEATURES, 1, {"feature_updates": [update]})
        assert answer.error_code == ErrorCode.NONE
        assert [(r.feature, r.error_code) for r in answer.results] == [
            ("transaction.version", ErrorCode.INVALID_REQUEST)
        ]
        # A lone broker does not serve DescribeQuorum: the connection closes, as a
        # ZooKeeper-mode Kafka closes it for an API it does not expose.
        _cid, frame = raw.encode(ApiKey.DESCRIBE_QUORUM, 2, {"topics": []})
        raw.send_bytes(frame)
        assert raw.is_closed_by_peer()
    finally:
        raw.close()


def test_idle_connections_are_closed(new_broker: Callable[..., BrokerProcess]) -> None:
    broker = new_broker({"connections.max.idle.ms": "500"})
    idle = Raw(broker)
    assert idle.is_closed_by_peer()  # within the 10 s read timeout; nothing was pending
    idle.close()
    assert broker.alive()
