"""Broker failure and start on the active controller (rules 9 and 10): leaders and ISRs
away from dead replicas, and leaders for offline partitions a returning broker can lead."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace
from typing import Final

from tidelog.controller import decisions
from tidelog.controller.context import ControllerContext
from tidelog.controller.history import Cause
from tidelog.controller.state_writes import StateWriter
from tidelog.model import NO_BROKER, BrokerId, TopicPartition
from tidelog.replication.partition import LeaderAndIsr
from tidelog.zk import ZkClient
from tidelog.zk.znodes import PartitionState

UNCLEAN_CONFIG: Final = "unclean.leader.election.enable"


class BrokerFailures:
    """Elections after broker deaths and starts; every method runs in the controller's event
    queue. ``default_unclean`` reads the broker's current ``unclean.leader.election.enable``
    (a dynamic config)."""

    def __init__(
        self,
        ctx: ControllerContext,
        zk: ZkClient,
        writer: StateWriter,
        default_unclean: Callable[[], bool],
    ) -> None:
        self.ctx = ctx
        self.zk = zk
        self.writer = writer
        self.default_unclean = default_unclean

    async def unclean_allowed(self, topics: Iterable[str]) -> dict[str, bool]:
        """Per topic: its ``unclean.leader.election.enable``, else the broker default."""
        out: dict[str, bool] = {}
        for topic in set(topics):
            value = (await self.zk.get_topic_config(topic)).get(UNCLEAN_CONFIG)
            out[topic] = self.default_unclean() if value is None else value.strip() == "true"
        return out

    def restarted_since_written(self, state: PartitionState) -> frozenset[BrokerId]:
        """Live leader/ISR members registered after ``state`` was last written."""
        if state.modified_zxid <= 0:
            return frozenset()
        return frozenset(
            r
            for r in (state.leader, *state.isr)
            if r != NO_BROKER
            and r in self.ctx.live
            and self.ctx.live[r].broker_epoch > state.modified_zxid
        )

    async def handle_dead_replicas(
        self,
        restarted: Mapping[TopicPartition, frozenset[BrokerId]] | None = None,
        cause: Cause | None = None,
    ) -> set[TopicPartition]:
        """Every partition with a dead leader or a dead ISR member: rule 10, one batch.

        ``restarted``: per partition, live brokers to treat as dead for it (bounced while
        there was no controller); they are not electable for that partition here.
        """
        restarted = restarted or {}
        live = set(self.ctx.live)
        electable = self.ctx.electable()
        affected = [
            tp
            for tp, state in self.ctx.states.items()
            if (state.leader != NO_BROKER and state.leader not in live)
            or any(r not in live for r in state.isr)
            or tp in restarted
        ]
        if not affected:
            return set()
        unclean = await self.unclean_allowed(tp.topic for tp in affected)

        def decide(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            current = state.leader_and_isr()
            outcome: LeaderAndIsr | None = None
            gone = restarted.get(tp, frozenset())
            usable = electable - gone
            # Apply each dead replica in turn (leader first, so the election sees the rest).
            dead = sorted(
                {
                    r
                    for r in (state.leader, *state.isr)
                    if r != NO_BROKER and (r not in live or r in gone)
                },
                key=lambda r: r != state.leader,
            )
            for broker in dead:
                step = decisions.on_broker_failure(
                    self.ctx.replicas(tp),
                    current,
                    broker,
                    usable,
                    unclean_allowed=unclean[tp.topic],
                )
                if step is not None:
                    current, _ = step
                    outcome = current
            if outcome is not None and outcome.leader_epoch > state.leader_epoch + 1:
                # Several failure steps each bumped the epoch; one leader change is one epoch.
                outcome = replace(outcome, leader_epoch=state.leader_epoch + 1)
            return outcome

        return await self.writer.write_decided(decide, affected, cause)

    async def elect_offline(self, started: Collection[BrokerId]) -> set[TopicPartition]:
        """Offline partitions (leader -1) that a live broker can now lead (rule 9)."""
        live = self.ctx.electable()
        offline = [
            tp
            for tp, state in self.ctx.states.items()
            if state.leader == NO_BROKER and any(r in started for r in self.ctx.replicas(tp))
        ]
        if not offline:
            return set()
        unclean = await self.unclean_allowed(tp.topic for tp in offline)

        def decide(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            step = decisions.on_broker_startup(
                self.ctx.replicas(tp),
                state.leader_and_isr(),
                live,
                unclean_allowed=unclean[tp.topic],
            )
            return None if step is None else step[0]

        started_ids = ", ".join(map(str, sorted(started)))
        return await self.writer.write_decided(
            decide, offline, Cause("broker_startup", f"replica on broker {started_ids} is back")
        )
