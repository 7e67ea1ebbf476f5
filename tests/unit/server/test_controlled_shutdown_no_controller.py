"""ControlledShutdown when the controller is gone: the stopping broker gives up at once.

When every broker of a cluster stops at once, the controller resigns while the others are
still asking it to move their leaderships; nobody competes for the seat any more. Retrying
would hold each broker for its whole 10 s bound, so a failed attempt asks ZooKeeper who the
controller is, and no controller ends the controlled shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from typing import Any

import pytest

from tidelog.controller.leader_moves import ControlledShutdownResult
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.server.cluster.metadata_cache import CachedBroker, ClusterMetadataCache
from tidelog.server.cluster.node import ClusterNode
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.replica.manager import ReplicaManager, log_config_for, now_ms
from tidelog.storage.log_manager import LogManager


class _ZooKeeperWithoutController:
    """The two reads the broker makes: no /controller, nobody registered."""

    def __init__(self) -> None:
        self.asked = 0

    async def get_controller(self) -> int | None:
        self.asked += 1
        return None

    async def get_live_brokers(self) -> dict[int, Any]:
        return {}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _node(tmp_path: Path, broker_id: int, metadata: ClusterMetadataCache) -> ClusterNode:
    config = load_broker_config(
        {
            "log.dirs": str(tmp_path),
            "broker.id": str(broker_id),
            "zookeeper.connect": "127.0.0.1:1",
        }
    )
    logs = LogManager(
        [tmp_path], log_config_for(effective_topic_config(config, {})), now_ms=now_ms()
    )
    node = ClusterNode(config, ReplicaManager(config, logs), metadata, {})
    node.zk = _ZooKeeperWithoutController()  # type: ignore[assignment]
    node.broker_epoch = 7
    return node


def _controlled_shutdown(node: ClusterNode, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="tidelog.server.cluster.controlled_shutdown"):
        asyncio.run(node.controlled_shutdown(timeout_s=10.0))


def test_controlled_shutdown_stops_asking_once_no_controller_is_elected(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metadata = ClusterMetadataCache(2)
    # Our metadata still names broker 1, whose process has stopped (its port refuses).
    metadata.controller_id = 1
    metadata.brokers[1] = CachedBroker(1, "127.0.0.1", _closed_port())
    node = _node(tmp_path, 2, metadata)
    zk = node.zk
    assert isinstance(zk, _ZooKeeperWithoutController)
    _controlled_shutdown(node, caplog)
    # Asked ZooKeeper once after the refused attempt, then stopped: no retry until 10 s.
    assert zk.asked == 1
    assert "no controller elected; stopping without it" in caplog.text
    assert "did not complete" not in caplog.text


class _ActiveControllerOfAStoppingCluster:
    """This broker's own controller, active, answering that its leaderships stay (every
    other broker is in a controlled shutdown too)."""

    is_active = True

    def __init__(self) -> None:
        self.asked = 0

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> Any:
        self.asked += 1
        return ControlledShutdownResult(ErrorCode.NONE, (TopicPartition("t", 0),) * 5)

    def electable_besides(self, broker_id: int) -> bool:
        return False


def test_the_controller_stops_asking_when_every_other_broker_is_stopping(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """It answered the others' controlled shutdowns first and took their leaderships; its
    own cannot move them anywhere (it retried for 10 s with 5,000 partitions)."""
    metadata = ClusterMetadataCache(1)
    for b in (1, 2, 3):  # the others are still live (stopping, not gone)
        metadata.brokers[b] = CachedBroker(b, "127.0.0.1", _closed_port())
    node = _node(tmp_path, 1, metadata)
    controller = _ActiveControllerOfAStoppingCluster()
    node.controller = controller  # type: ignore[assignment]
    _controlled_shutdown(node, caplog)
    assert controller.asked == 1  # no retry
    assert "5 leaderships stay here, every other broker is stopping too" in caplog.text
