"""The operator's guide's commands (docs/deploy.md), run as an operator runs them: the
``tidelog`` command in a child process, its output read back."""

from __future__ import annotations

import subprocess
import sys

from tests.harness import wait_until


def tidelog(*args: str) -> str:
    """``tidelog ARGS`` (the console script's entry point, ``python -m tidelog``); its
    stdout, or the test fails with its stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "tidelog", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"tidelog {' '.join(args)}: {done.returncode}\n{done.stderr}"
    return done.stdout


def under_replicated(bootstrap: str) -> str:
    """The guide's check between two hosts: partition lines whose ISR lacks a replica."""
    return tidelog(
        "topics", "describe", "--bootstrap-server", bootstrap, "--under-replicated-partitions"
    )


def wait_fully_replicated(bootstrap: str, timeout_s: float = 90.0) -> None:
    """Until ``under_replicated`` prints nothing (every ISR full again)."""
    wait_until(
        lambda: under_replicated(bootstrap) == "", timeout_s, "no under-replicated partition"
    )
