"""Real processes on loopback, the pieces every launcher shares: a free port, a broker
process started from a ``server.properties``, its readiness probe (an ApiVersions round
trip), and the state of a PID as ``/proc`` shows it.

Used by ``tidelog.testing.broker`` (one broker a test owns), ``tidelog.testing.cluster``
(ZooKeeper + N brokers, ``tidelog cluster up``) and ``tidelog.testing.zookeeper``. Processes
are only ever signalled by their own PID, never by name.
"""

from __future__ import annotations

import contextlib
import random
import socket
import ssl
import struct
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Literal

ProcessState = Literal["running", "paused", "stopped"]

_PORT_RANGE_FILE: Final = "/proc/sys/net/ipv4/ip_local_port_range"
#: Where free_port looks below the ephemeral range (ports above most fixed services').
_LOWEST_PORT: Final = 10000


def _ephemeral_low() -> int | None:
    """The first port the kernel hands out to outgoing connections (Linux), or None."""
    try:
        with open(_PORT_RANGE_FILE) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, for a server started next.

    Picked below the kernel's ephemeral range when there is room: a port the OS picks with
    ``bind(0)`` comes from that range, so between this call and the server's own bind an
    outgoing connection of any process could take it as its local port (the server then
    fails to start with EADDRINUSE).
    """
    low = _ephemeral_low()
    if low is not None and low - 1 > _LOWEST_PORT:
        pick = random.SystemRandom()
        for _ in range(100):
            port = pick.randrange(_LOWEST_PORT, low)
            if _bindable(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port_: int = sock.getsockname()[1]
        return port_


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports (see ``free_port``)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def api_versions_round_trip(
    host: str, port: int, timeout: float = 2.0, tls: ssl.SSLContext | None = None
) -> bool:
    """One ApiVersions v0 request (over TLS with ``tls``: ApiVersions needs no login);
    True when a well-formed answer with error 0 came back: the broker serves, not merely
    accepts connections."""
    client_id = b"tidelog-launcher"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        with contextlib.ExitStack() as stack:
            sock = stack.enter_context(socket.create_connection((host, port), timeout=timeout))
            if tls is not None:
                hostname = host if tls.check_hostname else None
                sock = stack.enter_context(tls.wrap_socket(sock, server_hostname=hostname))
            sock.sendall(struct.pack(">i", len(body)) + body)
            (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
            payload = _recv_exactly(sock, size)
    except (OSError, struct.error):
        return False
    correlation_id, error_code = struct.unpack_from(">ih", payload)
    return bool(correlation_id == 7 and error_code == 0)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def write_properties(path: Path, properties: Mapping[str, str]) -> None:
    """A Java properties file, one ``key=value`` a line, in the mapping's order."""
    path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()), encoding="utf-8")


def broker_command(python: str, config_path: Path, event_loop: str) -> list[str]:
    """The command line of a broker process: ``python -m tidelog broker --config ...``."""
    return [
        python,
        "-m",
        "tidelog",
        "broker",
        "--config",
        str(config_path),
        "--event-loop",
        event_loop,
    ]


def spawn_broker(
    argv: list[str], output_path: Path, cwd: Path, *, new_session: bool = False
) -> subprocess.Popen[bytes]:
    """Start a broker process (``broker_command``) without waiting for it, its stdout and
    stderr appended to ``output_path``. ``new_session``: its own session, so a Ctrl-C in the
    terminal does not reach it and it outlives the process that started it."""
    with output_path.open("ab") as output:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=new_session,
        )


def log_tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a process's log, for an error that points at it."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no output)"
    return "\n".join(text.splitlines()[-lines:])


def process_state(pid: int | None, marker: str) -> ProcessState:
    """State of ``pid`` if it still runs the process whose command line contains ``marker``.

    A PID that is gone, a zombie, or now runs something else is "stopped" (so a recycled
    PID is never taken for ours); SIGSTOPped is "paused".

    A process in the middle of an ``execve`` shows an empty command line: ``ip netns exec``
    execs the broker after Popen has returned (polled at once, 98 of 100 starts showed the
    empty line). An empty command line of a user process (its parent not kthreadd) is
    taken for ours, still starting.
    """
    if pid is None:
        return "stopped"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "stopped"
    # /proc/<pid>/stat: "pid (comm) S ppid ..."; the comm may hold spaces: split after ')'.
    status, ppid = stat.rpartition(")")[2].split()[:2]
    if status in ("Z", "X"):
        return "stopped"
    exec_under_way = not cmdline and ppid not in ("0", "2")
    if marker.encode() not in cmdline and not exec_under_way:
        return "stopped"
    if status in ("T", "t"):
        return "paused"
    return "running"
