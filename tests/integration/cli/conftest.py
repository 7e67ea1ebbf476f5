"""Run the real ``tidelog`` command as a subprocess (``python -m tidelog``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


Tidelog = Callable[..., Result]


@pytest.fixture
def tidelog(tmp_path: Path) -> Tidelog:
    """``tidelog("topics", "list", input="...")`` -> Result (cwd: the test's tmp dir)."""

    def run(*args: str, input: str | None = None, timeout: float = 120.0) -> Result:
        proc = subprocess.run(
            [sys.executable, "-m", "tidelog", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=tmp_path,
            check=False,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run
