"""Partition reassignment (KIP-455) on the deterministic simulator: the controller's steps
(``tidelog.controller.reassignment``) with the real pure rules, under load and faults."""

from __future__ import annotations

import pytest

from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.testing.sim import Simulation
from tidelog.testing.sim_types import SimConfig
from tidelog.testing.soak import replay_command, run_seed

pytestmark = pytest.mark.sim

TP = TopicPartition("sim", 0)
B0, B1, B2, B3, B4 = (BrokerId(i) for i in range(5))


def cluster(brokers: int = 4, seed: int = 7) -> Simulation:
    """``brokers`` brokers, one partition on (0, 1, 2), min.insync.replicas=2."""
    config = SimConfig(
        brokers=brokers, replication_factor=3, min_insync_replicas=2, net_delay_ms=(1, 4)
    )
    sim = Simulation(config, seed)
    sim.tracing = True
    sim.run_for(50)
    return sim


def load(sim: Simulation, start_ms: int, end_ms: int, every_ms: int = 7) -> list[int]:
    """acks=all produces every ``every_ms`` between the two times; their record ids."""
    sent: list[int] = []
    for t in range(start_ms, end_ms, every_ms):
        sim.schedule(t, lambda: sent.append(sim.produce(TP, -1)))
    return sent


def done(sim: Simulation) -> bool:
    return TP not in sim.reassignments


def assert_all_acked_kept(sim: Simulation) -> None:
    state = sim.states[TP]
    leader_log = sim.brokers[state.leader].logs[TP].records
    acked = sim.checker.acked(TP)
    assert acked, "nothing was acknowledged"
    for offset, record_id in acked.items():
        assert leader_log[offset] == record_id
    assert sim.checker.ok, sim.checker.violations


def test_move_the_leader_off_under_acks_all_load() -> None:
    sim = cluster()
    assert sim.states[TP].leader == B0
    sent = load(sim, sim.now_ms, sim.now_ms + 800)
    sim.run_for(200)
    epoch = sim.states[TP].leader_epoch
    assert sim.reassign(TP, (B1, B2, B3)).error is ErrorCode.NONE
    assert sim.assignment[TP] == (B1, B2, B3, B0)  # RS = TRS + ORS while it runs
    assert sim.reassignments[TP].adding == (B3,)
    assert sim.reassignments[TP].removing == (B0,)
    assert sim.run_until_true(lambda: done(sim), 2000)
    state = sim.states[TP]
    assert sim.assignment[TP] == (B1, B2, B3)
    assert state.leader == B1  # first live target replica in the ISR
    assert state.leader_epoch == epoch + 1  # the leader moved: a new epoch fences B0
    assert set(state.isr) <= {B1, B2, B3}
    sim.settle(800)
    assert TP not in sim.brokers[B0].logs  # StopReplica(delete)
    assert TP not in sim.brokers[B0].partitions
    assert all(rid in sim.outcomes for rid in sent)
    ok = [rid for rid in sent if sim.outcomes[rid] is ErrorCode.NONE]
    assert len(ok) > len(sent) // 2
    assert sim.stats.reassignments_completed == 1
    assert_all_acked_kept(sim)
    assert sim.brokers[B3].logs[TP].records == sim.brokers[B1].logs[TP].records


def test_adding_replicas_keeps_the_leader_and_its_epoch() -> None:
    sim = cluster()
    epoch = sim.states[TP].leader_epoch
    load(sim, sim.now_ms, sim.now_ms + 300)
    assert sim.reassign(TP, (B0, B1, B2, B3)).error is ErrorCode.NONE
    assert sim.run_until_true(lambda: done(sim), 2000)
    assert sim.states[TP].leader == B0
    assert sim.states[TP].leader_epoch == epoch  # nobody removed, leader kept: no bump
    sim.settle(800)
    assert set(sim.states[TP].isr) == {B0, B1, B2, B3}
    assert_all_acked_kept(sim)


