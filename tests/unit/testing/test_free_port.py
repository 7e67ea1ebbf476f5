"""``free_port`` picks servers' ports outside the range outgoing connections take theirs from."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tidelog.testing import processes


def test_ports_come_from_below_the_ephemeral_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("32768\t60999\n")
    monkeypatch.setattr(processes, "_PORT_RANGE_FILE", str(ranges))
    ports = {processes.free_port() for _ in range(20)}
    assert all(10000 <= port < 32768 for port in ports), ports
    assert len(ports) > 1  # picked at random, not one fixed port
    port = ports.pop()
    with socket.create_server(("127.0.0.1", port)):  # and free
        pass


def test_a_taken_port_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        ranges = tmp_path / "ip_local_port_range"
        ranges.write_text(f"{port + 1} 60999\n")
        monkeypatch.setattr(processes, "_LOWEST_PORT", port - 1)
        monkeypatch.setattr(processes, "_PORT_RANGE_FILE", str(ranges))
        # Only port - 1 and port are in range, and port is taken.
        picked = {processes.free_port() for _ in range(5)}
    assert port not in picked


def test_without_the_range_the_os_picks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "_PORT_RANGE_FILE", str(tmp_path / "missing"))
    port = processes.free_port()
    with socket.create_server(("127.0.0.1", port)):
        pass
