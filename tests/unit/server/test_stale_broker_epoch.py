"""A restarted broker and the controller's requests for its previous incarnation (KIP-380),
and what it answers for partitions it knows but does not host yet."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

from .test_cluster_metadata import TOPIC, broker, leader_and_isr, metadata, update_metadata

OLD_EPOCH = 5
NEW_EPOCH = 9


def test_control_requests_for_an_earlier_incarnation_are_refused_unapplied(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        node, apis = broker(tmp_path)
        node.broker_epoch = NEW_EPOCH
        node.readiness.registered(NEW_EPOCH)
        # Queued for the killed process: a change of partition 1 only, and its LeaderAndIsr.
        stale_update = dataclasses.replace(
            update_metadata(TOPIC, range(1, 2)), broker_epoch=OLD_EPOCH
        )
        answer = await node.handle_update_metadata(stale_update)
        assert answer.error_code == ErrorCode.STALE_BROKER_EPOCH
        stale_lai = dataclasses.replace(leader_and_isr(TOPIC, range(3)), broker_epoch=OLD_EPOCH)
        lai_answer = await node.handle_leader_and_isr(stale_lai)
        assert lai_answer.error_code == ErrorCode.STALE_BROKER_EPOCH
        # Nothing of them applied: no topic of one partition, nothing hosted, not ready.
        assert TOPIC not in node.metadata.topics
        assert node.replica_manager.partitions == {}
        assert not node.readiness.is_open
        # The controller's view of this incarnation is applied and opens the gate.
        fresh = dataclasses.replace(update_metadata(TOPIC, range(3)), broker_epoch=NEW_EPOCH)
        assert (await node.handle_update_metadata(fresh)).error_code == ErrorCode.NONE
        assert metadata(apis, TOPIC) == (ErrorCode.NONE, [0, 1, 2])
        assert node.readiness.is_open
        # A request without a broker epoch (-1) is not stale.
        unstamped = update_metadata(TOPIC, range(3))
        assert (await node.handle_update_metadata(unstamped)).error_code == ErrorCode.NONE

    asyncio.run(body())


def test_a_known_partition_not_hosted_yet_is_not_leader_not_unknown(tmp_path: Path) -> None:
    async def body() -> None:
        node, apis = broker(tmp_path)
        await node.handle_update_metadata(update_metadata(TOPIC, range(3)))
        # UpdateMetadata came, the LeaderAndIsr that makes this broker host it not yet.
        tp = TopicPartition(TOPIC, 1)
        assert apis.data._list_offset(tp, -1, -1)["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        ((result, _),) = node.replica_manager.append_records({tp: b""}, -1).values()
        assert result.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        unknown = TopicPartition("nope", 0)
        assert apis.data._list_offset(unknown, -1, -1)["error_code"] == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )

    asyncio.run(body())
