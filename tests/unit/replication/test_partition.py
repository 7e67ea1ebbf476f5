"""The pure Partition: HW, ISR with in-flight changes, acks checks, fencing (rules 2-8)."""

from __future__ import annotations

import pytest

from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.replication.epoch import LeaderEpochCache
from tidelog.replication.partition import (
    ISR_JOIN_BACKOFF_INITIAL_MS,
    ISR_JOIN_BACKOFF_MAX_MS,
    AlterFollowup,
    AlterPartitionProposal,
    CommittedPartitionState,
    LeaderAndIsr,
    Partition,
    PendingExpandIsr,
    PendingShrinkIsr,
    ReplicaState,
    ReplicationStateError,
    alter_partition_followup,
    follower_high_watermark,
)

TP = TopicPartition("t", 0)
B0, B1, B2 = BrokerId(0), BrokerId(1), BrokerId(2)
LAG = 1000


def leader(
    *,
    isr: tuple[BrokerId, ...] = (B0, B1, B2),
    leo: int = 0,
    hw: int = 0,
    min_isr: int = 2,
    cache: LeaderEpochCache | None = None,
    lag: int = LAG,
) -> Partition:
    p = Partition(
        topic_partition=TP,
        local_broker_id=B0,
        replica_lag_time_max_ms=lag,
        min_insync_replicas=min_isr,
    )
    p.make_leader(
        leader_epoch=5,
        partition_epoch=10,
        replicas=(B0, B1, B2),
        isr=isr,
        log_end_offset=leo,
        high_watermark=hw,
        now_ms=0,
        epoch_cache=cache if cache is not None else LeaderEpochCache(),
    )
    return p


def fetch(p: Partition, r: BrokerId, offset: int, now_ms: int) -> bool:
    res = p.update_follower_fetch_state(
        r, fetch_offset=offset, leader_log_end_offset=p.log_end_offset, now_ms=now_ms
    )
    return res.high_watermark_moved


def test_make_leader_records_epoch_start_before_writes() -> None:
    cache = LeaderEpochCache()
    p = leader(leo=7, hw=3, cache=cache)
    assert cache.entries[-1].epoch == 5
    assert cache.entries[-1].start_offset == 7
    assert p.leader_epoch_start_offset == 7
    assert p.is_leader
    assert p.isr == {B0, B1, B2}
    # Followers' LEOs are unknown in a new epoch: the HW cannot move on stale knowledge.
    assert not p.maybe_increment_high_watermark(0)
    assert p.high_watermark == 3


def test_hw_is_min_leo_over_isr_and_never_goes_back() -> None:
    p = leader(leo=0)
    p.on_leader_append(10, 1)
    assert not fetch(p, B1, 6, 2)
    assert fetch(p, B2, 4, 3)
    assert p.high_watermark == 4
    assert fetch(p, B2, 8, 4)
    assert p.high_watermark == 6
    # A follower fetching from lower (it was truncated) never moves the HW back.
    assert not fetch(p, B1, 2, 5)
    assert p.high_watermark == 6


def test_isr_of_one_moves_hw_on_append() -> None:
    p = leader(isr=(B0,), min_isr=1)
    assert p.on_leader_append(3, 1)
    assert p.high_watermark == 3


def test_two_fetch_rule_for_last_caught_up_time() -> None:
    rs = ReplicaState(broker_id=B1)
    rs.update_fetch_state(fetch_offset=5, leader_log_end_offset=5, now_ms=100)
    assert rs.last_caught_up_time_ms == 100
    # Reaches the LEO the leader had at the previous fetch (5) but not the current (9):
    # caught up as of the previous fetch's time.
    rs.update_fetch_state(fetch_offset=5, leader_log_end_offset=9, now_ms=300)
    assert rs.last_caught_up_time_ms == 100
    rs.update_fetch_state(fetch_offset=9, leader_log_end_offset=12, now_ms=500)
    assert rs.last_caught_up_time_ms == 300
    rs.update_fetch_state(fetch_offset=10, leader_log_end_offset=15, now_ms=700)
    assert rs.last_caught_up_time_ms == 300  # 10 < 12: not caught up with either
    assert rs.is_caught_up(leader_log_end_offset=15, now_ms=1300, replica_lag_time_max_ms=1000)
    assert not rs.is_caught_up(leader_log_end_offset=15, now_ms=1301, replica_lag_time_max_ms=1000)
    assert rs.is_caught_up(leader_log_end_offset=10, now_ms=99999, replica_lag_time_max_ms=1000)


