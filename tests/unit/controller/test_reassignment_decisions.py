"""The pure reassignment rules (``tidelog.controller.decisions``, KIP-455)."""

from __future__ import annotations

from tidelog.controller.decisions import (
    ReplicaAssignment,
    complete_reassignment,
    on_replicas_changed,
    plan_reassignment,
    reassignment_target_error,
    replica_removal_problem,
)
from tidelog.model import BrokerId
from tidelog.replication.partition import LeaderAndIsr


def b(*ids: int) -> tuple[BrokerId, ...]:
    return tuple(BrokerId(i) for i in ids)


def state(leader: int, isr: tuple[int, ...], epoch: int = 3, pe: int = 7) -> LeaderAndIsr:
    return LeaderAndIsr(
        leader=BrokerId(leader), leader_epoch=epoch, isr=b(*isr), partition_epoch=pe
    )


def test_plan_is_target_then_origin_with_adding_and_removing() -> None:
    planned = plan_reassignment(ReplicaAssignment(replicas=b(0, 1)), b(1, 2))
    assert planned == ReplicaAssignment(replicas=b(1, 2, 0), adding=b(2), removing=b(0))
    assert planned.origin == b(1, 0)
    assert planned.target == b(1, 2)
    assert planned.is_reassigning


def test_reorder_only_is_not_a_reassignment_in_progress() -> None:
    planned = plan_reassignment(ReplicaAssignment(replicas=b(0, 1, 2)), b(2, 1, 0))
    assert planned == ReplicaAssignment(replicas=b(2, 1, 0))
    assert not planned.is_reassigning


def test_replacing_a_running_reassignment_starts_from_its_origin() -> None:
    running = plan_reassignment(ReplicaAssignment(replicas=b(0, 1)), b(1, 2))
    again = plan_reassignment(running, b(1, 3))
    # 2 was being added by the first one and is not wanted: it is gone from RS.
    assert again == ReplicaAssignment(replicas=b(1, 3, 0), adding=b(3), removing=b(0))


def test_cancel_goes_back_to_the_origin() -> None:
    running = plan_reassignment(ReplicaAssignment(replicas=b(0, 1)), b(1, 2))
    cancelled = plan_reassignment(running, running.origin)
    assert set(cancelled.replicas) == {0, 1}
    assert not cancelled.is_reassigning


def test_target_errors_carry_kafkas_messages() -> None:
    live = b(0, 1, 2)
    assert reassignment_target_error((), live) == (
        "Empty replica list specified in partition reassignment."
    )
    assert "Duplicate replica ids" in (reassignment_target_error(b(1, 1), live) or "")
    assert "not alive" in (reassignment_target_error(b(1, 9), live) or "")
    assert "Invalid broker id" in (reassignment_target_error(b(-1), live) or "")
    assert reassignment_target_error(b(2, 0), live) is None


def test_not_complete_until_every_target_replica_is_in_the_isr() -> None:
    ra = plan_reassignment(ReplicaAssignment(replicas=b(0, 1)), b(1, 2))
    assert complete_reassignment(ra, state(0, (0, 1)), b(0, 1, 2)) is None


def test_completion_moves_the_leader_off_a_removed_replica_and_bumps_the_epoch() -> None:
    ra = plan_reassignment(ReplicaAssignment(replicas=b(0, 1)), b(1, 2))
    done = complete_reassignment(ra, state(0, (0, 1, 2)), b(0, 1, 2))
    assert done == LeaderAndIsr(leader=BrokerId(1), leader_epoch=4, isr=b(1, 2), partition_epoch=8)


def test_completion_keeps_a_live_target_leader_and_bumps_only_when_replicas_leave() -> None:
    growing = plan_reassignment(ReplicaAssignment(replicas=b(1)), b(1, 2))
    kept = complete_reassignment(growing, state(1, (1, 2)), b(1, 2))
    assert kept == LeaderAndIsr(leader=BrokerId(1), leader_epoch=3, isr=b(1, 2), partition_epoch=8)
    shrinking = plan_reassignment(ReplicaAssignment(replicas=b(1, 2, 0)), b(1, 2))
    bumped = complete_reassignment(shrinking, state(1, (0, 1, 2)), b(0, 1, 2))
    assert bumped is not None
    assert (bumped.leader, bumped.leader_epoch, bumped.isr) == (1, 4, b(1, 2))


def test_completion_waits_for_a_live_target_leader() -> None:
    ra = plan_reassignment(ReplicaAssignment(replicas=b(0)), b(1, 2))
    # Every target replica is in the ISR but none is live: no leader can be chosen.
    assert complete_reassignment(ra, state(0, (0, 1, 2)), b(0)) is None
    later = complete_reassignment(ra, state(0, (0, 1, 2)), b(0, 2))
    assert later is not None
    assert later.leader == 2


def test_a_changed_replica_set_always_moves_the_partition_epoch_soak_seed_5041() -> None:
    # Adding replicas: leader, ISR and leader epoch stay; the partition epoch moves, so an
    # AlterPartition built on the old replica set is refused as stale.
    before = state(0, (0, 1))
    assert on_replicas_changed(before, b(2, 0, 1), (), b(0, 1, 2)) == state(0, (0, 1), pe=8)


def test_dropped_replicas_leave_the_isr_and_a_dropped_leader_hands_over() -> None:
    before = state(0, (0, 1, 2))
    assert on_replicas_changed(before, b(1, 2), b(0), b(0, 1, 2)) == state(1, (1, 2), epoch=4, pe=8)
    assert on_replicas_changed(before, b(0, 1), b(2), b(0, 1, 2)) == state(0, (0, 1), epoch=4, pe=8)
    # No in-sync electable replica left to lead: nothing to write (refused before).
    assert on_replicas_changed(state(0, (0,)), b(1, 2), b(0), b(0, 1, 2)) is None


def test_dropping_the_whole_isr_is_refused_even_without_a_leader_soak_seed_55604() -> None:
    # Offline (leader -1), its only in-sync replica 2 an adding replica that
    # a replacing reassignment no longer wants. Dropping it would leave no in-sync replica
    # and delete the only complete log.
    offline = state(-1, (2,))
    assert replica_removal_problem("t-0", offline, b(2), b(3, 0, 1), b(0, 1, 3)) == (
        "Replicas [2] are the only in-sync replicas of t-0; removing them would leave it "
        "none. Let the running reassignment finish first."
    )
    # Another in-sync replica stays: allowed.
    assert replica_removal_problem("t-0", state(-1, (1, 2)), b(2), b(0, 1), b(0, 1)) is None


def test_dropping_the_leader_needs_an_in_sync_electable_successor() -> None:
    led = state(2, (1, 2))
    assert replica_removal_problem("t-0", led, b(2), b(0, 1), b(0, 1)) is None
    # 1 is in sync but not electable (shutting down or fenced): refused.
    refused = replica_removal_problem("t-0", led, b(2), b(0, 1), b(0))
    assert refused is not None
    assert refused.startswith("Replica 2 leads t-0 and no other replica")
    assert replica_removal_problem("t-0", led, (), b(0, 1, 2), b(0)) is None
