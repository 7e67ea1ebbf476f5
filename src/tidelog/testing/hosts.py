"""A cluster on N hosts made on this machine: a network namespace per host (``netns``), each
running one ZooKeeper ensemble member and one broker bound to the host's own address.

``HostsCluster(dir, hosts=3).start()`` (root only) makes the hosts (``HostNetwork``: a bridge
in the root namespace at 10.a.b.254, host i at 10.a.b.i), then in host i (from 1) starts::

    ZooKeeper member myid=i  on 10.a.b.i:2181 (quorum 2888, election 3888), server.1..N
    broker broker.id=i       listeners = advertised.listeners = PLAINTEXT://10.a.b.i:9092,
                             zookeeper.connect = every member's 10.a.b.j:2181

and returns once the ensemble has one leader (``srvr``: ``Mode: leader``, the others
``follower``) and every broker answers ApiVersions at its address
(and, given a ``metadata_view``, lists every broker). Clients run in the root namespace.
``link_down(i)`` / ``link_up(i)`` partition host i and heal it. ``stop_broker(i)`` (SIGTERM: a
controlled shutdown) / ``start_broker(i)`` (with the server.properties on disk, edits kept)
and ``stop_zookeeper(i)`` / ``start_zookeepers([i, ...])`` take one host's processes through
an operator's steps (docs/deploy.md: rolling restart, ZooKeeper backup and restore).
Everything is recorded in ``<dir>/hosts.json`` as soon as it exists (the PIDs, and every
namespace and link made), so ``HostsCluster.attach(dir).stop()`` from another process
(``tidelog cluster down``) stops the processes by PID and removes exactly the namespaces and
links this cluster made::

    <dir>/hosts.json                   names, addresses, PIDs, what was made (the state file)
    <dir>/host-N/zookeeper/            zoo.cfg, data/myid, zookeeper.log
    <dir>/host-N/broker/               server.properties, logs/, broker.log

Signals go to a recorded PID only after checking that it still runs our process (its command
line names our config file).

Exceptions: ``tidelog.testing.cluster.ClusterError`` (no state file, a process did not start),
``tidelog.testing.netns.NetnsError`` (not root, an ``ip`` command failed),
``tidelog.testing.zookeeper.ZooKeeperStartError``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Final, Self

from tidelog.security.client_config import PLAINTEXT
from tidelog.testing.cluster import LOCAL_DEFAULTS, ClusterError, MetadataView
from tidelog.testing.netns import (
    HostNetwork,
    Made,
    NetnsError,
    Runner,
    free_subnet,
    require_root,
    run_ip,
    shares_subnet,
    unique_prefix,
)
from tidelog.testing.processes import (
    api_versions_round_trip,
    broker_command,
    log_tail,
    process_state,
    spawn_broker,
    write_properties,
)
from tidelog.testing.zookeeper import ZooKeeperProcess, srvr_mode

HOSTS_STATE_FILE: Final = "hosts.json"
BROKER_PORT: Final = 9092
ZOOKEEPER_PORT: Final = 2181


@dataclass(frozen=True, slots=True)
class HostInfo:
    """Host ``host`` (from 1; also its broker id and ZooKeeper myid)."""

    host: int
    namespace: str
    address: str
    directory: str
    zookeeper_pid: int | None = None
    broker_pid: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.address}:{BROKER_PORT}"

    @property
    def zookeeper_connect(self) -> str:
        return f"{self.address}:{ZOOKEEPER_PORT}"

    @property
    def zookeeper_dir(self) -> Path:
        return Path(self.directory) / "zookeeper"

    @property
    def broker_dir(self) -> Path:
        return Path(self.directory) / "broker"

    @property
    def broker_config(self) -> Path:
        return self.broker_dir / "server.properties"


@dataclass(frozen=True, slots=True)
class HostsState:
    directory: str
    prefix: str
    subnet: tuple[int, int]
    hosts: tuple[HostInfo, ...]
    #: Every namespace and link made, oldest first (``netns.Made``).
    made: tuple[Made, ...] = ()
    overrides: Mapping[str, str] = field(default_factory=dict)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(h.bootstrap for h in self.hosts)

    @property
    def zookeeper_connect(self) -> str:
        return ",".join(h.zookeeper_connect for h in self.hosts)

    def to_json(self) -> str:
        data = {
            "directory": self.directory,
            "prefix": self.prefix,
            "subnet": list(self.subnet),
            "hosts": [asdict(h) for h in self.hosts],
            "made": [asdict(m) for m in self.made],
            "overrides": dict(self.overrides),
        }
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> HostsState:
        data = json.loads(text)
        a, b = data["subnet"]
        return cls(
            directory=str(data["directory"]),
            prefix=str(data["prefix"]),
            subnet=(int(a), int(b)),
            hosts=tuple(HostInfo(**h) for h in data["hosts"]),
            made=tuple(Made(str(m["kind"]), str(m["name"])) for m in data["made"]),
            overrides=dict(data.get("overrides", {})),
        )


def is_hosts_cluster(directory: Path) -> bool:
    """True when ``directory`` holds a ``--hosts`` cluster's state file."""
    return (directory / HOSTS_STATE_FILE).is_file()


