"""Every bench result says which code it measured (issue 29: a figure comes from a stored
run on the commit it describes)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tidelog.bench.common import code_version, machine
from tidelog.bench.report import _code


def test_the_commit_of_the_tree_tidelog_is_imported_from() -> None:
    got = code_version()
    root = Path(got["code_tree"])
    head = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert got["commit"] == head
    assert re.fullmatch(r"[0-9a-f]{40}", got["commit"])
    assert isinstance(got["uncommitted_changes"], bool)
    assert machine()["commit"] == head


def test_the_report_names_the_commit_and_uncommitted_changes() -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    assert _code({"commit": commit, "uncommitted_changes": False}) == "tidelog `0123456789`"
    assert _code({"commit": commit, "uncommitted_changes": True, "librdkafka": "2.16.0"}) == (
        "tidelog `0123456789` with uncommitted changes, librdkafka 2.16.0"
    )
    assert _code({}) == "commit not recorded"
