"""The broker in a cluster: ZooKeeper, the controller, control RPCs, fetchers, ISR changes.

With ``zookeeper.connect`` set, the broker composition (``tidelog.server.broker``) adds a
``ClusterNode``. It wires what exists; the rules stay in ``tidelog.replication`` (Partition,
truncation) and ``tidelog.controller`` (decisions, Controller):

1. Start: open a ZooKeeper session (``zookeeper.session.timeout.ms``), register
   ``/brokers/ids/<id>`` (the broker epoch is the znode's czxid), start a ``Controller``
   candidate (one broker wins ``/controller``). No partition is hosted until the controller
   says so: a LeaderAndIsr makes each replica leader or follower (rule 10).
2. The controller reaches brokers through ``RpcControllerSender``: one queue and one
   connection per target broker, requests sent in order, each retried until the target
   answers or is replaced by a newer incarnation. Brokers fence a stale controller epoch
   with STALE_CONTROLLER_EPOCH (11) and ignore the request (rule 8).
3. Followers pull (rule 2): one ``LeaderFetcher`` per leader broker carries every partition
   this broker follows from it. A partition that became follower first finds its divergence
   point with OffsetForLeaderEpoch rounds (``replication.truncation``, rule 7), then fetches
   from its log end offset with ``replica_id`` = own id; the leader's HW caps the
   follower's HW (rule 3).
4. ISR changes (rules 4, 5): the leader's ``Partition`` proposes them (on a follower fetch,
   and every ``replica.lag.time.max.ms``/2); ``AlterPartitionSender`` takes each proposal to
   the active controller (AlterPartition, API 56) and applies the answer with
   ``Partition.on_alter_partition_response``. ``Partition`` keeps one change in flight.
5. Metadata answers come from ``ClusterMetadataCache``, fed by UpdateMetadata and by the
   LeaderAndIsr states this broker applied, when newer (``applied_leader_and_isr``).
6. InitProducerId: producer ids come from blocks of 1000 claimed on ZooKeeper's
   ``/latest_producer_id_block`` with compare-and-set (``ProducerIdManager`` over
   ``ZkProducerIdBlockStore``, Kafka's ZkProducerIdManager), so no two brokers and no two
   incarnations of one broker ever hand out the same id.
7. Log dir failure (KIP-112; replica manager rule 5): when a log dir goes offline this
   broker stops fetching into it and posts a log dir failure event for the controller, which
   moves its leaderships to clean successors and takes it out of every ISR. When the dir has
   room again it posts a recovery event (tidelog's) and fetches again (truncating first,
   rule 7); each leader adds it back to the ISR once caught up. The event is posted again
   when a new controller epoch shows up while a dir is offline (the new controller did not
   see the first one).
8. Every connection to a peer broker (the controller's channels, follower fetchers,
   requests to the controller) goes to the address the peer registered, unless the
   testing-only ``tidelog.testing.peer.addresses`` names another for that peer
   (``BrokerConfig.peer_address``): the fault harness puts a proxy on each link A -> B.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tidelog.aio import cancel_and_wait, wait_for
from tidelog.client.client import Client
from tidelog.client.client import FetchRequestPartition as ClientFetchPartition
from tidelog.client.connection import BrokerConnection
from tidelog.client.errors import ClientError
from tidelog.controller.controller import Controller
from tidelog.controller.deletion import LEADER_DURING_DELETE
from tidelog.controller.messages import PartitionInfo
from tidelog.controller.topic_admin import create_partitions, create_topic
from tidelog.errors import ErrorCode, KafkaError
from tidelog.model import BrokerId, ControllerEpoch, TopicPartition
from tidelog.protocol import control
from tidelog.replication.partition import (
    AlterFollowup,
    AlterPartitionProposal,
    LeaderAndIsr,
    alter_partition_followup,
)
from tidelog.replication.truncation import EpochEndOffset, follower_truncation_offset
from tidelog.security.client_config import PLAINTEXT, ClientSecurity
from tidelog.server.cluster.readiness import ReadinessGate
from tidelog.server.config.broker_config import (
    BrokerConfig,
    config_to_string,
    validate_topic_configs,
)
from tidelog.server.metadata.local import MetadataStore, TopicInfo
from tidelog.server.network.listeners import inter_broker_security
from tidelog.server.replica.manager import (
    HostedPartition,
    ReplicaManager,
    effective_topic_config,
    now_ms,
)
from tidelog.server.replica.stray_replicas import stray_logs, unknown_topic_logs
from tidelog.storage.producer_id import ProducerIdManager
from tidelog.zk import LiveBroker, SessionEvent, Watch, ZkClient, ZkError
from tidelog.zk.security import ZkAuth
from tidelog.zk.znodes import (
    CONFIG_CHANGES_PATH,
    LOG_DIR_FAILURE_EVENT,
    LOG_DIR_RECOVERY_EVENT,
    BrokerRegistration,
    EndPoint,
    LogDirEvent,
)

#: First and longest wait between AlterPartition attempts for one change (rule 5a).
_ALTER_RETRY_BACKOFF_S = 0.2
_ALTER_RETRY_BACKOFF_MAX_S = 2.0
#: LeaderAndIsr requests up to this many partitions log each one at INFO.
_PER_PARTITION_LOG_LIMIT = 50

log = logging.getLogger(__name__)

#: How long a control request to one broker is retried before it is dropped (the target
#: is dead: the controller will learn it from ZooKeeper and decide again).
CONTROL_RETRY_S = 30.0


# --- the metadata cache --------------------------------------------------------------------


@dataclass(slots=True)
class CachedPartition:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class CachedBroker:
    """A live broker as the controller described it: ``host``/``port`` on the inter-broker
    listener, ``endpoints`` by listener name (Metadata answers a client with the brokers'
    endpoints on the listener it connected to, Kafka's rule)."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: Mapping[str, tuple[str, int]] = field(default_factory=dict)

    def address_on(self, listener_name: str) -> tuple[str, int] | None:
        """This broker's endpoint on ``listener_name`` (None: it has no such listener)."""
        if not self.endpoints:  # described without endpoints: one listener
            return self.host, self.port
        return self.endpoints.get(listener_name)


class ClusterMetadataCache(MetadataStore):
    """Topics, partition states and live brokers as the controller last told this broker
    (Kafka's MetadataCache). In memory only: ZooKeeper is the source of truth.

    A topic's ``num_partitions`` comes from UpdateMetadata only, which the controller sends
    with every partition of a new topic (and everything to a broker that starts, and at
    failover). LeaderAndIsr names only the partitions this broker replicates, and this
    broker applies them one at a time: a topic first seen there is kept with 0 partitions,
    "not described yet", so that no answer ever lists part of a topic as the whole of it.
    """

    def __init__(self, broker_id: int) -> None:
        self.topics: dict[str, TopicInfo] = {}
        self.cluster_id = ""
        self.partitions: dict[TopicPartition, CachedPartition] = {}
        self.brokers: dict[int, CachedBroker] = {}
        self.controller_id = -1
        self.controller_epoch = -1
        #: Called with (topic, overrides) after AlterConfigs changed a topic's overrides.
        self.on_configs_changed: Callable[[str, Mapping[str, object]], None] | None = None

    def _save(self) -> None:
        pass

    def set_configs(self, name: str, configs: Mapping[str, object]) -> None:
        super().set_configs(name, configs)
        if self.on_configs_changed is not None:
            self.on_configs_changed(name, configs)

    def allocate_producer_id(self) -> int:
        # A cluster broker hands out producer ids from ZooKeeper-claimed blocks
        # (ClusterNode.generate_producer_id); the single-broker counter must never be used.
        raise NotImplementedError("cluster brokers allocate producer ids through ZooKeeper")

    def update_partition(
        self, tp: TopicPartition, topic_id: uuid.UUID | None, state: CachedPartition
    ) -> None:
        self.partitions[tp] = state
        info = self.topics.get(tp.topic)
        if info is None:
            self.topics[tp.topic] = TopicInfo(
                tp.topic, topic_id or uuid.UUID(int=0), tp.partition + 1, {}
            )
        else:
            self.topics[tp.topic] = TopicInfo(
                info.name,
                topic_id if topic_id is not None and topic_id.int else info.topic_id,
                max(info.num_partitions, tp.partition + 1),
                info.configs,
            )

    def host_partition(
        self, tp: TopicPartition, topic_id: uuid.UUID | None, state: CachedPartition
    ) -> None:
        """A partition LeaderAndIsr asks this broker to replicate, not yet in the cache: its
        state and its topic's id, but not a partition count (see the class docstring)."""
        self.partitions[tp] = state
        info = self.topics.get(tp.topic)
        if info is None:
            self.topics[tp.topic] = TopicInfo(tp.topic, topic_id or uuid.UUID(int=0), 0, {})
        elif topic_id is not None and topic_id.int and info.topic_id != topic_id:
            self.topics[tp.topic] = replace(info, topic_id=topic_id)

    def applied_leader_and_isr(self, tp: TopicPartition, state: CachedPartition) -> None:
        """A LeaderAndIsr this broker applied for ``tp``: its state replaces the cached one
        when it is newer (a higher leader epoch, or the same with a higher partition epoch).

        The controller sends LeaderAndIsr to the replicas first and UpdateMetadata to every
        broker after it, so without this a new leader, or a follower told of it, answers
        Metadata for a while with the old leader, possibly a broker that has just stopped.
        librdkafka took 2.2-2.5 s to recover from one such answer after a controlled
        shutdown (about 1 s to ask again, 1 s more to connect to the new leader), against
        0.6-0.9 s otherwise. A KRaft broker has no such window: it learns its leadership and
        its metadata from the same record of the metadata log (KIP-500).
        """
        cached = self.partitions.get(tp)
        if cached is None or (state.leader_epoch, state.partition_epoch) > (
            cached.leader_epoch,
            cached.partition_epoch,
        ):
            self.partitions[tp] = state

    def described(self, topic: str) -> TopicInfo | None:
        """``topic`` if UpdateMetadata described it (its partition count is known)."""
        info = self.topics.get(topic)
        return info if info is not None and info.num_partitions > 0 else None

    def remove_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)
        for tp in [tp for tp in self.partitions if tp.topic == topic]:
            del self.partitions[tp]