def test_target_broker_crashes_mid_move_then_returns() -> None:
    sim = cluster()
    load(sim, sim.now_ms, sim.now_ms + 1500)
    sim.run_for(300)  # B3 would have 40-odd records to catch up
    sim.block(B3, B0)  # ... and cannot fetch yet
    assert sim.reassign(TP, (B3, B1, B2)).error is ErrorCode.NONE
    sim.run_for(100)
    sim.crash(B3)  # its session expires: the controller knows it is down
    sim.run_for(500)
    assert not done(sim)  # a dead target replica holds the reassignment
    assert sim.states[TP].leader == B0
    sim.heal(B3, B0)
    sim.restart(B3)
    assert sim.run_until_true(lambda: done(sim), 3000)
    assert sim.assignment[TP] == (B3, B1, B2)
    sim.settle(1000)
    assert_all_acked_kept(sim)
    assert TP not in sim.brokers[B0].logs


def test_cancel_mid_move_returns_to_the_origin_and_deletes_the_new_replica() -> None:
    sim = cluster()
    load(sim, sim.now_ms, sim.now_ms + 1000)
    sim.run_for(200)
    sim.block(B3, B0)  # B3 cannot catch up: the move cannot end
    assert sim.reassign(TP, (B3, B1, B2)).error is ErrorCode.NONE
    assert sim.run_until_true(lambda: TP in sim.brokers[B3].logs, 200)
    sim.run_for(300)
    assert not done(sim)
    assert sim.cancel_reassignment(TP).error is ErrorCode.NONE
    assert done(sim)  # the origin is all in the ISR: it completes at once
    # ORS = RS - adding, in RS's order (Kafka's originReplicas): the same replicas, but the
    # preferred leader is now B1.
    assert sim.assignment[TP] == sim.targets[TP] == (B1, B2, B0)
    sim.run_for(100)
    assert TP not in sim.brokers[B3].logs
    sim.settle(800)
    assert_all_acked_kept(sim)


def test_replacing_a_move_drops_the_replicas_it_was_adding_from_the_isr_at_once() -> None:
    sim = cluster(brokers=5)
    load(sim, sim.now_ms, sim.now_ms + 700)
    sim.run_for(200)
    sim.block(B4, B0)  # B4 will not catch up; B3 will
    assert sim.reassign(TP, (B3, B4, B1)).error is ErrorCode.NONE
    assert sim.run_until_true(lambda: B3 in sim.states[TP].isr, 1000)
    assert not done(sim)
    epoch = sim.states[TP].leader_epoch
    # Replace: a new target from the first one's origin (0, 1, 2); 3 and 4 leave at once.
    assert sim.reassign(TP, (B0, B1, B2)).error is ErrorCode.NONE
    assert done(sim)
    assert B3 not in sim.states[TP].isr
    assert sim.states[TP].leader == B0
    assert sim.states[TP].leader_epoch == epoch + 1  # written by the "leave at once" step
    sim.run_for(100)
    assert TP not in sim.brokers[B3].logs
    assert TP not in sim.brokers[B4].logs
    sim.run_for(500)  # the load ends
    sim.settle(800)
    assert_all_acked_kept(sim)


def test_controller_dies_between_the_two_writes_of_completion() -> None:
    sim = cluster()
    load(sim, sim.now_ms, sim.now_ms + 600)
    sim.run_for(100)
    epoch = sim.states[TP].leader_epoch
    sim.crash_controller_mid_completion = 1
    assert sim.reassign(TP, (B1, B2, B3)).error is ErrorCode.NONE
    assert sim.run_until_true(lambda: sim.stats.controller_failovers == 1, 2000)
    # The new controller found every target in sync and completed again: one more epoch.
    assert done(sim)
    assert sim.assignment[TP] == (B1, B2, B3)
    assert sim.states[TP].leader == B1
    assert sim.states[TP].leader_epoch == epoch + 2
    sim.settle(1000)
    assert_all_acked_kept(sim)


