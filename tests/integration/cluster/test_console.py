"""The web console in a real browser (issue 22, docs/console.md): three real brokers, each
serving the console on its ``metrics.listener``; Debian's chromium, driven by Playwright,
opens the page, sees the brokers, the controller and the partition's replicas with their
LEO and HW; the partition's leader is SIGKILLed and the page shows the new leader, the ISR
without the dead broker and the election in the timeline with its reason."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import BrokerCluster, free_port, wait_until
from tests.integration.cluster.helpers import produce
from tests.integration.cluster.test_metrics import metrics_port

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: How long the page may take to show what the cluster did (2 shared cores).
PAGE_TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        pytest.skip("chromium is not installed (scripts/bootstrap.sh installs Debian's)")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (the dev extra has it)"
    )
    with sync_api.sync_playwright() as pw:
        launched = pw.chromium.launch(
            executable_path=CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium"),
            args=CHROMIUM_ARGS,
        )
        try:
            yield launched
        finally:
            launched.close()


def get(port: int, path: str, method: str = "GET") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path)
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def tidelog_console(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidelog", "console", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    """``group`` commits ``offset`` for ``topic``-0 (a real client, no consumption)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.commit(offsets=[CTopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def snapshot(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/snapshot", timeout=10) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"] == "application/json"
        found = json.loads(answer.read())
    assert isinstance(found, dict)
    return found


@pytest.mark.parametrize(
    "leader_is_controller",
    [
        # The page is served by the controller: the history comes from its memory.
        pytest.param(False, id="leader-not-controller"),
        # The controller dies too: a new one repairs at failover; the page is served by a
        # broker that reads the history from ZooKeeper.
        pytest.param(True, id="leader-is-controller"),
    ],
)
def test_console_shows_an_election_after_the_leader_is_killed(
    new_cluster: Callable[..., BrokerCluster],
    browser: Any,
    tmp_path: Path,
    leader_is_controller: bool,
) -> None:
    cluster = new_cluster(3, {"metrics.listener": "http://127.0.0.1:0"})
    ports = {b.broker_id: metrics_port(b) for b in cluster.brokers}
    first_controller = int(cluster.metadata().controller_id)
    others = [b for b in sorted(ports) if b != first_controller]
    leader = first_controller if leader_is_controller else others[0]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(
                "watched",
                num_partitions=1,
                replica_assignment=[[leader, *(b for b in ports if b != leader)]],
            )
        ]
    )
    futures["watched"].result(timeout=30)
    assert len(produce(cluster.bootstrap, "watched", [b"r%d" % i for i in range(50)])) == 50
    commit(cluster.bootstrap, "watchers", "watched", 20)
    old_leader = cluster.wait_for_leader("watched", 0)
    assert old_leader == leader
    # The page is served by a broker that will survive.
    viewer = others[-1] if leader_is_controller else first_controller
    url = f"http://127.0.0.1:{ports[viewer]}/console"

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    started = time.monotonic()
    page.goto(url)
    tp = page.locator('.partition[data-tp="watched-0"]')
    tp.wait_for(timeout=PAGE_TIMEOUT_MS)
    load_s = time.monotonic() - started
    # Brokers, controller, and the partition: 3 replicas, all in the ISR, LEO 50, HW 50.
    brokers = page.locator(".broker")
    assert brokers.count() == 3
    assert page.locator('.broker[data-alive="true"]').count() == 3
    controller = page.locator("#controller")
    page.wait_for_function(
        "() => document.querySelector('#controller').dataset.id !== ''"
        " && document.querySelector('#controller').dataset.id !== '-1'",
        timeout=PAGE_TIMEOUT_MS,
    )
    controller_id = int(controller.get_attribute("data-id") or "-1")
    assert controller_id in ports
    page.wait_for_function(
        """() => {
            const p = document.querySelector('.partition[data-tp="watched-0"]');
            const leos = [...p.querySelectorAll('.replica')].map(r => r.dataset.leo);
            return p.dataset.hw === '50' && leos.length === 3 && leos.every(l => l === '50');
        }""",
        timeout=PAGE_TIMEOUT_MS,
    )
    assert tp.get_attribute("data-leader") == str(old_leader)
    assert sorted(tp.get_attribute("data-isr").split(",")) == sorted(map(str, ports))
    assert "LEO 50" in tp.inner_text()
    assert "HW 50" in tp.inner_text()
    assert tp.locator("line.hw").count() == 1
    epoch_before = int(tp.get_attribute("data-epoch") or "-1")
    # The group's committed offset and lag (HW 50 - 20), from its coordinator.
    group = page.locator('.group[data-group="watchers"]')
    group.wait_for(timeout=PAGE_TIMEOUT_MS)
    assert "total lag 30" in group.inner_text()
    page.screenshot(path=str(tmp_path / "console-before.png"), full_page=True)

    # SIGKILL the leader: the page shows the new leader, the ISR without it, the election.
    killed_at = time.monotonic()
    cluster.broker(old_leader).kill()
    page.wait_for_function(
        f"""() => {{
            const p = document.querySelector('.partition[data-tp="watched-0"]');
            return p && p.dataset.leader !== '{old_leader}' && p.dataset.leader !== '-1'
                && !p.dataset.isr.split(',').includes('{old_leader}');
        }}""",
        timeout=PAGE_TIMEOUT_MS,
    )
    new_leader = int(tp.get_attribute("data-leader") or "-1")
    assert new_leader in ports
    assert new_leader != old_leader
    assert int(tp.get_attribute("data-epoch") or "-1") > epoch_before
    assert str(old_leader) not in (tp.get_attribute("data-isr") or "").split(",")
    election = page.locator('.event[data-kind="election"][data-tp="watched-0"]').first
    election.wait_for(timeout=PAGE_TIMEOUT_MS)
    seen_s = time.monotonic() - killed_at
    seen_wall_ms = time.time() * 1000
    text = election.inner_text()
    assert f"leader {old_leader} died" in text
    assert f"leader {old_leader} → {new_leader}" in text
    assert page.locator(f'.broker[data-id="{old_leader}"][data-alive="false"]').count() == 1
    page.locator('.event[data-kind="broker_death"]').first.wait_for(timeout=PAGE_TIMEOUT_MS)
    dead_replica = tp.locator(f'.replica[data-id="{old_leader}"]')
    assert dead_replica.get_attribute("data-dead") == "true"
    page.screenshot(path=str(tmp_path / "console-after.png"), full_page=True)
    decided_ms = max(
        e["time_ms"]
        for e in snapshot(ports[viewer])["history"]
        if e["kind"] == "election" and e.get("topic") == "watched"
    )
    print(
        f"console: page load {load_s:.2f} s, election shown {seen_s:.2f} s after SIGKILL, "
        f"{seen_wall_ms - decided_ms:.0f} ms after the controller decided it"
    )
    page.close()

    # The same history through the API of every surviving broker (read from ZooKeeper by
    # those that are not the controller).
    for b in ports:
        if b == old_leader:
            continue
        found = wait_until(
            lambda b=b: [
                e
                for e in snapshot(ports[b])["history"]
                if e["kind"] == "election" and e.get("topic") == "watched"
            ],
            30.0,
            f"broker {b}'s console to list the election",
        )
        assert isinstance(found, list)
        assert found[-1]["old_leader"] == old_leader
        assert found[-1]["new_leader"] == new_leader
        assert old_leader not in found[-1]["new_isr"]
        # "failover" when the dead leader was the controller too.
        assert found[-1]["trigger"] in ("broker_failure", "failover")

    # Bad requests: Kafka's tools would get the metrics endpoint's answers.
    status, body = get(ports[viewer], "/api/nothing")
    assert status == 404
    assert b"the console is at /console" in body
    status, body = get(ports[viewer], "/api/events?interval_ms=fast")
    assert status == 400
    assert b"interval_ms must be an integer" in body
    status, _ = get(ports[viewer], "/console", method="POST")
    assert status == 405
    status, _ = get(ports[viewer], "/metrics")
    assert status == 200  # the metrics endpoint is still there


