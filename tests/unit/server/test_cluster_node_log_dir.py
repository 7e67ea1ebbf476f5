"""The cluster side of a log dir failure without a network (cluster rule 7): fetching into
an offline dir stops, the failure is posted for the controller (again for a new controller
epoch), a LeaderAndIsr does not restart fetching while offline, and recovery fetches again
and posts the recovery. ZooKeeper is a recorder of posted events here (the real path is in
tests/integration/zk/test_log_dir_events.py and tests/faults/test_disk_full.py)."""

from __future__ import annotations

import asyncio
import errno
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import cast

from tidelog.model import BrokerId, TopicPartition
from tidelog.protocol import control
from tidelog.server.cluster.metadata_cache import CachedBroker, ClusterMetadataCache
from tidelog.server.cluster.node import ClusterNode
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.replica.manager import ReplicaManager, log_config_for, now_ms
from tidelog.storage.log_manager import LogManager
from tidelog.zk import ZkClient
from tidelog.zk.znodes import LOG_DIR_FAILURE_EVENT, LOG_DIR_RECOVERY_EVENT, LogDirEvent

TP = TopicPartition("t", 0)
TOPIC_ID = uuid.UUID(int=7)


class PostedEvents:
    """Stands in for the ZkClient calls made here: no topic overrides; records the log dir
    events that would be posted."""

    def __init__(self) -> None:
        self.events: list[LogDirEvent] = []

    async def get_topic_config(self, _topic: str) -> dict[str, str]:
        return {}

    async def post_log_dir_event(self, event: LogDirEvent) -> str:
        self.events.append(event)
        return f"log_dir_event_{len(self.events) - 1:010d}"


def node(tmp_path: Path) -> tuple[ClusterNode, PostedEvents]:
    config = load_broker_config(
        {"log.dirs": str(tmp_path), "broker.id": "1", "zookeeper.connect": "127.0.0.1:1"}
    )
    logs = LogManager(
        [tmp_path], log_config_for(effective_topic_config(config, {})), now_ms=now_ms()
    )
    n = ClusterNode(config, ReplicaManager(config, logs), ClusterMetadataCache(1), {})
    posted = PostedEvents()
    n.zk = cast(ZkClient, posted)
    n.broker_epoch = 42
    return n, posted


def follower_of_2(controller_epoch: int, leader_epoch: int) -> control.LeaderAndIsrRequest:
    return control.LeaderAndIsrRequest(
        controller_id=0,
        controller_epoch=controller_epoch,
        partition_states=(
            control.LeaderAndIsrPartitionState(
                topic_name=TP.topic,
                partition_index=TP.partition,
                controller_epoch=controller_epoch,
                leader=2,
                leader_epoch=leader_epoch,
                isr=(2, 3),
                partition_epoch=leader_epoch,
                replicas=(1, 2, 3),
            ),
        ),
        topic_ids=(control.TopicIdEntry(topic_name=TP.topic, topic_id=TOPIC_ID),),
        live_leaders=(control.LeaderAndIsrLiveLeader(broker_id=2, host_name="127.0.0.1", port=1),),
    )


async def until(what: str, predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(5.0):
        while not predicate():
            await asyncio.sleep(0.01)
    assert predicate(), what


def test_offline_dir_stops_fetching_reports_and_recovers(tmp_path: Path) -> None:
    async def body() -> None:
        n, posted = node(tmp_path)
        rm = n.replica_manager
        reporter = asyncio.get_running_loop().create_task(n._log_dir_report_loop())
        await n.handle_leader_and_isr(follower_of_2(controller_epoch=1, leader_epoch=0))
        assert n._is_fetching(TP)

        rm.on_storage_error(TP, OSError(errno.ENOSPC, "No space left on device"))
        assert not n._is_fetching(TP)
        await until("the failure posted", lambda: len(posted.events) == 1)
        assert posted.events == [LogDirEvent(BrokerId(1), LOG_DIR_FAILURE_EVENT, 42)]

        # Same controller, new leader epoch: no fetching into the offline dir, no new post.
        await n.handle_leader_and_isr(follower_of_2(controller_epoch=1, leader_epoch=1))
        assert not n._is_fetching(TP)
        # A new controller epoch: the failure is posted again (the new controller does not
        # know it).
        await n.handle_leader_and_isr(follower_of_2(controller_epoch=2, leader_epoch=2))
        assert not n._is_fetching(TP)
        await until("the failure posted again", lambda: len(posted.events) == 2)
        assert posted.events[1].event == LOG_DIR_FAILURE_EVENT

        # Room again: fetching restarts (truncation first) and the recovery is posted.
        n.metadata.brokers[2] = CachedBroker(2, "127.0.0.1", 1)
        rm.mark_log_dir_online(tmp_path)
        assert n._is_fetching(TP)
        fetch_state = n.fetchers.fetchers[2].partitions[TP]
        assert (fetch_state.leader_epoch, fetch_state.truncating) == (2, True)
        await until("the recovery posted", lambda: len(posted.events) == 3)
        assert posted.events[2] == LogDirEvent(BrokerId(1), LOG_DIR_RECOVERY_EVENT, 42)

        reporter.cancel()
        await n.fetchers.stop()
        await n.client.close()

    asyncio.run(body())
