"""Named replication scenarios from the seeds, scripted on the deterministic simulator."""

from __future__ import annotations

import pytest

from tidelog.errors import ErrorCode
from tidelog.model import NO_BROKER, BrokerId, TopicPartition
from tidelog.testing.sim import Simulation
from tidelog.testing.sim_types import SimConfig

pytestmark = pytest.mark.sim

TP = TopicPartition("sim", 0)
B0, B1, B2 = BrokerId(0), BrokerId(1), BrokerId(2)


def hw(sim: Simulation, broker: BrokerId) -> int:
    return sim.brokers[broker].partitions[TP].high_watermark


def log(sim: Simulation, broker: BrokerId) -> list[int]:
    return sim.brokers[broker].logs[TP].records


def produce_acked(sim: Simulation, acks: int = -1) -> int:
    rid = sim.produce(TP, acks)
    assert sim.run_until_true(lambda: rid in sim.outcomes, 2000)
    assert sim.outcomes[rid] is ErrorCode.NONE
    return rid


# ---- seed 002: HW truncation loses m2; leader epochs keep it ---------------------------


def seed_002(*, old_rule: bool) -> tuple[Simulation, int, int]:
    """B (broker 0) leads, A (broker 1) follows; min.insync.replicas=1 as in the seed.

    m2 is acknowledged once B's HW passes it; A has m2 but still HW 1 (B's HW travels in the
    next fetch response). A restarts — fast enough that its ZooKeeper session survives, so
    it stays in the ISR — then B dies before A fetches again, and A is elected.
    """
    config = SimConfig(
        brokers=2,
        replication_factor=2,
        min_insync_replicas=1,
        net_delay_ms=(2, 2),
        truncate_to_hw_on_follow=old_rule,
    )
    sim = Simulation(config, seed=2)
    sim.run_for(50)
    m1 = produce_acked(sim)
    assert sim.run_until_true(lambda: hw(sim, B1) == 1, 500)
    m2 = sim.produce(TP, -1)
    assert sim.run_until_true(lambda: hw(sim, B0) == 2, 500)
    assert sim.outcomes[m2] is ErrorCode.NONE  # acknowledged: ISR {A, B} >= 1
    assert log(sim, B1) == [m1, m2]
    assert hw(sim, B1) == 1  # A has not heard of HW 2 yet
    sim.crash(B1, session_expires=False)  # A restarts ...
    sim.restart(B1)
    assert sim.run_until_true(lambda: TP in sim.brokers[B1].fetchers, 100)
    sim.crash(B0)  # ... and B dies before A fetched again: A, in the ISR, is elected
    assert sim.run_until_true(lambda: sim.brokers[B1].partitions[TP].is_leader, 100)
    assert sim.states[TP].leader == B1
    return sim, m1, m2


def test_seed_002_old_hw_truncation_loses_m2() -> None:
    sim, m1, m2 = seed_002(old_rule=True)
    assert log(sim, B1) == [m1]  # truncated to its HW on restart
    assert [(lost.offset, lost.record_id) for lost in sim.checker.lost_acked] == [(1, m2)]
    assert any(v.kind == "committed-data-lost" for v in sim.checker.violations)
    # B comes back and keeps its own m2 at offset 1 while A writes m3 there: the logs
    # diverge below their HWs too (the seed's second failure), and the checker says so.
    m3 = produce_acked(sim, acks=1)
    sim.restart(B0)
    sim.run_for(500)
    assert log(sim, B1) == [m1, m3]
    assert log(sim, B0) == [m1, m2]
    assert any(v.kind == "log-matching" for v in sim.checker.violations)


def test_seed_002_leader_epochs_keep_m2() -> None:
    sim, m1, m2 = seed_002(old_rule=False)
    assert log(sim, B1) == [m1, m2]
    m3 = produce_acked(sim, acks=1)
    sim.restart(B0)
    sim.settle(1000)
    assert sim.checker.violations == []
    assert sim.checker.lost_acked == []
    assert log(sim, B0) == log(sim, B1) == [m1, m2, m3]


# ---- seed 000/004: all replicas down -----------------------------------------------------


def all_replicas_down(*, unclean: bool) -> tuple[Simulation, list[int], list[int]]:
    """Three replicas, min.insync.replicas=1. Broker 2 dies first, then 1, then the leader 0;
    records acknowledged after each death live on fewer replicas. Broker 2 comes back first.
    Returns (sim, records all replicas had, records broker 2 never saw)."""
    config = SimConfig(
        brokers=3,
        replication_factor=3,
        min_insync_replicas=1,
        net_delay_ms=(2, 2),
        unclean_leader_election=unclean,
    )
    sim = Simulation(config, seed=4)
    sim.run_for(50)
    everywhere = [produce_acked(sim) for _ in range(3)]
    sim.run_for(100)  # broker 2 fetches them
    assert log(sim, B2) == everywhere
    sim.crash(B2)
    sim.run_for(20)
    assert sim.states[TP].isr == (B0, B1)
    missing = [produce_acked(sim) for _ in range(2)]
    sim.crash(B1)
    sim.run_for(20)
    missing += [produce_acked(sim) for _ in range(2)]  # ISR {0} >= 1
    sim.crash(B0)
    assert sim.states[TP].leader == NO_BROKER
    assert sim.states[TP].isr == (B0,)  # the last ISR member stays in the ISR
    sim.run_for(100)
    sim.restart(B2)
    sim.run_for(200)
    return sim, everywhere, missing


