"""Peers (placeholder until the peer rows land)."""

# Optional dependencies (the bench extra) load lazily; workers take positional arguments
# because they run through multiprocessing's starmap.
# ruff: noqa: PLR0917

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tidelog.bench.common import Row


def run_peer(
    name: str,
    directory: Path,
    sizes: list[int],
    seconds: float,
    producers: int,
    say: Callable[[str], None],
    skipped: list[dict[str, str]],
) -> list[Row]:
    raise NotImplementedError(name)
