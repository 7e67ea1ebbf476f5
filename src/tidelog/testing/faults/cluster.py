"""The cluster under test: ZooKeeper + N real broker processes, every link through a proxy.

``FaultCluster`` is a ``LocalCluster`` (``tidelog.cli.launcher``: real processes, signalled
by their own PIDs) whose brokers are wired for network faults:

- each broker advertises a ``LinkProxy`` in front of its listener (``advertised.listeners``),
  so every client and every peer reaches it through that proxy: cutting it isolates the
  broker from clients and peers (inbound);
- each broker reaches ZooKeeper through a proxy of its own (``zookeeper.connect``): cutting
  it partitions that broker from ZooKeeper (its session expires after
  ``zookeeper.session.timeout.ms``);
- optionally one broker's log dir is a small tmpfs (``mount -t tmpfs``; root only), which
  the disk-full fault fills. ``stop()`` unmounts it.

The harness itself talks to the brokers' real ports (``admin_bootstrap``), so its own
observations never cross a cut link.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from tidelog.cli.launcher import (
    BrokerInfo,
    ClusterError,
    LocalCluster,
    ProcessState,
    process_state,
)
from tidelog.client import BlockingClient, ClientError, ClusterMetadata
from tidelog.client.client import PartitionMetadata
from tidelog.testing.faults.proxy import LinkProxy, ProxyLoop


class FaultCluster(LocalCluster):
    """See the module docstring."""

    def __init__(
        self,
        directory: Path,
        brokers: int = 3,
        overrides: Mapping[str, str] | None = None,
        *,
        tmpfs_broker: int | None = None,
        tmpfs_size: str = "24m",
    ) -> None:
        super().__init__(directory, brokers=brokers, overrides=overrides)
        self.proxies = ProxyLoop()
        self.broker_proxy: dict[int, LinkProxy] = {}
        self.zk_proxy: dict[int, LinkProxy] = {}
        self.tmpfs_broker = tmpfs_broker
        self.tmpfs_size = tmpfs_size
        self.tmpfs_mount: Path | None = None

    # -- wiring -------------------------------------------------------------------------------

    def broker_properties(self, info: BrokerInfo) -> dict[str, str]:
        properties = super().broker_properties(info)
        state = self._require_state()
        if info.broker_id not in self.broker_proxy:
            self.broker_proxy[info.broker_id] = LinkProxy(
                self.proxies, info.port, f"clients->broker{info.broker_id}"
            )
        properties["advertised.listeners"] = (
            f"PLAINTEXT://127.0.0.1:{self.broker_proxy[info.broker_id].port}"
        )
        if state.zookeeper_port is not None:
            if info.broker_id not in self.zk_proxy:
                self.zk_proxy[info.broker_id] = LinkProxy(
                    self.proxies, state.zookeeper_port, f"broker{info.broker_id}->zookeeper"
                )
            properties["zookeeper.connect"] = f"127.0.0.1:{self.zk_proxy[info.broker_id].port}"
        return properties

    def start(self, timeout_s: float = 90.0) -> FaultCluster:
        if self.tmpfs_broker is not None:
            log_dir = self.directory / f"broker-{self.tmpfs_broker}" / "logs"
            log_dir.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={self.tmpfs_size}", "tmpfs", str(log_dir)],
                check=True,
                capture_output=True,
            )
            self.tmpfs_mount = log_dir
        try:
            super().start(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout_s: float = 30.0, *, unmount: bool = True) -> None:
        for proxy in (*self.broker_proxy.values(), *self.zk_proxy.values()):
            proxy.heal()
        with contextlib.suppress(ClusterError):
            super().stop(timeout_s)
        # Any child of ours still running (a start that was given up on): by its own PID.
        for pid, child in list(self._children.items()):
            if child.poll() is None:
                child.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(10)
            self._children.pop(pid, None)
        for proxy in (*self.broker_proxy.values(), *self.zk_proxy.values()):
            proxy.close()
        self.broker_proxy.clear()
        self.zk_proxy.clear()
        self.proxies.close()
        if unmount:
            self.unmount()

    def unmount(self) -> None:
        if self.tmpfs_mount is not None:
            subprocess.run(["umount", "-l", str(self.tmpfs_mount)], check=False)
            self.tmpfs_mount = None

    def broker_state(self, broker_id: int) -> ProcessState:
        """As ``LocalCluster.broker_state``, but a child of ours that has not exited is never
        "stopped": right after ``Popen`` returns, ``/proc/<pid>/cmdline`` may still show our
        own command line (the kernel closes the exec error pipe before it installs the new
        arguments), and the launcher's check then took a starting broker for an exited one
        ("exited during start-up" with nothing in its log)."""
        info = self.broker(broker_id)
        child = self._children.get(info.pid or -1)
        if child is None:
            return super().broker_state(broker_id)
        if child.poll() is not None:
            return "stopped"
        return "paused" if process_state(info.pid, "") == "paused" else "running"

    # -- observation --------------------------------------------------------------------------

    @property
    def broker_ids(self) -> list[int]:
        return [b.broker_id for b in self._require_state().brokers]

    @property
    def client_bootstrap(self) -> str:
        """What clients use: every broker's proxy."""
        return ",".join(f"127.0.0.1:{p.port}" for p in self.broker_proxy.values())

    @property
    def admin_bootstrap(self) -> str:
        """The brokers' real listeners (never behind a cut link): the harness' own view."""
        return ",".join(b.bootstrap for b in self._require_state().brokers)

    def log_dir(self, broker_id: int) -> Path:
        return self.broker(broker_id).log_dir

    def reachable(self) -> list[int]:
        """Brokers running, not paused, with no cut link."""
        return [
            b
            for b in self.broker_ids
            if self.broker_state(b) == "running"
            and not self.broker_proxy[b].is_cut
            and not self.zk_proxy[b].is_cut
        ]

    def metadata(self, topics: list[str] | None = None) -> ClusterMetadata | None:
        """Metadata from the first reachable broker that answers (over its real port)."""
        for broker_id in self.reachable():
            info = self.broker(broker_id)
            try:
                with BlockingClient(info.bootstrap, request_timeout_s=3.0) as client:
                    return client.metadata(topics)
            except (ClientError, OSError, TimeoutError):
                continue
        return None

    def partitions(self, topic: str) -> dict[int, PartitionMetadata]:
        md = self.metadata([topic])
        if md is None or topic not in md.topics:
            return {}
        return dict(md.topics[topic].partitions)

    def controller(self) -> int | None:
        md = self.metadata([])
        return None if md is None or md.controller_id < 0 else md.controller_id

    def metadata_of(self, broker_id: int, topics: list[str]) -> ClusterMetadata | None:
        """Metadata as one broker's cache has it (None when it does not answer)."""
        try:
            with BlockingClient(self.broker(broker_id).bootstrap, request_timeout_s=3.0) as c:
                return c.metadata(topics)
        except (ClientError, OSError, TimeoutError):
            return None

    def healthy(self, topic: str) -> bool:
        """Every broker reachable and in the ISR of every partition it replicates, as EVERY
        broker's metadata says: a broker back from a partition may still hold a stale cache
        (the controller sends nothing to a broker it thinks dead)."""
        return self.unhealthy_because(topic) is None

    def unhealthy_because(self, topic: str) -> str | None:
        """Why the cluster is not healthy (None when it is); see ``healthy``."""
        reachable = self.reachable()
        if len(reachable) != len(self.broker_ids):
            return f"reachable brokers {reachable}"
        for broker_id in self.broker_ids:
            md = self.metadata_of(broker_id, [topic])
            if md is None or topic not in md.topics or not md.topics[topic].partitions:
                return f"broker {broker_id}: no metadata for {topic}"
            if len(md.brokers) != len(self.broker_ids):
                return f"broker {broker_id} sees brokers {sorted(md.brokers)}"
            for p in md.topics[topic].partitions.values():
                if p.leader_id < 0 or set(p.isr) != set(p.replicas):
                    return (
                        f"broker {broker_id} sees {topic}-{p.partition} leader {p.leader_id} "
                        f"isr {sorted(p.isr)}"
                    )
        return None

    def wait_healthy(self, topic: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.healthy(topic):
                return True
            time.sleep(0.25)
        return False
