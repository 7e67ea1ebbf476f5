"""The operator's guide's commands (docs/deploy.md), run as an operator runs them.

A block the tests run follows a ``<!-- test block: NAME -->`` line in the guide;
``run_guide_block`` runs its text with bash, the guide's example addresses and names
replaced by the test cluster's, and the ``tidelog`` console script of this Python on PATH.
So a command changed in the guide is the command the test runs next time."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from tests.harness import wait_until

GUIDE: Final = Path(__file__).resolve().parents[3] / "docs" / "deploy.md"
#: The guide's example bootstrap list (the three brokers).
GUIDE_BOOTSTRAP: Final = "10.0.0.1:9092,10.0.0.2:9092,10.0.0.3:9092"
_BLOCK = re.compile(r"<!-- test block: (?P<name>[\w-]+) -->\n```sh\n(?P<body>.*?)\n```", re.S)


def guide_block(name: str) -> str:
    """The text of the guide's block ``name``; the test fails when there is none."""
    blocks = {m["name"]: m["body"] for m in _BLOCK.finditer(GUIDE.read_text(encoding="utf-8"))}
    assert name in blocks, f"no block {name!r} in {GUIDE} (blocks: {sorted(blocks)})"
    return blocks[name]


def run_guide_block(
    name: str,
    replacements: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    stop_on_error: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run block ``name`` with bash (``set -euo pipefail`` unless ``stop_on_error`` is
    false: then every line runs and the caller judges the output)."""
    script = guide_block(name)
    for old, new in (replacements or {}).items():
        script = script.replace(old, new)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    preamble = "set -euo pipefail\n" if stop_on_error else ""
    done = subprocess.run(
        ["bash", "-c", preamble + script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PATH": path, **(env or {})},
    )
    if stop_on_error:
        assert done.returncode == 0, f"block {name}: {done.returncode}\n{script}\n{done.stderr}"
    return done


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
    """The guide's check between two hosts (block ``under-replicated``): the partition
    lines whose ISR lacks a replica."""
    return run_guide_block("under-replicated", {GUIDE_BOOTSTRAP: bootstrap}).stdout


def wait_fully_replicated(bootstrap: str, timeout_s: float = 90.0) -> None:
    """Until ``under_replicated`` prints nothing (every ISR full again)."""
    wait_until(
        lambda: under_replicated(bootstrap) == "", timeout_s, "no under-replicated partition"
    )
