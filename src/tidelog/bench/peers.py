"""Peers on the same host: NATS JetStream R3 and RabbitMQ Streams, three nodes each.

Each peer is installed from Debian's packages when absent (``apt-get install``), started as
three processes on loopback (their own config, ports and data under the run's directory),
driven from Python in its fastest acknowledged mode, and stopped by PID:

- NATS JetStream 2.9 (``nats-server``): a stream with ``num_replicas=3`` (file storage);
  nats-py ``publish_async``; a publish is acknowledged after the stream's Raft group (2 of
  3) stored it.
- RabbitMQ Streams 3.10 (``rabbitmq-server`` + ``rabbitmq_stream``): three nodes joined
  into one cluster, a stream with ``initial-cluster-size=3``; rstream with sub-entry
  batching (100 messages per entry) for small records and ``send_batch`` (10 per frame)
  for 64 KiB; a confirm comes after a quorum of replicas has the data, without fsync.

The publishers (``bench.peer_clients``) keep the Kafka producers' window (32 MiB
unacknowledged), start their clock when the client holds the records, and measure their
own CPU; each row records its ``window``, ``timer`` and ``client_cpu``.
"""

# Optional dependencies (the bench extra) load lazily; workers take positional arguments
# because they run through multiprocessing's starmap.
# ruff: noqa: PLC0415, PLR0917

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidelog.bench.common import Row, remove_data, settle
from tidelog.bench.kafka import perf_test_line, run_parallel, summarise_produce
from tidelog.bench.peer_clients import (
    SUB_ENTRY_MAX_BYTES,
    nats_publish_worker,
    rabbit_per_call,
    rabbit_publish_worker,
)

Say = Callable[[str], None]


class PeerUnavailableError(Exception):
    """The peer could not be installed or started here (the reason is recorded)."""


