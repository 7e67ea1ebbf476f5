"""Run the real ZooKeeper server (Debian's ``zookeeper`` package) as a child process.

``ZooKeeperProcess`` writes its own ``zoo.cfg`` and ``log4j.properties`` into a data
directory, starts ``java ... org.apache.zookeeper.server.quorum.QuorumPeerMain zoo.cfg``
listening on 127.0.0.1 only (or on ``host``), and waits until a real ZooKeeper session can be opened
(PEERS.md: ``ruok`` answers before the server serves, so it is not readiness). It stops
the server by its own PID: SIGTERM, then SIGKILL after a grace period. Used by the
integration tests (``tests/integration/zk/conftest.py``) and by ``tidelog.testing.cluster``
(``tidelog cluster up``).

The AdminServer and every four-letter word but ``srvr`` are off (ZooKeeper answers ``srvr``
whatever its whitelist says: ``zkServer.sh status`` needs it); the server log is
``<data_dir>/zookeeper.log``.

An ensemble member (``ensemble={id: address}``, ``server_id``) gets the ``server.N=`` lines
and a ``myid`` file, binds its client and quorum ports to its own ``host`` address, and may
run behind an ``argv_prefix`` (``ip netns exec NS``: ``tidelog.testing.hosts``). Its members
are ``launch()``-ed together and then each ``wait_serving()``: one member alone never serves.
Members answer the four-letter words ``srvr``, ``ruok`` and ``mntr``; ``mode()`` reads
``Mode: leader|follower`` from ``srvr`` (``tidelog.zk.four_letter``).

Exceptions::

    TidelogError
     └── ZooKeeperStartError    java/jars missing, or the server did not become ready
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from tidelog.errors import TidelogError
from tidelog.testing.processes import free_port
from tidelog.zk import probe_session
from tidelog.zk.four_letter import srvr_mode

__all__ = ["ZooKeeperProcess", "ZooKeeperStartError", "default_classpath", "srvr_mode"]

#: Where Debian installs ZooKeeper's jar and the jars its server needs beyond its manifest's
#: Class-Path (a log4j binding for slf4j, and the netty pieces the manifest leaves out).
DEBIAN_JAVA_DIR: Final = Path("/usr/share/java")
DEBIAN_JARS: Final = (
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
    "slf4j-log4j12.jar",
    "log4j-1.2.jar",
    "netty-codec.jar",
    "netty-resolver.jar",
)
#: Overrides the class path (``os.pathsep``-separated), e.g. for a tarball install.
CLASSPATH_ENV: Final = "TIDELOG_ZOOKEEPER_CLASSPATH"
MAIN_CLASS: Final = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
#: Small heap and a serial GC: ZooKeeper shares 2 cores with brokers and Spark here.
#: An ensemble member's quorum ports (followers to the leader, leader election).
QUORUM_PORT: Final = 2888
ELECTION_PORT: Final = 3888
JVM_OPTIONS: Final = ("-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true")

_LOG4J_PROPERTIES: Final = """\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
"""


class ZooKeeperStartError(TidelogError):
    """ZooKeeper could not be started (missing java/jars, or it never served a session)."""


def default_classpath() -> str:
    """The server's class path: ``$TIDELOG_ZOOKEEPER_CLASSPATH`` or Debian's jars."""
    override = os.environ.get(CLASSPATH_ENV)
    if override:
        return override
    jars = [DEBIAN_JAVA_DIR / name for name in DEBIAN_JARS]
    missing = [str(jar) for jar in jars if not jar.is_file()]
    if missing:
        raise ZooKeeperStartError(
            f"ZooKeeper's jars are missing ({', '.join(missing)}): install Debian's "
            f"`zookeeper` package (make venv does) or set {CLASSPATH_ENV}"
        )
    return os.pathsep.join(str(jar) for jar in jars)


class ZooKeeperProcess:
    """One standalone ZooKeeper server on 127.0.0.1, owned by this process.

    ``start()`` blocks until a session can be opened; ``stop()`` ends the server by its PID.
    Usable as a context manager. ``client_port=None`` picks a free port (retried on a
    lost race).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        client_port: int | None = None,
        tick_time_ms: int = 500,
        min_session_timeout_ms: int = 1000,
        max_session_timeout_ms: int = 60000,
        java: str | None = None,
        classpath: str | None = None,
        extra_config: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        argv_prefix: Sequence[str] = (),
        server_id: int | None = None,
        ensemble: Mapping[int, str] | None = None,
    ) -> None:
        if (server_id is None) != (ensemble is None) or (
            ensemble is not None and server_id not in ensemble
        ):
            raise ZooKeeperStartError("an ensemble member needs its server_id in the ensemble")
        self.host = host
        self.argv_prefix = tuple(argv_prefix)
        self.server_id = server_id
        self.ensemble = dict(ensemble) if ensemble is not None else None
        self.data_dir = data_dir
        self.tick_time_ms = tick_time_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self._requested_port = client_port
        self._port: int | None = client_port
        self._java = java
        self._classpath = classpath
        self._extra_config = dict(extra_config or {})
        self._proc: subprocess.Popen[bytes] | None = None

    # -- properties -------------------------------------------------------------------------

    @property
    def client_port(self) -> int:
        if self._port is None:
            raise ZooKeeperStartError("ZooKeeper has not been started")
        return self._port

    @property
    def connect_string(self) -> str:
        """``host:port`` for ``zookeeper.connect`` (append a chroot path as needed)."""
        return f"{self.host}:{self.client_port}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> None:
        """Start the server and wait for a real session; raises ZooKeeperStartError."""
        if self.is_running():
            raise ZooKeeperStartError(f"ZooKeeper already running (pid {self.pid})")
        java = self._java or shutil.which("java")
        if java is None:
            raise ZooKeeperStartError("`java` not found on PATH (ZooKeeper needs Java 17)")
        classpath = self._classpath or default_classpath()
        deadline = time.monotonic() + timeout_s
        # With a picked port another process may grab it between our probe and the JVM's
        # bind: then the JVM exits early and we try once more with a fresh port.
        attempts = 3 if self._requested_port is None else 1
        exit_status: int | None = None
        for attempt in range(attempts):
            if self._requested_port is None:
                self._port = free_port()
            self._launch(java, classpath)
            if self._wait_ready(deadline):
                return
            exited = not self.is_running()
            exit_status = self.stop()
            lost_port_race = exited and "Address already in use" in self._log_tail(200)
            if not exited:
                exit_status = None  # it was still starting when time ran out: we stopped it
            if not lost_port_race or attempt == attempts - 1:
                break
        what = (
            f"exited with status {exit_status}"
            if exit_status is not None
            else f"did not serve a session within {timeout_s:.0f}s"
        )
        raise ZooKeeperStartError(
            f"ZooKeeper on {self.connect_string} {what}; see {self.log_path}:\n{self._log_tail()}"
        )

    def launch(self) -> None:
        """Start the server without waiting (an ensemble member: see the module docstring);
        ``client_port`` must have been given."""
        if self._requested_port is None:
            raise ZooKeeperStartError("launch() needs a client_port (start() picks one)")
        if self.is_running():
            raise ZooKeeperStartError(f"ZooKeeper already running (pid {self.pid})")
        java = self._java or shutil.which("java")
        if java is None:
            raise ZooKeeperStartError("`java` not found on PATH (ZooKeeper needs Java 17)")
        self._launch(java, self._classpath or default_classpath())

    def wait_serving(self, timeout_s: float) -> None:
        """Wait until a launched server serves a session (a member: after its ensemble
        elected a leader); raises ZooKeeperStartError, leaving the process to ``stop()``."""
        if not self._wait_ready(time.monotonic() + timeout_s):
            state = "exited" if not self.is_running() else f"not serving after {timeout_s:.0f}s"
            raise ZooKeeperStartError(
                f"ZooKeeper on {self.connect_string} {state} (mode {self.mode()}); see "
                f"{self.log_path}:\n{self._log_tail()}"
            )

    def mode(self, timeout_s: float = 2.0) -> str | None:
        """This server's ``srvr_mode``."""
        return srvr_mode(self.host, self.client_port, timeout_s)

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM our server's PID, SIGKILL it after ``grace_s``; returns its exit status."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
        self._proc = None
        return proc.returncode

    def kill(self) -> int | None:
        """SIGKILL our server's PID (a crash: no clean shutdown) and reap it; returns its
        exit status. ``launch()`` starts it again with the same data directory."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        self._proc = None
        return proc.returncode

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals --------------------------------------------------------------------------

    def config_lines(self) -> Sequence[str]:
        """The zoo.cfg this server runs with (standalone on loopback, or an ensemble member)."""
        settings = {
            "tickTime": str(self.tick_time_ms),
            "dataDir": str(self.data_dir.resolve() / "data"),
            "clientPort": str(self.client_port),
            "clientPortAddress": self.host,
            "minSessionTimeout": str(self.min_session_timeout_ms),
            "maxSessionTimeout": str(self.max_session_timeout_ms),
            "admin.enableServer": "false",
            # An empty whitelist turns off every four-letter word but srvr, which ZooKeeper
            # always answers (``tidelog cluster status`` reads a lone server's mode from it).
            "4lw.commands.whitelist": "",
            "maxClientCnxns": "0",
            "autopurge.purgeInterval": "0",
        }
        if self.ensemble is not None:
            settings.update(self._ensemble_settings(self.ensemble))
        settings.update(self._extra_config)
        return [f"{key}={value}" for key, value in settings.items()]

    def _ensemble_settings(self, ensemble: Mapping[int, str]) -> dict[str, str]:
        settings = {
            "initLimit": "10",
            "syncLimit": "5",
            "4lw.commands.whitelist": "srvr,ruok,mntr",
            # Quorum sockets on our own address only (the default listens on every address).
            "quorumListenOnAllIPs": "false",
        }
        for server_id, address in sorted(ensemble.items()):
            settings[f"server.{server_id}"] = f"{address}:{QUORUM_PORT}:{ELECTION_PORT}"
        return settings

    def _launch(self, java: str, classpath: str) -> None:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        if self.server_id is not None:
            (self.data_dir / "data" / "myid").write_text(f"{self.server_id}\n")
        self.config_path.write_text("\n".join(self.config_lines()) + "\n")
        log4j = self.data_dir / "log4j.properties"
        log4j.write_text(_LOG4J_PROPERTIES)
        argv = [
            *self.argv_prefix,
            java,
            *JVM_OPTIONS,
            f"-Dlog4j.configuration=file:{log4j.resolve()}",
            "-Dzookeeper.admin.enableServer=false",
            "-cp",
            classpath,
            MAIN_CLASS,
            str(self.config_path.resolve()),
        ]
        with self.log_path.open("ab") as log:
            try:
                self._proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.data_dir,
                    # Its own process group, so a Ctrl-C in the terminal reaches only us; we
                    # still stop it by its PID.
                    start_new_session=True,
                )
            except OSError as exc:
                raise ZooKeeperStartError(f"cannot run {java}: {exc}") from exc

    def _wait_ready(self, deadline: float) -> bool:
        while time.monotonic() < deadline:
            if not self.is_running():
                return False
            remaining = deadline - time.monotonic()
            if probe_session(self.connect_string, timeout_s=max(0.5, min(2.0, remaining))):
                return True
            time.sleep(0.1)
        return False

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])