class HostsCluster:
    """N hosts, each with a ZooKeeper member and a broker; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        hosts: int = 3,
        overrides: Mapping[str, str] | None = None,
        *,
        python: str = sys.executable,
        event_loop: str = "uvloop",
        metadata_view: MetadataView | None = None,
        runner: Runner = run_ip,
    ) -> None:
        if hosts < 1:
            raise ClusterError("a cluster needs at least one host")
        self.directory = directory.resolve()
        self.num_hosts = hosts
        self.overrides = dict(overrides or {})
        self.python = python
        self.event_loop = event_loop
        self._read_metadata = metadata_view
        self._runner = runner
        self.network: HostNetwork | None = None
        self.state: HostsState | None = None
        self._zookeepers: dict[int, ZooKeeperProcess] = {}
        #: Brokers started by this process, reaped once stopped.
        self._children: list[subprocess.Popen[bytes]] = []

    @classmethod
    def attach(cls, directory: Path, *, runner: Runner = run_ip) -> Self:
        """The cluster recorded in ``directory``'s state file (started by any process)."""
        path = directory.resolve() / HOSTS_STATE_FILE
        try:
            state = HostsState.from_json(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ClusterError(
                f"no --hosts cluster in {directory} (no {HOSTS_STATE_FILE})"
            ) from None
        except (ValueError, KeyError, TypeError) as exc:
            raise ClusterError(f"{path} is not a hosts state file: {exc}") from exc
        cluster = cls(Path(state.directory), len(state.hosts), state.overrides, runner=runner)
        cluster.state = state
        cluster.network = HostNetwork(
            state.prefix, len(state.hosts), state.subnet, runner, list(state.made)
        )
        return cluster

    # -- state --------------------------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.directory / HOSTS_STATE_FILE

    def _require_state(self) -> HostsState:
        if self.state is None:
            raise ClusterError(f"the cluster in {self.directory} has not been started")
        return self.state

    def _save(self, state: HostsState) -> None:
        self.state = state
        tmp = self.state_path.with_suffix(".json.tmp")
        tmp.write_text(state.to_json(), encoding="utf-8")
        os.replace(tmp, self.state_path)

    def _save_made(self) -> None:
        assert self.network is not None
        self._save(replace(self._require_state(), made=tuple(self.network.made)))

    def _update_host(self, info: HostInfo) -> None:
        state = self._require_state()
        hosts = tuple(info if h.host == info.host else h for h in state.hosts)
        self._save(replace(state, hosts=hosts))

    def host(self, host: int) -> HostInfo:
        for info in self._require_state().hosts:
            if info.host == host:
                return info
        raise ClusterError(f"no host {host} in this cluster (hosts 1..{self.num_hosts})")

    @property
    def bootstrap_servers(self) -> str:
        return self._require_state().bootstrap_servers

    # -- start --------------------------------------------------------------------------------

    def start(self, timeout_s: float = 90.0) -> Self:
        """Make the hosts, start the ensemble, then the brokers; on any failure stop what was
        started and remove what was made, then re-raise."""
        require_root()
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.state_path.exists():
            previous = HostsCluster.attach(self.directory, runner=self._runner)
            if previous.is_running() or previous.network_made():
                raise ClusterError(
                    f"a --hosts cluster is already up in {self.directory}; "
                    f"`tidelog cluster down --dir {self.directory}` first"
                )
        deadline = time.monotonic() + timeout_s
        try:
            self._make_network()
            self._start_ensemble(deadline)
            for info in self._require_state().hosts:
                self._launch_broker(info)
            self.wait_ready(max(5.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def _make_network(self, attempts: int = 3) -> None:
        """Make the hosts on a subnet no other interface holds (another run may pick the
        same free one at the same moment: then again with another)."""
        for _ in range(attempts):
            network = HostNetwork(unique_prefix(), self.num_hosts, free_subnet(), self._runner)
            self._new_state(network)
            try:
                network.create()
            finally:
                self._save_made()
            if not shares_subnet(network):
                return
            network.destroy()
            self._save_made()
        raise NetnsError(f"another run held each subnet picked ({attempts} attempts)")

    def _new_state(self, network: HostNetwork) -> None:
        self.network = network
        self._save(
            HostsState(
                directory=str(self.directory),
                prefix=network.prefix,
                subnet=network.subnet,
                hosts=tuple(
                    HostInfo(
                        host=i,
                        namespace=network.namespace(i),
                        address=network.address(i),
                        directory=str(self.directory / f"host-{i}"),
                    )
                    for i in range(1, self.num_hosts + 1)
                ),
                overrides=self.overrides,
            )
        )

    def network_made(self) -> bool:
        return self.network is not None and bool(self.network.made)

    def _start_ensemble(self, deadline: float) -> None:
        self._launch_zookeepers([h.host for h in self._require_state().hosts], deadline)
        while not ensemble_settled(self.ensemble_modes()):
            if time.monotonic() > deadline:
                raise ClusterError(f"the ensemble did not settle: {self.ensemble_modes()}")
            time.sleep(0.1)

    def _launch_zookeepers(self, hosts: list[int], deadline: float) -> None:
        """Launch the members on ``hosts`` together, then wait until each serves."""
        network = self.network
        assert network is not None
        ensemble = {h.host: h.address for h in self._require_state().hosts}
        for host in hosts:
            info = self.host(host)
            zk = ZooKeeperProcess(
                info.zookeeper_dir,
                client_port=ZOOKEEPER_PORT,
                host=info.address,
                argv_prefix=network.exec_prefix(info.host),
                server_id=info.host,
                ensemble=ensemble,
            )
            zk.launch()
            self._zookeepers[info.host] = zk
            self._update_host(replace(info, zookeeper_pid=zk.pid))
        for host in hosts:
            self._zookeepers[host].wait_serving(max(5.0, deadline - time.monotonic()))

    def ensemble_modes(self) -> dict[int, str | None]:
        """Each member's ``Mode`` from ``srvr`` (None: it does not answer, e.g. cut off or
        without a quorum)."""
        hosts = self._require_state().hosts
        return {h.host: srvr_mode(h.address, ZOOKEEPER_PORT, 1.0) for h in hosts}

    def broker_properties(self, info: HostInfo) -> dict[str, str]:
        """Host ``info``'s broker: bound to the host's address, all members in its connect."""
        listener = f"PLAINTEXT://{info.bootstrap}"
        return {
            "broker.id": str(info.host),
            "listeners": listener,
            "advertised.listeners": listener,
            "log.dirs": str(info.broker_dir / "logs"),
            **LOCAL_DEFAULTS,
            "default.replication.factor": str(min(3, self.num_hosts)),
            "zookeeper.connect": self._require_state().zookeeper_connect,
            **self.overrides,
        }

    def _launch_broker(self, info: HostInfo) -> None:
        info.broker_dir.mkdir(parents=True, exist_ok=True)
        write_properties(info.broker_config, self.broker_properties(info))
        self._spawn_broker(info)

    def _spawn_broker(self, info: HostInfo) -> None:
        """Start host ``info``'s broker with its server.properties as it is on disk."""
        assert self.network is not None
        argv = [
            *self.network.exec_prefix(info.host),
            *broker_command(self.python, info.broker_config, self.event_loop),
        ]
        process = spawn_broker(
            argv, info.broker_dir / "broker.log", info.broker_dir, new_session=True
        )
        self._children.append(process)
        self._update_host(replace(info, broker_pid=process.pid))

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Every broker answers ApiVersions at its address and (with a ``metadata_view``)
        lists every broker."""
        deadline = time.monotonic() + timeout_s
        hosts = self._require_state().hosts
        for info in hosts:
            while not api_versions_round_trip(info.address, BROKER_PORT, timeout=1.0):
                self._check_deadline(info, deadline, "did not answer ApiVersions")
                time.sleep(0.1)
        if self._read_metadata is None:
            return
        everyone = {h.host for h in hosts}
        for info in hosts:
            while True:
                view = self._read_metadata(info.bootstrap, PLAINTEXT)
                if view is not None and everyone <= set(view[0]):
                    break
                self._check_deadline(info, deadline, f"lists only {view and list(view[0])}")
                time.sleep(0.25)

    def _check_deadline(self, info: HostInfo, deadline: float, what: str) -> None:
        log_path = info.broker_dir / "broker.log"
        if process_state(info.broker_pid, str(info.broker_config)) == "stopped":
            raise ClusterError(
                f"broker {info.host} exited during start-up; see {log_path}:\n"
                + log_tail(log_path, 30)
            )
        if time.monotonic() > deadline:
            raise ClusterError(
                f"broker {info.host} at {info.bootstrap} {what}; see {log_path}:\n"
                + log_tail(log_path, 30)
            )

    # -- faults -------------------------------------------------------------------------------

    def link_down(self, host: int) -> None:
        """Cut host ``host`` off the others and the clients (its processes keep running)."""
        self.host(host)
        assert self.network is not None
        self.network.link_down(host)

    def link_up(self, host: int) -> None:
        self.host(host)
        assert self.network is not None
        self.network.link_up(host)

    # -- one host's processes, stopped and started as an operator does (docs/deploy.md) ------

    def stop_broker(self, host: int, timeout_s: float = 60.0) -> int | None:
        """SIGTERM host ``host``'s broker (a controlled shutdown, as ``systemctl stop``
        with deploy/tidelog.service does) and wait until it is gone; SIGKILL after
        ``timeout_s``. Returns its exit status when this process started it."""
        info = self.host(host)
        child = next((c for c in self._children if c.pid == info.broker_pid), None)
        _stop_pids([(info.broker_pid, str(info.broker_config))], timeout_s)
        if child is None:
            return None
        self._children.remove(child)
        return child.wait(10.0)

    def start_broker(self, host: int, timeout_s: float = 60.0, *, wait: bool = True) -> None:
        """Start host ``host``'s stopped broker with its server.properties as it is now on
        disk (an operator's edits kept) and (``wait``) until it answers ApiVersions."""
        info = self.host(host)
        if self.broker_state(host) != "stopped":
            raise ClusterError(f"broker {host} is still running (pid {info.broker_pid})")
        self._spawn_broker(info)
        if not wait:
            return
        info = self.host(host)
        deadline = time.monotonic() + timeout_s
        while not api_versions_round_trip(info.address, BROKER_PORT, timeout=1.0):
            self._check_deadline(info, deadline, "did not answer ApiVersions")
            time.sleep(0.1)

    def stop_zookeeper(self, host: int) -> None:
        """SIGTERM host ``host``'s ensemble member and wait until it is gone."""
        info = self.host(host)
        zk = self._zookeepers.pop(host, None)
        if zk is not None:
            zk.stop()
        _stop_pids([(info.zookeeper_pid, str(info.zookeeper_dir / "zoo.cfg"))], 10.0)

    def start_zookeepers(self, hosts: list[int], timeout_s: float = 60.0) -> None:
        """Start the stopped members on ``hosts`` together (a member alone never serves:
        start a quorum at once) and wait until each serves a session."""
        running = [h for h in hosts if self.zookeeper_state(h) != "stopped"]
        if running:
            raise ClusterError(f"ZooKeeper is still running on hosts {running}")
        self._launch_zookeepers(hosts, time.monotonic() + timeout_s)

    def cut_from_hosts(self, host: int, others: Sequence[int] | None = None) -> list[int]:
        """Cut host ``host`` off from the other hosts (their ZooKeeper members and brokers),
        both ways, while the root namespace's clients still reach it (``netns.cut_from``);
        returns the hosts cut from. ``heal_cut`` heals."""
        self.host(host)
        assert self.network is not None
        peers = [h.host for h in self._require_state().hosts if h.host != host]
        chosen = peers if others is None else [h for h in others if h in peers]
        self.network.cut_from(host, chosen)
        return chosen

    def heal_cut(self, host: int, others: Sequence[int]) -> list[str]:
        assert self.network is not None
        return self.network.heal_cut(host, others)

    def kill_zookeeper(self, host: int) -> None:
        """SIGKILL host ``host``'s ZooKeeper member by its PID (one this process started)."""
        zk = self._zookeepers.get(host)
        if zk is None:
            raise ClusterError(f"the ZooKeeper member of host {host} was not started here")
        zk.kill()

    def start_zookeeper(self, host: int) -> None:
        """Start host ``host``'s member again (same myid and data) without waiting: it serves
        once it has joined a quorum (``ensemble_modes``)."""
        zk = self._zookeepers.get(host)
        if zk is None:
            raise ClusterError(f"the ZooKeeper member of host {host} was not started here")
        zk.launch()
        self._update_host(replace(self.host(host), zookeeper_pid=zk.pid))

    # -- status and teardown ------------------------------------------------------------------

    def broker_state(self, host: int) -> str:
        info = self.host(host)
        return process_state(info.broker_pid, str(info.broker_config))

    def zookeeper_state(self, host: int) -> str:
        info = self.host(host)
        return process_state(info.zookeeper_pid, str(info.zookeeper_dir / "zoo.cfg"))

    def is_running(self) -> bool:
        if self.state is None:
            return False
        return any(
            self.broker_state(h.host) != "stopped" or self.zookeeper_state(h.host) != "stopped"
            for h in self.state.hosts
        )

    def stop(self, timeout_s: float = 30.0) -> list[str]:
        """Stop every broker, then the ensemble (by PID), then remove the namespaces and links
        this cluster made; keeps the files. Returns what could not be removed."""
        if self.state is None:
            return []
        hosts = self._require_state().hosts
        try:
            _stop_pids([(h.broker_pid, str(h.broker_config)) for h in hosts], timeout_s)
            for child in self._children:
                child.wait(10.0)
            self._children.clear()
            for zk in self._zookeepers.values():
                zk.stop()
            self._zookeepers.clear()
            zookeepers = [(h.zookeeper_pid, str(h.zookeeper_dir / "zoo.cfg")) for h in hosts]
            _stop_pids(zookeepers, 10.0)
        finally:
            # The namespaces and links go even when a process would not stop.
            errors = [] if self.network is None else self.network.destroy()
            if self.network is not None:
                self._save_made()
        return errors


def ensemble_settled(modes: Mapping[int, str | None]) -> bool:
    """One leader and the others followers (a one-member ensemble runs standalone)."""
    values = list(modes.values())
    if values == ["standalone"]:
        return True
    return values.count("leader") == 1 and values.count("follower") == len(values) - 1


def _stop_pids(processes: list[tuple[int | None, str]], timeout_s: float) -> None:
    """SIGTERM each PID still running our process (``marker`` in its command line), then
    SIGKILL those left after ``timeout_s``; waits until they are gone."""
    running = []
    for pid, marker in processes:
        state = process_state(pid, marker)
        if pid is None or state == "stopped":
            continue
        with contextlib.suppress(ProcessLookupError):
            if state == "paused":
                os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGTERM)
            running.append((pid, marker))
    deadline = time.monotonic() + timeout_s
    for pid, marker in running:
        if not _wait_gone(pid, marker, deadline):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if not _wait_gone(pid, marker, time.monotonic() + 10.0):
                raise ClusterError(f"process {pid} ({marker}) survived SIGKILL for 10 s")


def _wait_gone(pid: int, marker: str, deadline: float) -> bool:
    while process_state(pid, marker) != "stopped":
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


__all__ = [
    "BROKER_PORT",
    "HOSTS_STATE_FILE",
    "ZOOKEEPER_PORT",
    "HostInfo",
    "HostsCluster",
    "HostsState",
    "is_hosts_cluster",
]
