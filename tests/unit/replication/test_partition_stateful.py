"""Hypothesis stateful test of the leader's Partition against a model of its followers."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.replication.epoch import LeaderEpochCache
from tidelog.replication.partition import (
    AlterPartitionProposal,
    CommittedPartitionState,
    LeaderAndIsr,
    Partition,
    PendingShrinkIsr,
)

LAG = 100
FOLLOWERS = (BrokerId(1), BrokerId(2))


class LeaderMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.leo = 3
        self.p = Partition(
            topic_partition=TopicPartition("t", 0),
            local_broker_id=BrokerId(0),
            replica_lag_time_max_ms=LAG,
            min_insync_replicas=2,
        )
        self.p.make_leader(
            leader_epoch=1,
            partition_epoch=1,
            replicas=(BrokerId(0), *FOLLOWERS),
            isr=(BrokerId(0), *FOLLOWERS),
            log_end_offset=self.leo,
            high_watermark=0,
            now_ms=0,
            epoch_cache=LeaderEpochCache(),
        )
        self.follower_leo = dict.fromkeys(FOLLOWERS, 0)
        self.controller = LeaderAndIsr(
            leader=BrokerId(0), leader_epoch=1, isr=(BrokerId(0), *FOLLOWERS), partition_epoch=1
        )
        self.inflight: AlterPartitionProposal | None = None
        self.last_hw = 0

    @rule(n=st.integers(1, 5))
    def append(self, n: int) -> None:
        self.leo += n
        self.p.on_leader_append(self.leo, self.now)

    @rule(ms=st.integers(1, 80))
    def tick(self, ms: int) -> None:
        self.now += ms
        proposal = self.p.maybe_shrink_isr(self.now)
        if proposal is not None:
            assert self.inflight is None
            assert isinstance(self.p.state, PendingShrinkIsr)
            self.inflight = proposal

    @rule(follower=st.sampled_from(FOLLOWERS), progress=st.integers(0, 10))
    def fetch(self, follower: BrokerId, progress: int) -> None:
        # The follower fetches from its LEO; the response then moves it ahead (not visible
        # to the leader until its next fetch).
        offset = self.follower_leo[follower]
        res = self.p.update_follower_fetch_state(
            follower, fetch_offset=offset, leader_log_end_offset=self.leo, now_ms=self.now
        )
        self.follower_leo[follower] = min(self.leo, offset + progress)
        if res.proposal is not None:
            assert self.inflight is None
            self.inflight = res.proposal

    @precondition(lambda self: self.inflight is not None)
    @rule(accept=st.booleans(), lost=st.booleans())
    def controller_answers(self, accept: bool, lost: bool) -> None:
        proposal = self.inflight
        assert proposal is not None
        self.inflight = None
        if accept:
            self.controller = LeaderAndIsr(
                leader=BrokerId(0),
                leader_epoch=1,
                isr=proposal.new_isr,
                partition_epoch=self.controller.partition_epoch + 1,
            )
            self.p.on_alter_partition_response(proposal, ErrorCode.NONE, self.controller, self.now)
            assert self.p.isr == set(proposal.new_isr)
        elif lost:
            # Applied, but the answer was lost (rule 5a): the change stays in flight, the HW
            # keeps waiting for the maximal ISR, and the retry learns the state in force.
            maximal = set(self.p.maximal_isr)
            self.p.on_alter_partition_response(
                proposal, ErrorCode.REQUEST_TIMED_OUT, None, self.now
            )
            assert self.p.in_flight_proposal == proposal
            assert self.p.maximal_isr == maximal
            self.controller = LeaderAndIsr(
                leader=BrokerId(0),
                leader_epoch=1,
                isr=proposal.new_isr,
                partition_epoch=self.controller.partition_epoch + 1,
            )
            self.p.on_alter_partition_response(proposal, ErrorCode.NONE, self.controller, self.now)
            assert self.p.isr == set(proposal.new_isr)
        else:
            self.p.on_alter_partition_response(
                proposal, ErrorCode.INELIGIBLE_REPLICA, None, self.now
            )
        assert isinstance(self.p.state, CommittedPartitionState)

    @invariant()
    def hw_rules(self) -> None:
        hw = self.p.high_watermark
        assert hw >= self.last_hw  # never backwards
        self.last_hw = hw
        assert hw <= self.leo
        # Every member of the maximal ISR has been seen holding everything below the HW.
        for r in self.p.maximal_isr:
            if r != BrokerId(0):
                assert self.p.replica_states[r].log_end_offset >= hw or hw == 0
        assert self.p.isr <= self.p.maximal_isr
        assert BrokerId(0) in self.p.isr

    @invariant()
    def acks_all_answer_matches_isr(self) -> None:
        done, error = self.p.check_enough_replicas_reach_offset(self.p.high_watermark)
        assert done
        expected = (
            ErrorCode.NONE if len(self.p.isr) >= 2 else ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        )
        assert error is expected


LeaderMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestLeaderMachine = LeaderMachine.TestCase
