"""A cluster broker answers CreatePartitions and DeleteTopics once the change is in the
metadata it serves (``tidelog.server.cluster.propagation``), REQUEST_TIMED_OUT when it is not
by timeout_ms, at once with timeout_ms 0 (Kafka's DelayedCreatePartitions and
DelayedDeleteTopics); a topic config change is answered once ZooKeeper has it.

The node has no ZooKeeper: the admin write itself is stood in for, and the controller's
UpdateMetadata is applied by hand. The other live brokers (2 and 3) are described at ports
nobody serves: propagation's rule 2 gives them up without changing the answer (the
three-broker integration test covers brokers that answer)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema

from tidelog.client.metadata import TopicMetadata
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId
from tidelog.protocol import control
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.protocol.messages import build
from tidelog.server.apis.kafka_apis import KafkaApis
from tidelog.server.cluster import propagation
from tidelog.server.cluster.backend import ZkBackend
from tidelog.server.cluster.node import ClusterNode
from tidelog.server.cluster.propagation import MetadataPropagation

from .nodes import cluster_node
from .test_cluster_metadata import TOPIC, update_metadata

#: A short timeout_ms for the answers that must time out (what is asserted is the code).
SHORT = timedelta(milliseconds=300)
#: Long enough never to be reached when the metadata arrives.
LONG = timedelta(seconds=30)


def broker(tmp_path: Path) -> tuple[ClusterNode, KafkaApis]:
    node = cluster_node(tmp_path, auto_create_topics_enable="false")
    apis = KafkaApis(
        node.config,
        ZkBackend(node.config, node),
        node.replica_manager,
        {
            ApiKey.CREATE_PARTITIONS: (0, 3),
            ApiKey.DELETE_TOPICS: (0, 6),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
        },
    )
    return node, apis


async def call(apis: KafkaApis, api: ApiKey, version: int, data: dict[str, Any]) -> Any:
    body = build(load_request_schema(api, version), data)
    answer = apis.handlers[api](RequestHeader(int(api), version, 1, "test"), body)
    if isinstance(answer, asyncio.Future):
        answer = await answer
    return answer


def later(step: Callable[[], Awaitable[object]]) -> Callable[..., Awaitable[None]]:
    """An admin write stood in for: it succeeds, and the controller's UpdateMetadata
    (``step``) reaches this broker a moment after the write was answered."""

    async def write(*_args: object, **_kwargs: object) -> Any:
        async def deliver() -> None:
            await asyncio.sleep(0.1)
            await step()

        asyncio.get_running_loop().create_task(deliver())
        return ErrorCode.NONE, None

    return write


def deleted(topic: str) -> control.UpdateMetadataRequest:
    """The controller's UpdateMetadata for a deleted topic (leader LeaderDuringDelete)."""
    grown = update_metadata(topic, range(3))
    return control.UpdateMetadataRequest(
        controller_id=grown.controller_id,
        controller_epoch=grown.controller_epoch,
        partition_states=tuple(
            control.UpdateMetadataPartitionState(
                **{
                    **{f: getattr(ps, f) for f in ps.__dataclass_fields__},
                    "leader": BrokerId(-2),
                }
            )
            for ps in grown.partition_states
        ),
        live_brokers=grown.live_brokers,
        topic_ids=grown.topic_ids,
    )


async def delete(apis: KafkaApis, timeout: timedelta) -> ErrorCode:
    answer = await call(
        apis, ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": TOPIC}], "timeout": timeout}
    )
    (result,) = answer.responses
    return ErrorCode(result.error_code)


async def grow(apis: KafkaApis, timeout: timedelta, *, validate_only: bool = False) -> Any:
    answer = await call(
        apis,
        ApiKey.CREATE_PARTITIONS,
        3,
        {
            "topics": [{"name": TOPIC, "count": 4, "assignments": None}],
            "timeout": timeout,
            "validate_only": validate_only,
        },
    )
    (result,) = answer.results
    return ErrorCode(result.error_code), result.error_message


def test_delete_topics_answers_once_the_topic_left_the_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body() -> None:
        node, apis = broker(tmp_path)
        await node.handle_update_metadata(update_metadata(TOPIC, range(3)))
        monkeypatch.setattr(node, "delete_topic", later(lambda: asyncio.sleep(0)))
        # The controller never deletes it: still in the metadata at timeout_ms.
        assert await delete(apis, SHORT) == ErrorCode.REQUEST_TIMED_OUT
        # timeout_ms 0: answered at once, the topic still listed (Kafka: no wait).
        assert await delete(apis, timedelta(0)) == ErrorCode.NONE
        assert TOPIC in node.metadata.topics
        monkeypatch.setattr(
            node, "delete_topic", later(lambda: node.handle_update_metadata(deleted(TOPIC)))
        )
        assert await delete(apis, LONG) == ErrorCode.NONE
        assert TOPIC not in node.metadata.topics  # the answer came after the metadata
        await node.propagation.close()
        await node.fetchers.stop()
        await node.client.close()

    asyncio.run(body())


