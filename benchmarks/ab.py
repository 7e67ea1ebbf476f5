"""Interleaved A/B of two source trees on the same machine: `tidelog bench` rows of each,
run old/new/old/new..., then min/median/max per row and side.

Each run is a fresh `tidelog bench` process with PYTHONPATH set to one tree's `src`, so the
brokers it starts (child processes inheriting the environment) run that tree's code too.
Nothing else should run beside it: the figures are only comparable run to run.

    .venv/bin/python benchmarks/ab.py --a /path/to/old/tree --b . --runs 3 \
        --bench-args "--only produce,e2e --sizes 100,65536 --seconds 8 --no-charts" \
        --output benchmarks/results/ab-issue28

prints a Markdown table (and writes it as ab.md beside each run's results.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: (section, value path, unit, higher is better)
METRICS = (
    ("produce", ("records_per_s",), "records/s", True),
    ("produce", ("mb_per_s",), "MB/s", True),
    ("e2e", ("latency_ms", "p50"), "ms p50", False),
    ("e2e", ("latency_ms", "p99"), "ms p99", False),
    ("e2e", ("latency_ms", "p99.9"), "ms p99.9", False),
    ("e2e", ("broker_cpu_ms_per_1k",), "broker CPU ms per 1k records", False),
    ("produce", ("latency_ms", "p99"), "produce ms p99", False),
    ("produce", ("client_cpu",), "client CPU (cores)", False),
)


def run_once(tree: Path, bench_args: list[str], output: Path) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(tree.resolve() / "src"))
    command = [sys.executable, "-m", "tidelog", "bench", *bench_args, "--output", str(output)]
    print(f"$ PYTHONPATH={env['PYTHONPATH']} {shlex.join(command)}", flush=True)
    subprocess.run(command, env=env, check=True)
    result: dict[str, object] = json.loads((output / "results.json").read_text())
    return result


def _value(values: dict[str, object], path: tuple[str, ...]) -> float | None:
    node: object = values
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return float(node) if isinstance(node, int | float) else None


def rows_of(result: dict[str, object]) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    rows = result.get("rows", [])
    assert isinstance(rows, list)
    for row in rows:
        if row.get("system") != "tidelog":
            continue
        for section, path, unit, _ in METRICS:
            if row.get("section") != section:
                continue
            value = _value(row.get("values", {}), path)
            if value is not None:
                out[(f"{row['workload']}", unit)] = value
    return out


def table(a: list[dict[tuple[str, str], float]], b: list[dict[tuple[str, str], float]]) -> str:
    keys = sorted({k for run in a + b for k in run}, key=lambda k: (k[1], k[0]))
    lines = [
        "| row | unit | A min / median / max | B min / median / max | B/A (medians) |",
        "|---|---|---|---|---|",
    ]

    def mmm(values: list[float]) -> str:
        if not values:
            return "-"
        return f"{min(values):,.1f} / {statistics.median(values):,.1f} / {max(values):,.1f}"

    for workload, unit in keys:
        va = [run[(workload, unit)] for run in a if (workload, unit) in run]
        vb = [run[(workload, unit)] for run in b if (workload, unit) in run]
        ratio = (
            f"{statistics.median(vb) / statistics.median(va):.3f}"
            if va and vb and statistics.median(va)
            else "-"
        )
        lines.append(f"| {workload} | {unit} | {mmm(va)} | {mmm(vb)} | {ratio} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", type=Path, help="the tree measured first (old)")
    parser.add_argument("--b", type=Path, help="the tree measured second (new)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each tree")
    parser.add_argument("--bench-args", default="--only produce,e2e --no-charts")
    parser.add_argument("--pause", type=float, default=20.0, help="seconds between runs")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument(
        "--tabulate",
        action="store_true",
        help="run nothing: tabulate every a*/ and b*/ results.json below --output",
    )
    args = parser.parse_args()
    if args.tabulate:
        found = {
            side: [
                rows_of(json.loads(p.read_text()))
                for p in sorted(args.output.rglob(f"{side}[0-9]*/results.json"))
            ]
            for side in ("a", "b")
        }
        print(f"{len(found['a'])} A runs, {len(found['b'])} B runs below {args.output}\n")
        print(table(found["a"], found["b"]))
        return 0
    if args.a is None or args.b is None:
        parser.error("--a and --b name the two trees")
    bench_args = shlex.split(args.bench_args)
    results: dict[str, list[dict[tuple[str, str], float]]] = {"a": [], "b": []}
    for i in range(args.runs):
        for side, tree in (("a", args.a), ("b", args.b)):
            if results["a"] or results["b"]:
                time.sleep(args.pause)
            result = run_once(tree, bench_args, args.output / f"{side}{i + 1}")
            results[side].append(rows_of(result))
    text = (
        f"A = {args.a.resolve()}, B = {args.b.resolve()}; {args.runs} runs each, interleaved "
        f"A/B/A/B; `tidelog bench {args.bench_args}`\n\n" + table(results["a"], results["b"])
    )
    (args.output / "ab.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
