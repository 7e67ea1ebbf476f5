"""ISR changes sent to the controller (Kafka's AlterPartitionManager; replication rules 4,
5): the leader's ``Partition`` proposes them (on a follower fetch, and every
``replica.lag.time.max.ms``/2 for a shrink); ``AlterPartitionManager`` takes each proposal
to the active controller (AlterPartition, API 56) and applies the answer with
``Partition.on_alter_partition_response``. ``Partition`` keeps one change in flight."""

from __future__ import annotations

import asyncio
import importlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kio.index import load_request_schema

from tidelog.aio import wait_for
from tidelog.client.connection import BrokerConnection
from tidelog.client.errors import ClientError
from tidelog.controller.controller import Controller
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.replication.partition import (
    AlterFollowup,
    AlterPartitionProposal,
    LeaderAndIsr,
    alter_partition_followup,
)
from tidelog.server.cluster.controller_connection import error_code_of
from tidelog.server.replica.manager import ReplicaManager, now_ms
from tidelog.zk import ZkClient, ZkError

log = logging.getLogger(__name__)

#: First and longest wait between AlterPartition attempts for one change (rule 5a).
_ALTER_RETRY_BACKOFF_S = 0.2
_ALTER_RETRY_BACKOFF_MAX_S = 2.0
#: How long one AlterPartition attempt may take before it counts as timed out.
_ALTER_TIMEOUT_S = 10.0

#: Sends one proposal to the controller: its answer's error and the state in force.
SendAlter = Callable[[AlterPartitionProposal], Awaitable[tuple[ErrorCode, LeaderAndIsr | None]]]


class AlterPartitionManager:
    """Proposes ISR shrinks on a timer and takes every proposal to the controller until an
    answer settles it (rule 5a)."""

    def __init__(
        self,
        *,
        replica_manager: ReplicaManager,
        send: SendAlter,
        zookeeper: Callable[[], ZkClient | None],
        background: set[asyncio.Task[Any]],
        lag_ms: int,
    ) -> None:
        self.replica_manager = replica_manager
        self.send = send
        self.zookeeper = zookeeper
        self.background = background
        #: Kafka's replica.lag.time.max.ms, for the shrink timer.
        self.lag_ms = lag_ms

    async def shrink_loop(self) -> None:
        """Every ``replica.lag.time.max.ms``/2: propose the ISR shrinks the leaders want."""
        interval = max(0.05, self.lag_ms / 2000)
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
        """Take ``proposal`` to the controller in the background."""
        task = asyncio.get_running_loop().create_task(self.alter_partition(proposal))
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def alter_partition(self, proposal: AlterPartitionProposal) -> None:
        """Send ``proposal`` until an answer settles it (replication rule 5a): the same
        proposal again after a timeout or an unavailable controller (a change it already
        applied is answered with the state in force), the state znode read after a stale
        epoch answer. Ends when the partition no longer has this change in flight."""
        tp = proposal.topic_partition
        rm = self.replica_manager
        backoff = _ALTER_RETRY_BACKOFF_S
        while True:
            try:
                error, committed = await wait_for(self.send(proposal), _ALTER_TIMEOUT_S)
            except (ClientError, OSError, TimeoutError, ZkError) as exc:
                log.info("%s: AlterPartition failed: %s", tp, exc or type(exc).__name__)
                error, committed = ErrorCode.REQUEST_TIMED_OUT, None
            hosted = rm.partitions.get(tp)
            if hosted is None:
                return
            partition = hosted.partition
            isr_before = partition.isr
            if partition.on_alter_partition_response(proposal, error, committed, now_ms()):
                self._complete_purgatories(tp)
            rm.count_isr_change(isr_before, partition.isr)
            if error != ErrorCode.NONE:
                rm.failed_isr_updates += 1
            if error == ErrorCode.NONE and committed is not None:
                log.info("%s: ISR now %s", tp, list(committed.isr))
                # Parked acks=all produces may now fail with NOT_ENOUGH_REPLICAS_AFTER_APPEND.
                rm.produce_purgatory.check_and_complete(tp)
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
        zk = self.zookeeper()
        if zk is None:
            return False
        try:
            states = await zk.get_partition_states([tp])
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


async def send_alter_partition(
    proposal: AlterPartitionProposal,
    *,
    broker_id: BrokerId,
    broker_epoch: int,
    controller: Controller | None,
    topic_id: uuid.UUID | None,
    connect: Callable[[], Awaitable[BrokerConnection]],
) -> tuple[ErrorCode, LeaderAndIsr | None]:
    """Send ``proposal`` to the active controller: in process when it is this broker's own,
    else AlterPartition v3 over ``connect()``'s connection (``topic_id`` None: the topic is
    not in our metadata, UNKNOWN_TOPIC_OR_PARTITION). The answer's error and, unless the
    controller did not name one, the partition state in force."""
    if controller is not None and controller.is_active:
        result = await controller.alter_partition(proposal, broker_epoch=broker_epoch)
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
    if topic_id is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    conn = await connect()
    request = _alter_partition_request(proposal, broker_id, broker_epoch, topic_id)
    response = await conn.send(request, timeout_s=_ALTER_TIMEOUT_S)
    if response.error_code != ErrorCode.NONE:
        return error_code_of(response.error_code), None
    tp = proposal.topic_partition
    for topic in response.topics:
        for p in topic.partitions:
            if p.partition_index == tp.partition:
                error = error_code_of(p.error_code)
                return error, LeaderAndIsr(
                    leader=BrokerId(p.leader_id),
                    leader_epoch=int(p.leader_epoch),
                    isr=tuple(BrokerId(r) for r in p.isr),
                    partition_epoch=int(p.partition_epoch),
                )
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None


def _alter_partition_request(
    proposal: AlterPartitionProposal, broker_id: BrokerId, broker_epoch: int, topic_id: uuid.UUID
) -> Any:
    """AlterPartition v3 (KIP-497, KIP-841) for one partition's proposed ISR."""
    m = _kio_request_module(56, 3)
    tp = proposal.topic_partition
    return m.AlterPartitionRequest(
        broker_id=broker_id,
        broker_epoch=broker_epoch,
        topics=(
            m.TopicData(
                topic_id=topic_id,
                partitions=(
                    m.PartitionData(
                        partition_index=tp.partition,
                        leader_epoch=proposal.leader_epoch,
                        new_isr_with_epochs=tuple(
                            m.BrokerState(broker_id=r, broker_epoch=-1) for r in proposal.new_isr
                        ),
                        leader_recovery_state=0,
                        partition_epoch=proposal.partition_epoch,
                    ),
                ),
            ),
        ),
    )


def _kio_request_module(api_key: int, version: int) -> Any:
    """kio's module of one API's request at one version (its entity classes live there)."""
    return importlib.import_module(load_request_schema(api_key, version).__module__)


__all__ = ["AlterPartitionManager", "SendAlter", "send_alter_partition"]