def test_all_down_clean_waits_for_an_isr_member_and_loses_nothing() -> None:
    sim, everywhere, missing = all_replicas_down(unclean=False)
    assert sim.states[TP].leader == NO_BROKER  # broker 2 is back but not in the ISR: offline
    rid = sim.produce(TP, 1)
    assert sim.outcomes[rid] is ErrorCode.LEADER_NOT_AVAILABLE
    sim.restart(B1)
    sim.run_for(200)
    assert sim.states[TP].leader == NO_BROKER  # neither is broker 1
    sim.restart(B0)
    assert sim.states[TP].leader == B0  # the ISR member returns: clean election
    sim.settle(1000)
    assert sim.checker.violations == []
    assert sim.checker.lost_acked == []
    assert log(sim, B0)[:7] == everywhere + missing
    assert log(sim, B2)[:7] == everywhere + missing
    assert sim.stats.unclean_elections == 0


def test_all_down_unclean_elects_first_back_and_reports_the_loss() -> None:
    sim, everywhere, missing = all_replicas_down(unclean=True)
    assert sim.states[TP].leader == B2  # the first replica back, not in the ISR
    assert sim.stats.unclean_elections == 1
    lost = [(r.offset, r.record_id) for r in sim.checker.lost_acked]
    assert lost == list(enumerate(missing, start=len(everywhere)))
    # Broker 2's new history wins: the others truncate to it when they return.
    new = produce_acked(sim)
    sim.settle(1000)
    assert log(sim, B0) == log(sim, B1) == log(sim, B2) == [*everywhere, new]


# ---- seed 003/004: a follower in a long GC pause ---------------------------------------


