"""The benchmark gets its cluster launcher from ``tidelog bench``, never by importing the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidelog.bench import runner
from tidelog.bench.launch import Launcher
from tidelog.cli.launcher import LocalCluster
from tidelog.cli.local_security import CLIENT_PROPERTIES
from tidelog.cli.main import main
from tidelog.testing.processes import free_port

_BENCH_MODULES = (
    "cleaner",
    "common",
    "kafka",
    "launch",
    "limits",
    "metrics",
    "peers",
    "plots",
    "report",
    "runner",
    "security",
    "tidelog_rows",
    "transactions",
    "zones",
)


def test_no_bench_module_imports_the_cli() -> None:
    imports = "; ".join(f"import tidelog.bench.{name}" for name in _BENCH_MODULES)
    check = (
        "import sys; "
        "print(sorted(m for m in sys.modules if m.split('.')[:2] == ['tidelog', 'cli']))"
    )
    out = subprocess.run(
        [sys.executable, "-c", f"{imports}; {check}"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    ).stdout
    assert out.strip() == "[]"


def test_the_bench_command_hands_in_the_local_cluster_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[runner.Options] = []

    def fake_run(options: runner.Options) -> int:
        seen.append(options)
        return 0

    monkeypatch.setattr(runner, "run", fake_run)
    assert main(["bench", "--only", "limits", "--output", str(tmp_path)]) == 0
    (options,) = seen
    assert options.launcher == Launcher(LocalCluster, free_port, CLIENT_PROPERTIES)
    assert options.sections == ("limits",)