def test_controller_dies_after_writing_the_assignment_the_next_one_deletes_the_strays() -> None:
    """The completion's writes made, its StopReplica never sent. The removed
    replica (here the leader) runs on; the next controller has nothing to resume and
    removes it with its UpdateMetadata (``tidelog.server.replica.stray_replicas`` rule 1)."""
    sim = cluster()
    load(sim, sim.now_ms, sim.now_ms + 600)
    sim.run_for(100)
    sim.crash_controller_after_assignment = 1
    assert sim.reassign(TP, (B1, B2, B3)).error is ErrorCode.NONE
    assert sim.run_until_true(lambda: sim.stats.controller_failovers == 1, 2000)
    assert done(sim)
    assert sim.assignment[TP] == (B1, B2, B3)
    sim.run_for(200)
    assert TP not in sim.brokers[B0].logs
    assert TP not in sim.brokers[B0].partitions
    sim.settle(1000)
    assert_all_acked_kept(sim)


def test_removed_broker_that_was_down_deletes_the_stray_log_when_it_returns() -> None:
    sim = cluster()
    load(sim, sim.now_ms, sim.now_ms + 400)
    sim.run_for(200)
    sim.crash(B2)
    assert sim.reassign(TP, (B0, B1, B3)).error is ErrorCode.NONE
    assert sim.run_until_true(lambda: done(sim), 2000)
    assert TP in sim.brokers[B2].logs  # down: no StopReplica reached it
    sim.restart(B2)
    sim.run_for(200)
    assert TP not in sim.brokers[B2].logs
    assert TP not in sim.brokers[B2].partitions
    sim.settle(800)
    assert_all_acked_kept(sim)


def test_refusals_name_kafkas_errors() -> None:
    sim = cluster()
    sim.crash(B3)
    refused = sim.reassign(TP, (B3, B1, B2))
    assert refused.error is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert refused.message == (
        "Replica assignment has brokers that are not alive. Replica list: 3,1,2, "
        "live broker list: 0,1,2"
    )
    twice = sim.reassign(TP, (B1, B1))
    assert twice.error is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert twice.message == "Duplicate replica ids in partition reassignment replica list: [1, 1]"
    nothing = sim.cancel_reassignment(TP)
    assert nothing.error is ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    assert sim.assignment[TP] == (B0, B1, B2)
    assert sim.stats.reassignments_refused == 3


def test_settled_check_reports_a_reassignment_left_running() -> None:
    """The end-of-run invariant is not vacuous: a live target that cannot catch up (cut off
    from the leader) leaves the move running, and the check says so."""
    sim = cluster()
    sim.block(B3, B0)
    assert sim.reassign(TP, (B3, B1, B2)).error is ErrorCode.NONE
    sim.run_for(500)
    assert not done(sim)
    sim.check_reassignments_settled()
    assert [v.kind for v in sim.checker.violations] == ["reassignment-stuck"]


# ---- random seeds -----------------------------------------------------------------------

SEEDS = 200


def test_random_seeds_with_reassignments_keep_every_invariant() -> None:
    failures = []
    started = completed = 0
    for seed in range(SEEDS):
        result = run_seed(seed, reassign_share=1.0)
        started += result.stats.reassignments_started
        completed += result.stats.reassignments_completed
        if not result.ok:
            replay = replay_command(
                seed, unclean=False, old_hw_truncation=False, reassign_share=1.0
            )
            failures.append(f"seed {seed}: {result.violations[0]}\n  replay: {replay}")
    assert not failures, "\n".join(failures)
    # Not vacuous: most seeds start reassignments and most of those complete.
    assert started > SEEDS
    assert completed > SEEDS // 2