def test_paused_follower_leaves_isr_and_rejoins_after_catching_up() -> None:
    config = SimConfig(brokers=3, replication_factor=3, min_insync_replicas=2, net_delay_ms=(1, 4))
    sim = Simulation(config, seed=3)
    lag = config.replica_lag_time_max_ms
    for t in range(20, 4000, 10):
        sim.schedule(t, sim.produce, TP, -1)
    sim.run_for(500)
    assert sim.states[TP].isr == (B0, B1, B2)
    sim.pause(B2, 4 * lag)
    hw_at_pause = hw(sim, B0)
    sim.run_for(lag + lag // 2 + 50)  # lag, then up to lag/2 until the next check
    assert sim.states[TP].isr == (B0, B1)  # shrunk through AlterPartition
    hw_without_b2 = hw(sim, B0)
    sim.run_for(lag)
    assert hw(sim, B0) > hw_without_b2 > hw_at_pause  # the HW moves on without it
    assert sim.brokers[B2].logs[TP].log_end_offset < hw(sim, B0)  # it is behind
    sim.run_for(2 * lag)  # resumes (4 * lag after the pause), fetches, catches up
    assert sim.run_until_true(lambda: B2 in sim.states[TP].isr, 2000)
    assert sim.brokers[B2].logs[TP].log_end_offset >= hw(sim, B0) - 20
    sim.settle(1000)
    assert sim.checker.violations == []
    assert log(sim, B2)[: hw(sim, B0)] == log(sim, B0)[: hw(sim, B0)]


# ---- acks=all and min.insync.replicas ------------------------------------------------------


def test_acks_all_below_min_isr_is_refused_before_append() -> None:
    config = SimConfig(brokers=3, replication_factor=3, min_insync_replicas=2, net_delay_ms=(2, 2))
    sim = Simulation(config, seed=5)
    sim.run_for(50)
    produce_acked(sim)
    sim.crash(B1)
    sim.crash(B2)
    sim.run_for(50)
    assert sim.states[TP].isr == (B0,)
    leo_before = sim.brokers[B0].logs[TP].log_end_offset
    refused = sim.produce(TP, -1)
    sim.run_for(50)
    assert sim.outcomes[refused] is ErrorCode.NOT_ENOUGH_REPLICAS
    assert refused not in log(sim, B0)
    assert sim.brokers[B0].logs[TP].log_end_offset == leo_before
    accepted = produce_acked(sim, acks=1)  # acks=1 does not need the ISR
    assert accepted in log(sim, B0)


def test_isr_shrinking_after_append_answers_not_enough_replicas_after_append() -> None:
    config = SimConfig(brokers=3, replication_factor=3, min_insync_replicas=2, net_delay_ms=(2, 2))
    sim = Simulation(config, seed=6)
    sim.run_for(50)
    produce_acked(sim)
    sim.block(B0, B1)  # the followers can no longer reach the leader
    sim.block(B0, B2)
    rid = sim.produce(TP, -1)
    sim.run_for(50)
    assert rid in log(sim, B0)  # appended: the ISR was 3 when it arrived
    assert rid not in sim.outcomes  # parked in the purgatory
    assert sim.run_until_true(lambda: rid in sim.outcomes, 2000)
    assert sim.outcomes[rid] is ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert sim.states[TP].isr == (B0,)
    assert sim.checker.violations == []


def test_same_seed_same_run() -> None:
    from tidelog.testing.soak import run_seed

    a = run_seed(17, trace=True)
    b = run_seed(17, trace=True)
    assert a.trace == b.trace
    assert a.stats == b.stats
    assert len(a.trace) > 5


# ---- a zombie leader: a GC pause longer than the ZooKeeper session ---------------------


def test_zombie_leader_cannot_acknowledge_acks_all() -> None:
    """The leader freezes past its session; the controller elects broker 1. Produces queued
    at the frozen leader are appended when it wakes, but acks=all cannot complete — the HW
    waits for the ISR, which includes the new leader, and the zombie's AlterPartition is
    fenced — so only acks=1 writes are acknowledged and then lost, as Kafka documents."""
    config = SimConfig(brokers=3, replication_factor=3, min_insync_replicas=2, net_delay_ms=(2, 2))
    sim = Simulation(config, seed=7)
    sim.run_for(50)
    before = [produce_acked(sim) for _ in range(3)]
    sim.pause(B0, 600, session_expires=True)
    all_rid = sim.produce(TP, -1)  # both reach the frozen leader and wait in its queue
    one_rid = sim.produce(TP, 1)
    sim.run_for(config.zookeeper_session_timeout_ms + 20)
    assert sim.states[TP].leader == B1  # elected while broker 0 is frozen
    assert sim.states[TP].leader_epoch == 1
    after = produce_acked(sim)  # the new leader takes writes
    sim.run_until(sim.brokers[B0].paused_until)  # the zombie wakes, still leader of epoch 0
    assert sim.brokers[B0].partitions[TP].is_leader
    assert log(sim, B0)[-2:] == [all_rid, one_rid]  # it appended both
    assert sim.run_until_true(lambda: all_rid in sim.outcomes, 2000)
    assert sim.outcomes[all_rid] is not ErrorCode.NONE  # never acknowledged
    assert sim.outcomes[one_rid] is ErrorCode.NONE  # acks=1: the zombie answered ...
    sim.settle(1000)
    assert sim.brokers[B0].partitions[TP].leader_id == B1
    assert one_rid not in log(sim, B0)  # ... and the record was truncated away
    assert log(sim, B0) == log(sim, B1) == log(sim, B2) == [*before, after]
    assert sim.checker.violations == []


# ---- a lost AlterPartition answer (as under `tidelog bench`'s failover section) ----------


def lost_expand_answer() -> tuple[Simulation, list[int], BrokerId]:
    """Broker 2 drops out of the ISR and catches up; the leader proposes it back in and the
    controller applies that, but its answer is lost (the leader's request timed out: a busy
    controller, a cut link). Broker 2 then stalls again and records are acknowledged; the
    leader and broker 1 die, and the controller elects from the ISR it holds.

    If the leader took the lost answer as "not applied" it would wait only for itself and
    broker 1 while the controller counts broker 2 in: broker 2 is elected without the
    acknowledged records. Returns (sim, records acknowledged while broker 2 stalled, the
    leader right after the two crashes)."""
    config = SimConfig(brokers=3, replication_factor=3, min_insync_replicas=2, net_delay_ms=(2, 2))
    sim = Simulation(config, seed=11)
    sim.run_for(50)
    produce_acked(sim)
    sim.pause(B2, 800)  # longer than replica.lag.time.max.ms (300): shrunk out
    produce_acked(sim)  # waits for the shrink (acks=all)
    assert B2 not in sim.states[TP].isr
    sim.lose_alter_responses = 1  # the next AlterPartition answer never arrives
    assert sim.run_until_true(lambda: B2 in sim.states[TP].isr, 3000)  # applied
    sim.run_for(50)
    sim.pause(B2, 5000)  # stalls again, session kept
    acked = [produce_acked(sim) for _ in range(5)]
    sim.run_for(1500)
    sim.crash(B0)
    sim.crash(B1)
    sim.run_for(500)
    leader_after_crashes = sim.states[TP].leader
    sim.settle(3000)  # everyone back: the final check compares the leader's log
    return sim, acked, leader_after_crashes


def test_lost_alter_partition_answer_loses_nothing() -> None:
    sim, acked, leader_after_crashes = lost_expand_answer()
    assert sim.stats.lost_alter_responses == 1
    # Broker 2 was shrunk out again before the records were acknowledged: it is not
    # electable, so the partition is offline until broker 0 or 1 returns.
    assert leader_after_crashes == NO_BROKER
    assert sim.checker.lost_acked == []
    assert sim.checker.violations == []
    assert all(r in log(sim, sim.states[TP].leader) for r in acked)