# --- controller -> brokers -----------------------------------------------------------------

#: Where to connect to a peer broker: (broker id, registered host, registered port) ->
#: (host, port); ``BrokerConfig.peer_address`` (``tidelog.testing.peer.addresses``).
PeerAddress = Callable[[int, str, int], tuple[str, int]]


def _registered(_broker_id: int, host: str, port: int) -> tuple[str, int]:
    return host, port


def listener_address(registration: BrokerRegistration, listener_name: str) -> tuple[str, int]:
    """Where a registered broker listens on ``listener_name`` (the inter-broker listener:
    every broker of a cluster uses the same one, Kafka's rule); the legacy PLAINTEXT
    host/port when it registered no such listener (an older broker)."""
    for endpoint in registration.endpoints:
        if endpoint.listener_name == listener_name:
            return endpoint.host or "127.0.0.1", endpoint.port
    return registration.host or "127.0.0.1", registration.port


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
        peer_address: PeerAddress = _registered,
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


# --- follower fetchers ---------------------------------------------------------------------


@dataclass(slots=True)
class FetchState:
    """One followed partition in a fetcher: truncating first, then fetching (rule 7)."""

    leader_epoch: int
    truncating: bool = True
    delayed_until: float = 0.0
    #: Caught up to the leader's high watermark at the last fetch (Kafka's
    #: ``isReplicaInSync``): the follower throttle never holds such a partition back.
    in_sync: bool = False
    #: The leader's high watermark in its last fetch answer (-1: none yet); the lag metrics
    #: read it at scrape time (tidelog.server.observability.metrics).
    leader_high_watermark: int = -1


