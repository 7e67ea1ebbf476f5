"""``run.run_schedule``: the fault schedule both workloads run (no cluster: a fake nemesis)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from tidelog.testing.faults.run import run_schedule


@dataclass(frozen=True)
class Schedule:
    faults: int
    kinds: Sequence[str]
    rest_kinds: Sequence[str] | None = None
    cover_all_first: bool = False
    time_limit_s: float | None = None
    gap_s: tuple[float, float] = (0.0, 0.0)


class FakeNemesis:
    def __init__(self, kinds: Sequence[str]) -> None:
        self._kinds = list(kinds)
        self.ran: list[tuple[int, str]] = []
        self.healed = 0

    def kinds(self) -> list[str]:
        return self._kinds

    def run_one(self, index: int, kind: str) -> None:
        self.ran.append((index, kind))

    def heal_all(self) -> None:
        self.healed += 1


def _run(nemesis: FakeNemesis, schedule: Schedule, started: float = 0.0) -> list[str]:
    logged: list[str] = []
    run_schedule(cast(Any, nemesis), schedule, random.Random(7), logged.append, started)
    return logged


def test_every_kind_once_first_then_the_rest_kinds_only() -> None:
    nemesis = FakeNemesis(["kill", "pause", "partition", "disk_full"])
    schedule = Schedule(
        faults=10,
        kinds=["kill", "pause", "partition", "unknown"],
        rest_kinds=["pause"],
        cover_all_first=True,
    )
    assert _run(nemesis, schedule) == []
    kinds = [kind for _, kind in nemesis.ran]
    assert [i for i, _ in nemesis.ran] == list(range(10))
    assert sorted(kinds[:3]) == ["kill", "partition", "pause"]  # available ones, once each
    assert kinds[3:] == ["pause"] * 7
    assert nemesis.healed == 1


def test_the_time_limit_stops_the_schedule_and_everything_is_healed() -> None:
    nemesis = FakeNemesis(["kill"])
    logged = _run(nemesis, Schedule(faults=5, kinds=["kill"], time_limit_s=0.0), started=-1.0)
    assert nemesis.ran == []
    assert logged == ["time limit reached after 0 faults"]
    assert nemesis.healed == 1
