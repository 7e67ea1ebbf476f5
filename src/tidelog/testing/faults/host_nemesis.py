"""The nemesis on namespace hosts (issue 33 point 2): real partitions and ZooKeeper ensemble
faults against a ``HostsCluster`` (one network namespace per host, each with a ZooKeeper
member and a broker on its own 10.x address).

One fault at a time, healed, then the cluster awaited healthy (every broker and member
running, the ensemble with one leader, every broker listing every broker and full ISRs),
as ``nemesis.Nemesis`` does. Durations are relative to the ZooKeeper session timeout
(session):

=========================  =================================================================
host_link_down_leader      the host leading the most partitions of the topic: its link
                           down (root-side veth; a real partition from everyone, its
                           ZooKeeper member included) for 0.5-2 session, link up
host_link_down_controller  the active controller's host: link down 0.5-2 session, link up
host_cut_from_hosts        a random host cut from the other hosts (their ZooKeeper members
                           and brokers, both ways: blackhole routes) but not from the root
                           namespace's clients, for 0.5-2 session; its own member is then a
                           minority of one, so its broker is cut from the quorum too
zk_member_kill             SIGKILL one ZooKeeper member (by PID; the leader half the time),
                           start it again after 1 s .. 1.5 session (the quorum holds)
zk_quorum_loss             SIGKILL a majority of the members (2 of 3), hold 1 s .. 2
                           session, start them again: the quorum is lost and regained
=========================  =================================================================

While ZooKeeper has no quorum, Kafka's brokers keep serving produce and fetch on the
leaders they have (no ISR change can be written; acks=all completes while the ISR is
unchanged), and their sessions survive: a new ZooKeeper leader restarts every session's
timeout. ``progress(start, end)`` (the run's acknowledgements and reads in a window) lets
the nemesis record what was served during each fault: ``served`` holds, per fault index,
(records acknowledged, records read) between the fault's start and its heal.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Final

from tidelog.client import BlockingClient, ClientError, ClusterMetadata
from tidelog.testing.cluster import ClusterError
from tidelog.testing.faults.nemesis import FaultRecord, Timings
from tidelog.testing.faults.workload import Ack
from tidelog.testing.hosts import HostsCluster, ensemble_settled
from tidelog.testing.netns import NetnsError

HOST_KINDS: Final[tuple[str, ...]] = (
    "host_link_down_leader",
    "host_link_down_controller",
    "host_cut_from_hosts",
    "zk_member_kill",
    "zk_quorum_loss",
)

#: (records acknowledged, records read) in [start, end] of time.monotonic().
Progress = Callable[[float, float], tuple[int, int]]


def metadata_at(bootstrap: str, topics: list[str] | None) -> ClusterMetadata | None:
    """Metadata as the broker at ``bootstrap`` answers it (None when it does not)."""
    try:
        with BlockingClient(bootstrap, request_timeout_s=3.0) as client:
            return client.metadata(topics)
    except (ClientError, OSError, TimeoutError):
        return None


class HostNemesis:
    """Applies ``HOST_KINDS`` to a ``HostsCluster`` for one topic; see the module docstring."""

    def __init__(
        self,
        cluster: HostsCluster,
        topic: str,
        rng: random.Random,
        timings: Timings,
        log: Callable[[str], None] = lambda _line: None,
        *,
        progress: Progress = lambda _start, _end: (0, 0),
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        self.rng = rng
        self.t = timings
        self.log = log
        self.progress = progress
        self.records: list[FaultRecord] = []
        self.harness_errors: list[str] = []
        #: No fault here writes records of its own (``Injector.probe_acks``).
        self.probe_acks: list[Ack] = []
        #: Per fault index: (records acknowledged, records read) from its start to its heal.
        self.served: dict[int, tuple[int, int]] = {}
        #: Faults in force (healed by ``heal_all``): links down, cuts (host, others), members
        #: killed.
        self._links_down: set[int] = set()
        self._cuts: dict[int, list[int]] = {}
        self._isr_before_heal: dict[int, tuple[int, ...]] = {}

    @property
    def hosts(self) -> list[int]:
        return list(range(1, self.cluster.num_hosts + 1))

    def kinds(self) -> list[str]:
        return list(HOST_KINDS)

    # -- observation --------------------------------------------------------------------------

    def metadata_of(self, host: int, topics: list[str] | None) -> ClusterMetadata | None:
        return metadata_at(self.cluster.host(host).bootstrap, topics)

    def metadata(self, topics: list[str] | None) -> ClusterMetadata | None:
        """From the first host not cut off whose broker answers."""
        for host in self.hosts:
            if host in self._links_down or host in self._cuts:
                continue
            md = self.metadata_of(host, topics)
            if md is not None:
                return md
        return None

    def leader_host(self) -> int | None:
        """The host leading the most partitions of the topic (ties broken by the RNG)."""
        md = self.metadata([self.topic])
        if md is None or self.topic not in md.topics:
            return None
        leaders = Counter(
            p.leader_id for p in md.topics[self.topic].partitions.values() if p.leader_id >= 0
        )
        if not leaders:
            return None
        most = max(leaders.values())
        return self.rng.choice(sorted(h for h, n in leaders.items() if n == most))

    def controller_host(self) -> int | None:
        md = self.metadata([])
        return None if md is None or md.controller_id < 0 else md.controller_id

    def unhealthy_because(self) -> str | None:
        """Why the cluster is not healthy (None when it is): a process down, a fault in
        force, an unsettled ensemble, or a broker's metadata missing a broker or an ISR
        member."""
        for host in self.hosts:
            if self.cluster.broker_state(host) != "running":
                return f"broker {host} is {self.cluster.broker_state(host)}"
            if self.cluster.zookeeper_state(host) != "running":
                return f"ZooKeeper member {host} is {self.cluster.zookeeper_state(host)}"
        if self._links_down or self._cuts:
            return f"links down {sorted(self._links_down)}, cuts {self._cuts}"
        modes = self.cluster.ensemble_modes()
        if not ensemble_settled(modes):
            return f"ensemble modes {modes}"
        for host in self.hosts:
            md = self.metadata_of(host, [self.topic])
            if md is None:
                return f"broker {host}: no metadata"
            if set(md.brokers) != set(self.hosts):
                return f"broker {host} sees brokers {sorted(md.brokers)}"
            if self.topic not in md.topics or not md.topics[self.topic].partitions:
                return f"broker {host}: no metadata for {self.topic}"
            for p in md.topics[self.topic].partitions.values():
                if p.leader_id < 0 or set(p.isr) != set(p.replicas):
                    return f"broker {host} sees p{p.partition} leader {p.leader_id} isr {p.isr}"
        return None

    def wait_healthy(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.unhealthy_because() is None:
                return True
            time.sleep(0.25)
        return False

    def smallest_isr(self) -> str:
        """Per partition, the smallest ISR any answering broker's metadata shows now (from
        the root namespace, which every fault leaves connected unless a link is down)."""
        smallest: dict[int, tuple[int, ...]] = {}
        for host in self.hosts:
            if host in self._links_down:
                continue
            md = self.metadata_of(host, [self.topic])
            if md is None or self.topic not in md.topics:
                continue
            for p in md.topics[self.topic].partitions.values():
                if p.partition not in smallest or len(p.isr) < len(smallest[p.partition]):
                    smallest[p.partition] = tuple(sorted(p.isr))
        self._isr_before_heal = smallest
        return "isr " + " ".join(f"p{p} {list(isr)}" for p, isr in sorted(smallest.items()))

    # -- the faults ---------------------------------------------------------------------------

    def run_one(self, index: int, kind: str) -> FaultRecord:
        start = time.monotonic()
        self._isr_before_heal = {}
        try:
            target, detail = getattr(self, f"_{kind}")()
        except (ClusterError, NetnsError) as exc:
            said = " | ".join(line for line in str(exc).splitlines()[-3:] if line.strip())
            target, detail = None, f"harness: {said}"
            self.harness_errors.append(f"fault {index} ({kind}): {detail}")
            self.heal_all()
        healed = time.monotonic()
        acked, read = self.progress(start, healed)
        self.served[index] = (acked, read)
        detail += f"; meanwhile {acked} acknowledged, {read} read"
        healthy = self.wait_healthy(self.t.heal_timeout_s)
        if not healthy:
            detail += f"; not healthy after the heal timeout ({self.unhealthy_because()})"
            self.heal_all()
            healthy = self.wait_healthy(self.t.heal_timeout_s)
        record = FaultRecord(
            index,
            kind,
            target,
            start,
            healed,
            time.monotonic(),
            healthy,
            detail,
            self._isr_before_heal,
        )
        self.records.append(record)
        self.log(
            f"fault {index:4d} {kind:25s} host {target} {detail} "
            f"(heal {healed - start:.1f}s, healthy {record.settled - healed:.1f}s later: {healthy})"
        )
        return record

    def _cut_for(self) -> float:
        return self.rng.uniform(self.t.session_s * 0.5, self.t.session_s * 2.0)

    def _link_down(self, host: int, why: str) -> tuple[int | None, str]:
        seconds = self._cut_for()
        self.cluster.link_down(host)
        self._links_down.add(host)
        time.sleep(seconds)
        isr = self.smallest_isr()
        self.cluster.link_up(host)
        self._links_down.discard(host)
        return host, f"{why}: link down {seconds:.1f}s; {isr}"

    def _host_link_down_leader(self) -> tuple[int | None, str]:
        host = self.leader_host()
        if host is None:
            return None, "no leader to cut off"
        return self._link_down(host, "leader host")

    def _host_link_down_controller(self) -> tuple[int | None, str]:
        host = self.controller_host()
        if host is None:
            return None, "no controller to cut off"
        return self._link_down(host, "controller host")

    def _host_cut_from_hosts(self) -> tuple[int | None, str]:
        host = self.rng.choice(self.hosts)
        seconds = self._cut_for()
        others = self.cluster.cut_from_hosts(host)
        self._cuts[host] = others
        time.sleep(seconds)
        isr = self.smallest_isr()
        self._heal_cut(host)
        return host, f"cut from hosts {others} (not from clients) {seconds:.1f}s; {isr}"

    def _heal_cut(self, host: int) -> None:
        errors = self.cluster.heal_cut(host, self._cuts.pop(host))
        self.harness_errors.extend(f"heal of the cut of host {host}: {e}" for e in errors)

    def _zk_leader(self) -> int | None:
        modes = self.cluster.ensemble_modes()
        return next((h for h, mode in modes.items() if mode == "leader"), None)

    def _zk_member_kill(self) -> tuple[int | None, str]:
        leader = self._zk_leader()
        host = (
            leader
            if leader is not None and self.rng.random() < 0.5
            else self.rng.choice(self.hosts)
        )
        role = "leader" if host == leader else "follower"
        seconds = self.rng.uniform(1.0, self.t.session_s * 1.5)
        self.cluster.kill_zookeeper(host)
        time.sleep(seconds)
        self.cluster.start_zookeeper(host)
        return host, f"ZooKeeper member {host} ({role}) SIGKILL, restarted after {seconds:.1f}s"

    def _zk_quorum_loss(self) -> tuple[int | None, str]:
        majority = len(self.hosts) // 2 + 1
        victims = sorted(self.rng.sample(self.hosts, majority))
        seconds = self.rng.uniform(1.0, self.t.session_s * 2.0)
        for host in victims:
            self.cluster.kill_zookeeper(host)
        time.sleep(seconds)
        isr = self.smallest_isr()
        for host in victims:
            self.cluster.start_zookeeper(host)
        return None, (
            f"ZooKeeper members {victims} SIGKILL: quorum lost {seconds:.1f}s, then restarted; "
            f"{isr}"
        )

    def heal_all(self) -> None:
        """Links up, cuts healed, every member not running started again."""
        for host in sorted(self._links_down):
            self.cluster.link_up(host)
        self._links_down.clear()
        for host in sorted(self._cuts):
            self._heal_cut(host)
        for host in self.hosts:
            if self.cluster.zookeeper_state(host) == "stopped":
                try:
                    self.cluster.start_zookeeper(host)
                except ClusterError as exc:
                    self.harness_errors.append(f"start of ZooKeeper member {host}: {exc}")
