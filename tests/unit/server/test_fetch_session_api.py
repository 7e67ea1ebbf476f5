"""Fetch with sessions through the broker's handler (``DataApis.handle_fetch`` over
``fetch_session``), in-process: topic-id sessions (Fetch v13+), unknown topic ids kept and
answered, the version check, and a follower's incremental fetch updating its fetch offset."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema

from tidelog.client.records import Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader, decode_response
from tidelog.protocol.messages import build
from tidelog.server.apis.kafka_apis import KafkaApis
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.metadata.local import MetadataStore
from tidelog.server.network.connection import Response
from tidelog.server.replica.manager import ReplicaManager, log_config_for, now_ms
from tidelog.storage.log_manager import LogManager


@pytest.fixture
def apis(tmp_path: Path) -> Iterator[KafkaApis]:
    """A broker alone with topic ``t`` (2 partitions), 3 records in t-0."""
    config = load_broker_config({"log.dirs": str(tmp_path)})
    logs = LogManager(
        [tmp_path], log_config_for(effective_topic_config(config, {})), now_ms=now_ms()
    )
    apis = KafkaApis.alone(config, MetadataStore(tmp_path), ReplicaManager(config, logs), {})
    apis.create_topic("t", 2, {})
    appended = apis.replica_manager.append_records(
        {TopicPartition("t", 0): build_batch([Record(value=b"v")] * 3, base_timestamp_ms=1)}, 1
    )
    assert all(result.error == ErrorCode.NONE for result, _ in appended.values())
    yield apis
    logs.close()


def fetch(apis: KafkaApis, version: int, data: dict[str, Any]) -> Any:
    base = {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20}
    body = build(load_request_schema(ApiKey.FETCH, version), {**base, **data})

    async def inside() -> Any:
        answer = apis.handlers[ApiKey.FETCH](
            RequestHeader(int(ApiKey.FETCH), version, 1, "t"), body
        )
        if isinstance(answer, asyncio.Future):
            answer = await answer
        if isinstance(answer, Response):
            frame = b"".join(
                part if isinstance(part, bytes) else part.read_bytes()  # type: ignore[attr-defined]
                for part in answer.parts
            )
            return decode_response(ApiKey.FETCH, version, frame[4:])[1]
        return answer

    return asyncio.run(inside())


def by_id(topic_id: uuid.UUID, *partitions: tuple[int, int]) -> dict[str, Any]:
    return {
        "topic_id": topic_id,
        "partitions": [
            {"partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20}
            for p, o in partitions
        ],
    }


def answered(body: Any, key: str) -> dict[tuple[Any, int], int]:
    return {
        (getattr(t, key), int(p.partition_index)): int(p.error_code)
        for t in body.responses
        for p in t.partitions
    }


def test_topic_id_session_answers_news_and_keeps_unknown_ids(apis: KafkaApis) -> None:
    known = apis.metadata.topics["t"].topic_id
    unknown = uuid.uuid4()
    full = fetch(
        apis,
        13,
        {
            "session_id": 0,
            "session_epoch": 0,
            "topics": [by_id(known, (0, 0), (1, 0)), by_id(unknown, (0, 0))],
        },
    )
    session_id = int(full.session_id)
    assert session_id != 0
    assert answered(full, "topic_id") == {
        (known, 0): ErrorCode.NONE,
        (known, 1): ErrorCode.NONE,
        (unknown, 0): ErrorCode.UNKNOWN_TOPIC_ID,
    }
    # Caught up on t-0: only the unknown topic id (an error is always news) comes back.
    step = fetch(
        apis,
        13,
        {"session_id": session_id, "session_epoch": 1, "topics": [by_id(known, (0, 3))]},
    )
    assert int(step.session_id) == session_id
    assert answered(step, "topic_id") == {(unknown, 0): ErrorCode.UNKNOWN_TOPIC_ID}
    # Forgetting it leaves an idle session: an empty answer.
    step = fetch(
        apis,
        13,
        {
            "session_id": session_id,
            "session_epoch": 2,
            "topics": [],
            "forgotten_topics_data": [{"topic_id": unknown, "partitions": [0]}],
        },
    )
    assert answered(step, "topic_id") == {}
    assert apis.replica_manager.fetch_sessions.num_partitions == 2


def test_a_topic_id_session_asked_by_name_is_a_topic_id_error(apis: KafkaApis) -> None:
    known = apis.metadata.topics["t"].topic_id
    full = fetch(apis, 13, {"session_id": 0, "session_epoch": 0, "topics": [by_id(known, (0, 0))]})
    by_name = fetch(
        apis, 12, {"session_id": int(full.session_id), "session_epoch": 1, "topics": []}
    )
    assert by_name.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    assert (int(by_name.session_id), list(by_name.responses)) == (0, [])


def test_a_follower_session_moves_its_fetch_offset_and_sees_the_high_watermark(
    apis: KafkaApis,
) -> None:
    """A follower's incremental fetch names only the partition whose offset moved; the
    leader still reads the partitions it left out, at their cached offsets."""

    def topic(*partitions: tuple[int, int]) -> dict[str, Any]:
        return {
            "topic": "t",
            "partitions": [
                {"partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20}
                for p, o in partitions
            ],
        }

    full = fetch(
        apis,
        12,
        {"replica_id": 1, "session_id": 0, "session_epoch": 0, "topics": [topic((0, 0), (1, 0))]},
    )
    session_id = int(full.session_id)
    assert answered(full, "topic") == {("t", 0): 0, ("t", 1): 0}
    # Nothing listed: t-0's records are sent again from the cached offset 0.
    again = fetch(
        apis, 12, {"replica_id": 1, "session_id": session_id, "session_epoch": 1, "topics": []}
    )
    parts = {int(p.partition_index): p for t in again.responses for p in t.partitions}
    assert list(parts) == [0]
    assert parts[0].records
    # The follower appended them: t-0 at 3, nothing new to send, an empty answer.
    caught_up = fetch(
        apis,
        12,
        {"replica_id": 1, "session_id": session_id, "session_epoch": 2, "topics": [topic((0, 3))]},
    )
    assert answered(caught_up, "topic") == {}
    session = apis.replica_manager.fetch_sessions.get(session_id)
    assert session is not None
    assert session.privileged
    assert [p.fetch_offset for p in session.partitions.values()] == [0, 3]


def test_a_consumer_session_on_a_follower_reads_below_its_high_watermark(
    apis: KafkaApis,
) -> None:
    """KIP-392 with KIP-227: a consumer's Fetch v11+ session on a follower of t-0 (high
    watermark 2 of its 3 records) reads up to that HW, hears of nothing until it moves, then
    of the new HW and the record; Fetch v10 (no client metadata) is NOT_LEADER_OR_FOLLOWER."""
    rm = apis.replica_manager
    tp = TopicPartition("t", 0)
    hosted = rm.partitions[tp]
    rm.make_follower(
        tp, hosted.topic_id, effective_topic_config(rm.config, {}), leader=BrokerId(1),
        leader_epoch=1, partition_epoch=1, replicas=[BrokerId(0), BrokerId(1)],
        isr=[BrokerId(0), BrokerId(1)],
    )  # fmt: skip
    hosted.partition.update_follower_high_watermark(log_end_offset=3, leader_high_watermark=2)

    def topic(offset: int) -> dict[str, Any]:
        wanted = {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
        return {"topic": "t", "partitions": [wanted]}

    old = fetch(apis, 10, {"session_id": 0, "session_epoch": -1, "topics": [topic(0)]})
    assert answered(old, "topic") == {("t", 0): ErrorCode.NOT_LEADER_OR_FOLLOWER}

    full = fetch(
        apis, 12, {"session_id": 0, "session_epoch": 0, "rack_id": "b", "topics": [topic(2)]}
    )
    session_id = int(full.session_id)
    assert session_id != 0
    (part,) = full.responses[0].partitions
    assert (part.error_code, part.high_watermark, part.preferred_read_replica) == (0, 2, -1)
    assert not part.records  # the third record is above the follower's HW
    idle = fetch(apis, 12, {"session_id": session_id, "session_epoch": 1, "topics": []})
    assert answered(idle, "topic") == {}
    hosted.partition.update_follower_high_watermark(log_end_offset=3, leader_high_watermark=3)
    moved = fetch(apis, 12, {"session_id": session_id, "session_epoch": 2, "topics": []})
    (part,) = moved.responses[0].partitions
    assert (part.error_code, part.high_watermark) == (0, 3)
    assert part.records
