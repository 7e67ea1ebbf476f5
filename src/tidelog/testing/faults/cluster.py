"""The cluster under test: ZooKeeper + N real broker processes, every link through a proxy.

``FaultCluster`` is a ``LocalCluster`` (``tidelog.testing.cluster``: real processes,
signalled by their own PIDs) whose brokers are wired for network faults:

- each broker advertises a ``LinkProxy`` in front of its listener (``advertised.listeners``),
  so every client reaches it through that proxy (``broker_proxy``): cutting it cuts the
  broker off from clients;
- each broker reaches each peer through a proxy of its own for that ordered pair
  (``peer_proxy[(a, b)]``: broker a's connections to broker b, both directions of each),
  passed to broker a as the testing-only ``tidelog.testing.peer.addresses``; its own id maps
  to its real listener (a broker's requests to itself, e.g. the controller's to its own
  broker, cross no network). ``cut_link``/``partition`` cut these: one way (a cannot reach
  b, b still reaches a) or both; ``isolate`` cuts a broker's client proxy and every peer
  link to and from it;
- each broker reaches ZooKeeper through a proxy of its own (``zookeeper.connect``): cutting
  it partitions that broker from ZooKeeper (its session expires after
  ``zookeeper.session.timeout.ms``);
- optionally racks (``racks=("a", "b", "c")``: broker i's ``broker.rack`` is
  racks[(i - 1) mod len], as ``tidelog cluster up --racks``): ``cut_rack`` cuts every broker
  of one rack off from everything outside it at once (its clients, ZooKeeper, and every peer
  link to and from a broker of another rack, both ways), as a rack whose network uplink
  fails; links between brokers of that rack stay up;
- optionally one broker's log dir is a small tmpfs (``mount -t tmpfs``; root only), which
  the disk-full fault fills. ``stop()`` unmounts it.

The harness itself talks to the brokers' real ports (``admin_bootstrap``), so its own
observations never cross a cut link: Metadata, the ISRs, the end offsets
(``end_offsets``: ListOffsets, read_committed or not) and a transactional id's coordinator
(``transaction_coordinator``: FindCoordinator with key type 1, issue 19).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.static.primitive import i8

from tidelog.client import (
    LATEST_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    BlockingClient,
    ClientError,
    ClusterMetadata,
)
from tidelog.client.client import PartitionMetadata
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.security.client_config import PLAINTEXT, ClientSecurity
from tidelog.testing.cluster import BrokerInfo, ClusterError, LocalCluster
from tidelog.testing.faults.proxy import LinkProxy, ProxyLoop
from tidelog.testing.processes import ProcessState, process_state

#: FindCoordinator's key type for a transactional id (KIP-98; 0 is a consumer group).
KEY_TYPE_TRANSACTION: Final = 1


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
        racks: Sequence[str] = (),
    ) -> None:
        super().__init__(
            directory,
            brokers=brokers,
            overrides=overrides,
            metadata_view=_metadata_view,
            racks=racks,
        )
        self.proxies = ProxyLoop()
        self.broker_proxy: dict[int, LinkProxy] = {}
        self.zk_proxy: dict[int, LinkProxy] = {}
        #: (from, to) -> the proxy carrying broker ``from``'s connections to broker ``to``.
        self.peer_proxy: dict[tuple[int, int], LinkProxy] = {}
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
        # Broker ports stay the same across restarts (LocalCluster.start_broker), so do these
        # proxies: created once, on the first start of the broker that uses them.
        peers = [f"{info.broker_id}=127.0.0.1:{info.port}"]
        for peer in state.brokers:
            if peer.broker_id == info.broker_id:
                continue
            link = (info.broker_id, peer.broker_id)
            if link not in self.peer_proxy:
                self.peer_proxy[link] = LinkProxy(
                    self.proxies, peer.port, f"broker{link[0]}->broker{link[1]}"
                )
            peers.append(f"{peer.broker_id}=127.0.0.1:{self.peer_proxy[link].port}")
        properties["tidelog.testing.peer.addresses"] = ",".join(peers)
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
        self.heal_links()
        with contextlib.suppress(ClusterError):
            super().stop(timeout_s)
        # Any child of ours still running (a start that was given up on): by its own PID.
        for pid, child in list(self._children.items()):
            if child.poll() is None:
                child.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(10)
            self._children.pop(pid, None)
        for proxy in self.all_proxies():
            proxy.close()
        self.broker_proxy.clear()
        self.zk_proxy.clear()
        self.peer_proxy.clear()
        self.proxies.close()
        if unmount:
            self.unmount()

    # -- links --------------------------------------------------------------------------------

    def all_proxies(self) -> list[LinkProxy]:
        return [*self.broker_proxy.values(), *self.zk_proxy.values(), *self.peer_proxy.values()]

    def heal_links(self) -> None:
        """Heal every link: clients, ZooKeeper, peers."""
        for proxy in self.all_proxies():
            proxy.heal()

    def peer_links(self, broker_id: int) -> list[tuple[int, int]]:
        """Every peer link from or to ``broker_id``."""
        return sorted(link for link in self.peer_proxy if broker_id in link)

    def cut_link(self, source: int, target: int, *, both_ways: bool = False) -> None:
        """Cut broker ``source``'s connections to broker ``target`` (``target`` still reaches
        ``source``, unless ``both_ways``)."""
        self.peer_proxy[(source, target)].cut()
        if both_ways:
            self.peer_proxy[(target, source)].cut()

    def heal_link(self, source: int, target: int, *, both_ways: bool = False) -> None:
        self.peer_proxy[(source, target)].heal()
        if both_ways:
            self.peer_proxy[(target, source)].heal()

    def partition(self, side: list[int]) -> list[tuple[int, int]]:
        """Cut every peer link between ``side`` and the other brokers, both ways (clients and
        ZooKeeper still reach everyone). Returns the links cut; ``heal_links`` heals."""
        other = [b for b in self.broker_ids if b not in side]
        links = sorted(link for a in side for b in other for link in ((a, b), (b, a)))
        for link in links:
            self.peer_proxy[link].cut()
        return links

    def isolate(self, broker_id: int) -> None:
        """Cut ``broker_id`` off from clients and from every peer, both ways (not from
        ZooKeeper): ``unisolate`` heals."""
        self.broker_proxy[broker_id].cut()
        for link in self.peer_links(broker_id):
            self.peer_proxy[link].cut()

    def unisolate(self, broker_id: int) -> None:
        for link in self.peer_links(broker_id):
            self.peer_proxy[link].heal()
        self.broker_proxy[broker_id].heal()

    def rack_brokers(self, rack: str) -> list[int]:
        """The brokers of ``rack`` (by ``rack_of``)."""
        return [b for b in self.broker_ids if self.rack_of(b) == rack]

    def cut_rack(self, rack: str) -> list[tuple[int, int]]:
        """Cut every broker of ``rack`` off from everything outside the rack at once: its
        clients, its ZooKeeper link, and every peer link between it and a broker of another
        rack, both ways (links inside the rack stay up). Returns the peer links cut;
        ``heal_links`` heals."""
        brokers = self.rack_brokers(rack)
        if not brokers:
            raise ValueError(f"no broker in rack {rack!r} (racks: {list(self.racks)})")
        for broker in brokers:
            self.broker_proxy[broker].cut()
            if broker in self.zk_proxy:  # (no ZooKeeper: only in the wiring's unit tests)
                self.zk_proxy[broker].cut()
        return self.partition(brokers)

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

    def cut_links(self) -> list[tuple[int, int]]:
        """The peer links cut now, as (from, to)."""
        return sorted(link for link, proxy in self.peer_proxy.items() if proxy.is_cut)

    def reachable(self) -> list[int]:
        """Brokers running, not paused, with no cut link (clients, ZooKeeper, or a peer link
        from or to it)."""
        cut = {b for link in self.cut_links() for b in link}
        return [
            b
            for b in self.broker_ids
            if self.broker_state(b) == "running"
            and not self.broker_proxy[b].is_cut
            and not self.zk_proxy[b].is_cut
            and b not in cut
        ]

    def metadata(self, topics: list[str] | None = None) -> ClusterMetadata | None:
        """Metadata from the first reachable broker that answers (over its real port)."""
        for broker_id in self.reachable():
            info = self.broker(broker_id)
            md = _metadata_at(info.bootstrap, topics)
            if md is not None:
                return md
        return None

    def partitions(self, topic: str) -> dict[int, PartitionMetadata]:
        md = self.metadata([topic])
        if md is None or topic not in md.topics:
            return {}
        return dict(md.topics[topic].partitions)

    def controller(self) -> int | None:
        md = self.metadata([])
        return None if md is None or md.controller_id < 0 else md.controller_id

    def transaction_coordinator(self, transactional_id: str) -> int | None:
        """The broker coordinating ``transactional_id`` (FindCoordinator, key type 1, asked of
        each reachable broker in turn over its real port): None when none answers with one
        (e.g. COORDINATOR_NOT_AVAILABLE while its ``__transaction_state`` partition has no
        leader)."""
        request = FindCoordinatorRequest(key=transactional_id, key_type=i8(KEY_TYPE_TRANSACTION))
        for broker_id in self.reachable():
            try:
                with BlockingClient(self.broker(broker_id).bootstrap, request_timeout_s=3.0) as c:
                    response = c.send(request)
            except (ClientError, OSError, TimeoutError):
                continue
            if int(response.error_code) == ErrorCode.NONE and int(response.node_id) >= 0:
                return int(response.node_id)
        return None

    def end_offsets(
        self, topic: str, partitions: int, *, read_committed: bool
    ) -> dict[int, int] | None:
        """Each partition's end as its leader tells it (ListOffsets, latest): the last stable
        offset when ``read_committed``, else the high watermark; None when a leader does not
        answer or answers with an error."""
        isolation = READ_COMMITTED if read_committed else READ_UNCOMMITTED
        wanted = {TopicPartition(topic, p): LATEST_TIMESTAMP for p in range(partitions)}
        try:
            with BlockingClient(self.admin_bootstrap, request_timeout_s=5.0) as client:
                got = client.list_offsets(wanted, isolation_level=isolation)
        except (ClientError, OSError, TimeoutError):
            return None
        if set(got) != set(wanted) or any(r.error_code != ErrorCode.NONE for r in got.values()):
            return None
        return {tp.partition: r.offset for tp, r in got.items()}

    def metadata_of(self, broker_id: int, topics: list[str]) -> ClusterMetadata | None:
        """Metadata as one broker's cache has it (None when it does not answer)."""
        return _metadata_at(self.broker(broker_id).bootstrap, topics)

    def healthy(self, topic: str, *, also: Sequence[str] = ()) -> bool:
        """Every broker reachable and in the ISR of every partition it replicates (of
        ``topic`` and of the topics ``also`` names, e.g. ``__transaction_state``), as EVERY
        broker's metadata says: a broker back from a partition may still hold a stale cache
        (the controller sends nothing to a broker it thinks dead)."""
        return self.unhealthy_because(topic, also=also) is None

    def unhealthy_because(self, topic: str, *, also: Sequence[str] = ()) -> str | None:
        """Why the cluster is not healthy (None when it is); see ``healthy``."""
        reachable = self.reachable()
        if len(reachable) != len(self.broker_ids):
            cut = self.cut_links()
            return f"reachable brokers {reachable}" + (f" (peer links cut: {cut})" if cut else "")
        topics = [topic, *also]
        for broker_id in self.broker_ids:
            md = self.metadata_of(broker_id, topics)
            if md is None:
                return f"broker {broker_id}: no metadata"
            if len(md.brokers) != len(self.broker_ids):
                return f"broker {broker_id} sees brokers {sorted(md.brokers)}"
            for name in topics:
                if name not in md.topics or not md.topics[name].partitions:
                    return f"broker {broker_id}: no metadata for {name}"
                for p in md.topics[name].partitions.values():
                    if p.leader_id < 0 or set(p.isr) != set(p.replicas):
                        return (
                            f"broker {broker_id} sees {name}-{p.partition} leader {p.leader_id} "
                            f"isr {sorted(p.isr)}"
                        )
        return None

    def wait_healthy(self, topic: str, timeout_s: float, *, also: Sequence[str] = ()) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.healthy(topic, also=also):
                return True
            time.sleep(0.25)
        return False


def _metadata_at(
    bootstrap: str, topics: list[str] | None, security: ClientSecurity = PLAINTEXT
) -> ClusterMetadata | None:
    """Metadata as the broker at ``bootstrap`` answers it (None when it does not)."""
    try:
        with BlockingClient(bootstrap, request_timeout_s=3.0, security=security) as client:
            return client.metadata(topics)
    except (ClientError, OSError, TimeoutError):
        return None


def _metadata_view(bootstrap: str, security: ClientSecurity) -> tuple[tuple[int, ...], int] | None:
    """``LocalCluster``'s view of one broker: (broker ids, controller id), or None."""
    md = _metadata_at(bootstrap, [], security)
    return None if md is None else (tuple(sorted(md.brokers)), md.controller_id)