# A reassignment's same-epoch LeaderAndIsr keeps the leader's in-flight AlterPartition
# (Partition.make_leader: the same state keeps it in flight).
@pytest.mark.parametrize("seed", [439, 760, 5922, 7133])
def test_inflight_isr_change_survives_a_reassignment_leader_and_isr(seed: int) -> None:
    result = run_seed(seed, reassign_share=1.0)
    assert result.ok, result.violations


def test_seed_5041_retried_alter_partition_naming_a_replica_removed_and_added_back() -> None:
    """A retried AlterPartition names a replica removed and added back at the same
    partition epoch: ``decisions.on_replicas_changed`` moves the epoch, so it is refused."""
    result = run_seed(5041, reassign_share=1.0)
    assert result.ok, result.violations


def test_seed_18014_follower_drops_an_epoch_it_opened_at_its_leo_and_never_wrote_in() -> None:
    """Truncation to the LEO drops the epochs starting there (as ``Log.truncate_to``), so
    the follower does not ask the new leader about that epoch for ever."""
    result = run_seed(18014, reassign_share=1.0)
    assert result.ok, result.violations


def test_seed_18219_paused_brokers_queued_stop_replica_keeps_its_order() -> None:
    """What a paused broker queued runs at its resume before anything due at that instant
    (the simulator's FIFO per link)."""
    result = run_seed(18219, reassign_share=1.0)
    assert result.ok, result.violations


def test_seed_55604_replace_dropping_an_offline_partitions_only_isr_member_is_refused() -> None:
    """``decisions.replica_removal_problem`` refuses a replace that drops the only in-sync
    replica of an offline partition."""
    result = run_seed(55604, reassign_share=1.0)
    assert result.ok, result.violations


def test_reassignment_racing_an_isr_expansion_loses_nothing() -> None:
    """The race of seeds 439, 760, 5922 and 7133 (the test above), scripted to its worst outcome.

    B2 lags and leaves the ISR; it catches up and leader B0 proposes it back in. While the
    proposal travels, a reassignment to (0, 2, 1) - the same replicas, B2 now preferred
    over B1 - sends B0 the unchanged state with the new replica list. B0 applies it (same
    leader epoch: ``make_leader`` takes the ISR {0, 1} and forgets the expansion), then
    ignores the controller's answer (ISR {0, 1, 2}, nothing in flight any more). B2 falls
    behind again; B0 acknowledges with ISR {0, 1}; B0 dies and the controller elects B2,
    first in the new order among the live ISR members, without those records, unless the
    same state keeps the change in flight and B0 applies the controller's answer, as it does.
    """
    config = SimConfig(
        brokers=3,
        replication_factor=3,
        min_insync_replicas=2,
        net_delay_ms=(2, 2),
        controller_delay_ms=(5, 5),
    )
    sim = Simulation(config, 1)
    sim.run_for(50)
    sim.block(B2, B0)
    load(sim, sim.now_ms, sim.now_ms + 200, every_ms=20)
    sim.run_for(800)
    assert sim.states[TP].isr == (B0, B1)
    sim.heal(B2, B0)
    leader = sim.brokers[B0].partitions[TP]
    assert sim.run_until_true(lambda: leader.in_flight_proposal is not None, 1000)
    assert sim.reassign(TP, (B0, B2, B1)).error is ErrorCode.NONE
    sim.block(B2, B0)
    sim.run_for(30)  # the controller applies the expansion; B0 must know it
    load(sim, sim.now_ms, sim.now_ms + 200, every_ms=20)
    sim.run_for(300)
    sim.crash(B0)
    sim.run_for(100)  # B2 may be elected: it must hold every acknowledged record
    assert not sim.checker.lost_acked, sim.checker.violations[:1]
    assert sim.checker.ok, sim.checker.violations[:1]


# STALE_BROKER_EPOCH to a retry of an ISR expansion an earlier attempt applied is a stale
# answer (replication rule 5a): the expansion stays.
def test_zombie_leader_keeps_an_applied_expansion_after_re_registering() -> None:
    result = run_seed(1234, reassign_share=1.0)
    assert result.ok, result.violations