def test_shrink_is_pending_until_committed_and_hw_waits_meanwhile() -> None:
    p = leader(leo=0)
    p.on_leader_append(10, 0)
    fetch(p, B1, 10, 10)
    fetch(p, B2, 2, 10)
    assert p.high_watermark == 2
    assert p.maybe_shrink_isr(500) is None  # within replica.lag.time.max.ms
    proposal = p.maybe_shrink_isr(LAG + 1)
    assert proposal is not None
    assert proposal.new_isr == (B0, B1)
    assert (proposal.leader_epoch, proposal.partition_epoch) == (5, 10)
    assert isinstance(p.state, PendingShrinkIsr)
    assert p.maximal_isr == {B0, B1, B2}  # the HW still waits for B2
    assert not p.maybe_increment_high_watermark(LAG + 2)
    assert p.maybe_shrink_isr(LAG + 3) is None  # one change in flight
    committed = LeaderAndIsr(leader=B0, leader_epoch=5, isr=(B0, B1), partition_epoch=11)
    assert p.on_alter_partition_response(proposal, ErrorCode.NONE, committed, LAG + 4)
    assert p.high_watermark == 10
    assert p.isr == {B0, B1}
    assert p.partition_epoch == 11
    assert isinstance(p.state, CommittedPartitionState)


def test_expand_requires_hw_and_epoch_start_offset() -> None:
    p = leader(isr=(B0, B1), leo=20, hw=20)
    # B2 at 15 is below both the HW and this epoch's start offset (20).
    assert (
        p.update_follower_fetch_state(
            B2, fetch_offset=15, leader_log_end_offset=20, now_ms=1
        ).proposal
        is None
    )
    res = p.update_follower_fetch_state(B2, fetch_offset=20, leader_log_end_offset=20, now_ms=2)
    assert res.proposal is not None
    assert res.proposal.new_isr == (B0, B1, B2)
    assert isinstance(p.state, PendingExpandIsr)
    assert p.maximal_isr == {B0, B1, B2}
    assert p.isr == {B0, B1}  # acks=all still counts the committed ISR


def test_alter_partition_error_reverts_and_stale_answers_are_ignored() -> None:
    p = leader(isr=(B0, B1), leo=20, hw=20)
    proposal = p.update_follower_fetch_state(
        B2, fetch_offset=20, leader_log_end_offset=20, now_ms=1
    ).proposal
    assert proposal is not None
    other = LeaderAndIsr(leader=B0, leader_epoch=5, isr=(B0, B1, B2), partition_epoch=11)
    stale = proposal.__class__(
        topic_partition=TP, leader_id=B0, leader_epoch=5, partition_epoch=9, new_isr=(B0,)
    )
    assert not p.on_alter_partition_response(stale, ErrorCode.NONE, other, 2)
    assert isinstance(p.state, PendingExpandIsr)
    # Only an explicit "not applied" drops the change (rule 5a).
    p.on_alter_partition_response(proposal, ErrorCode.INELIGIBLE_REPLICA, None, 3)
    assert p.state == CommittedPartitionState(isr=frozenset({B0, B1}))
    assert alter_partition_followup(ErrorCode.INELIGIBLE_REPLICA) is AlterFollowup.REVERT


@pytest.mark.parametrize(
    ("error", "followup"),
    [
        (ErrorCode.REQUEST_TIMED_OUT, AlterFollowup.RETRY),
        (ErrorCode.NOT_CONTROLLER, AlterFollowup.RETRY),
        (ErrorCode.INVALID_UPDATE_VERSION, AlterFollowup.RESYNC),
        (ErrorCode.FENCED_LEADER_EPOCH, AlterFollowup.RESYNC),
    ],
)
def test_alter_partition_answer_in_doubt_keeps_the_change_in_flight(
    error: ErrorCode, followup: AlterFollowup
) -> None:
    """Rule 5a: a timeout may hide an applied expand, so the HW keeps waiting for the new
    member (the maximal ISR) until a retry's answer or the controller's state settles it."""
    p = leader(isr=(B0, B1), leo=20, hw=20)
    proposal = p.update_follower_fetch_state(
        B2, fetch_offset=20, leader_log_end_offset=20, now_ms=1
    ).proposal
    assert proposal is not None
    assert not p.on_alter_partition_response(proposal, error, None, 2)
    assert alter_partition_followup(error) is followup
    assert p.in_flight_proposal == proposal
    assert p.maximal_isr == {B0, B1, B2}
    # A state of another leadership settles nothing; ours, as written, does.
    deposed = LeaderAndIsr(leader=B1, leader_epoch=6, isr=(B1, B2), partition_epoch=11)
    assert not p.on_state_resync(deposed, 3)
    assert p.in_flight_proposal == proposal
    written = LeaderAndIsr(
        leader=B0, leader_epoch=5, isr=(B0, B1, B2), partition_epoch=proposal.partition_epoch + 1
    )
    p.on_state_resync(written, 4)
    assert p.state == CommittedPartitionState(isr=frozenset({B0, B1, B2}))
    assert p.partition_epoch == written.partition_epoch


