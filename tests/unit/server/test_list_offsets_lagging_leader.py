"""ListOffsets on a leader whose high watermark lags the records of earlier epochs (KIP-207,
Kafka's ``Partition.fetchOffsetForTimestamp``): the follower turned leader answers "not
yet" (retriable) instead of an offset lower than the previous leader gave, or none, until
its followers have fetched up to the start of its epoch; and a lookup by timestamp or for
the largest timestamp (-3) only answers records below the high watermark."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema

from tidelog.client.records import Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.protocol.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from tidelog.protocol.messages import build
from tidelog.server.apis.kafka_apis import KafkaApis
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.metadata.local import MetadataStore
from tidelog.server.metadata.local_backend import LocalBackend
from tidelog.server.network.request_context import INTERNAL, set_request
from tidelog.server.replica.manager import PartitionRead, ReplicaManager, log_config_for, now_ms
from tidelog.storage.log_manager import LogManager

TOPIC = "t"
TP = TopicPartition(TOPIC, 0)
#: Record i carries timestamp OLD + 1000 i: explicit CreateTime timestamps from 2001.
OLD = 1_000_000_000_000
LEADER = BrokerId(0)
FOLLOWERS = [BrokerId(1), BrokerId(2)]


@pytest.fixture
def apis(tmp_path: Path) -> Iterator[KafkaApis]:
    """One broker (id 0) leading ``t``-0, which holds 5 records, one batch each."""
    config = load_broker_config({"log.dirs": str(tmp_path), "broker.id": "0"})
    logs = LogManager(
        [tmp_path], log_config_for(effective_topic_config(config, {})), now_ms=now_ms()
    )
    replica_manager = ReplicaManager(config, logs)
    apis = KafkaApis(
        config, LocalBackend(config, MetadataStore(tmp_path), replica_manager), replica_manager, {}
    )
    apis.create_topic(TOPIC, 1, {"retention.ms": -1})
    hosted = replica_manager.partitions[TP]
    for i in range(5):
        batch = build_batch([Record(value=b"v%d" % i)], base_timestamp_ms=OLD + 1000 * i)
        hosted.log.append_as_leader(batch, leader_epoch=0, now_ms=now_ms())
    hosted.partition.on_leader_append(hosted.log.log_end_offset, now_ms())
    assert hosted.partition.high_watermark == 5
    yield apis
    set_request(INTERNAL)
    logs.close()


def lead_again_with_lagging_hw(apis: KafkaApis, high_watermark: int) -> None:
    """This broker becomes leader of epoch 1 with two followers, its high watermark still at
    ``high_watermark`` (what a follower knew when the previous leader died)."""
    hosted = apis.replica_manager.partitions[TP]
    apis.replica_manager.make_leader(
        TP,
        hosted.topic_id,
        effective_topic_config(apis.config, {"retention.ms": -1}),
        high_watermark,
        leader_epoch=1,
        partition_epoch=1,
        replicas=[LEADER, *FOLLOWERS],
        isr=[LEADER, *FOLLOWERS],
    )


def followers_fetch_to(apis: KafkaApis, offset: int) -> None:
    for follower in FOLLOWERS:
        apis.replica_manager.update_follower_fetch_state(
            follower, [PartitionRead(TP, offset, 1 << 20)]
        )


def list_offset(apis: KafkaApis, timestamp: int, version: int = 7, replica_id: int = -1) -> Any:
    """The answer for ``t``-0 to one ListOffsets request."""

    async def inside() -> Any:
        body = build(
            load_request_schema(ApiKey.LIST_OFFSETS, version),
            {
                "replica_id": replica_id,
                "topics": [
                    {"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}
                ],
            },
        )
        header = RequestHeader(int(ApiKey.LIST_OFFSETS), version, 1, "test")
        return apis.handlers[ApiKey.LIST_OFFSETS](header, body)

    answer = asyncio.run(inside())
    return answer.topics[0].partitions[0]


def found(part: Any) -> tuple[ErrorCode, int, int]:
    """(error, offset, timestamp) of one partition's answer."""
    code = ErrorCode._value2member_map_[int(part.error_code)]
    assert isinstance(code, ErrorCode)
    return code, int(part.offset), int(part.timestamp)


def test_a_leader_behind_its_epoch_start_answers_offset_not_available(apis: KafkaApis) -> None:
    lead_again_with_lagging_hw(apis, high_watermark=2)
    not_yet = (ErrorCode.OFFSET_NOT_AVAILABLE, -1, -1)
    # Record 3 is above the lagging HW: neither "none" (-1) nor an offset lower than the
    # previous leader's, but retriable.
    assert found(list_offset(apis, OLD + 3000)) == not_yet
    assert found(list_offset(apis, LATEST_TIMESTAMP)) == not_yet
    assert found(list_offset(apis, MAX_TIMESTAMP)) == not_yet
    assert found(list_offset(apis, OLD + 10**9)) == not_yet  # newer than every record
    # Below the HW the answer stands, and the log start needs no HW.
    assert found(list_offset(apis, OLD + 500)) == (ErrorCode.NONE, 1, OLD + 1000)
    assert found(list_offset(apis, EARLIEST_TIMESTAMP)) == (ErrorCode.NONE, 0, -1)
    # Clients of ListOffsets v1-v4 know no OFFSET_NOT_AVAILABLE: Kafka answers them
    # LEADER_NOT_AVAILABLE, which they retry after a metadata refresh.
    assert found(list_offset(apis, OLD + 3000, version=4)) == (
        ErrorCode.LEADER_NOT_AVAILABLE,
        -1,
        -1,
    )
    # Once the followers have fetched to the epoch start, the HW is there: real answers.
    followers_fetch_to(apis, 5)
    assert found(list_offset(apis, OLD + 3000)) == (ErrorCode.NONE, 3, OLD + 3000)
    assert found(list_offset(apis, LATEST_TIMESTAMP)) == (ErrorCode.NONE, 5, -1)
    assert found(list_offset(apis, MAX_TIMESTAMP)) == (ErrorCode.NONE, 4, OLD + 4000)
    assert found(list_offset(apis, OLD + 10**9)) == (ErrorCode.NONE, -1, -1)


def test_records_above_the_hw_of_a_settled_leader_are_not_answered(apis: KafkaApis) -> None:
    # The HW reached the epoch start (5); records appended since wait for the followers
    # (acks=1). Kafka answers such a lookup with no offset, no error.
    lead_again_with_lagging_hw(apis, high_watermark=2)
    followers_fetch_to(apis, 5)
    hosted = apis.replica_manager.partitions[TP]
    batch = build_batch([Record(value=b"new")], base_timestamp_ms=OLD + 9000)
    hosted.log.append_as_leader(batch, leader_epoch=1, now_ms=now_ms())
    hosted.partition.on_leader_append(hosted.log.log_end_offset, now_ms())
    assert hosted.partition.high_watermark == 5
    assert found(list_offset(apis, OLD + 9000)) == (ErrorCode.NONE, -1, -1)
    # The largest timestamp is record 5's, above the HW: not answered either (it was).
    assert found(list_offset(apis, MAX_TIMESTAMP)) == (ErrorCode.NONE, -1, -1)
    assert found(list_offset(apis, LATEST_TIMESTAMP)) == (ErrorCode.NONE, 5, -1)
    followers_fetch_to(apis, 6)
    assert found(list_offset(apis, OLD + 9000)) == (ErrorCode.NONE, 5, OLD + 9000)
    assert found(list_offset(apis, MAX_TIMESTAMP)) == (ErrorCode.NONE, 5, OLD + 9000)