def test_create_partitions_answers_once_every_new_partition_has_a_leader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body() -> None:
        node, apis = broker(tmp_path)
        await node.handle_update_metadata(update_metadata(TOPIC, range(3)))
        monkeypatch.setattr(node, "create_partitions", later(lambda: asyncio.sleep(0)))
        # Written, but the controller never describes partition 3: REQUEST_TIMED_OUT.
        assert await grow(apis, SHORT) == (ErrorCode.REQUEST_TIMED_OUT, None)
        assert await grow(apis, timedelta(0)) == (ErrorCode.NONE, None)
        assert await grow(apis, LONG, validate_only=True) == (ErrorCode.NONE, None)
        assert node.metadata.topics[TOPIC].num_partitions == 3
        # Partition 3 described without a leader: not enough.
        leaderless = update_metadata(TOPIC, range(3, 4), leader=-1)
        monkeypatch.setattr(
            node, "create_partitions", later(lambda: node.handle_update_metadata(leaderless))
        )
        assert await grow(apis, SHORT) == (ErrorCode.REQUEST_TIMED_OUT, None)
        monkeypatch.setattr(
            node,
            "create_partitions",
            later(lambda: node.handle_update_metadata(update_metadata(TOPIC, range(4)))),
        )
        assert await grow(apis, LONG) == (ErrorCode.NONE, None)
        assert node.metadata.topics[TOPIC].num_partitions == 4
        await node.propagation.close()
        await node.fetchers.stop()
        await node.client.close()

    asyncio.run(body())


def test_a_topic_created_again_counts_as_deleted(tmp_path: Path) -> None:
    async def body() -> None:
        node, _ = broker(tmp_path)
        await node.handle_update_metadata(update_metadata(TOPIC, range(3)))
        old = node.metadata.topics[TOPIC].topic_id
        assert await node.propagation.topics_gone({TOPIC: old}, 0.1) == {TOPIC}
        assert await node.propagation.topics_gone({TOPIC: uuid.uuid4()}, 30) == set()
        await node.propagation.close()
        await node.fetchers.stop()
        await node.client.close()

    asyncio.run(body())


class RecordingZooKeeper:
    """Topic config writes that succeed and are recorded."""

    def __init__(self) -> None:
        self.written: list[tuple[str, dict[str, str]]] = []

    async def set_topic_config(self, topic: str, config: dict[str, str]) -> None:
        self.written.append((topic, dict(config)))


async def set_retention(apis: KafkaApis, value: str) -> tuple[ErrorCode, str | None]:
    answer = await call(
        apis,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": TOPIC,
                    "configs": [{"name": "retention.ms", "config_operation": 0, "value": value}],
                }
            ],
            "validate_only": False,
        },
    )
    (result,) = answer.responses
    return ErrorCode(result.error_code), result.error_message


def test_a_topic_config_change_is_in_zookeeper_before_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body() -> None:
        node, apis = broker(tmp_path)
        await node.handle_update_metadata(update_metadata(TOPIC, range(3)))
        # No ZooKeeper to write to: refused, nothing changed (it was answered NONE while
        # the write failed in the background).
        assert await set_retention(apis, "1000") == (
            ErrorCode.UNKNOWN_SERVER_ERROR,
            "ZooKeeper is not reachable",
        )
        assert dict(node.metadata.topics[TOPIC].configs) == {}
        zk = RecordingZooKeeper()
        monkeypatch.setattr(node, "zk", zk)
        assert await set_retention(apis, "2000") == (ErrorCode.NONE, None)
        assert zk.written == [(TOPIC, {"retention.ms": "2000"})]
        assert dict(node.metadata.topics[TOPIC].configs) == {"retention.ms": 2000}
        await node.propagation.close()
        await node.fetchers.stop()
        await node.client.close()

    asyncio.run(body())


def test_what_a_peer_answer_shows_of_a_deleted_topic() -> None:
    gone_there = MetadataPropagation.gone_there
    old, nil = uuid.UUID(int=5), uuid.UUID(int=0)

    def seen(error: ErrorCode, topic_id: uuid.UUID | None) -> TopicMetadata:
        return TopicMetadata(TOPIC, error, topic_id, {})

    assert gone_there(old, None)  # not in the answer
    assert gone_there(old, seen(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, nil))
    assert gone_there(old, seen(ErrorCode.NONE, uuid.UUID(int=6)))  # created again
    assert not gone_there(old, seen(ErrorCode.NONE, old))
    assert not gone_there(old, seen(ErrorCode.NONE, nil))  # an answer without ids
    assert not gone_there(nil, seen(ErrorCode.NONE, old))  # deleted before its id was known


def test_a_broker_config_change_is_answered_once_applied_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 4 on this broker: the wait ends when its watch applied the change, or after
    PEER_WAIT_S without it (the answer is never changed)."""
    monkeypatch.setattr(propagation, "PEER_WAIT_S", 0.5)

    async def body() -> None:
        node, _apis = broker(tmp_path)
        loop = asyncio.get_running_loop()
        applied_at = loop.time() + 0.2

        start = loop.time()
        await node.propagation.broker_configs_seen(lambda: loop.time() >= applied_at, None)
        assert applied_at <= loop.time() < start + 0.5
        start = loop.time()
        await node.propagation.broker_configs_seen(lambda: False, None)
        assert loop.time() >= start + 0.5
        start = loop.time()
        await node.propagation.broker_configs_seen(lambda: True, None)
        assert loop.time() < start + 0.05  # already applied: answered at once
        await node.propagation.close()
        await node.fetchers.stop()
        await node.client.close()

    asyncio.run(body())