def test_console_command_prints_the_urls(new_cluster: Callable[..., BrokerCluster]) -> None:
    cluster = new_cluster(2, {"metrics.listener": "http://127.0.0.1:0"})
    ports = {b.broker_id: metrics_port(b) for b in cluster.brokers}
    # Port 0 cannot be told from the config: the command says where to look.
    found = tidelog_console("--bootstrap-server", cluster.bootstrap)
    assert found.returncode == 1, found.stderr
    for b in ports:
        assert f"broker {b}" in found.stdout
    assert "picks a free port at start" in found.stdout
    assert "no broker serves the console yet" in found.stderr
    some = next(iter(ports))
    checked = tidelog_console("--metrics-url", f"http://127.0.0.1:{ports[some]}")
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip() == f"http://127.0.0.1:{ports[some]}/console"
    assert "2 live brokers" in checked.stderr
    status, body = get(ports[some], "/console")
    assert status == 200
    assert b"tidelog console" in body
    refused = tidelog_console("--metrics-url", "http://127.0.0.1:1")
    assert refused.returncode == 1
    assert "no console at http://127.0.0.1:1" in refused.stderr


def test_console_command_without_a_metrics_listener(
    new_cluster: Callable[..., BrokerCluster],
) -> None:
    cluster = new_cluster(1)
    found = tidelog_console("--bootstrap-server", cluster.bootstrap)
    assert found.returncode == 1
    assert "no metrics listener: set metrics.listener=http://0.0.0.0:9404" in found.stdout


def test_console_command_finds_a_fixed_port_on_every_interface(
    new_cluster: Callable[..., BrokerCluster],
) -> None:
    port = free_port()
    cluster = new_cluster(1, {"metrics.listener": f"http://0.0.0.0:{port}"})
    found = tidelog_console("--bootstrap-server", cluster.bootstrap)
    assert found.returncode == 0, found.stderr
    # 0.0.0.0 is reached at the broker's advertised host.
    url = f"http://127.0.0.1:{port}/console"
    assert found.stdout.strip() == f"broker 0 (controller): {url}"
    status, body = get(port, "/console")
    assert status == 200
    assert b"<title>tidelog console</title>" in body
