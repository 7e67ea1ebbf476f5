"""ZooKeeperProcess runs the real server, loopback only, and stops it by its PID."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tidelog.testing.zookeeper import ZooKeeperProcess, ZooKeeperStartError
from tidelog.zk import probe_session

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); Popen.wait in stop() reaps it, so this is exact.
    return True


def test_shared_server_config_is_loopback_only(zookeeper: ZooKeeperProcess) -> None:
    config = zookeeper.config_path.read_text().splitlines()
    assert "clientPortAddress=127.0.0.1" in config
    assert "admin.enableServer=false" in config
    assert f"clientPort={zookeeper.client_port}" in config
    assert probe_session(zookeeper.connect_string, timeout_s=5)


def test_four_letter_words_are_off(zookeeper: ZooKeeperProcess) -> None:
    with socket.create_connection(("127.0.0.1", zookeeper.client_port), timeout=5) as sock:
        sock.sendall(b"ruok")
        reply = b""
        while chunk := sock.recv(1024):
            reply += chunk
    assert b"imok" not in reply
    assert b"not in the whitelist" in reply


def test_start_and_stop_by_pid(tmp_path: Path) -> None:
    server = ZooKeeperProcess(tmp_path / "zk")
    with server:
        pid = server.pid
        assert pid is not None
        assert _alive(pid)
        assert probe_session(server.connect_string, timeout_s=5)
        connect = server.connect_string
    assert server.pid is None
    assert not _alive(pid)
    assert not probe_session(connect, timeout_s=1)
    assert "binding to port" in server.log_path.read_text()


def test_broken_classpath_is_a_clear_error(tmp_path: Path) -> None:
    server = ZooKeeperProcess(tmp_path / "zk", classpath=str(tmp_path / "missing.jar"))
    with pytest.raises(ZooKeeperStartError, match=r"exited with status 1; see .*zookeeper\.log"):
        server.start(timeout_s=20)
    assert not server.is_running()
    assert "ClassNotFoundException" in server.log_path.read_text() or "Could not find" in (
        server.log_path.read_text()
    )


def test_missing_java_is_a_clear_error(tmp_path: Path) -> None:
    server = ZooKeeperProcess(tmp_path / "zk", java=str(tmp_path / "no-java"))
    with pytest.raises(ZooKeeperStartError, match=r"cannot run .*no-java"):
        server.start(timeout_s=5)
    assert server.pid is None
