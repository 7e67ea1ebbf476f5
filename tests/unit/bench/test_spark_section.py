"""``tidelog bench --only spark``: registered, opt-in (a plain ``tidelog bench`` and the
external mode leave it out), and its ratios."""

from __future__ import annotations

import pytest

from tidelog.bench import runner
from tidelog.bench.spark import _ratio
from tidelog.cli.bench import OPT_IN_SECTIONS, SECTION_NAMES, _sections
from tidelog.cli.output import CommandError


def test_the_section_is_registered_and_opt_in() -> None:
    assert "spark" in SECTION_NAMES
    assert "spark" in runner.SECTIONS
    assert OPT_IN_SECTIONS == ("spark",)
    assert "spark" not in _sections(None, external=False)
    assert _sections("spark", external=False) == ("spark",)


def test_not_with_an_external_cluster() -> None:
    with pytest.raises(CommandError, match="--only spark: not with --bootstrap-server"):
        _sections("spark", external=True)


def test_ratios_to_the_plain_clients() -> None:
    assert _ratio(600_000, 400_000) == 1.5
    assert _ratio(1.0, 0.0) is None


def test_the_report_table_puts_each_row_beside_its_plain_client() -> None:
    from tidelog.bench.spark import markdown

    load = [1.0, 2.0, 3.0]
    rows = [
        {
            "workload": "connector batch read rows/s per executor core",
            "values": {
                "rows_per_s": 900_000,
                "plain_consumer": {"rows_per_s": 300_000},
                "ratio_to_plain": 3.0,
                "executor_path": {"rows_per_s": 1_200_000},
                "executor_ratio_to_plain": 4.0,
            },
            "load_average": load,
        },
        {
            "workload": "streaming e2e",
            "values": {
                "latency_ms": {"p50": 400.0, "p99": 700.0},
                "plain_consumer": {"latency_ms": {"p50": 2.0, "p99": 9.0}},
            },
            "load_average": load,
        },
    ]
    text = "\n".join(markdown(rows))
    assert "| connector batch read rows/s per executor core | 900,000 | 300,000 | 3.0 |" in text
    assert "| executor read path alone, into Arrow | 1,200,000 | 300,000 | 4.0 |" in text
    assert "p50 400.0 ms, p99 700.0 ms | p50 2.0 ms, p99 9.0 ms" in text
