"""``make demo``'s timeline (examples/demo.py, issue 22): events in time order with their
wall-clock time, ISR changes of one poll on one line, ``timeline.json`` and
``timeline.png`` written, and each broker's console address found in its log."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.fixture(scope="module")
def demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tidelog_demo", EXAMPLES / "demo.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["tidelog_demo"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_timeline_rows_are_in_time_order_with_utc_times(demo: ModuleType) -> None:
    timeline = demo.Timeline(started=100.0, started_wall=1_790_000_000.0)
    timeline.mark("leader elected", "orders-0 led elsewhere", at=107.25)
    timeline.mark("start", "", at=100.0)
    timeline.mark("failover injected", "SIGKILL broker 2", at=102.5)
    rows = timeline.rows()
    assert [r["event"] for r in rows] == ["start", "failover injected", "leader elected"]
    assert [r["t_s"] for r in rows] == [0.0, 2.5, 7.25]
    assert rows[1]["time_utc"] == "2026-09-21T14:13:22.500+00:00"


def test_isr_changes_of_one_poll_are_one_line(demo: ModuleType) -> None:
    events = [
        (5.0, 0, (1, 2, 3), (1, 3), 2, 3),
        (5.0, 1, (1, 2, 3), (1, 3), 1, 1),
        (5.0, 2, (1, 2, 3), (1, 2), 3, 3),
        (9.0, 0, (1, 3), (1, 2, 3), 3, 3),
    ]
    assert demo.isr_changes(events) == [
        (
            5.0,
            "orders-0,1: ISR [1,2,3] -> [1,3]; orders-2: ISR [1,2,3] -> [1,2]; "
            "leader orders-0 2 -> 3",
        ),
        (9.0, "orders-0: ISR [1,3] -> [1,2,3]"),
    ]


def test_timeline_files(demo: ModuleType, tmp_path: Path) -> None:
    timeline = demo.Timeline(started=0.0, started_wall=1_790_000_000.0)
    for at, event in ((0.0, "start"), (2.0, "producing"), (4.0, "failover injected")):
        timeline.mark(event, at=at)
    acks = [2.0 + i / 1000 for i in range(2000)] + [9.0 + i / 1000 for i in range(500)]
    written = timeline.write(tmp_path, acks)
    assert [p.name for p in written] == ["timeline.json", "timeline.png"]
    data = json.loads((tmp_path / "timeline.json").read_text(encoding="utf-8"))
    assert [e["event"] for e in data["events"]] == ["start", "producing", "failover injected"]
    assert (tmp_path / "timeline.png").read_bytes().startswith(b"\x89PNG")


def test_console_urls_come_from_each_brokers_log(demo: ModuleType, tmp_path: Path) -> None:
    logs = []
    for broker_id, port in ((1, 40001), (2, 40002)):
        log = tmp_path / f"broker-{broker_id}.log"
        log.write_text(
            f"INFO tidelog.server.broker: metrics served on http://127.0.0.1:{port}/metrics\n",
            encoding="utf-8",
        )
        logs.append(SimpleNamespace(broker_id=broker_id, output_path=log))
    cluster = SimpleNamespace(state=SimpleNamespace(brokers=logs))
    assert demo.console_urls(cluster, timeout_s=1.0) == {
        1: "http://127.0.0.1:40001/console",
        2: "http://127.0.0.1:40002/console",
    }
    # A JSON log line (log.format=json) names the address the same way.
    logs[1].output_path.write_text(
        json.dumps({"message": "metrics served on http://127.0.0.1:40009/metrics"}) + "\n",
        encoding="utf-8",
    )
    assert demo.console_urls(cluster, timeout_s=1.0)[2] == "http://127.0.0.1:40009/console"