@pytest.mark.parametrize(
    ("isr", "acks", "expected"),
    [
        ((B0, B1, B2), -1, ErrorCode.NONE),
        ((B0, B1), -1, ErrorCode.NONE),
        ((B0,), -1, ErrorCode.NOT_ENOUGH_REPLICAS),
        ((B0,), 1, ErrorCode.NONE),
        ((B0,), 0, ErrorCode.NONE),
    ],
)
def test_check_append(isr: tuple[BrokerId, ...], acks: int, expected: ErrorCode) -> None:
    assert leader(isr=isr, min_isr=2).check_append(acks) is expected


def test_not_enough_replicas_after_append() -> None:
    p = leader(leo=0)
    assert p.check_append(-1) is ErrorCode.NONE
    p.on_leader_append(5, 0)
    assert p.check_enough_replicas_reach_offset(5) == (False, ErrorCode.NONE)
    fetch(p, B1, 5, 10)
    proposal = p.maybe_shrink_isr(LAG + 100)  # B2 never fetched: out
    assert proposal is not None
    committed = LeaderAndIsr(leader=B0, leader_epoch=5, isr=(B0, B1), partition_epoch=11)
    p.on_alter_partition_response(proposal, ErrorCode.NONE, committed, LAG + 101)
    assert p.check_enough_replicas_reach_offset(5) == (True, ErrorCode.NONE)
    # B1 stops fetching while the log grows: it drops out too, and the batch, committed,
    # now has an ISR below the minimum.
    p.on_leader_append(8, 2 * LAG)
    proposal = p.maybe_shrink_isr(3 * LAG)
    assert proposal is not None
    committed = LeaderAndIsr(leader=B0, leader_epoch=5, isr=(B0,), partition_epoch=12)
    p.on_alter_partition_response(proposal, ErrorCode.NONE, committed, 3 * LAG)
    assert p.check_enough_replicas_reach_offset(5) == (
        True,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    )


def test_fencing() -> None:
    p = leader()
    assert p.validate_leader_epoch(5) is ErrorCode.NONE
    assert p.validate_leader_epoch(-1) is ErrorCode.NONE
    assert p.validate_leader_epoch(4) is ErrorCode.FENCED_LEADER_EPOCH
    assert p.validate_leader_epoch(6) is ErrorCode.UNKNOWN_LEADER_EPOCH
    p.make_follower(
        leader_id=B1, leader_epoch=6, partition_epoch=11, replicas=(B0, B1, B2), isr=(B1, B2),
        log_end_offset=0,
    )  # fmt: skip
    assert p.validate_leader_epoch(6) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert p.validate_leader_epoch(6, require_leader=False) is ErrorCode.NONE
    assert p.validate_leader_epoch(5) is ErrorCode.FENCED_LEADER_EPOCH
    assert p.check_append(1) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(ReplicationStateError):
        p.on_leader_append(1, 0)


def test_follower_high_watermark() -> None:
    assert follower_high_watermark(5, 9) == 5
    assert follower_high_watermark(9, 5) == 5
    p = Partition(
        topic_partition=TP, local_broker_id=B1, replica_lag_time_max_ms=LAG, min_insync_replicas=1
    )
    assert p.make_follower(
        leader_id=B0, leader_epoch=1, partition_epoch=1, replicas=(B0, B1), isr=(B0, B1),
        log_end_offset=3,
    )  # fmt: skip
    assert p.update_follower_high_watermark(log_end_offset=3, leader_high_watermark=8)
    assert p.high_watermark == 3
    p.on_follower_truncate(2)
    assert p.high_watermark == 2
    # Same leader and epoch again: no re-truncation needed.
    assert not p.make_follower(
        leader_id=B0, leader_epoch=1, partition_epoch=2, replicas=(B0, B1), isr=(B0,),
        log_end_offset=2,
    )  # fmt: skip


