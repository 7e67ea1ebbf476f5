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