@dataclass(slots=True)
class LeaderFetcher:
    """All partitions this broker follows from one leader, on one connection (rule 2)."""

    node: ClusterNode
    leader_id: int
    host: str
    port: int
    partitions: dict[TopicPartition, FetchState] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    conn: BrokerConnection | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(
            self._run(), name=f"fetcher-{self.leader_id}"
        )

    async def stop(self) -> None:
        if self.task is not None:
            await cancel_and_wait(self.task)
        if self.conn is not None:
            await self.conn.close()

    async def _run(self) -> None:
        backoff = self.node.config.get_int("replica.fetch.backoff.ms") / 1000
        while True:
            if not self.partitions:
                self.wake.clear()
                await self.wake.wait()
                continue
            try:
                if self.conn is None or self.conn.is_closed:
                    self.conn = await BrokerConnection.connect(
                        self.host,
                        self.port,
                        client_id=f"replica-fetcher-{self.node.broker_id}",
                        security=self.node.peer_security,
                    )
                progressed = await self._round(self.conn)
            except (ClientError, OSError) as exc:
                log.info("fetcher from broker %d: %s", self.leader_id, exc)
                if self.conn is not None:
                    await self.conn.close()
                    self.conn = None
                progressed = False
            except KafkaError:
                log.exception("fetcher from broker %d failed", self.leader_id)
                progressed = False
            if not progressed:
                self.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await wait_for(self.wake.wait(), backoff)

    def _truncate(self, hosted: HostedPartition, offset: int) -> bool:
        """Truncate a followed log (rule 7); False when its log dir failed meanwhile."""
        try:
            hosted.log.truncate_to(offset)
        except OSError as exc:
            # The cut itself is done (a checkpoint after it failed): the HW follows it.
            hosted.partition.on_follower_truncate(hosted.log.log_end_offset)
            self._storage_failed(hosted.partition.topic_partition, exc)
            return False
        hosted.partition.on_follower_truncate(hosted.log.log_end_offset)
        return True

    def _storage_failed(self, tp: TopicPartition, exc: OSError) -> None:
        log.warning("%s: writing the replica failed: %s", tp, exc)
        self.partitions.pop(tp, None)
        self.node.replica_manager.on_storage_error(tp, exc)

    def _current(self, tp: TopicPartition, state: FetchState) -> bool:
        """Whether ``state`` still describes how we follow ``tp`` (nothing moved meanwhile)."""
        if self.partitions.get(tp) is not state:
            return False
        hosted = self.node.replica_manager.partitions.get(tp)
        return (
            hosted is not None
            and hosted.partition.leader_id == self.leader_id
            and hosted.partition.leader_epoch == state.leader_epoch
        )

    async def _round(self, conn: BrokerConnection) -> bool:
        rm = self.node.replica_manager
        client = self.node.client
        me = self.node.broker_id
        now = asyncio.get_running_loop().time()
        truncating = {
            tp: st
            for tp, st in self.partitions.items()
            if st.truncating and st.delayed_until <= now and not rm.is_offline(tp)
        }
        progressed = False
        if truncating:
            asked: dict[TopicPartition, tuple[int, int]] = {}
            for tp, st in truncating.items():
                hosted = rm.partitions[tp]
                latest = hosted.log.leader_epoch_cache.latest_epoch()
                if latest is None:
                    # No epoch history: nothing of ours can be proven; keep up to the HW
                    # (Kafka's fallback for logs without epochs).
                    hw = hosted.partition.high_watermark
                    if hosted.log.log_end_offset > hw and not self._truncate(hosted, hw):
                        continue
                    st.truncating = False
                    continue
                asked[tp] = (latest, st.leader_epoch)
            answers = await client.offset_for_leader_epoch(asked, replica_id=me, conn=conn)
            for tp, answer in answers.items():
                st = truncating[tp]
                if not self._current(tp, st):
                    continue
                if answer.error_code != ErrorCode.NONE:
                    st.delayed_until = now + 0.2
                    continue
                hosted = rm.partitions[tp]
                decision = follower_truncation_offset(
                    hosted.log.leader_epoch_cache,
                    log_end_offset=hosted.log.log_end_offset,
                    high_watermark=hosted.partition.high_watermark,
                    leader_answer=EpochEndOffset(answer.leader_epoch, answer.end_offset),
                )
                if decision.offset < hosted.log.log_end_offset:
                    log.info(
                        "%s: truncating from %d to %d (leader %d, epoch %d)",
                        tp,
                        hosted.log.log_end_offset,
                        decision.offset,
                        self.leader_id,
                        st.leader_epoch,
                    )
                    if not self._truncate(hosted, decision.offset):
                        continue
                st.truncating = not decision.truncation_completed
                progressed = True
        fetching = {
            tp: st
            for tp, st in self.partitions.items()
            if not st.truncating and st.delayed_until <= now and not rm.is_offline(tp)
        }
        if not fetching:
            return progressed
        max_bytes = self.node.config.get_int("replica.fetch.max.bytes")
        requests = {}
        quota = rm.replication_throttles().follower  # KIP-73 (replication_quota rule 4)
        for tp, st in fetching.items():
            if quota.should_throttle(tp, in_sync=st.in_sync):
                continue
            hosted = rm.partitions[tp]
            requests[tp] = ClientFetchPartition(
                fetch_offset=hosted.log.log_end_offset,
                partition_max_bytes=max_bytes,
                current_leader_epoch=st.leader_epoch,
                log_start_offset=hosted.log.log_start_offset,
            )
        if not requests:
            return progressed
        results = await client.fetch(
            requests,
            max_wait_ms=self.node.config.get_int("replica.fetch.wait.max.ms"),
            min_bytes=self.node.config.get_int("replica.fetch.min.bytes"),
            max_bytes=self.node.config.get_int("replica.fetch.response.max.bytes"),
            replica_id=me,
            conn=conn,
        )
        # A fetch answered without errors is a finished long poll (the leader parked it up
        # to replica.fetch.wait.max.ms): fetch again at once. replica.fetch.backoff.ms is
        # for failures only (Kafka's AbstractFetcherThread), else a follower idle for one
        # poll sleeps a further second while acks=all produces wait for it.
        answered = bool(results) and all(r.error_code == ErrorCode.NONE for r in results.values())
        progressed = progressed or answered
        for tp, result in results.items():
            fst = fetching.get(tp)
            if fst is None or not self._current(tp, fst):
                continue
            hosted = rm.partitions[tp]
            if result.error_code == ErrorCode.NONE:
                if result.records:
                    try:
                        hosted.log.append_as_follower(result.records, now_ms=now_ms())
                    except OSError as exc:
                        # A full or failing log dir: nothing was appended (storage leaves
                        # the log as it was); the dir goes offline and we stop fetching
                        # into it until it has room again (replica manager rule 5).
                        self._storage_failed(tp, exc)
                        continue
                    except KafkaError as exc:
                        base = _first_base_offset(result.records)
                        leo = hosted.log.log_end_offset
                        if base is not None and hosted.log.log_start_offset <= base < leo:
                            # The leader's batch straddles our log end: our tail's batch
                            # boundaries differ from the leader's although the epochs
                            # agree (a tail lost below the HW, then re-fetched). The
                            # leader's log is the truth for a follower: cut back to the
                            # start of its batch and take it whole next round. Without
                            # this the epoch-based truncation finds nothing to cut and the
                            # follower retries forever.
                            log.warning(
                                "%s: follower append failed (%s): truncating to %d",
                                tp,
                                exc,
                                base,
                            )
                            self._truncate(hosted, base)
                            continue
                        log.warning("%s: follower append failed (%s): truncating", tp, exc)
                        fst.truncating = True
                        continue
                    progressed = True
                    if quota.is_throttled(tp):
                        quota.record(len(result.records))
                fst.in_sync = hosted.log.log_end_offset >= result.high_watermark
                fst.leader_high_watermark = result.high_watermark
                hosted.partition.update_follower_high_watermark(
                    log_end_offset=hosted.log.log_end_offset,
                    leader_high_watermark=result.high_watermark,
                )
            elif result.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                if 0 <= hosted.log.log_end_offset < result.log_start_offset:
                    try:
                        hosted.log.truncate_fully_and_start_at(result.log_start_offset)
                    except OSError as exc:
                        self._storage_failed(tp, exc)
                        continue
                    hosted.partition.on_follower_truncate(hosted.log.log_end_offset)
                else:
                    fst.truncating = True
            else:
                # Not leader (yet), fenced or unknown epoch: the controller's LeaderAndIsr
                # brings the truth; try again after a short pause.
                fst.delayed_until = now + 0.2
        return progressed


def _first_base_offset(records: bytes | memoryview) -> int | None:
    """The base offset of the first batch in a fetched record set (None if too short)."""
    if len(records) < 8:
        return None
    return int.from_bytes(records[:8], "big", signed=True)