def test_make_leader_same_epoch_keeps_follower_progress() -> None:
    p = leader(leo=0)
    p.on_leader_append(4, 0)
    fetch(p, B1, 4, 1)
    assert p.high_watermark == 0  # B2 unknown
    # The controller removed B2 (it died): same leader epoch, newer partition epoch.
    assert not p.make_leader(
        leader_epoch=5, partition_epoch=11, replicas=(B0, B1, B2), isr=(B0, B1),
        log_end_offset=4, high_watermark=0, now_ms=2, epoch_cache=LeaderEpochCache(),
    )  # fmt: skip
    assert p.high_watermark == 4


# ---- 5b: a refused ISR join backs off (KIP-841 / KIP-903; issue 18) ---------------------


def propose_join(p: Partition, r: BrokerId, now_ms: int) -> AlterPartitionProposal | None:
    """``r`` fetches at the leader's LEO; the ISR expansion it triggers, if any."""
    return p.update_follower_fetch_state(
        r, fetch_offset=p.log_end_offset, leader_log_end_offset=p.log_end_offset, now_ms=now_ms
    ).proposal


def refuse_join(
    p: Partition, r: BrokerId, now_ms: int, error: ErrorCode = ErrorCode.INELIGIBLE_REPLICA
) -> None:
    proposal = propose_join(p, r, now_ms)
    assert proposal is not None
    assert r in proposal.new_isr
    assert not p.on_alter_partition_response(proposal, error, None, now_ms)
    assert isinstance(p.state, CommittedPartitionState)


def commit(p: Partition, proposal: AlterPartitionProposal, now_ms: int) -> None:
    committed = LeaderAndIsr(
        leader=B0,
        leader_epoch=proposal.leader_epoch,
        isr=proposal.new_isr,
        partition_epoch=proposal.partition_epoch + 1,
    )
    p.on_alter_partition_response(proposal, ErrorCode.NONE, committed, now_ms)
    assert p.isr == set(proposal.new_isr)


def test_refused_join_is_not_proposed_again_until_the_backoff_passed() -> None:
    p = leader(isr=(B0, B1), leo=20, hw=20)
    refuse_join(p, B2, 100, ErrorCode.INELIGIBLE_REPLICA)
    # Every fetch of B2 used to propose it again at once (hundreds a second).
    assert propose_join(p, B2, 101) is None
    assert propose_join(p, B2, 100 + ISR_JOIN_BACKOFF_INITIAL_MS - 1) is None
    again = propose_join(p, B2, 100 + ISR_JOIN_BACKOFF_INITIAL_MS)
    assert again is not None
    assert again.new_isr == (B0, B1, B2)


@pytest.mark.parametrize(
    ("lag", "delays"),
    [
        (30_000, [500, 1000, 2000, ISR_JOIN_BACKOFF_MAX_MS, ISR_JOIN_BACKOFF_MAX_MS]),
        (1500, [500, 1000, 1500, 1500]),  # never beyond replica.lag.time.max.ms
    ],
)
def test_refused_join_backoff_doubles_and_is_capped(lag: int, delays: list[int]) -> None:
    assert ISR_JOIN_BACKOFF_INITIAL_MS == 500
    assert ISR_JOIN_BACKOFF_MAX_MS == 4000
    p = leader(isr=(B0, B1), leo=20, hw=20, lag=lag)
    now = 100
    for delay in delays:
        refuse_join(p, B2, now)
        assert propose_join(p, B2, now + delay - 1) is None
        now += delay
    assert propose_join(p, B2, now) is not None


def test_refused_join_does_not_hold_back_another_replica() -> None:
    p = leader(isr=(B0,), leo=20, hw=20, min_isr=1)
    refuse_join(p, B1, 100)
    assert propose_join(p, B1, 101) is None
    other = propose_join(p, B2, 102)
    assert other is not None
    assert other.new_isr == (B0, B2)


