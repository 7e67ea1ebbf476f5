"""The ZooKeeper backend's producer ids: a block that cannot be claimed now is
ProducerIdUnavailableError, which InitProducerId answers with the retriable
COORDINATOR_LOAD_IN_PROGRESS (Kafka 3.x while its next block is pending)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.server.apis.helper import RequestHelper
from tidelog.server.apis.producer_id_apis import ProducerIdApis
from tidelog.server.cluster.backend import ZkBackend
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.metadata.backend import ProducerIdUnavailableError
from tidelog.zk import ZkError


def backend(generate: Any) -> ZkBackend:
    config = load_broker_config({"zookeeper.connect": "127.0.0.1:1"})
    node = SimpleNamespace(metadata=SimpleNamespace(), generate_producer_id=generate)
    return ZkBackend(config, node)  # type: ignore[arg-type]


def test_an_unclaimable_block_is_unavailable() -> None:
    async def unreachable() -> int:
        raise ZkError("connection loss")

    with pytest.raises(ProducerIdUnavailableError, match="connection loss"):
        asyncio.run(backend(unreachable).allocate_producer_id())


def test_init_producer_id_answers_retriable_then_an_id() -> None:
    answers: Iterator[int | Exception] = iter([ZkError("connection loss"), 5000])

    async def generate() -> int:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    zk = backend(generate)
    apis = ProducerIdApis(RequestHelper(zk.config), zk)
    body = SimpleNamespace(transactional_id=None)

    async def ask() -> Any:
        answer = apis.handle_init_producer_id(
            RequestHeader(ApiKey.INIT_PRODUCER_ID, 4, 1, "c"), body
        )
        return await answer if isinstance(answer, asyncio.Future) else answer

    first = asyncio.run(ask())
    assert (first.error_code, first.producer_id) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)
    second = asyncio.run(ask())
    assert (second.error_code, second.producer_id, second.producer_epoch) == (
        ErrorCode.NONE,
        5000,
        0,
    )


def test_the_controller_and_fetchers_are_the_nodes_read_at_each_call() -> None:
    zk = backend(None)
    zk.node.controller = None  # type: ignore[misc]
    zk.node.fetchers = SimpleNamespace(fetchers={})  # type: ignore[misc]
    assert zk.controller() is None
    assert not zk.is_active_controller()  # no candidate yet
    candidate = SimpleNamespace(is_active=False)
    zk.node.controller = candidate  # type: ignore[misc]
    assert zk.controller() is candidate
    assert not zk.is_active_controller()
    candidate.is_active = True
    assert zk.is_active_controller()
    fetcher = SimpleNamespace(leader_id=1, partitions={})
    zk.node.fetchers.fetchers = {1: fetcher}
    assert list(zk.fetchers()) == [fetcher]
