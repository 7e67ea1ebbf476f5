"""A local tidelog cluster: one ZooKeeper and N broker processes under one directory.

``LocalCluster(dir, brokers=3, overrides={...}).start()`` starts a real ZooKeeper
(``ZooKeeperProcess``) and N ``python -m tidelog broker --config <dir>/broker-N/server.properties``
processes on free loopback ports, in the background (their own sessions, output to files), and
records everything in ``<dir>/cluster.json`` (the state file)::

    <dir>/cluster.json                 ports, PIDs, paths (the state file)
    <dir>/zookeeper/                   zoo.cfg, data/, zookeeper.log
    <dir>/broker-N/server.properties   the broker's configuration
    <dir>/broker-N/logs/               its log dir
    <dir>/broker-N/broker.log          its stdout and stderr
    <dir>/security/, client.properties with ``security != "plaintext"`` (the CLI's
                                       ``tidelog.cli.launcher.LocalCluster``)

``racks=("a", "b")`` (``tidelog cluster up --racks a,b``) gives broker i ``broker.rack`` =
racks[(i - 1) mod len], recorded in the state file so a restarted broker keeps it.

``start()`` returns when every broker answers ApiVersions and, when the brokers form a cluster
through ZooKeeper and a ``metadata_view`` is given, every broker's Metadata lists every broker.
A cluster started by one process can be driven by another: ``LocalCluster.attach(dir)`` reads
the state file.

The Metadata view is a collaborator (``metadata_view``: bootstrap and client security in,
broker ids and controller out), because reading Metadata takes a Kafka client and
``tidelog.client`` is not below ``tidelog.testing``; the CLI and the fault harness pass theirs.
A secured cluster (``security != "plaintext"``) is the CLI's: ``tidelog.cli.launcher``'s
subclass provides ``security`` and ``bootstrap_security``.

Signals always go to a recorded PID, and only after checking that the PID still runs the
process we started (its command line names our config file), so a recycled PID is never hit.

Exceptions::

    TidelogError
     └── ClusterError        no state file, unknown broker, a process did not start or stop
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Protocol, Self

from tidelog.errors import TidelogError
from tidelog.security.client_config import PLAINTEXT, ClientSecurity
from tidelog.testing.processes import (
    ProcessState,
    api_versions_round_trip,
    broker_command,
    free_ports,
    log_tail,
    process_state,
    spawn_broker,
    write_properties,
)
from tidelog.testing.zookeeper import ZooKeeperProcess

log = logging.getLogger("tidelog.launcher")

STATE_FILE: Final = "cluster.json"
DEFAULT_DIR: Final = Path(".tidelog")
#: Settings of a local cluster that differ from Kafka's defaults (overridable): failures are
#: noticed within seconds rather than Kafka's 18 s session / 30 s lag.
LOCAL_DEFAULTS: Final[Mapping[str, str]] = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "10000",
    "replica.high.watermark.checkpoint.interval.ms": "1000",
    "num.partitions": "1",
}

#: One broker's Metadata as ``(broker ids, controller id)``, or None when it did not answer;
#: called with the broker's bootstrap address and the cluster's client security.
MetadataView = Callable[[str, ClientSecurity], "tuple[tuple[int, ...], int] | None"]


class ClusterError(TidelogError):
    """The local cluster could not be found, started, or driven as asked."""


class ClusterSecurity(Protocol):
    """What a secured cluster adds to each broker's properties and to its admin client
    (``tidelog.cli.local_security.LocalSecurity``)."""

    def broker_properties(
        self, broker_id: int, port: int, broker_ids: Sequence[int]
    ) -> Mapping[str, str]: ...

    def client_security(self) -> ClientSecurity: ...

    def write_client_properties(self, cluster_dir: Path, broker_ids: Sequence[int]) -> object: ...


# --- the state file ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    port: int
    directory: str
    pid: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return Path(self.directory) / "server.properties"

    @property
    def output_path(self) -> Path:
        return Path(self.directory) / "broker.log"

    @property
    def log_dir(self) -> Path:
        return Path(self.directory) / "logs"


@dataclass(frozen=True, slots=True)
class ClusterState:
    directory: str
    zookeeper_port: int | None
    zookeeper_pid: int | None
    brokers: tuple[BrokerInfo, ...]
    overrides: Mapping[str, str] = field(default_factory=dict)
    started_at_ms: int = 0
    #: ``tidelog cluster up --security``: plaintext, ssl, sasl_plaintext or sasl_ssl.
    security: str = "plaintext"
    #: ``tidelog cluster up --racks a,b``: broker i (from 1) has ``broker.rack`` =
    #: racks[(i - 1) mod len]; empty: no racks.
    racks: tuple[str, ...] = ()

    def to_json(self) -> str:
        data = asdict(self)
        data["brokers"] = [asdict(b) for b in self.brokers]
        data["overrides"] = dict(self.overrides)
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ClusterState:
        data = json.loads(text)
        return cls(
            directory=str(data["directory"]),
            zookeeper_port=data.get("zookeeper_port"),
            zookeeper_pid=data.get("zookeeper_pid"),
            brokers=tuple(
                BrokerInfo(
                    broker_id=int(b["broker_id"]),
                    port=int(b["port"]),
                    directory=str(b["directory"]),
                    pid=b.get("pid"),
                )
                for b in data["brokers"]
            ),
            overrides=dict(data.get("overrides", {})),
            started_at_ms=int(data.get("started_at_ms", 0)),
            security=str(data.get("security", "plaintext")),
            racks=tuple(str(r) for r in data.get("racks", ())),
        )

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)


def read_state(directory: Path) -> ClusterState:
    path = directory / STATE_FILE
    try:
        return ClusterState.from_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ClusterError(
            f"no local cluster in {directory} (no {STATE_FILE}); start one with "
            f"`tidelog cluster up --dir {directory}`"
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ClusterError(f"{path} is not a tidelog cluster state file: {exc}") from exc


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# --- the cluster -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    broker_id: int
    pid: int | None
    port: int
    state: ProcessState
    #: Broker ids this broker's Metadata lists (None when it did not answer).
    sees: tuple[int, ...] | None
    controller_id: int | None


class LocalCluster:
    """ZooKeeper + N brokers under ``directory``; see the module docstring."""

    def __init__(
        self,
        directory: Path = DEFAULT_DIR,
        brokers: int = 3,
        overrides: Mapping[str, str] | None = None,
        *,
        zookeeper: bool = True,
        python: str = sys.executable,
        event_loop: str = "uvloop",
        security: str = "plaintext",
        metadata_view: MetadataView | None = None,
        racks: Sequence[str] = (),
    ) -> None:
        if brokers < 1:
            raise ClusterError("a cluster needs at least one broker")
        if any(not rack.strip() for rack in racks):
            raise ClusterError("--racks needs a non-empty rack name for each entry")
        if security != "plaintext" and not zookeeper:
            raise ClusterError("a secured cluster keeps its users and ACLs in ZooKeeper")
        self.security_mode = security
        self.racks = tuple(r.strip() for r in racks)
        self._read_metadata = metadata_view
        self.directory = directory.resolve()
        self.num_brokers = brokers
        self.overrides = dict(overrides or {})
        self.use_zookeeper = zookeeper
        self.python = python
        self.event_loop = event_loop
        self.state: ClusterState | None = None
        #: Children started by this process (reaped with wait); others are signalled by PID.
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._zookeeper: ZooKeeperProcess | None = None

    # -- attach -------------------------------------------------------------------------------

    @classmethod
    def attach(cls, directory: Path = DEFAULT_DIR) -> Self:
        """The cluster recorded in ``directory``'s state file (started by any process)."""
        state = read_state(directory.resolve())
        cluster = cls(
            Path(state.directory),
            brokers=len(state.brokers),
            overrides=state.overrides,
            zookeeper=state.zookeeper_port is not None,
            security=state.security,
            racks=state.racks,
        )
        cluster.state = state
        return cluster

    @property
    def state_path(self) -> Path:
        return self.directory / STATE_FILE

    def _require_state(self) -> ClusterState:
        """The current state: re-read from the file, which other processes may have changed."""
        if self.state is None:
            raise ClusterError(f"the cluster in {self.directory} has not been started")
        with contextlib.suppress(ClusterError):
            self.state = read_state(self.directory)
        return self.state

    def _save(self, state: ClusterState) -> None:
        self.state = state
        _write_atomically(self.state_path, state.to_json())

    @property
    def bootstrap_servers(self) -> str:
        return self._require_state().bootstrap_servers

    @property
    def security(self) -> ClusterSecurity | None:
        """The cluster's secrets and settings (None: plaintext); only the CLI's subclass
        (``tidelog.cli.launcher``) secures a cluster."""
        if self.security_mode != "plaintext":
            raise ClusterError(
                f"a {self.security_mode} cluster is started by tidelog.cli.launcher.LocalCluster"
            )
        return None

    def bootstrap_security(self, zookeeper_connect: str) -> None:
        """Anything a secured cluster writes to ZooKeeper before its brokers start."""

    def client_security(self) -> ClientSecurity:
        """How this cluster's admin connects (plaintext: no security)."""
        security = self.security
        return PLAINTEXT if security is None else security.client_security()

    @property
    def _broker_ids(self) -> list[int]:
        return [i + 1 for i in range(self.num_brokers)]

    @property
    def zookeeper_connect(self) -> str | None:
        state = self._require_state()
        return None if state.zookeeper_port is None else f"127.0.0.1:{state.zookeeper_port}"

    def broker(self, broker_id: int) -> BrokerInfo:
        for info in self._require_state().brokers:
            if info.broker_id == broker_id:
                return info
        ids = ", ".join(str(b.broker_id) for b in self._require_state().brokers)
        raise ClusterError(f"no broker {broker_id} in this cluster (brokers: {ids})")

    # -- start --------------------------------------------------------------------------------

    def is_running(self) -> bool:
        """True when any recorded process (ZooKeeper or a broker) still runs."""
        if self.state is None:
            return False
        if self.zookeeper_state() != "stopped":
            return True
        return any(self.broker_state(b.broker_id) != "stopped" for b in self.state.brokers)

    def _pick_broker_ports(self) -> tuple[BrokerInfo, ...]:
        """Each broker's port, saved in the state (``free_ports``: distinct, free now)."""
        ports = free_ports(self.num_brokers)
        brokers = tuple(
            BrokerInfo(
                broker_id=i + 1,
                port=ports[i],
                directory=str(self.directory / f"broker-{i + 1}"),
            )
            for i in range(self.num_brokers)
        )
        self._save(replace(self._require_state(), brokers=brokers))
        return brokers

    def start(self, timeout_s: float = 90.0) -> Self:
        """Start ZooKeeper and the brokers; return once they serve (see module docstring).

        A directory holding a stopped cluster is reused: its data survives, ports are new.
        On any failure everything started so far is stopped again.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.state_path.exists():
            previous = LocalCluster.attach(self.directory)
            if previous.is_running():
                raise ClusterError(
                    f"a cluster is already running in {self.directory}; "
                    f"`tidelog cluster down --dir {self.directory}` first"
                )
        deadline = time.monotonic() + timeout_s
        self._save(
            ClusterState(
                directory=str(self.directory),
                zookeeper_port=None,
                zookeeper_pid=None,
                brokers=(),
                overrides=self.overrides,
                started_at_ms=int(time.time() * 1000),
                security=self.security_mode,
                racks=self.racks,
            )
        )
        try:
            if self.use_zookeeper:
                zk = ZooKeeperProcess(self.directory / "zookeeper")
                zk.start(timeout_s=max(10.0, deadline - time.monotonic()))
                self._zookeeper = zk
                assert zk.pid is not None
                self._save(
                    replace(
                        self._require_state(),
                        zookeeper_port=zk.client_port,
                        zookeeper_pid=zk.pid,
                    )
                )
            # The brokers' ports are picked once ZooKeeper listens: picked before, one of them
            # could be the port ZooKeeper then picked (free_port tests a bind, and nothing
            # was bound yet), and that broker failed to start with EADDRINUSE.
            brokers = self._pick_broker_ports()
            security = self.security
            if security is not None:
                security.write_client_properties(self.directory, self._broker_ids)
                self.bootstrap_security(f"127.0.0.1:{zk.client_port}")
            for info in brokers:
                self._launch_broker(info)
            self.wait_ready(timeout_s=max(5.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def rack_of(self, broker_id: int) -> str | None:
        """``broker.rack`` of a broker (ids from 1): racks[(id - 1) mod len], or None."""
        return self.racks[(broker_id - 1) % len(self.racks)] if self.racks else None

    def broker_properties(self, info: BrokerInfo) -> dict[str, str]:
        """The ``server.properties`` of one broker: launcher defaults (its rack), then the
        overrides."""
        properties = {
            "broker.id": str(info.broker_id),
            "listeners": f"PLAINTEXT://127.0.0.1:{info.port}",
            "log.dirs": str(info.log_dir),
            **LOCAL_DEFAULTS,
            "default.replication.factor": str(min(3, self.num_brokers)),
        }
        rack = self.rack_of(info.broker_id)
        if rack is not None:
            properties["broker.rack"] = rack
        state = self._require_state()
        if state.zookeeper_port is not None:
            properties["zookeeper.connect"] = f"127.0.0.1:{state.zookeeper_port}"
        security = self.security
        if security is not None:
            properties.update(
                security.broker_properties(info.broker_id, info.port, self._broker_ids)
            )
        properties.update(self.overrides)
        return properties

    def _launch_broker(self, info: BrokerInfo) -> BrokerInfo:
        Path(info.directory).mkdir(parents=True, exist_ok=True)
        write_properties(info.config_path, self.broker_properties(info))
        argv = broker_command(self.python, info.config_path, self.event_loop)
        # Its own session: a Ctrl-C in the terminal does not reach it, and it outlives the
        # `tidelog cluster up` that started it. Stopped by PID only.
        process = spawn_broker(argv, info.output_path, Path(info.directory), new_session=True)
        self._children[process.pid] = process
        started = replace(info, pid=process.pid)
        self._replace_broker(started)
        return started

    def _replace_broker(self, info: BrokerInfo) -> None:
        state = self._require_state()
        self._save(
            replace(
                state,
                brokers=tuple(info if b.broker_id == info.broker_id else b for b in state.brokers),
            )
        )

    def wait_ready(self, timeout_s: float = 60.0, broker_ids: list[int] | None = None) -> None:
        """Wait until the brokers answer ApiVersions and Metadata shows the whole cluster.

        Brokers that are not wired to ZooKeeper each list only themselves: when that stays
        so for a few seconds the wait ends anyway (single-broker mode).
        """
        state = self._require_state()
        ids = broker_ids or [b.broker_id for b in state.brokers]
        deadline = time.monotonic() + timeout_s
        for broker_id in ids:
            info = self.broker(broker_id)
            tls = self.client_security().ssl_context
            while not api_versions_round_trip("127.0.0.1", info.port, timeout=1.0, tls=tls):
                if self.broker_state(broker_id) == "stopped":
                    raise ClusterError(
                        f"broker {broker_id} exited during start-up; see {info.output_path}:\n"
                        + log_tail(info.output_path)
                    )
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"broker {broker_id} did not answer ApiVersions within {timeout_s:.0f}s; "
                        f"see {info.output_path}:\n" + log_tail(info.output_path)
                    )
                time.sleep(0.1)
        live = {b.broker_id for b in state.brokers if self.broker_state(b.broker_id) == "running"}
        if len(live) < 2 or state.zookeeper_port is None or self._read_metadata is None:
            return
        isolated_since: float | None = None
        while True:
            views = {broker_id: self._metadata_view(broker_id) for broker_id in ids}
            if all(view is not None and live <= set(view[0]) for view in views.values()):
                return
            isolated = all(view is not None and view[0] == (b,) for b, view in views.items())
            now = time.monotonic()
            if isolated:
                isolated_since = isolated_since or now
                if now - isolated_since > 5.0:
                    log.warning("brokers list only themselves: not clustered through ZooKeeper")
                    return
            else:
                isolated_since = None
            if now > deadline:
                raise ClusterError(
                    "brokers did not all appear in Metadata within "
                    f"{timeout_s:.0f}s: "
                    + "; ".join(
                        f"broker {b} sees {list(v[0]) if v else 'nothing'}"
                        for b, v in views.items()
                    )
                )
            time.sleep(0.25)

    def _metadata_view(self, broker_id: int) -> tuple[tuple[int, ...], int] | None:
        """(broker ids, controller id) from one broker's Metadata, or None (also when the
        cluster has no ``metadata_view``)."""
        if self._read_metadata is None:
            return None
        return self._read_metadata(self.broker(broker_id).bootstrap, self.client_security())

    # -- status -------------------------------------------------------------------------------

    def zookeeper_state(self) -> ProcessState:
        state = self._require_state()
        return process_state(state.zookeeper_pid, str(self.directory / "zookeeper" / "zoo.cfg"))

    def broker_state(self, broker_id: int) -> ProcessState:
        info = self.broker(broker_id)
        child = self._children.get(info.pid or -1)
        if child is not None and child.poll() is not None:
            return "stopped"
        return process_state(info.pid, str(info.config_path))

    def status(self) -> list[BrokerStatus]:
        result = []
        for info in self._require_state().brokers:
            state = self.broker_state(info.broker_id)
            view = self._metadata_view(info.broker_id) if state == "running" else None
            result.append(
                BrokerStatus(
                    broker_id=info.broker_id,
                    pid=info.pid,
                    port=info.port,
                    state=state,
                    sees=None if view is None else view[0],
                    controller_id=None if view is None else view[1],
                )
            )
        return result

    def controller_id(self) -> int | None:
        """The controller as the running brokers' Metadata reports it (most common answer)."""
        votes: dict[int, int] = {}
        for status in self.status():
            if status.controller_id is not None and status.controller_id >= 0:
                votes[status.controller_id] = votes.get(status.controller_id, 0) + 1
        return max(votes, key=lambda k: votes[k]) if votes else None

    # -- one broker ---------------------------------------------------------------------------

    def _signal_broker(self, broker_id: int, sig: signal.Signals) -> BrokerInfo:
        info = self.broker(broker_id)
        if self.broker_state(broker_id) == "stopped" or info.pid is None:
            raise ClusterError(f"broker {broker_id} is not running")
        os.kill(info.pid, sig)
        return info

    def _wait_exit(self, pid: int, marker: str, timeout_s: float) -> bool:
        child = self._children.get(pid)
        if child is not None:
            try:
                child.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return False
            self._children.pop(pid, None)
            return True
        deadline = time.monotonic() + timeout_s
        while process_state(pid, marker) != "stopped":
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def kill_broker(self, broker_id: int) -> None:
        """SIGKILL by PID (a crash: nothing flushed, the ZooKeeper session left to expire)."""
        info = self._signal_broker(broker_id, signal.SIGKILL)
        assert info.pid is not None
        self._wait_exit(info.pid, str(info.config_path), 10.0)

    def stop_broker(self, broker_id: int, timeout_s: float = 30.0) -> None:
        """SIGTERM by PID (a clean shutdown), SIGKILL after ``timeout_s``."""
        info = self.broker(broker_id)
        if info.pid is None:
            return
        marker = str(info.config_path)
        if self.broker_state(broker_id) == "paused":
            os.kill(info.pid, signal.SIGCONT)
        if self.broker_state(broker_id) != "stopped":
            os.kill(info.pid, signal.SIGTERM)
            if not self._wait_exit(info.pid, marker, timeout_s):
                if process_state(info.pid, marker) != "stopped":
                    os.kill(info.pid, signal.SIGKILL)
                self._wait_exit(info.pid, marker, 10.0)
        self._children.pop(info.pid, None)

    def pause_broker(self, broker_id: int) -> None:
        """SIGSTOP: the process freezes (sockets stay open, its session times out)."""
        self._signal_broker(broker_id, signal.SIGSTOP)
        deadline = time.monotonic() + 5.0
        while self.broker_state(broker_id) != "paused" and time.monotonic() < deadline:
            time.sleep(0.02)

    def resume_broker(self, broker_id: int) -> None:
        self._signal_broker(broker_id, signal.SIGCONT)
        deadline = time.monotonic() + 5.0
        while self.broker_state(broker_id) == "paused" and time.monotonic() < deadline:
            time.sleep(0.02)

    def start_broker(self, broker_id: int, timeout_s: float = 60.0) -> None:
        """Start a stopped broker again with its config, data and port."""
        if self.broker_state(broker_id) != "stopped":
            raise ClusterError(f"broker {broker_id} is already running")
        self._launch_broker(self.broker(broker_id))
        self.wait_ready(timeout_s=timeout_s, broker_ids=[broker_id])

    def restart_broker(
        self, broker_id: int, *, crash: bool = False, timeout_s: float = 60.0
    ) -> None:
        """Stop (SIGTERM, or SIGKILL when ``crash``) if running, then start again."""
        if self.broker_state(broker_id) != "stopped":
            if crash:
                self.kill_broker(broker_id)
            else:
                self.stop_broker(broker_id)
        self.start_broker(broker_id, timeout_s=timeout_s)

    # -- teardown -----------------------------------------------------------------------------

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop every broker (SIGTERM to all at once, SIGKILL to those still running after
        ``timeout_s``), then ZooKeeper; keeps the files."""
        if self.state is None:
            return
        state = self._require_state()
        running = []
        for info in state.brokers:
            broker_state = self.broker_state(info.broker_id)
            if broker_state == "stopped" or info.pid is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                if broker_state == "paused":
                    os.kill(info.pid, signal.SIGCONT)
                os.kill(info.pid, signal.SIGTERM)
                running.append(info)
        deadline = time.monotonic() + timeout_s
        for info in running:
            assert info.pid is not None
            marker = str(info.config_path)
            if not self._wait_exit(info.pid, marker, max(0.1, deadline - time.monotonic())):
                log.warning(
                    "broker %d did not stop within %.0fs: SIGKILL", info.broker_id, timeout_s
                )
                with contextlib.suppress(ProcessLookupError):
                    if process_state(info.pid, marker) != "stopped":
                        os.kill(info.pid, signal.SIGKILL)
                self._wait_exit(info.pid, marker, 10.0)
            self._children.pop(info.pid, None)
        if self._zookeeper is not None:
            self._zookeeper.stop()
            self._zookeeper = None
        elif state.zookeeper_pid is not None:
            marker = str(self.directory / "zookeeper" / "zoo.cfg")
            if process_state(state.zookeeper_pid, marker) != "stopped":
                os.kill(state.zookeeper_pid, signal.SIGTERM)
                if not self._wait_exit(state.zookeeper_pid, marker, 10.0):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(state.zookeeper_pid, signal.SIGKILL)
                    self._wait_exit(state.zookeeper_pid, marker, 10.0)

    def destroy(self) -> None:
        """Stop everything and delete the directory."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Self:
        if self.state is None:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def logs(self) -> Iterator[tuple[str, Path]]:
        state = self._require_state()
        if state.zookeeper_port is not None:
            yield "zookeeper", self.directory / "zookeeper" / "zookeeper.log"
        for info in state.brokers:
            yield f"broker-{info.broker_id}", info.output_path


def describe_state(state: ClusterState) -> dict[str, Any]:
    """The state as plain data (for ``--json``)."""
    return json.loads(state.to_json())  # type: ignore[no-any-return]


__all__ = [
    "DEFAULT_DIR",
    "LOCAL_DEFAULTS",
    "STATE_FILE",
    "BrokerInfo",
    "BrokerStatus",
    "ClusterError",
    "ClusterSecurity",
    "ClusterState",
    "LocalCluster",
    "MetadataView",
    "read_state",
]