@pytest.mark.parametrize("leader_epoch", [5, 6], ids=["same-epoch", "new-epoch"])
def test_refused_join_backoff_resets_on_leader_and_isr(leader_epoch: int) -> None:
    p = leader(isr=(B0, B1), leo=20, hw=20)
    refuse_join(p, B2, 100)
    refuse_join(p, B2, 100 + ISR_JOIN_BACKOFF_INITIAL_MS)  # now backed off for 1000 ms
    now = 101 + ISR_JOIN_BACKOFF_INITIAL_MS
    assert propose_join(p, B2, now) is None
    # The controller's state moved (e.g. B2 restarted, or a new leader epoch).
    p.make_leader(
        leader_epoch=leader_epoch, partition_epoch=11, replicas=(B0, B1, B2), isr=(B0, B1),
        log_end_offset=20, high_watermark=20, now_ms=now, epoch_cache=LeaderEpochCache(),
    )  # fmt: skip
    assert p.isr_join_backoffs == {}
    assert propose_join(p, B2, now + 1) is not None


def test_refused_join_backoff_resets_once_the_replica_joined() -> None:
    p = leader(isr=(B0, B1), leo=20, hw=20)
    refuse_join(p, B2, 100)
    refuse_join(p, B2, 100 + ISR_JOIN_BACKOFF_INITIAL_MS)  # next delay would be 2000 ms
    now = 100 + 3 * ISR_JOIN_BACKOFF_INITIAL_MS
    joined = propose_join(p, B2, now)
    assert joined is not None
    commit(p, joined, now)
    # B2 falls behind and is shrunk out, catches up, and is refused again: 500 ms, not 2000.
    p.on_leader_append(30, now)
    fetch(p, B1, 30, now + 1)
    now += LAG + 1
    shrink = p.maybe_shrink_isr(now)
    assert shrink is not None
    assert shrink.new_isr == (B0, B1)
    commit(p, shrink, now)
    refuse_join(p, B2, now)
    assert propose_join(p, B2, now + ISR_JOIN_BACKOFF_INITIAL_MS - 1) is None
    assert propose_join(p, B2, now + ISR_JOIN_BACKOFF_INITIAL_MS) is not None


def test_stale_broker_epoch_keeps_an_expansion_in_flight_until_the_state_is_read() -> None:
    """STALE_BROKER_EPOCH refuses this attempt only: an earlier one, whose answer was lost,
    may have been applied (simulator seed 1234). The HW keeps waiting for the joiner until
    the controller's state says whether it joined."""
    p = leader(isr=(B0, B1), leo=20, hw=20)
    proposal = propose_join(p, B2, 100)
    assert proposal is not None
    assert not p.on_alter_partition_response(proposal, ErrorCode.STALE_BROKER_EPOCH, None, 100)
    assert p.in_flight_proposal == proposal
    assert p.state.maximal_isr == {B0, B1, B2}
    # The state read back: the earlier attempt was applied.
    applied = LeaderAndIsr(
        leader=B0, leader_epoch=proposal.leader_epoch, isr=(B0, B1, B2),
        partition_epoch=proposal.partition_epoch + 1,
    )  # fmt: skip
    p.on_state_resync(applied, 101)
    assert p.isr == {B0, B1, B2}


def test_same_state_again_keeps_the_change_in_flight_and_an_older_one_is_ignored() -> None:
    """A new controller resends the state it read (same epochs): an ISR change in flight
    stays in flight; an older partition epoch of the same leader epoch changes nothing."""
    p = leader(isr=(B0, B1), leo=20, hw=20)
    proposal = propose_join(p, B2, 100)
    assert proposal is not None
    epochs = {"leader_epoch": proposal.leader_epoch, "log_end_offset": 20, "high_watermark": 20}
    p.make_leader(
        partition_epoch=proposal.partition_epoch, replicas=(B0, B1, B2), isr=(B0, B1),
        now_ms=101, epoch_cache=LeaderEpochCache(), **epochs,
    )  # fmt: skip
    assert p.in_flight_proposal == proposal
    p.make_leader(
        partition_epoch=proposal.partition_epoch - 1, replicas=(B0, B1), isr=(B0,),
        now_ms=102, epoch_cache=LeaderEpochCache(), **epochs,
    )  # fmt: skip
    assert p.in_flight_proposal == proposal
    assert p.replicas == (B0, B1, B2)
