"""Random simulator runs: one seed = one cluster, one fault schedule, one verdict.

    python -m tidelog.testing.soak --seeds 100000          # sweep seeds 0..N-1
    python -m tidelog.testing.soak --replay 1234 --trace   # one seed, with its event trace

Every seed is deterministic: the same seed replays the same run, event for event. A failing
seed is printed with the command that replays it. ``--unclean`` / ``--old-hw-truncation``
switch on the unsafe rules, to watch the checker catch what they lose.

Partition reassignments (KIP-455) join the faults in a share of the seeds
(``--reassign-share``: 1 for every seed; by default half of them, ``REASSIGN_SHARE``). A
seed that draws them gets a cluster of 3 to 5 brokers
and one to four reassignments to random targets of the same, a smaller or a larger size,
some cancelled soon after, and controller failovers (a quarter of them cutting a completion
between its two writes, a quarter after both, before anyone is told). They come from their
own random stream, so a seed without them runs exactly as with ``--reassign-share 0``.
Once settled, no reassignment may still run and each assignment must be its last target.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass, replace

from tidelog.model import BrokerId, TopicPartition
from tidelog.testing.invariants import LostRecord, Violation
from tidelog.testing.sim import Simulation
from tidelog.testing.sim_types import SimConfig, Stats

#: Share of the seeds whose schedule includes reassignments (and controller failovers);
#: ``tests/sim/test_reassignment.py`` sweeps with 1 (docs/replication.md "Reassignment
#: under the simulator").
REASSIGN_SHARE = 0.5
#: A reassignment may complete late, moving a leadership as the run settles: its replicas
#: get this much longer to converge.
REASSIGN_EXTRA_SETTLE_MS = 1000


@dataclass(frozen=True, slots=True)
class SeedResult:
    seed: int
    config: SimConfig
    violations: tuple[Violation, ...]
    lost_acked: tuple[LostRecord, ...]
    stats: Stats
    trace: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.violations


def random_config(
    rng: random.Random, *, unclean: bool = False, old_hw_truncation: bool = False
) -> SimConfig:
    brokers = rng.choice((3, 3, 4))
    rf = rng.choice((2, 3, 3))
    return SimConfig(
        brokers=brokers,
        partitions=rng.choice((1, 1, 2)),
        replication_factor=rf,
        min_insync_replicas=rng.choice((1, 2, 2)) if rf > 1 else 1,
        net_drop_rate=rng.choice((0.0, 0.0, 0.02, 0.1)),
        net_delay_ms=rng.choice(((1, 5), (1, 20), (5, 40))),
        controller_delay_ms=rng.choice(((1, 5), (1, 30), (10, 80))),
        replica_lag_time_max_ms=rng.choice((150, 300, 600)),
        unclean_leader_election=unclean,
        truncate_to_hw_on_follow=old_hw_truncation,
        # Drawn last so the earlier draws of every seed stay what they were.
        alter_response_loss_rate=rng.choice((0.0, 0.0, 0.05, 0.2)),
    )


def schedule_faults(
    sim: Simulation, rng: random.Random, duration_ms: int, *, power_loss: bool = False
) -> None:
    """Producers, a consumer per partition, and a random fault schedule on ``sim``.
    ``power_loss``: crashes also lose each log's unflushed tail."""
    c = sim.config
    tps = sorted(sim.assignment)
    t = 0
    while t < duration_ms:
        t += rng.randint(3, 30)
        tp = rng.choice(tps)
        sim.schedule(t, sim.produce, tp, rng.choice((0, 1, -1, -1)))
    for tp in tps:
        for t in range(40, duration_ms, 40):
            sim.schedule(t, sim.consume, tp)
    brokers = [BrokerId(i) for i in range(c.brokers)]
    lag = c.replica_lag_time_max_ms
    for _ in range(rng.randint(2, 8)):
        at = rng.randint(50, duration_ms - 100)
        kind = rng.choices(
            ("crash", "bounce", "pause", "block", "preferred", "shutdown"),
            weights=(3, 2, 3, 3, 1, 1),
        )[0]
        b = rng.choice(brokers)
        if kind == "crash":
            sim.schedule(at, lambda b=b: sim.crash(b, lose_unflushed=power_loss))
            sim.schedule(at + rng.randint(50, 1200), sim.restart, b)
        elif kind == "bounce":
            sim.schedule(
                at, lambda b=b: sim.crash(b, session_expires=False, lose_unflushed=power_loss)
            )
            sim.schedule(at + rng.randint(5, 150), sim.restart, b)
        elif kind == "pause":
            duration = rng.randint(20, 3 * lag)
            expires = rng.random() < 0.5
            sim.schedule(at, lambda b=b, d=duration, e=expires: sim.pause(b, d, session_expires=e))
        elif kind == "block":
            other = rng.choice([x for x in brokers if x != b])
            sim.schedule(at, sim.block, b, other)
            sim.schedule(at + rng.randint(50, 1500), sim.heal, b, other)
        elif kind == "shutdown":
            sim.schedule(at, sim.controlled_shutdown, b)
            sim.schedule(at + rng.randint(100, 1000), sim.restart, b)
        else:
            sim.schedule(at, sim.elect_preferred_leader, rng.choice(tps))


def with_reassignments(rng: random.Random, config: SimConfig, share: float) -> SimConfig | None:
    """The config of a seed that draws reassignments (more brokers, so that moves are moves),
    None for one that does not. Always draws the same number of values from ``rng``."""
    drawn = rng.random()
    brokers = rng.choice((3, 4, 4, 5))
    if drawn >= share:
        return None
    return replace(config, brokers=max(config.brokers, brokers))


