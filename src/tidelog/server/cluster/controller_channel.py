"""The controller's requests to brokers over the wire (Kafka's ControllerChannelManager):
one queue and one connection per target broker incarnation, LeaderAndIsr / UpdateMetadata /
StopReplica sent in order, each retried until the target answers or is replaced by a newer
incarnation (a new broker epoch), or ``CONTROL_RETRY_S`` has passed."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Sequence

from tidelog.aio import cancel_and_wait
from tidelog.client.connection import BrokerConnection
from tidelog.client.errors import ClientError
from tidelog.controller.messages import PartitionInfo
from tidelog.model import BrokerId, ControllerEpoch, TopicPartition
from tidelog.protocol import control
from tidelog.security.client_config import PLAINTEXT, ClientSecurity
from tidelog.server.cluster.peers import PeerAddress, listener_address, registered_address
from tidelog.zk import LiveBroker

log = logging.getLogger(__name__)

#: How long a control request to one broker is retried before it is dropped (the target
#: is dead: the controller will learn it from ZooKeeper and decide again).
CONTROL_RETRY_S = 30.0


class _ControlChannel:
    """The controller's queue to one broker incarnation (Kafka's RequestSendThread)."""

    def __init__(
        self,
        broker: LiveBroker,
        client_id: str,
        peer_address: PeerAddress,
        listener_name: str = "PLAINTEXT",
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.broker = broker
        self.client_id = client_id
        self.peer_address = peer_address
        self.listener_name = listener_name
        self.security = security
        self.queue: asyncio.Queue[control.ControlMessage] = asyncio.Queue()
        self.conn: BrokerConnection | None = None
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        reg = self.broker.registration
        host, port = self.peer_address(reg.broker_id, *listener_address(reg, self.listener_name))
        while True:
            request = await self.queue.get()
            deadline = asyncio.get_running_loop().time() + CONTROL_RETRY_S
            while True:
                try:
                    if self.conn is None or self.conn.is_closed:
                        self.conn = await BrokerConnection.connect(
                            host, port, client_id=self.client_id, security=self.security
                        )
                    await self.conn.send(request, timeout_s=30.0)
                    break
                except ClientError as exc:
                    if self.conn is not None:
                        await self.conn.close()
                        self.conn = None
                    if asyncio.get_running_loop().time() > deadline:
                        log.warning(
                            "dropping %s to broker %d: %s",
                            type(request).__name__,
                            reg.broker_id,
                            exc,
                        )
                        break
                    await asyncio.sleep(0.2)

    async def close(self) -> None:
        await cancel_and_wait(self.task)
        if self.conn is not None:
            await self.conn.close()


class RpcControllerSender:
    """``ControllerSender`` over the wire: LeaderAndIsr / UpdateMetadata / StopReplica."""

    def __init__(
        self,
        broker_id: BrokerId,
        peer_address: PeerAddress = registered_address,
        *,
        listener_name: str = "PLAINTEXT",
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.broker_id = broker_id
        self.peer_address = peer_address
        #: The inter-broker listener and how to connect to it
        #: (``tidelog.server.network.listeners``).
        self.listener_name = listener_name
        self.security = security
        self._channels: dict[BrokerId, _ControlChannel] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def _channel(self, broker: LiveBroker) -> _ControlChannel:
        channel = self._channels.get(broker.broker_id)
        if channel is not None and channel.broker.broker_epoch == broker.broker_epoch:
            return channel
        if channel is not None:  # a new incarnation: what was queued for the old one is moot
            task = asyncio.get_running_loop().create_task(channel.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        channel = _ControlChannel(
            broker,
            f"controller-{self.broker_id}",
            self.peer_address,
            self.listener_name,
            self.security,
        )
        self._channels[broker.broker_id] = channel
        return channel

    def leader_and_isr(
        self,
        broker: LiveBroker,
        controller_epoch: ControllerEpoch,
        partitions: Sequence[PartitionInfo],
        live_leaders: Sequence[LiveBroker],
    ) -> None:
        request = control.LeaderAndIsrRequest(
            controller_id=self.broker_id,
            controller_epoch=controller_epoch,
            broker_epoch=broker.broker_epoch,
            partition_states=tuple(
                control.LeaderAndIsrPartitionState(
                    topic_name=i.topic_partition.topic,
                    partition_index=i.topic_partition.partition,
                    controller_epoch=i.state.controller_epoch,
                    leader=i.state.leader,
                    leader_epoch=i.state.leader_epoch,
                    isr=tuple(i.state.isr),
                    partition_epoch=i.state.partition_epoch,
                    replicas=tuple(i.replicas),
                    is_new=i.is_new,
                )
                for i in partitions
            ),
            topic_ids=_topic_ids(partitions),
            live_leaders=tuple(
                control.LeaderAndIsrLiveLeader(
                    broker_id=b.broker_id,
                    host_name=listener_address(b.registration, self.listener_name)[0],
                    port=listener_address(b.registration, self.listener_name)[1],
                )
                for b in live_leaders
            ),
        )
        self._channel(broker).queue.put_nowait(request)

    def update_metadata(
        self,
        broker: LiveBroker,
        controller_epoch: ControllerEpoch,
        partitions: Sequence[PartitionInfo],
        live_brokers: Sequence[LiveBroker],
    ) -> None:
        live = {b.broker_id for b in live_brokers}
        request = control.UpdateMetadataRequest(
            controller_id=self.broker_id,
            controller_epoch=controller_epoch,
            broker_epoch=broker.broker_epoch,
            partition_states=tuple(
                control.UpdateMetadataPartitionState(
                    topic_name=i.topic_partition.topic,
                    partition_index=i.topic_partition.partition,
                    controller_epoch=i.state.controller_epoch,
                    leader=i.state.leader,
                    leader_epoch=i.state.leader_epoch,
                    isr=tuple(i.state.isr),
                    partition_epoch=i.state.partition_epoch,
                    replicas=tuple(i.replicas),
                    offline_replicas=tuple(r for r in i.replicas if r not in live),
                )
                for i in partitions
            ),
            live_brokers=tuple(
                control.UpdateMetadataBroker(
                    id=b.broker_id,
                    host=listener_address(b.registration, self.listener_name)[0],
                    port=listener_address(b.registration, self.listener_name)[1],
                    rack=b.registration.rack,
                    endpoints=tuple(
                        control.UpdateMetadataEndpoint(
                            listener=e.listener_name,
                            host=e.host,
                            port=e.port,
                            security_protocol=e.security_protocol,
                        )
                        for e in b.registration.endpoints
                    ),
                )
                for b in live_brokers
            ),
            topic_ids=_topic_ids(partitions),
        )
        self._channel(broker).queue.put_nowait(request)

    def stop_replica(
        self,
        broker: LiveBroker,
        controller_epoch: ControllerEpoch,
        partitions: Sequence[TopicPartition],
        *,
        delete: bool,
    ) -> None:
        request = control.StopReplicaRequest(
            controller_id=self.broker_id,
            controller_epoch=controller_epoch,
            broker_epoch=broker.broker_epoch,
            partitions=tuple(
                control.StopReplicaPartition(
                    topic_name=tp.topic,
                    partition_index=tp.partition,
                    leader_epoch=-2 if delete else -1,
                    delete_partition=delete,
                )
                for tp in partitions
            ),
        )
        self._channel(broker).queue.put_nowait(request)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()


def _topic_ids(partitions: Iterable[PartitionInfo]) -> tuple[control.TopicIdEntry, ...]:
    ids: dict[str, uuid.UUID] = {}
    for i in partitions:
        if i.topic_id is not None:
            ids[i.topic_partition.topic] = i.topic_id
    return tuple(control.TopicIdEntry(topic_name=t, topic_id=u) for t, u in sorted(ids.items()))


__all__ = ["CONTROL_RETRY_S", "RpcControllerSender"]