def _ensure_package(binary: str, package: str, say: Say) -> None:
    if shutil.which(binary) or Path(f"/usr/lib/rabbitmq/bin/{binary}").exists():
        return
    say(f"installing {package} from Debian's packages")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
    try:
        subprocess.run(
            [*prefix, "apt-get", "install", "-y", "-qq", "--no-install-recommends", package],
            check=True,
            env=env,
            capture_output=True,
            timeout=600,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise PeerUnavailableError(f"apt-get install {package} failed: {exc}") from exc
    if not (shutil.which(binary) or Path(f"/usr/lib/rabbitmq/bin/{binary}").exists()):
        raise PeerUnavailableError(f"{package} installed but {binary} not found")


def _stop_pid(process: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait(10)


# --- NATS JetStream ------------------------------------------------------------------------


class NatsCluster:
    def __init__(self, directory: Path, free_port: Callable[[], int]) -> None:
        self.directory = directory
        self.processes: list[subprocess.Popen[bytes]] = []
        self.ports = [free_port() for _ in range(3)]
        self.cluster_ports = [free_port() for _ in range(3)]

    @property
    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{p}" for p in self.ports]

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for i in range(3):
            routes = ", ".join(
                f"nats-route://127.0.0.1:{p}" for j, p in enumerate(self.cluster_ports) if j != i
            )
            store = self.directory / f"n{i + 1}"
            config = self.directory / f"n{i + 1}.conf"
            config.write_text(
                f'server_name: "n{i + 1}"\n'
                f"listen: 127.0.0.1:{self.ports[i]}\n"
                f'jetstream {{ store_dir: "{store}", max_memory_store: 268435456 }}\n'
                f"cluster {{ name: tlbench, listen: 127.0.0.1:{self.cluster_ports[i]}, "
                f"routes: [{routes}] }}\n",
                encoding="utf-8",
            )
            with (self.directory / f"n{i + 1}.log").open("ab") as out:
                self.processes.append(
                    subprocess.Popen(
                        ["nats-server", "-c", str(config)],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                )

    def stop(self) -> None:
        for p in self.processes:
            _stop_pid(p)


async def _nats_create_stream(urls: list[str], name: str, subject: str, timeout_s: float) -> None:
    import nats
    from nats.js.api import StorageType, StreamConfig

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            nc = await nats.connect(servers=urls, connect_timeout=2)
            try:
                js = nc.jetstream(timeout=10)
                await js.add_stream(
                    StreamConfig(
                        name=name,
                        subjects=[subject],
                        num_replicas=3,
                        storage=StorageType.FILE,
                    )
                )
                info = await js.stream_info(name)
                if info.cluster is not None and len(info.cluster.replicas or []) == 2:
                    return
                last = RuntimeError(f"stream {name} has replicas {info.cluster}")
            finally:
                await nc.close()
        except Exception as exc:  # retried until the deadline: JetStream R3 takes a while
            last = exc
        await asyncio.sleep(1.0)
    raise PeerUnavailableError(f"JetStream R3 stream not created in {timeout_s:.0f}s: {last}")


def run_nats(
    directory: Path,
    sizes: list[int],
    seconds: float,
    producers: int,
    say: Say,
    free_port: Callable[[], int],
) -> list[Row]:
    _ensure_package("nats-server", "nats-server", say)
    version = subprocess.run(
        ["nats-server", "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    cluster = NatsCluster(directory, free_port)
    rows: list[Row] = []
    try:
        cluster.start()
        for size in sizes:
            name, subject = f"bench{size}", f"bench.{size}"
            asyncio.run(_nats_create_stream(cluster.urls, name, subject, 90))
            # Publishers spread over the three servers (a stream has one leader; others
            # forward), as Kafka producers spread over partition leaders.
            args = [(cluster.urls[i % 3], subject, size, seconds) for i in range(producers)]
            settled = settle()
            values = summarise_produce(run_parallel(nats_publish_worker, args), size)
            values.update(record_bytes=size, producers=producers, version=version, settled=settled)
            rows.append(
                Row(
                    "produce",
                    "NATS JetStream R3",
                    f"R3 publish_async {_size(size)}",
                    values,
                    note="ack after Raft quorum (2 of 3) stored it; one stream, file storage",
                )
            )
            say(f"NATS JetStream R3 {_size(size)}: {perf_test_line(values)}")
    finally:
        cluster.stop()
        remove_data(directory)
    return rows


# --- RabbitMQ Streams -------------------------------------------------------------------


RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")


class RabbitCluster:
    """Three RabbitMQ nodes (tlbench1..3@localhost) run as user rabbitmq, own epmd."""

    def __init__(self, directory: Path, free_port: Callable[[], int]) -> None:
        self.directory = directory
        self.epmd_port = free_port()
        self.amqp_ports = [free_port() for _ in range(3)]
        self.stream_ports = [free_port() for _ in range(3)]
        self.dist_ports = [free_port() for _ in range(3)]
        self.processes: list[subprocess.Popen[bytes]] = []
        self.epmd: subprocess.Popen[bytes] | None = None
        self.home = directory / "home"

    def node(self, i: int) -> str:
        return f"tlbench{i + 1}@localhost"

    def env(self, i: int) -> dict[str, str]:
        base = self.directory / f"rabbit{i + 1}"
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODENAME": self.node(i),
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.amqp_ports[i]),
            "RABBITMQ_DIST_PORT": str(self.dist_ports[i]),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(base / "plugins-expand"),
            "RABBITMQ_PID_FILE": str(base / "rabbit.pid"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    def _as_rabbitmq(self) -> dict[str, Any]:
        return (
            {"user": "rabbitmq", "group": "rabbitmq", "extra_groups": []}
            if os.geteuid() == 0
            else {}
        )

    def ctl(self, i: int, *args: str, timeout_s: float = 120) -> str:
        result = subprocess.run(
            [str(RABBIT_BIN / "rabbitmqctl"), "-n", self.node(i), *args],
            env=self.env(i),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            cwd=self.home,
            **self._as_rabbitmq(),
        )
        if result.returncode != 0:
            raise PeerUnavailableError(
                f"rabbitmqctl {' '.join(args)} on {self.node(i)}: "
                f"{(result.stderr or result.stdout).strip()[-400:]}"
            )
        return str(result.stdout)

    def start(self, say: Say) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(exist_ok=True)
        cookie = self.home / ".erlang.cookie"
        cookie.write_text(os.urandom(16).hex().upper(), encoding="ascii")
        cookie.chmod(0o400)
        for i in range(3):
            base = self.directory / f"rabbit{i + 1}"
            (base / "log").mkdir(parents=True, exist_ok=True)
            (base / "rabbitmq.conf").write_text(
                f"listeners.tcp.default = 127.0.0.1:{self.amqp_ports[i]}\n"
                f"stream.listeners.tcp.default = 127.0.0.1:{self.stream_ports[i]}\n"
                "stream.advertised_host = 127.0.0.1\n"
                f"stream.advertised_port = {self.stream_ports[i]}\n"
                "loopback_users = none\n"
                "log.console = false\n"
                "log.file.level = warning\n",
                encoding="utf-8",
            )
            (base / "enabled_plugins").write_text("[rabbitmq_stream].\n", encoding="utf-8")
        if os.geteuid() == 0:
            shutil.chown(self.directory, "rabbitmq", "rabbitmq")
            for path in self.directory.rglob("*"):
                shutil.chown(path, "rabbitmq", "rabbitmq")
        self.epmd = subprocess.Popen(
            ["epmd", "-port", str(self.epmd_port), "-address", "127.0.0.1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            **self._as_rabbitmq(),
        )
        for i in range(3):
            out = (self.directory / f"rabbit{i + 1}.out").open("ab")
            self.processes.append(
                subprocess.Popen(
                    [str(RABBIT_BIN / "rabbitmq-server")],
                    env=self.env(i),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=self.home,
                    start_new_session=True,
                    **self._as_rabbitmq(),
                )
            )
        for i in range(3):
            self._await_node(i, 180)
            say(f"rabbitmq node {self.node(i)} up")
        for i in (1, 2):
            self.ctl(i, "stop_app")
            self.ctl(i, "join_cluster", self.node(0))
            self.ctl(i, "start_app")
            self._await_node(i, 120)
        status = self.ctl(0, "cluster_status")
        if status.count("tlbench") < 3:
            raise PeerUnavailableError(f"RabbitMQ nodes did not cluster: {status[-400:]}")

    def _await_node(self, i: int, timeout_s: float) -> None:
        """``await_startup`` fails while the node is not yet registered: retry it."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.ctl(i, "await_startup", "--timeout", "60", timeout_s=90)
                return
            except PeerUnavailableError:
                if self.processes[i].poll() is not None or time.monotonic() > deadline:
                    log = self.directory / f"rabbit{i + 1}.out"
                    tail = log.read_text(errors="replace")[-600:] if log.exists() else ""
                    raise PeerUnavailableError(
                        f"RabbitMQ node {self.node(i)} did not start "
                        f"(exit {self.processes[i].poll()}): {tail}"
                    ) from None
                time.sleep(1.0)

    def stop(self) -> None:
        for i, p in enumerate(self.processes):
            if p.poll() is None:
                with contextlib.suppress(PeerUnavailableError, subprocess.SubprocessError, OSError):
                    self.ctl(i, "stop", timeout_s=60)
            _stop_pid(p, 30)
        if self.epmd is not None:
            _stop_pid(self.epmd, 5)


async def _rabbit_create_stream(port: int, stream: str) -> None:
    from rstream import Producer

    async with Producer("127.0.0.1", port, username="guest", password="guest") as producer:
        await producer.create_stream(stream, arguments={"initial-cluster-size": 3}, exists_ok=True)


def run_rabbitmq(
    directory: Path,
    sizes: list[int],
    seconds: float,
    producers: int,
    say: Say,
    free_port: Callable[[], int],
) -> list[Row]:
    _ensure_package("rabbitmq-server", "rabbitmq-server", say)
    cluster = RabbitCluster(directory, free_port)
    rows: list[Row] = []
    try:
        cluster.start(say)
        version = "3.10 (Debian)"
        for size in sizes:
            stream = f"bench{size}"
            asyncio.run(_rabbit_create_stream(cluster.stream_ports[0], stream))
            members = cluster.ctl(0, "list_queues", "name", "members", "--no-table-headers")
            args = [(cluster.stream_ports[i % 3], stream, size, seconds) for i in range(producers)]
            settled = settle()
            values = summarise_produce(run_parallel(rabbit_publish_worker, args), size)
            call = "send_sub_entry" if size <= SUB_ENTRY_MAX_BYTES else "send_batch"
            mode = f"{call} x{rabbit_per_call(size)}"
            values.update(
                record_bytes=size, producers=producers, version=version, mode=mode, settled=settled
            )
            line = next((ln for ln in members.splitlines() if ln.startswith(stream)), "")
            rows.append(
                Row(
                    "produce",
                    "RabbitMQ Streams",
                    f"3 replicas {mode} {_size(size)}",
                    values,
                    note=f"confirm after a quorum has it, no fsync; members: {line.strip()}",
                )
            )
            say(f"RabbitMQ Streams {_size(size)} ({mode}): {perf_test_line(values)}")
    finally:
        cluster.stop()
        remove_data(directory)
    return rows


def run_peer(
    name: str,
    directory: Path,
    sizes: list[int],
    seconds: float,
    producers: int,
    say: Say,
    skipped: list[dict[str, str]],
    free_port: Callable[[], int],
) -> list[Row]:
    """The produce rows of one peer; a peer that cannot run here is recorded in ``skipped``."""
    try:
        if name == "nats":
            return run_nats(directory, sizes, seconds, producers, say, free_port)
        if name == "rabbitmq":
            return run_rabbitmq(directory, sizes, seconds, producers, say, free_port)
    except PeerUnavailableError as exc:
        skipped.append({"section": f"peer {name}", "reason": str(exc)})
        say(f"peer {name} not measured: {exc}")
        return []
    raise ValueError(f"unknown peer {name!r} (nats, rabbitmq)")


def _size(size: int) -> str:
    if size >= 1024 and size % 1024 == 0:
        return f"{size // 1024} KiB"
    return f"{size} B"