def schedule_reassignments(sim: Simulation, rng: random.Random, duration_ms: int) -> None:
    """One to four reassignments (a random target of the same, a smaller or a larger size;
    some cancelled soon after) and controller failovers, at random times."""
    brokers = sorted(sim.brokers)
    tps: list[TopicPartition] = sorted(sim.assignment)
    for _ in range(rng.randint(1, 4)):
        at = rng.randint(50, duration_ms - 100)
        tp = rng.choice(tps)
        kind = rng.choices(("reassign", "failover"), weights=(5, 1))[0]
        if kind == "failover":
            cut = rng.random()
            if cut < 0.25:
                # The next completion dies between its two writes (then fails over).
                sim.schedule(at, _cut_next_completion, sim)
            elif cut < 0.5:
                # The next completion dies after both writes, telling nobody.
                sim.schedule(at, _cut_next_completion_after_assignment, sim)
            else:
                sim.schedule(at, sim.controller_failover)
            continue
        rf = len(sim.assignment[tp])
        size = rng.choice((rf, rf, rf, rf - 1, rf + 1))
        size = max(1, min(len(brokers), size))
        target = tuple(rng.sample(brokers, size))
        sim.schedule(at, sim.reassign, tp, target)
        if rng.random() < 0.25:
            sim.schedule(at + rng.randint(1, 400), sim.cancel_reassignment, tp)


def _cut_next_completion(sim: Simulation) -> None:
    sim.crash_controller_mid_completion += 1


def _cut_next_completion_after_assignment(sim: Simulation) -> None:
    sim.crash_controller_after_assignment += 1


def run_seed(
    seed: int,
    *,
    duration_ms: int = 2500,
    settle_ms: int = 1500,
    unclean: bool = False,
    old_hw_truncation: bool = False,
    power_loss: bool = False,
    reassign_share: float = REASSIGN_SHARE,
    trace: bool = False,
) -> SeedResult:
    rng = random.Random(f"schedule-{seed}")
    config = random_config(rng, unclean=unclean, old_hw_truncation=old_hw_truncation)
    reassign_rng = random.Random(f"reassign-{seed}")
    reassigning = with_reassignments(reassign_rng, config, reassign_share)
    sim = Simulation(reassigning or config, seed)
    sim.tracing = trace
    schedule_faults(sim, rng, duration_ms, power_loss=power_loss)
    if reassigning is not None:
        schedule_reassignments(sim, reassign_rng, duration_ms)
    sim.run_until(duration_ms)
    sim.settle(settle_ms + (REASSIGN_EXTRA_SETTLE_MS if reassigning is not None else 0))
    return SeedResult(
        seed=seed,
        config=sim.config,
        violations=tuple(sim.checker.violations),
        lost_acked=tuple(sim.checker.lost_acked),
        stats=sim.stats,
        trace=tuple(sim.trace),
    )


def replay_command(
    seed: int,
    *,
    unclean: bool,
    old_hw_truncation: bool,
    power_loss: bool = False,
    reassign_share: float = REASSIGN_SHARE,
) -> str:
    flags = (
        (" --unclean" if unclean else "")
        + (" --old-hw-truncation" if old_hw_truncation else "")
        + (" --power-loss" if power_loss else "")
        + (f" --reassign-share {reassign_share:g}" if reassign_share != REASSIGN_SHARE else "")
    )
    return f"python -m tidelog.testing.soak --replay {seed}{flags} --trace"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidelog.testing.soak", description=__doc__)
    parser.add_argument("--seeds", type=int, default=1000, help="run seeds start..start+N-1")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--replay", type=int, help="run one seed and print its details")
    parser.add_argument("--trace", action="store_true", help="with --replay: print the events")
    parser.add_argument("--unclean", action="store_true", help="unclean.leader.election.enable")
    parser.add_argument(
        "--old-hw-truncation", action="store_true", help="pre-KIP-101 truncation to the HW"
    )
    parser.add_argument(
        "--power-loss", action="store_true", help="crashes lose the unflushed tail (KIP-966)"
    )
    parser.add_argument(
        "--reassign-share",
        type=float,
        default=REASSIGN_SHARE,
        help=f"share of seeds with partition reassignments (default {REASSIGN_SHARE:g})",
    )
    args = parser.parse_args(argv)
    flags = {
        "unclean": args.unclean,
        "old_hw_truncation": args.old_hw_truncation,
        "power_loss": args.power_loss,
        "reassign_share": args.reassign_share,
    }
    if args.replay is not None:
        result = run_seed(args.replay, trace=args.trace, **flags)
        if args.trace:
            print("\n".join(result.trace))
        print(f"seed {result.seed}: {result.config}")
        print(f"stats: {result.stats}")
        for v in result.violations:
            print(f"VIOLATION {v}")
        for lost in result.lost_acked:
            print(f"LOST {lost}")
        print("OK" if result.ok else "FAILED")
        return 0 if result.ok else 1
    started = time.monotonic()
    failed = 0
    events = 0
    for seed in range(args.start, args.start + args.seeds):
        result = run_seed(seed, **flags)
        events += result.stats.events
        if not result.ok:
            failed += 1
            print(f"seed {seed} FAILED: {result.violations[0]}")
            print(f"  replay: {replay_command(seed, **flags)}", flush=True)
        done = seed - args.start + 1
        if done % 1000 == 0:
            print(
                f"... {done} seeds, {failed} failed, {time.monotonic() - started:.0f}s", flush=True
            )
    elapsed = time.monotonic() - started
    print(f"{args.seeds} seeds, {failed} failed, {events} events, {elapsed:.1f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
