"""Log dir failure and recovery on the active controller (KIP-112).

A broker that cannot write its log dir (full disk, IO error) posts
``/log_dir_event_notification/log_dir_event_<seq>`` (event 1); the controller deletes the
notifications, marks the broker's replicas offline (never electable, never added to an ISR)
and applies ``decisions.on_log_dir_failure`` to every partition it leads or is in the ISR of.
Unlike Kafka (offline until restart), the broker posts event 2 once the dir has room again:
its replicas become electable, offline partitions it can lead come back, and it gets
LeaderAndIsr for all its partitions (it fetches and catches up; each leader adds it back to
the ISR). The granularity is the broker (one log dir in practice). A new controller does not
know of earlier events: the broker posts its failure again when it hears from a new
controller epoch. An event of an incarnation that is no longer registered is ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import replace

from tidelog.controller import decisions
from tidelog.controller.context import ControllerContext
from tidelog.controller.history import Cause
from tidelog.controller.messages import BrokerMessages
from tidelog.controller.state_writes import StateWriter
from tidelog.model import BrokerId, TopicPartition
from tidelog.replication.partition import LeaderAndIsr
from tidelog.zk import ZkClient, znodes
from tidelog.zk.znodes import LogDirEvent, PartitionState

log = logging.getLogger(__name__)


class LogDirs:
    """The controller's log dir event handling; every method runs in its event queue.

    ``on_brokers_change`` is the controller's broker-change handler (an event may come from
    an incarnation whose registration it has not seen yet); ``elect_offline`` elects leaders
    for offline partitions that the given brokers can lead.
    """

    def __init__(
        self,
        ctx: ControllerContext,
        zk: ZkClient,
        writer: StateWriter,
        messages: BrokerMessages,
        *,
        on_brokers_change: Callable[[], Awaitable[None]],
        elect_offline: Callable[[Collection[BrokerId]], Awaitable[set[TopicPartition]]],
    ) -> None:
        self.ctx = ctx
        self.zk = zk
        self.writer = writer
        self.messages = messages
        self.on_brokers_change = on_brokers_change
        self.elect_offline = elect_offline

    async def on_events(self) -> None:
        """Kafka's processLogDirEventNotification: read every pending notification, delete
        them, act on the last event of each broker's current incarnation."""
        ctx = self.ctx
        if ctx.seat is None:
            return
        events = await self.zk.get_log_dir_events()
        if not events:
            return
        if any(e is not None and self._unseen_incarnation(e) for _, e in events):
            # Its registration's watch is still on its way: take the broker change first, or
            # its event would look stale.
            await self.on_brokers_change()
            if not ctx.is_active:
                return
        latest: dict[BrokerId, int] = {}
        for name, event in events:
            if event is None:
                continue
            broker = ctx.live.get(event.broker_id)
            if broker is None or event.broker_epoch not in (-1, broker.broker_epoch):
                log.info("controller %s: ignoring %s of a gone incarnation", ctx.broker_id, name)
                continue
            latest[event.broker_id] = event.event
        await self.zk.delete_log_dir_events(name for name, _ in events)
        failed = {b for b, e in latest.items() if e == znodes.LOG_DIR_FAILURE_EVENT}
        recovered = {b for b, e in latest.items() if e == znodes.LOG_DIR_RECOVERY_EVENT}
        if failed:
            await self._on_failure(failed)
        if recovered and ctx.is_active:
            await self._on_recovery(recovered)

    def _unseen_incarnation(self, event: LogDirEvent) -> bool:
        live = self.ctx.live
        return (
            event.broker_id not in live or event.broker_epoch > live[event.broker_id].broker_epoch
        )

    async def _on_failure(self, brokers: set[BrokerId]) -> None:
        ctx = self.ctx
        log.info("controller %s: log dir offline on brokers %s", ctx.broker_id, sorted(brokers))
        ctx.offline_dirs |= brokers
        affected = [
            tp
            for tp, state in sorted(ctx.states.items())
            if state.leader in brokers or any(r in brokers for r in state.isr)
        ]
        changed = await self.move_from_offline(affected)
        if not ctx.is_active:
            return
        self.messages.leader_and_isr(changed)
        self.messages.update_metadata(changed)

    async def move_from_offline(self, tps: Iterable[TopicPartition]) -> set[TopicPartition]:
        """``decisions.on_log_dir_failure`` for every offline-dir broker of each partition."""
        ctx = self.ctx
        electable = ctx.electable()

        def decide(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            current = state.leader_and_isr()
            outcome: LeaderAndIsr | None = None
            # The leader first, so its successor is chosen from the ISR as it stands.
            offline = sorted(
                {r for r in (state.leader, *state.isr) if r in ctx.offline_dirs},
                key=lambda r: r != state.leader,
            )
            for broker in offline:
                step = decisions.on_log_dir_failure(ctx.replicas(tp), current, broker, electable)
                if step is not None:
                    current, _ = step
                    outcome = current
            if outcome is not None and outcome.leader_epoch > state.leader_epoch + 1:
                outcome = replace(outcome, leader_epoch=state.leader_epoch + 1)
            return outcome

        offline_ids = ", ".join(map(str, sorted(ctx.offline_dirs)))
        return await self.writer.write_decided(
            decide, tps, Cause("log_dir_failure", f"log dir offline on broker {offline_ids}")
        )

    async def move_from_offline_leaders(self, tps: Sequence[TopicPartition]) -> None:
        """Partitions among ``tps`` still led by an offline-dir broker: move them if a clean
        successor has appeared."""
        ctx = self.ctx
        if ctx.seat is None:
            return
        changed = await self.move_from_offline(
            [tp for tp in tps if tp in ctx.states and ctx.states[tp].leader in ctx.offline_dirs]
        )
        if ctx.is_active:
            self.messages.leader_and_isr(changed)
            self.messages.update_metadata(changed)

    async def _on_recovery(self, brokers: set[BrokerId]) -> None:
        ctx = self.ctx
        log.info("controller %s: log dir back on brokers %s", ctx.broker_id, sorted(brokers))
        ctx.offline_dirs -= brokers
        changed = await self.elect_offline(brokers)
        if not ctx.is_active:
            return
        # Every partition they host, to them: they follow (and fetch) again.
        hosted = {tp for tp in ctx.states if any(b in ctx.replicas(tp) for b in brokers)}
        self.messages.leader_and_isr(hosted, to=brokers)
        self.messages.leader_and_isr(changed, to=set(ctx.live) - brokers)
        self.messages.update_metadata(changed)
