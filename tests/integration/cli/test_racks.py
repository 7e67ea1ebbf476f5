"""Racks (``broker.rack``) end to end: ``tidelog cluster up --brokers 4 --racks a,a,b,b``
(real ZooKeeper, real processes); CreateTopics and CreatePartitions place each partition's
two replicas on the two racks; ``topics describe`` and the web console show each replica's
rack.

Four brokers on racks a, a, b, b make the check bite: Kafka's rack-unaware placement over
brokers 1-4 puts the follower 1, 2 or 3 places after the leader (the shift, random, grows
every 4 partitions), and 1 or 3 places pairs two brokers of one rack; over 8 partitions two
consecutive shifts are used, and one of them is 1 or 3, so some partition would land on
one rack. Rack-aware placement interleaves the racks (1, 3, 2, 4) and never does.

One cluster for the module (starting it is the expensive part); each test uses its own
topic."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import wait_until
from tests.integration.cluster.test_console import CHROMIUM, CHROMIUM_ARGS, PAGE_TIMEOUT_MS

pytestmark = pytest.mark.integration

RACKS = {1: "a", 2: "a", 3: "b", 4: "b"}
_SERVED = re.compile(r"metrics served on http://127\.0\.0\.1:(\d+)/metrics")


def tidelog(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidelog", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def racked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The directory of a running ``cluster up --brokers 4 --racks a,a,b,b`` cluster (each
    broker serves the console on a free port)."""
    d = str(tmp_path_factory.mktemp("racks") / "cluster")
    up = tidelog(
        "cluster", "up", "--brokers", "4", "--racks", "a,a,b,b", "--dir", d, "--json",
        "--override", "metrics.listener=http://127.0.0.1:0", timeout=180,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        status = json.loads(up.stdout)
        assert {b["id"]: b["rack"] for b in status["brokers"]} == RACKS
        yield d
    finally:
        tidelog("cluster", "down", "--dir", d)


def describe(d: str, topic: str) -> dict[str, Any]:
    result = tidelog("topics", "describe", "--dir", d, "--topic", topic, "--json")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)["topics"][0]
    assert isinstance(found, dict)
    return found


def test_partitions_and_new_partitions_span_both_racks(racked: str) -> None:
    created = tidelog(
        "topics", "create", "--dir", racked, "--topic", "spread", "--partitions", "8",
        "--replication-factor", "2",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    grown = tidelog("topics", "alter", "--dir", racked, "--topic", "spread", "--partitions", "11")
    assert grown.returncode == 0, grown.stderr
    topic = describe(racked, "spread")
    partitions = topic["partitions"]
    assert len(partitions) == 11
    for p in partitions:
        assert sorted(p["racks"]) == ["a", "b"], p
        assert p["racks"] == [RACKS[b] for b in p["replicas"]]
    # Leaders go round the brokers: each of the 4 leads 2 of the first 8 partitions.
    leaders = [p["replicas"][0] for p in partitions[:8]]
    assert sorted(leaders.count(b) for b in RACKS) == [2, 2, 2, 2]
    text = tidelog("topics", "describe", "--dir", racked, "--topic", "spread")
    assert text.returncode == 0, text.stderr
    lines = [line for line in text.stdout.splitlines() if "\tPartition: 0\t" in line]
    replicas = partitions[0]["replicas"]
    assert f"\tReplicas: {','.join(map(str, replicas))}\t" in lines[0]
    assert f"\tRacks: {','.join(RACKS[b] for b in replicas)}" in lines[0]


def test_reassign_generate_and_decommission_keep_partitions_on_both_racks(
    racked: str, tmp_path: Path
) -> None:
    """Neither changes anything here (generate proposes; decommission --dry-run plans):
    generate's proposal spans both racks; decommissioning broker 3 (rack b) moves each of
    its replicas to broker 4, the other broker of rack b, however loaded."""
    created = tidelog(
        "topics", "create", "--dir", racked, "--topic", "moved", "--partitions", "4",
        "--replication-factor", "2",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    topics = tmp_path / "topics.json"
    topics.write_text('{"topics":[{"topic":"moved"}],"version":1}')
    generated = tidelog(
        "reassign", "generate", "--dir", racked, "--topics-to-move-json-file", str(topics),
        "--broker-list", "1,2,3,4",
    )  # fmt: skip
    assert generated.returncode == 0, generated.stderr
    proposal = json.loads(generated.stdout.strip().splitlines()[-1])["partitions"]
    assert len(proposal) == 4
    assert all(sorted(RACKS[b] for b in p["replicas"]) == ["a", "b"] for p in proposal)
    plan = tidelog("brokers", "decommission", "--dir", racked, "3", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.rstrip().endswith("Dry run: nothing was changed.")
    lines = plan.stdout.splitlines()
    proposed = json.loads(lines[lines.index("Proposed partition reassignment configuration") + 1])
    assert proposed["partitions"]  # broker 3 holds replicas of "moved" at least
    for p in proposed["partitions"]:
        assert 3 not in p["replicas"]
        assert sorted(RACKS[b] for b in p["replicas"]) == ["a", "b"], p


def console_port(d: str) -> int:
    """The port broker 1 logged for its ``metrics.listener`` (port 0: a free one)."""
    log = Path(d) / "broker-1" / "broker.log"
    found = wait_until(
        lambda: _SERVED.findall(log.read_text(encoding="utf-8", errors="replace")),
        30.0,
        "broker 1's metrics port in its log",
    )
    assert isinstance(found, list)
    return int(found[-1])


def test_the_console_snapshot_has_each_brokers_rack(racked: str) -> None:
    url = f"http://127.0.0.1:{console_port(racked)}/api/snapshot"
    with urllib.request.urlopen(url, timeout=10) as answer:
        snapshot = json.loads(answer.read())
    assert {b["id"]: b["rack"] for b in snapshot["brokers"]} == RACKS


def test_the_console_page_labels_brokers_and_replicas_with_their_racks(racked: str) -> None:
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        pytest.skip("chromium is not installed (scripts/bootstrap.sh installs Debian's)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    created = tidelog(
        "topics", "create", "--dir", racked, "--topic", "seen", "--partitions", "1",
        "--replication-factor", "2",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    replicas = describe(racked, "seen")["partitions"][0]["replicas"]
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium"),
            args=CHROMIUM_ARGS,
        )
        try:
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{console_port(racked)}/console")
            replica = page.locator(
                f'.partition[data-tp="seen-0"] .replica[data-id="{replicas[1]}"]'
            )
            replica.wait_for(timeout=PAGE_TIMEOUT_MS)
            assert replica.get_attribute("data-rack") == RACKS[replicas[1]]
            assert f"rack {RACKS[replicas[1]]} · " in (replica.text_content() or "")
            for broker, rack in RACKS.items():
                chip = page.locator(f'.broker[data-id="{broker}"]')
                assert chip.get_attribute("data-rack") == rack
                assert f"rack {rack}" in chip.inner_text()
        finally:
            browser.close()
