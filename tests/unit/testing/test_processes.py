"""``tidelog.testing.processes``: the pieces every launcher shares (no broker started)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from tidelog.testing.processes import (
    api_versions_round_trip,
    broker_command,
    free_ports,
    process_state,
    spawn_broker,
    write_properties,
)


def test_write_properties_one_key_a_line_in_order(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    write_properties(path, {"broker.id": "2", "listeners": "PLAINTEXT://127.0.0.1:9"})
    assert path.read_text() == "broker.id=2\nlisteners=PLAINTEXT://127.0.0.1:9\n"


def test_broker_command_runs_the_broker_module_with_its_config(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    assert broker_command("py", config, "asyncio") == [
        "py",
        "-m",
        "tidelog",
        "broker",
        "--config",
        str(config),
        "--event-loop",
        "asyncio",
    ]


def test_free_ports_are_distinct() -> None:
    ports = free_ports(5)
    assert len(set(ports)) == 5


def test_spawn_appends_output_and_may_start_a_new_session(tmp_path: Path) -> None:
    output = tmp_path / "broker.log"
    output.write_text("before\n")
    argv = [sys.executable, "-c", "import os; print(os.getsid(0))"]
    process = spawn_broker(argv, output, tmp_path, new_session=True)
    assert process.wait(30) == 0
    before, sid = output.read_text().splitlines()
    assert before == "before"
    assert int(sid) == process.pid != os.getsid(0)  # a session of its own
    assert process_state(process.pid, "getsid") == "stopped"  # reaped: gone


def test_api_versions_round_trip_is_false_when_nothing_serves() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert not api_versions_round_trip("127.0.0.1", port, timeout=0.5)
