"""Topic deletion on the active controller (Kafka's ``TopicDeletionManager``, simplified).

A ``/admin/delete_topics/<t>`` marker -> StopReplica(delete) to its replicas, the topic's
znodes removed, UpdateMetadata to all. (Kafka waits for StopReplica responses; here the
sender is fire-and-forget, see ``ControllerSender``.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Final

from tidelog.controller.context import ControllerContext
from tidelog.controller.messages import BrokerMessages
from tidelog.model import BrokerId, TopicPartition
from tidelog.zk import ZkClient

#: The leader UpdateMetadata names for a partition of a deleted topic (Kafka's).
LEADER_DURING_DELETE: Final = BrokerId(-2)


async def delete_marked_topics(
    ctx: ControllerContext,
    zk: ZkClient,
    messages: BrokerMessages,
    forget_topic: Callable[[str], None],
) -> None:
    """Delete every topic marked for deletion that is not being deleted yet; ``forget_topic``
    drops a deleted topic from the controller's cache (and its watch)."""
    seat = ctx.seat
    if seat is None:
        return
    marked = await zk.get_topics_marked_for_deletion()
    for topic in sorted(marked - ctx.deleting):
        ctx.deleting.add(topic)
        assignment = ctx.assignments.get(topic)
        if assignment is not None:
            per_broker: dict[BrokerId, list[TopicPartition]] = {}
            for partition, replicas in sorted(assignment.partitions.items()):
                for replica in replicas:
                    per_broker.setdefault(replica, []).append(TopicPartition(topic, partition))
            for broker_id, tps in sorted(per_broker.items()):
                if broker_id in ctx.live:
                    messages.sender.stop_replica(
                        ctx.live[broker_id], seat.controller_epoch, tps, delete=True
                    )
        # Kafka's LeaderDuringDelete (-2) in UpdateMetadata tells every broker, also those
        # without a replica, to drop the topic from its metadata.
        deleted = [
            replace(messages.info(tp), state=replace(ctx.states[tp], leader=LEADER_DURING_DELETE))
            for tp in sorted(ctx.states)
            if tp.topic == topic and topic in ctx.assignments
        ]
        await zk.delete_topic_znodes(topic, seat)
        forget_topic(topic)
        brokers = [ctx.live[b] for b in sorted(ctx.live)]
        for broker in brokers:
            messages.sender.update_metadata(broker, seat.controller_epoch, deleted, brokers)
    ctx.deleting &= marked