class ReplicaFetcherManager:
    """Fetchers keyed by leader broker (Kafka's ReplicaFetcherManager)."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self.fetchers: dict[int, LeaderFetcher] = {}

    def add(self, tp: TopicPartition, leader: int, host: str, port: int, leader_epoch: int) -> None:
        """Follow ``tp`` from ``leader``, registered at host:port (rule 2)."""
        self.remove(tp)
        host, port = self.node.config.peer_address(leader, host, port)
        fetcher = self.fetchers.get(leader)
        if fetcher is not None and (fetcher.host, fetcher.port) != (host, port):
            self._drop(leader)
            fetcher = None
        if fetcher is None:
            fetcher = LeaderFetcher(self.node, leader, host, port)
            self.fetchers[leader] = fetcher
            fetcher.start()
        fetcher.partitions[tp] = FetchState(leader_epoch)
        fetcher.wake.set()

    def remove(self, tp: TopicPartition) -> None:
        for fetcher in self.fetchers.values():
            fetcher.partitions.pop(tp, None)

    def _drop(self, leader: int) -> None:
        fetcher = self.fetchers.pop(leader)
        task = asyncio.get_running_loop().create_task(fetcher.stop())
        self.node.background.add(task)
        task.add_done_callback(self.node.background.discard)

    async def stop(self) -> None:
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()


# --- the node ------------------------------------------------------------------------------


class NoControllerError(ClientError):
    """No controller is elected (or its broker is not registered): nobody to ask."""


class ClusterNode:
    """This broker's cluster side: ZooKeeper session, controller candidate, control-plane
    handlers, fetchers and ISR proposals. See the module docstring."""

    def __init__(
        self,
        config: BrokerConfig,
        replica_manager: ReplicaManager,
        metadata: ClusterMetadataCache,
        checkpointed_hw: Mapping[TopicPartition, int],
    ) -> None:
        self.config = config
        self.broker_id = BrokerId(config.broker_id)
        self.replica_manager = replica_manager
        self.metadata = metadata
        self.checkpointed_hw = dict(checkpointed_hw)
        #: How this broker connects to its peers: the inter-broker listener's protocol,
        #: TLS trust and SASL login (``tidelog.server.network.listeners`` rule 4).
        self.listener_name = config.inter_broker_listener_name
        self.peer_security = inter_broker_security(config)
        self.client = Client(
            f"{config.advertised_listener.host}:{config.advertised_listener.port}",
            client_id=f"broker-{config.broker_id}",
            security=self.peer_security,
        )
        self.fetchers = ReplicaFetcherManager(self)
        #: Client requests wait until this broker is registered and has the controller's
        #: metadata for that registration (``tidelog.server.cluster.readiness``, issue 18).
        self.readiness = ReadinessGate(
            config.broker_id, config.get_int("tidelog.not.ready.request.hold.ms") / 1000
        )
        self.background: set[asyncio.Task[Any]] = set()
        self.broker_epoch = -1
        self.zk: ZkClient | None = None
        #: InitProducerId's ids: blocks of 1000 claimed on /latest_producer_id_block.
        self.producer_id_manager: ProducerIdManager | None = None
        self.controller: Controller | None = None
        self.sender = RpcControllerSender(
            self.broker_id,
            config.peer_address,
            listener_name=self.listener_name,
            security=self.peer_security,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._controller_conn: BrokerConnection | None = None
        #: One connection attempt at a time: AlterPartition proposals of many partitions
        #: run concurrently, and each used to open its own connection and overwrite the
        #: last one unclosed (leaked sockets, "Task was destroyed but it is pending").
        self._controller_conn_lock = asyncio.Lock()
        #: Topics whose config overrides were read from ZooKeeper.
        self._configs_loaded: set[str] = set()
        #: The registration (broker epoch) whose first UpdateMetadata was checked for logs of
        #: unknown topics (``tidelog.server.replica.stray_replicas`` rule 2).
        self._unknown_logs_checked_for = -1
        self._config_changed = asyncio.Event()
        self._config_watch: Watch | None = None
        replica_manager.alter_partition_sink = self.propose
        replica_manager.partition_known = lambda tp: tp in metadata.partitions
        replica_manager.log_dir_failure_sink = self._on_log_dir_offline
        replica_manager.log_dir_recovery_sink = self._on_log_dir_online
        #: The log dir event last posted (None: post the current state again), rule 7.
        self._log_dir_reported: int | None = LOG_DIR_RECOVERY_EVENT
        #: Bumped by every request to report again (one arriving while a post is on its way
        #: must not be taken as served by that post).
        self._log_dir_report_requests = 0
        self._log_dir_report = asyncio.Event()
        metadata.on_configs_changed = self._write_topic_config
        # Kafka's replica.lag.time.max.ms, for the shrink timer.
        self._lag_ms = config.get_int("replica.lag.time.max.ms")

    # -- lifecycle ----------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the ZooKeeper session (before the listener opens: no ZooKeeper, no broker)."""
        digest = self.config.get_str("tidelog.zookeeper.digest")
        self.zk = await ZkClient.connect(
            self.config.get_str("zookeeper.connect"),
            session_timeout_ms=self.config.get_int("zookeeper.session.timeout.ms"),
            connection_timeout_s=self.config.get_int("zookeeper.connection.timeout.ms") / 1000,
            auth=ZkAuth.parse(digest) if digest else None,
            set_acl=self.config.get_bool("zookeeper.set.acl"),
        )
        self.metadata.cluster_id = await self.zk.get_or_create_cluster_id()
        self.producer_id_manager = ProducerIdManager(
            self.broker_id, self.zk.producer_id_block_store()
        )

    async def generate_producer_id(self) -> int:
        """A producer id never handed out before by any broker of the cluster (Kafka's
        ZkProducerIdManager): from the current block, claiming the next one from ZooKeeper
        (compare-and-set) when it is used up. Raises ZkError when ZooKeeper cannot be reached."""
        assert self.producer_id_manager is not None
        return await asyncio.to_thread(self.producer_id_manager.generate_producer_id)

    async def start(self, bound_ports: Mapping[str, int]) -> None:
        """Register every advertised listener (they are up: ``bound_ports`` are the bound
        ports by listener name, for advertised port 0) and start competing for the
        controller seat."""
        assert self.zk is not None
        registration = BrokerRegistration(
            broker_id=self.broker_id,
            endpoints=tuple(
                EndPoint(
                    e.name,
                    e.host,
                    e.port or bound_ports.get(e.name, 0),
                    e.security_protocol,
                )
                for e in self.config.advertised_listeners
            ),
            rack=self.config.get_str("broker.rack") or None,
        )
        self.broker_epoch = await self.zk.register_broker(registration)
        log.info("broker %d registered, broker epoch %d", self.broker_id, self.broker_epoch)
        self.readiness.registered(self.broker_epoch)
        # After a session expiry the registration is redone with a new czxid: requests to
        # the controller (AlterPartition, ControlledShutdown) must carry the new broker
        # epoch, or the controller answers STALE_BROKER_EPOCH forever (found by the fault
        # harness, issue 7: a leader could never change its ISR again).
        self.zk.add_session_listener(self._on_session_event)
        self.controller = Controller(
            self.zk,
            self.broker_id,
            self.sender,
            unclean_leader_election_enable=self.config.get_bool("unclean.leader.election.enable"),
            auto_leader_rebalance_enable=self.config.get_bool("auto.leader.rebalance.enable"),
        )
        await self.controller.start()
        self._tasks.append(asyncio.get_running_loop().create_task(self._shrink_loop()))
        # Topic config changes made through any broker (Kafka's config change notifications).
        self._config_watch = await self.zk.watch_children(
            CONFIG_CHANGES_PATH, lambda _children: self._config_changed.set()
        )
        self._tasks.append(asyncio.get_running_loop().create_task(self._config_loop()))
        self._tasks.append(asyncio.get_running_loop().create_task(self._log_dir_report_loop()))

    def _on_session_event(self, event: SessionEvent, broker_epoch: int | None) -> None:
        if event is SessionEvent.EXPIRED:
            # Our registration is gone: until the controller has seen the new one and sent
            # us its view, our metadata may be stale (readiness rule 3).
            self.readiness.session_expired()
        if event is SessionEvent.REESTABLISHED and broker_epoch is not None:
            log.info("broker %d re-registered, broker epoch %d", self.broker_id, broker_epoch)
            self.broker_epoch = broker_epoch
            self.readiness.registered(broker_epoch)
            if self.replica_manager.offline_log_dirs:
                # The controller takes the new incarnation for a fresh start: report again.
                self._report_log_dirs_again()

    async def _config_loop(self) -> None:
        """Re-read the overrides of every known topic after a change notification and apply
        the ones that differ (log settings, ``min.insync.replicas``)."""
        while True:
            await self._config_changed.wait()
            self._config_changed.clear()
            zk = self.zk
            if zk is None:
                continue
            for topic in sorted(self.metadata.topics):
                try:
                    raw = await zk.get_topic_config(topic)
                except ZkError:
                    log.exception("reading the config of topic %s failed", topic)
                    continue
                parsed, problem = validate_topic_configs(dict(raw))
                if problem:
                    log.warning("topic %s has a bad config in ZooKeeper: %s", topic, problem)
                    continue
                overrides = {k: v for k, v in parsed.items() if v is not None}
                info = self.metadata.topics.get(topic)
                if info is None or dict(info.configs) == overrides:
                    continue
                self.metadata.topics[topic] = TopicInfo(
                    info.name, info.topic_id, info.num_partitions, overrides
                )
                self._configs_loaded.add(topic)
                self.replica_manager.update_topic_config(
                    topic, effective_topic_config(self.config, overrides)
                )
                log.info("topic %s config overrides now %s", topic, overrides)

    # -- log dir failure and recovery (rule 7) -------------------------------------------

    def _hosted_in(self, log_dir: Path) -> list[tuple[TopicPartition, HostedPartition]]:
        rm = self.replica_manager
        return [(tp, h) for tp, h in rm.partitions.items() if rm.log_dir_of(h) == log_dir]

    def _on_log_dir_offline(self, log_dir: Path) -> None:
        for tp, _hosted in self._hosted_in(log_dir):
            self.fetchers.remove(tp)
        self._log_dir_report.set()

    def _on_log_dir_online(self, log_dir: Path) -> None:
        """Follow again what we follow in ``log_dir`` (truncating first, rule 7). The
        controller's LeaderAndIsr after our recovery event says the same; this covers a
        failure and recovery so quick that only the recovery was posted, or none."""
        for tp, hosted in self._hosted_in(log_dir):
            partition = hosted.partition
            if partition.is_leader or partition.leader_id < 0:
                continue
            leader = self.metadata.brokers.get(partition.leader_id)
            if leader is not None:
                self.fetchers.add(
                    tp, leader.broker_id, leader.host, leader.port, partition.leader_epoch
                )
        # Report the recovery even if the failure was never posted (it came and went before
        # the poster ran): the controller then resends LeaderAndIsr for all our partitions,
        # also those whose LeaderAndIsr failed on the full disk.
        self._report_log_dirs_again()

    def _report_log_dirs_again(self) -> None:
        self._log_dir_report_requests += 1
        self._log_dir_reported = None
        self._log_dir_report.set()

    async def _log_dir_report_loop(self) -> None:
        """Post a log dir event whenever our state (any dir offline or none) differs from the
        last one posted. One poster, so a failure and a recovery never overtake each other."""
        while True:
            await self._log_dir_report.wait()
            self._log_dir_report.clear()
            zk = self.zk
            offline = bool(self.replica_manager.offline_log_dirs)
            kind = LOG_DIR_FAILURE_EVENT if offline else LOG_DIR_RECOVERY_EVENT
            if zk is None or kind == self._log_dir_reported:
                continue
            requests = self._log_dir_report_requests
            try:
                name = await zk.post_log_dir_event(
                    LogDirEvent(self.broker_id, kind, self.broker_epoch)
                )
            except ZkError as exc:
                log.warning("posting a log dir event failed (%s); trying again", exc)
                await asyncio.sleep(1.0)
                self._log_dir_report.set()
                continue
            if requests == self._log_dir_report_requests:
                self._log_dir_reported = kind
            log.info(
                "broker %d: log dir %s reported to the controller (%s)",
                self.broker_id,
                "failure" if offline else "recovery",
                name,
            )

    async def withdraw_candidacy(self) -> None:
        """At the start of a shutdown, a broker that is not the active controller stops
        competing for the seat: elected now, it would load every partition state and elect
        leaders among brokers that are all stopping (seen with three brokers stopped at
        once, 5,000 replicas each: the broker that won the seat after the controller
        resigned spent ~10 s writing leader epochs for 4,260 partitions in its own stop).
        The active controller stays until ``stop``: it answers the controlled shutdowns."""
        if self.controller is not None and not self.controller.is_active:
            await _bounded("the controller candidate", self.controller.stop())

    async def controlled_shutdown(self, timeout_s: float = 10.0) -> None:
        """Rule 12: ask the controller to move our leaderships away, bounded in time."""
        if self.zk is None or self.broker_epoch < 0:
            return  # never registered: nothing to hand over
        deadline = asyncio.get_running_loop().time() + timeout_s
        failed = False
        while asyncio.get_running_loop().time() < deadline:
            try:
                error, remaining = await wait_for(
                    # After a failed attempt the controller may have moved (or resigned, its
                    # broker stopping too): ZooKeeper says, our metadata may not yet.
                    self._ask_controlled_shutdown(ask_zookeeper=failed),
                    max(0.1, deadline - asyncio.get_running_loop().time()),
                )
            except NoControllerError as exc:
                # Nobody can move our leaderships: retrying only delays the stop (Kafka's
                # retries end the same way). When every broker stops at once, the last
                # controller resigned and the others no longer compete (withdraw_candidacy).
                log.info("controlled shutdown: %s; stopping without it", exc)
                return
            except (ClientError, OSError, TimeoutError, ZkError) as exc:
                log.info("controlled shutdown: %s", exc)
                error, remaining = ErrorCode.UNKNOWN_SERVER_ERROR, -1
            failed = error != ErrorCode.NONE
            if error == ErrorCode.NONE and remaining == 0:
                log.info("controlled shutdown succeeded")
                # Let the LeaderAndIsr that demotes us arrive before the sockets close.
                for _ in range(50):
                    if not any(
                        h.partition.is_leader and len(h.partition.replicas) > 1
                        for h in self.replica_manager.partitions.values()
                    ):
                        break
                    await asyncio.sleep(0.1)
                return
            if error == ErrorCode.NONE and (why := self._no_handover(remaining)) is not None:
                log.info("controlled shutdown: %s", why)
                return
            await asyncio.sleep(0.5)
        log.warning("controlled shutdown did not complete in %.0f s; stopping anyway", timeout_s)

    def _no_handover(self, remaining: int) -> str | None:
        """Why the ``remaining`` leaderships cannot move, however often we ask (None: they
        may). Kafka retries controlled.shutdown.max.retries times; retrying here only
        delayed the stop: the last broker of a cluster stopping one by one waited its whole
        10 s, and so did the controller of a cluster stopped at once."""
        if not set(self.metadata.brokers) - {self.broker_id}:
            return f"no other live broker to lead {remaining} partition(s); stopping"
        controller = self.controller
        if (
            remaining > 0
            and controller is not None
            and controller.is_active
            and not controller.electable_besides(self.broker_id)
        ):
            return f"{remaining} leaderships stay here, every other broker is stopping too"
        return None

    async def _ask_controlled_shutdown(self, *, ask_zookeeper: bool) -> tuple[ErrorCode, int]:
        controller = self.controller
        if controller is not None and controller.is_active:
            result = await controller.controlled_shutdown(self.broker_id, self.broker_epoch)
            return result.error, len(result.remaining)
        conn = await self._connection_to_controller(ask_zookeeper=ask_zookeeper)
        response = await conn.send(
            control.ControlledShutdownRequest(
                broker_id=self.broker_id, broker_epoch=self.broker_epoch
            ),
            timeout_s=10.0,
        )
        return _error(response.error_code), len(response.remaining_partitions)

    async def stop(self) -> None:
        """Stop fetching, leave the controller race, close the session. Each step is
        bounded, so a stuck peer cannot hold the shutdown (the logs are flushed after)."""
        if self._config_watch is not None:
            self._config_watch.cancel()
        for task in self._tasks:
            task.cancel()
        for task in list(self.background):
            task.cancel()
        await _bounded("the fetchers", self.fetchers.stop())
        if self.controller is not None:
            await _bounded("the controller", self.controller.stop())
        await _bounded("the control channels", self.sender.close())
        await _bounded("the client", self.client.close())
        if self._controller_conn is not None:
            await _bounded("the controller connection", self._controller_conn.close())
        if self.zk is not None:
            await _bounded("the ZooKeeper session", self.zk.close())

    # -- control-plane handlers (called by ClusterApis) ----------------------------------

    def _fenced(self, controller_epoch: int) -> bool:
        """Rule 8: a request from a controller older than one we heard from is ignored."""
        if controller_epoch < self.metadata.controller_epoch:
            log.info(
                "ignoring a control request of controller epoch %d (current %d)",
                controller_epoch,
                self.metadata.controller_epoch,
            )
            return True
        if (
            controller_epoch > self.metadata.controller_epoch
            and self.replica_manager.offline_log_dirs
        ):
            # A new controller knows nothing of our offline log dir: report it again.
            self._report_log_dirs_again()
        self.metadata.controller_epoch = controller_epoch
        return False

    def _stale_broker_epoch(self, request: control.ControlMessage) -> bool:
        """KIP-380: a control request addressed to an earlier incarnation of this broker
        (its broker epoch older than our registration's) is refused unapplied. The
        controller's queue to a killed broker goes on delivering to the process started
        after it on the same port; applied, its partial UpdateMetadata described a topic by
        the partitions it named, and its LeaderAndIsr made this broker leader at an old
        epoch. -1 (not sent) is not stale. These requests wait for the registration
        (``tidelog.server.cluster.readiness`` rule 4), so our own epoch is known here."""
        epoch = int(getattr(request, "broker_epoch", -1))
        if 0 <= epoch < self.broker_epoch:
            log.info(
                "ignoring %s for broker epoch %d (ours is %d)",
                type(request).__name__,
                epoch,
                self.broker_epoch,
            )
            return True
        return False

    async def _topic_config(self, topic: str) -> dict[str, object]:
        info = self.metadata.topics.get(topic)
        if info is None or topic not in self._configs_loaded:
            raw: dict[str, str] = {}
            if self.zk is not None:
                with contextlib.suppress(ZkError):
                    raw = await self.zk.get_topic_config(topic)
            parsed, problem = validate_topic_configs(dict(raw))
            if problem:
                log.warning("topic %s has a bad config in ZooKeeper: %s", topic, problem)
            overrides = {k: v for k, v in parsed.items() if v is not None}
            info = self.metadata.topics.get(topic)
            if info is not None:
                self.metadata.topics[topic] = TopicInfo(
                    info.name, info.topic_id, info.num_partitions, overrides
                )
                self._configs_loaded.add(topic)
            return effective_topic_config(self.config, overrides)
        return effective_topic_config(self.config, info.configs)

    async def handle_leader_and_isr(
        self, request: control.LeaderAndIsrRequest
    ) -> control.LeaderAndIsrResponse:
        if self._stale_broker_epoch(request):
            return control.LeaderAndIsrResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        if self._fenced(request.controller_epoch):
            return control.LeaderAndIsrResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
        topic_ids = {e.topic_name: e.topic_id for e in request.topic_ids}
        leaders = {b.broker_id: b for b in request.live_leaders}
        errors: list[control.PartitionError] = []
        rm = self.replica_manager
        # One line per partition for small requests (what the fault harness' readers want);
        # a summary for large ones: at INFO, 1,000 lines cost a loaded broker about a second.
        per_partition = (
            logging.INFO
            if len(request.partition_states) <= _PER_PARTITION_LOG_LIMIT
            else logging.DEBUG
        )
        led: list[TopicPartition] = []
        followed: list[TopicPartition] = []
        applied: list[TopicPartition] = []
        for ps in request.partition_states:
            tp = TopicPartition(ps.topic_name, ps.partition_index)
            topic_id = topic_ids.get(ps.topic_name)
            state = CachedPartition(
                ps.leader, ps.leader_epoch, ps.isr, ps.replicas, ps.partition_epoch
            )
            if tp not in self.metadata.partitions or tp.topic not in self.metadata.topics:
                self.metadata.host_partition(tp, topic_id, state)
            config = await self._topic_config(tp.topic)
            if topic_id is None:
                info = self.metadata.topics.get(tp.topic)
                topic_id = info.topic_id if info is not None else uuid.UUID(int=0)
            hosted = rm.partitions.get(tp)
            if hosted is not None and ps.leader_epoch < hosted.partition.leader_epoch:
                errors.append(_perror(tp, ErrorCode.FENCED_LEADER_EPOCH))
                continue
            replicas = [BrokerId(r) for r in ps.replicas]
            isr = [BrokerId(r) for r in ps.isr]
            try:
                if ps.leader == self.broker_id:
                    self.fetchers.remove(tp)
                    hw = (
                        hosted.partition.high_watermark
                        if hosted is not None
                        else self.checkpointed_hw.get(tp, 0)
                    )
                    rm.make_leader(
                        tp,
                        topic_id,
                        config,
                        hw,
                        leader_epoch=ps.leader_epoch,
                        partition_epoch=ps.partition_epoch,
                        replicas=replicas,
                        isr=isr,
                    )
                    led.append(tp)
                    log.log(
                        per_partition,
                        "%s: leader, epoch %d, ISR %s",
                        tp,
                        ps.leader_epoch,
                        list(ps.isr),
                        extra={"topic_partition": tp, "leader_epoch": ps.leader_epoch},
                    )
                else:
                    changed = rm.make_follower(
                        tp,
                        topic_id,
                        config,
                        leader=BrokerId(ps.leader),
                        leader_epoch=ps.leader_epoch,
                        partition_epoch=ps.partition_epoch,
                        replicas=replicas,
                        isr=isr,
                        high_watermark=self.checkpointed_hw.get(tp, 0),
                    )
                    leader = leaders.get(ps.leader)
                    if ps.leader < 0 or leader is None or rm.is_offline(tp):
                        # (Offline log dir: we fetch again once it has room, rule 7.)
                        self.fetchers.remove(tp)
                    elif changed or not self._is_fetching(tp):
                        self.fetchers.add(
                            tp, ps.leader, leader.host_name, leader.port, ps.leader_epoch
                        )
                        followed.append(tp)
                        log.log(
                            per_partition,
                            "%s: follower of %d, epoch %d",
                            tp,
                            ps.leader,
                            ps.leader_epoch,
                            extra={"topic_partition": tp, "leader_epoch": ps.leader_epoch},
                        )
            except KafkaError as exc:
                log.error("%s: cannot host the replica: %s", tp, exc)
                errors.append(_perror(tp, exc.code))
                continue
            except OSError as exc:
                # Creating the log failed on a full or failing log dir (Kafka answers
                # KAFKA_STORAGE_ERROR for the partition and takes the dir offline).
                log.error("%s: cannot host the replica: %s", tp, exc)
                rm.on_storage_error(tp, exc)
                errors.append(_perror(tp, ErrorCode.KAFKA_STORAGE_ERROR))
                continue
            applied.append(tp)
            self.metadata.applied_leader_and_isr(tp, state)
            errors.append(_perror(tp, ErrorCode.NONE))
        # Once for all partitions: a parked follower fetch spans all of them (purgatory).
        rm.produce_purgatory.check_and_complete_all(applied)
        rm.fetch_purgatory.check_and_complete_all(applied)
        if per_partition == logging.DEBUG:
            log.info(
                "LeaderAndIsr (controller epoch %d, %d partitions): leader of %d, "
                "new follower of %d, %d errors",
                request.controller_epoch,
                len(request.partition_states),
                len(led),
                len(followed),
                sum(1 for e in errors if e.error_code != ErrorCode.NONE),
            )
        return control.LeaderAndIsrResponse(partition_errors=tuple(errors))

    def _is_fetching(self, tp: TopicPartition) -> bool:
        return any(tp in f.partitions for f in self.fetchers.fetchers.values())

    async def handle_update_metadata(
        self, request: control.UpdateMetadataRequest
    ) -> control.UpdateMetadataResponse:
        if self._stale_broker_epoch(request):
            return control.UpdateMetadataResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        if self._fenced(request.controller_epoch):
            return control.UpdateMetadataResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
        self.metadata.controller_id = request.controller_id
        self.metadata.brokers = {
            b.id: CachedBroker(
                b.id, b.host, b.port, b.rack, {e.listener: (e.host, e.port) for e in b.endpoints}
            )
            for b in request.live_brokers
        }
        topic_ids = {e.topic_name: e.topic_id for e in request.topic_ids}
        new_topics = set()
        listed: dict[TopicPartition, control.UpdateMetadataPartitionState] = {}
        for ps in request.partition_states:
            tp = TopicPartition(ps.topic_name, ps.partition_index)
            if ps.leader == LEADER_DURING_DELETE:
                self.metadata.remove_topic(tp.topic)
                self._configs_loaded.discard(tp.topic)
                continue
            listed[tp] = ps
            if ps.topic_name not in self.metadata.topics:
                new_topics.add(ps.topic_name)
            self.metadata.update_partition(
                tp,
                topic_ids.get(ps.topic_name),
                CachedPartition(
                    ps.leader, ps.leader_epoch, ps.isr, ps.replicas, ps.partition_epoch
                ),
            )
        for topic in sorted(new_topics):
            await self._topic_config(topic)
        # A whole view for this registration: clients may be answered (readiness rule 2).
        self.readiness.applied_update_metadata(request.broker_epoch)
        self._delete_stray_logs(listed)
        if self._unknown_logs_checked_for != request.broker_epoch:
            self._unknown_logs_checked_for = request.broker_epoch
            unknown = unknown_topic_logs(
                self.replica_manager.log_manager.all_logs(), self.metadata.topics
            )
            if unknown:
                log.warning("logs of topics the controller does not know: %s", unknown[:10])
        return control.UpdateMetadataResponse()

    def _delete_stray_logs(
        self, listed: Mapping[TopicPartition, control.UpdateMetadataPartitionState]
    ) -> None:
        """``tidelog.server.replica.stray_replicas`` rule 1: replicas this UpdateMetadata says this
        broker no longer has, whose StopReplica(delete) it never got."""
        rm = self.replica_manager
        logs = rm.log_manager
        strays = stray_logs(
            listed,
            lambda tp: tp in rm.partitions or logs.get_log(tp) is not None,
            self.broker_id,
        )
        if not strays:
            return
        log.warning(
            "deleting the stray replicas %s: this broker is not one of their replicas",
            ", ".join(map(str, strays[:10])),
        )
        self._delete_replicas(strays)

    def _delete_replicas(self, tps: Sequence[TopicPartition]) -> None:
        """Stop fetching ``tps`` and delete their replicas (partition state and log):
        StopReplica(delete) and the stray rule. Only the replicas: the topic may live on (a
        reassignment moved them away); a deleted topic leaves the metadata cache with the
        UpdateMetadata that follows (leader LEADER_DURING_DELETE), on the same channel."""
        for tp in tps:
            self.fetchers.remove(tp)
        self.replica_manager.delete_partitions(tps)

    def handle_stop_replica(
        self, request: control.StopReplicaRequest
    ) -> control.StopReplicaResponse:
        if self._stale_broker_epoch(request):
            return control.StopReplicaResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        if self._fenced(request.controller_epoch):
            return control.StopReplicaResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
        deleted: list[TopicPartition] = []
        errors = []
        for p in request.partitions:
            tp = TopicPartition(p.topic_name, p.partition_index)
            if p.delete_partition:
                deleted.append(tp)
            else:
                self.fetchers.remove(tp)
            errors.append(_perror(tp, ErrorCode.NONE))
        if deleted:
            self._delete_replicas(deleted)
            log.info("deleted the replicas %s", ", ".join(map(str, deleted[:10])))
        return control.StopReplicaResponse(partition_errors=tuple(errors))

    # -- ISR changes (rules 4, 5) --------------------------------------------------------

    async def _shrink_loop(self) -> None:
        interval = max(0.05, self._lag_ms / 2000)
        while True:
            await asyncio.sleep(interval)
            now = now_ms()
            for hosted in list(self.replica_manager.partitions.values()):
                proposal = hosted.partition.maybe_shrink_isr(now)
                if proposal is not None:
                    log.info(
                        "%s: proposing ISR shrink to %s",
                        hosted.partition.topic_partition,
                        list(proposal.new_isr),
                    )
                    self.propose(proposal)

    def propose(self, proposal: AlterPartitionProposal) -> None:
        task = asyncio.get_running_loop().create_task(self._alter_partition(proposal))
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def _alter_partition(self, proposal: AlterPartitionProposal) -> None:
        """Send ``proposal`` until an answer settles it (replication rule 5a): the same
        proposal again after a timeout or an unavailable controller (a change it already
        applied is answered with the state in force), the state znode read after a stale
        epoch answer. Ends when the partition no longer has this change in flight."""
        tp = proposal.topic_partition
        backoff = _ALTER_RETRY_BACKOFF_S
        while True:
            try:
                error, committed = await wait_for(self._send_alter(proposal), 10.0)
            except (ClientError, OSError, TimeoutError, ZkError) as exc:
                log.info("%s: AlterPartition failed: %s", tp, exc or type(exc).__name__)
                error, committed = ErrorCode.REQUEST_TIMED_OUT, None
            hosted = self.replica_manager.partitions.get(tp)
            if hosted is None:
                return
            partition = hosted.partition
            isr_before = partition.isr
            if partition.on_alter_partition_response(proposal, error, committed, now_ms()):
                self._complete_purgatories(tp)
            self.replica_manager.count_isr_change(isr_before, partition.isr)
            if error != ErrorCode.NONE:
                self.replica_manager.failed_isr_updates += 1
            if error == ErrorCode.NONE and committed is not None:
                log.info("%s: ISR now %s", tp, list(committed.isr))
                # Parked acks=all produces may now fail with NOT_ENOUGH_REPLICAS_AFTER_APPEND.
                self.replica_manager.produce_purgatory.check_and_complete(tp)
                return
            followup = alter_partition_followup(error)
            log.info("%s: AlterPartition answered %s (%s)", tp, error.name, followup.value)
            if partition.in_flight_proposal != proposal:
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _ALTER_RETRY_BACKOFF_MAX_S)
            if partition.in_flight_proposal != proposal:
                return  # a LeaderAndIsr settled it meanwhile
            if followup is AlterFollowup.RESYNC and await self._resync_partition(tp, proposal):
                return

    async def _resync_partition(self, tp: TopicPartition, proposal: AlterPartitionProposal) -> bool:
        """Read ``tp``'s state znode and give it to the leader (rule 5a); True once the
        change in flight is settled."""
        if self.zk is None:
            return False
        try:
            states = await self.zk.get_partition_states([tp])
        except ZkError as exc:
            log.info("%s: reading the partition state failed: %s", tp, exc)
            return False
        state = states.get(tp)
        hosted = self.replica_manager.partitions.get(tp)
        if state is None or hosted is None:
            return hosted is None
        current = LeaderAndIsr(
            leader=state.leader,
            leader_epoch=int(state.leader_epoch),
            isr=tuple(state.isr),
            partition_epoch=int(state.partition_epoch),
        )
        isr_before = hosted.partition.isr
        if hosted.partition.on_state_resync(current, now_ms()):
            self._complete_purgatories(tp)
        self.replica_manager.count_isr_change(isr_before, hosted.partition.isr)
        settled = hosted.partition.in_flight_proposal != proposal
        if settled:
            log.info("%s: ISR now %s (read from ZooKeeper)", tp, list(current.isr))
            self.replica_manager.produce_purgatory.check_and_complete(tp)
        return settled

    def _complete_purgatories(self, tp: TopicPartition) -> None:
        self.replica_manager.produce_purgatory.check_and_complete(tp)
        self.replica_manager.fetch_purgatory.check_and_complete(tp)

    async def _send_alter(
        self, proposal: AlterPartitionProposal
    ) -> tuple[ErrorCode, LeaderAndIsr | None]:
        controller = self.controller
        if controller is not None and controller.is_active:
            result = await controller.alter_partition(proposal, broker_epoch=self.broker_epoch)
            state = result.state
            committed = (
                None
                if state is None
                else LeaderAndIsr(
                    leader=state.leader,
                    leader_epoch=int(state.leader_epoch),
                    isr=tuple(state.isr),
                    partition_epoch=int(state.partition_epoch),
                )
            )
            return result.error, committed
        tp = proposal.topic_partition
        info = self.metadata.topics.get(tp.topic)
        if info is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        conn = await self._connection_to_controller()
        m = _kio(56, 3, "request")
        request = m.AlterPartitionRequest(
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            topics=(
                m.TopicData(
                    topic_id=info.topic_id,
                    partitions=(
                        m.PartitionData(
                            partition_index=tp.partition,
                            leader_epoch=proposal.leader_epoch,
                            new_isr_with_epochs=tuple(
                                m.BrokerState(broker_id=r, broker_epoch=-1)
                                for r in proposal.new_isr
                            ),
                            leader_recovery_state=0,
                            partition_epoch=proposal.partition_epoch,
                        ),
                    ),
                ),
            ),
        )
        response = await conn.send(request, timeout_s=10.0)
        if response.error_code != ErrorCode.NONE:
            return _error(response.error_code), None
        for topic in response.topics:
            for p in topic.partitions:
                if p.partition_index == tp.partition:
                    error = _error(p.error_code)
                    return error, LeaderAndIsr(
                        leader=BrokerId(p.leader_id),
                        leader_epoch=int(p.leader_epoch),
                        isr=tuple(BrokerId(r) for r in p.isr),
                        partition_epoch=int(p.partition_epoch),
                    )
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None

    async def _connection_to_controller(self, *, ask_zookeeper: bool = False) -> BrokerConnection:
        """A connection to the controller our metadata names, or with ``ask_zookeeper``
        (or none named) the one ``/controller`` names; ``NoControllerError`` when none is."""
        async with self._controller_conn_lock:
            return await self._connect_to_controller(ask_zookeeper=ask_zookeeper)

    async def _connect_to_controller(self, *, ask_zookeeper: bool) -> BrokerConnection:
        controller_id = self.metadata.controller_id
        if ask_zookeeper or controller_id < 0 or controller_id not in self.metadata.brokers:
            if self.zk is None:
                raise NoControllerError("no controller known")
            found = await self.zk.get_controller()
            if found is None:
                raise NoControllerError("no controller elected")
            controller_id = found
            live = await self.zk.get_live_brokers()
            if controller_id not in live:
                raise NoControllerError(f"controller {controller_id} is not registered")
            reg = live[BrokerId(controller_id)].registration
            host, port = listener_address(reg, self.listener_name)
        else:
            b = self.metadata.brokers[controller_id]
            host, port = b.host, b.port
        host, port = self.config.peer_address(controller_id, host, port)
        conn = self._controller_conn
        if conn is not None and not conn.is_closed and (conn.host, conn.port) == (host, port):
            return conn
        if conn is not None:
            await conn.close()
        self._controller_conn = await BrokerConnection.connect(
            host, port, client_id=f"broker-{self.broker_id}", security=self.peer_security
        )
        return self._controller_conn

    # -- admin through ZooKeeper (CreateTopics, CreatePartitions, DeleteTopics) ----------

    def _write_topic_config(self, topic: str, overrides: Mapping[str, object]) -> None:
        """AlterConfigs in a cluster: the overrides go to ``/config/topics/<topic>`` (the
        controller reads ``unclean.leader.election.enable`` there at election time)."""
        zk = self.zk
        if zk is None:
            return
        raw = {k: config_to_string(v) for k, v in overrides.items()}
        task = asyncio.get_running_loop().create_task(zk.set_topic_config(topic, raw))
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def create_topic(
        self,
        name: str,
        *,
        num_partitions: int,
        replication_factor: int,
        config: Mapping[str, str],
        assignment: Mapping[int, Sequence[BrokerId]] | None,
        validate_only: bool,
    ) -> tuple[ErrorCode, str | None, uuid.UUID | None]:
        assert self.zk is not None
        result = await create_topic(
            self.zk,
            name,
            num_partitions=num_partitions,
            replication_factor=replication_factor,
            config=config,
            assignment=assignment,
            validate_only=validate_only,
        )
        return result.error, result.message, result.topic_id

    async def create_partitions(
        self,
        topic: str,
        count: int,
        assignment: Sequence[Sequence[BrokerId]] | None,
        validate_only: bool,
    ) -> tuple[ErrorCode, str | None]:
        assert self.zk is not None
        result = await create_partitions(
            self.zk, topic, count=count, assignment=assignment, validate_only=validate_only
        )
        return result.error, result.message

    async def delete_topic(self, topic: str) -> None:
        assert self.zk is not None
        await self.zk.mark_topic_for_deletion(topic)

    async def wait_for_leaders(self, topics: Iterable[str], timeout_s: float) -> None:
        """Until every partition of ``topics`` has a leader in this broker's cache (or the
        time is up), so a client that created a topic can use it at once."""
        wanted = list(topics)
        deadline = asyncio.get_running_loop().time() + timeout_s
        while asyncio.get_running_loop().time() < deadline:
            ok = True
            for topic in wanted:
                info = self.metadata.described(topic)
                if info is None or any(
                    (p := self.metadata.partitions.get(TopicPartition(topic, i))) is None
                    or p.leader < 0
                    for i in range(info.num_partitions)
                ):
                    ok = False
                    break
            if ok:
                return
            await asyncio.sleep(0.05)


