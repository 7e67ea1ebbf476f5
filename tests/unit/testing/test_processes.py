"""``tidelog.testing.processes``: the pieces every launcher shares (no broker started)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
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


def test_a_process_in_the_middle_of_an_exec_is_still_running() -> None:
    """``ip netns exec`` execs the broker after Popen returns; while the kernel swaps the
    image the command line reads empty, which must not be taken for an exit (a hosts
    test's broker was reported "exited during start-up" by that window)."""
    # A process that execs itself again (as ``ip netns exec`` does), both images carrying
    # the marker; polled as fast as possible until it exits.
    exec_again = (
        "import os, sys; os.execv(sys.executable, [sys.executable, '-c', "
        "'import time; time.sleep(0.2)', 'tidelog-exec-marker'])"
    )
    misread = 0
    for _ in range(10):
        child = subprocess.Popen([sys.executable, "-c", exec_again, "tidelog-exec-marker"])
        try:
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline:
                state = process_state(child.pid, "tidelog-exec-marker")
                if child.poll() is not None:
                    break
                if state == "stopped" and child.poll() is None:
                    misread += 1
                    break
        finally:
            child.wait(10.0)
    assert misread == 0
    assert process_state(child.pid, "tidelog-exec-marker") == "stopped"