async def _bounded(what: str, step: Awaitable[None], timeout_s: float = 5.0) -> None:
    started = asyncio.get_running_loop().time()
    try:
        await wait_for(step, timeout_s)
    except TimeoutError:
        log.warning("stopping %s took more than %.0f s; going on", what, timeout_s)
    except Exception:
        log.exception("stopping %s failed", what)
    else:
        took = asyncio.get_running_loop().time() - started
        log.log(logging.INFO if took >= 1.0 else logging.DEBUG, "stopped %s in %.1f s", what, took)


def _error(value: int) -> ErrorCode:
    try:
        return ErrorCode._value2member_map_[int(value)]  # type: ignore[return-value]
    except KeyError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _perror(tp: TopicPartition, error: ErrorCode) -> control.PartitionError:
    return control.PartitionError(
        topic_name=tp.topic, partition_index=tp.partition, error_code=int(error)
    )


def _kio(api_key: int, version: int, kind: str) -> Any:
    import importlib  # noqa: PLC0415 - kio's modules are looked up by API and version

    from kio.index import load_request_schema, load_response_schema  # noqa: PLC0415

    cls = (load_request_schema if kind == "request" else load_response_schema)(api_key, version)
    return importlib.import_module(cls.__module__)


__all__ = [
    "CachedBroker",
    "CachedPartition",
    "ClusterMetadataCache",
    "ClusterNode",
    "RpcControllerSender",
]
