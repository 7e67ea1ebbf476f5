"""The nemesis: faults drawn from a seeded RNG, applied to real processes, then healed.

One fault at a time (RF=3 with min.insync.replicas=2 promises availability with one broker
faulty, durability while one ISR member survives; the runner waits for a healthy cluster
between faults, bounded, so each fault's unavailability is its own). Every fault is
recorded with what it hit and when, so a failing run can be replayed from its seed.

Kinds (durations relative to ``replica.lag.time.max.ms`` = lag and the ZooKeeper session
timeout = session):

====================  ======================================================================
kill_leader           SIGKILL the leader of a random partition, restart it after 0.5-3 s
kill_follower         SIGKILL a follower of a random partition, restart it after 0.5-3 s
kill_controller       SIGKILL the active controller (Metadata's controller id), restart
kill_restart_fast     SIGKILL a broker and start it again at once: the new process finds its
                      own stale /brokers/ids/N registration (the session of the killed one)
                      and waits for it to expire while clients already reach it
pause_short           SIGSTOP a broker for less than lag/2, SIGCONT
pause_lag             SIGSTOP longer than lag, shorter than session (leaves the ISR, keeps its
                      session), SIGCONT
pause_long            SIGSTOP longer than session (its session expires: a zombie on SIGCONT)
restart_clean         SIGTERM a broker (controlled shutdown), start it again
rolling_restart       SIGTERM and restart every broker in turn, each awaited healthy
partition_zk          cut one broker's link to ZooKeeper for 1 s .. 1.5 session, heal
isolate_broker        cut one broker off from clients and from every peer (both ways) for
                      1-6 s, heal (its ZooKeeper link stays up)
torn_tail             SIGKILL a broker, truncate one partition's active segment at a random
                      byte at or above its recovery point while it is down (a torn write of
                      what was not fsynced), restart it
disk_full             fill the tmpfs log dir of the tmpfs broker, hold 2-5 s, free it; a broker
                      that did not recover by itself within a few seconds is restarted
partition_brokers     split the brokers: one random broker vs the rest, every peer link across
                      cut both ways for 1-1.5 session (longer, up to 2 sessions + 5 s, until an
                      ISR shows the cut), heal; clients and ZooKeeper still reach
                      everyone, so the controller sees every broker alive and no leader moves:
                      followers that cannot fetch must leave the ISR (when their leader can
                      reach the controller), acks=all must wait for min.insync.replicas
partition_clients     cut every client off from one broker for 1-6 s, heal; its peers and
                      ZooKeeper still reach it, so it keeps its leaderships: clients of its
                      partitions wait (or time out and retry) until the heal
partition_asymmetric  cut one link one way: a follower of a random partition can no longer
                      reach that partition's leader (the leader still reaches it) for 2 lag ..
                      session (longer, up to 2 sessions + 5 s, until it is out of an ISR),
                      heal; the follower must leave the ISR
kill_txn_coordinator  (transactional workload only, issue 19) SIGKILL the transaction
                      coordinator of one of the workload's transactional ids (FindCoordinator,
                      key type 1), restart it after 0.5-3 s
partition_rack        (a cluster with racks only, issue 32) cut every broker of one random
                      rack off from everything outside it at once (clients, ZooKeeper, every
                      peer link to another rack, both ways; links inside the rack stay up)
                      for 1.2-1.5 session and until every partition accepted an acks=all
                      record through the clients' proxies (``racks.probe_writable``,
                      bounded by the heal timeout), heal
====================  ======================================================================

Mixes (``MIXES``, ``--mix``): ``all`` is every kind; ``restarts`` only the kinds that kill,
pause past the session or restart brokers (the window in which a restarted broker answers
clients before it knows the cluster again). ``TXN_KINDS`` (the transactional workload's
default, ``--workload transactions``) is ``restarts`` plus ``kill_txn_coordinator``, which
needs the transactional ids in use (``Nemesis(transactional_ids=...)``) and is not in
``ALL_KINDS``; nor is ``partition_rack``, which needs a cluster with two racks or more
(``FaultCluster(racks=...)``, ``--racks``). With ``health_topics``
(``__transaction_state``) the nemesis awaits those topics' ISRs too before it calls the
cluster healthy.

Network faults record in their detail the smallest ISR any broker's metadata showed for each
partition just before the heal (the proof that a cut did cut replication).
``partition_rack`` records besides, per partition, the offset of the acks=all record it
accepted while the rack was away (``FaultRecord.writable``); the nemesis keeps those
acknowledgements (``probe_acks``) for the checker.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.testing.cluster import ClusterError
from tidelog.testing.faults.cluster import FaultCluster
from tidelog.testing.faults.racks import probe_writable
from tidelog.testing.faults.workload import Ack

_BATCH_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength

ALL_KINDS: tuple[str, ...] = (
    "kill_leader",
    "kill_follower",
    "kill_controller",
    "pause_short",
    "pause_lag",
    "pause_long",
    "restart_clean",
    "rolling_restart",
    "partition_zk",
    "isolate_broker",
    "torn_tail",
    "disk_full",
    "partition_brokers",
    "partition_asymmetric",
    "partition_clients",
    "kill_restart_fast",
)

#: Every kind that kills and restarts a broker, pauses it past its session, or restarts it
#: cleanly: the window in which a restarted broker must not answer a client (e.g. a topic
#: with 0 partitions) before it knows the cluster again.
RESTART_KINDS: tuple[str, ...] = (
    "kill_leader",
    "kill_follower",
    "kill_controller",
    "kill_restart_fast",
    "torn_tail",
    "pause_long",
    "restart_clean",
    "rolling_restart",
)

#: Named fault mixes for ``--mix``.
MIXES: Mapping[str, tuple[str, ...]] = {"all": ALL_KINDS, "restarts": RESTART_KINDS}

#: Issue 19: SIGKILL the transaction coordinator of a transactional id in use, restart it
#: (only with ``Nemesis(transactional_ids=...)``).
KILL_TXN_COORDINATOR = "kill_txn_coordinator"
#: The transactional workload's default kinds: the restart-heavy mix and the coordinator.
TXN_KINDS: tuple[str, ...] = (*RESTART_KINDS, KILL_TXN_COORDINATOR)
#: Issue 32: cut every broker of one rack off at once (only with ``FaultCluster(racks=...)``
#: of two racks or more).
PARTITION_RACK = "partition_rack"
#: Every kind the nemesis has (``ALL_KINDS``, the transactional one and the rack one).
EVERY_KIND: tuple[str, ...] = (*ALL_KINDS, KILL_TXN_COORDINATOR, PARTITION_RACK)


@dataclass(frozen=True, slots=True)
class Timings:
    session_s: float
    lag_s: float
    heal_timeout_s: float = 45.0


@dataclass(frozen=True, slots=True)
class FaultRecord:
    index: int
    kind: str
    target: int | None
    start: float  # time.monotonic()
    healed: float  # when the heal action finished
    settled: float  # when the cluster was healthy again (or the wait gave up)
    healthy: bool
    detail: str
    #: Network faults: per partition, the smallest ISR any broker's metadata showed just
    #: before the heal (``Nemesis.smallest_isr``); empty for the other kinds.
    isr_before_heal: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    #: ``partition_rack``: per partition, the offset of the acks=all record it accepted while
    #: the rack was away (a partition missing accepted none within the heal timeout).
    writable: Mapping[int, int] = field(default_factory=dict)


class Nemesis:
    """Applies faults to a ``FaultCluster`` for one topic; see the module docstring."""

    def __init__(
        self,
        cluster: FaultCluster,
        topic: str,
        rng: random.Random,
        timings: Timings,
        log: Callable[[str], None] = lambda _line: None,
        *,
        transactional_ids: Sequence[str] = (),
        health_topics: Sequence[str] = (),
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        #: The transactional ids in use (``kill_txn_coordinator`` aims at their coordinators).
        self.transactional_ids = tuple(transactional_ids)
        #: Topics awaited healthy besides ``topic`` (e.g. ``__transaction_state``).
        self.health_topics = tuple(health_topics)
        self.rng = rng
        self.t = timings
        self.log = log
        self.records: list[FaultRecord] = []
        self._isr_before_heal: dict[int, tuple[int, ...]] = {}
        self._writable: dict[int, int] = {}
        #: ``partition_rack``'s acknowledged probe records (the checker holds to them too).
        self.probe_acks: list[Ack] = []
        #: Brokers that did not stop or start when told to (with their exit codes).
        self.harness_errors: list[str] = []

    def exit_codes(self) -> dict[int, int | None]:
        """Exit status of every broker process this harness started and saw exit."""
        return {
            pid: child.returncode
            for pid, child in self.cluster._children.items()
            if child.poll() is not None
        }

    def kinds(self) -> list[str]:
        return [
            k
            for k in EVERY_KIND
            if (k != "disk_full" or self.cluster.tmpfs_mount is not None)
            and (k != KILL_TXN_COORDINATOR or self.transactional_ids)
            and (k != PARTITION_RACK or len(set(self.cluster.racks)) > 1)
        ]

    def wait_healthy(self, timeout_s: float) -> bool:
        return self.cluster.wait_healthy(self.topic, timeout_s, also=self.health_topics)

    # -- targets ------------------------------------------------------------------------------

    def _random_broker(self) -> int:
        return self.rng.choice(self.cluster.broker_ids)

    def _leader_and_followers(self) -> tuple[int | None, list[int]]:
        parts = self.cluster.partitions(self.topic)
        if not parts:
            return None, []
        p = parts[self.rng.choice(sorted(parts))]
        leader = p.leader_id if p.leader_id >= 0 else None
        return leader, [r for r in p.replicas if r != p.leader_id]

    # -- the faults ---------------------------------------------------------------------------

    def run_one(self, index: int, kind: str) -> FaultRecord:
        start = time.monotonic()
        self._isr_before_heal = {}
        self._writable = {}
        try:
            target, detail = getattr(self, f"_{kind}")()
        except ClusterError as exc:
            # A broker that would not stop or start (reported, then healed by restarting).
            said = " | ".join(line for line in str(exc).splitlines()[-3:] if line.strip())
            target, detail = None, f"harness: {said}; exit codes {self.exit_codes()}"
            self.harness_errors.append(f"fault {index} ({kind}): {detail}")
            self.heal_all()
        healed = time.monotonic()
        healthy = self.wait_healthy(self.t.heal_timeout_s)
        if not healthy:
            why = self.cluster.unhealthy_because(self.topic, also=self.health_topics)
            detail += f"; not healthy after the heal timeout ({why}): restarting what is down"
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
            self._writable,
        )
        self.records.append(record)
        self.log(
            f"fault {index:4d} {kind:16s} broker {target} {detail} "
            f"(heal {healed - start:.1f}s, healthy {record.settled - healed:.1f}s later: {healthy})"
        )
        return record

    def _down_for(self) -> float:
        return self.rng.uniform(0.5, 3.0)

    def _crash_and_restart(self, broker: int) -> None:
        self.cluster.kill_broker(broker)
        time.sleep(self._down_for())
        self.cluster.start_broker(broker)

    def _kill_leader(self) -> tuple[int | None, str]:
        leader, _ = self._leader_and_followers()
        if leader is None:
            return None, "no leader to kill"
        self._crash_and_restart(leader)
        return leader, "SIGKILL leader"

    def _kill_follower(self) -> tuple[int | None, str]:
        _, followers = self._leader_and_followers()
        if not followers:
            return None, "no follower to kill"
        broker = self.rng.choice(followers)
        self._crash_and_restart(broker)
        return broker, "SIGKILL follower"

    def _kill_controller(self) -> tuple[int | None, str]:
        controller = self.cluster.controller()
        if controller is None:
            return None, "no controller to kill"
        self._crash_and_restart(controller)
        return controller, "SIGKILL controller"

    def _kill_txn_coordinator(self) -> tuple[int | None, str]:
        if not self.transactional_ids:
            return None, "no transactional id to aim at"
        transactional_id = self.rng.choice(self.transactional_ids)
        coordinator = None
        deadline = time.monotonic() + 10.0
        while coordinator is None and time.monotonic() < deadline:
            coordinator = self.cluster.transaction_coordinator(transactional_id)
            if coordinator is None:
                time.sleep(0.25)
        if coordinator is None:
            return None, f"no coordinator found for {transactional_id!r} within 10 s"
        self._crash_and_restart(coordinator)
        return coordinator, f"SIGKILL the transaction coordinator of {transactional_id!r}"

    def _kill_restart_fast(self) -> tuple[int | None, str]:
        broker = self._random_broker()
        self.cluster.kill_broker(broker)
        begin = time.monotonic()
        self.cluster.start_broker(broker)
        return broker, f"SIGKILL + start at once (ready {time.monotonic() - begin:.1f}s later)"

    def _pause(self, seconds: float) -> tuple[int | None, str]:
        broker = self._random_broker()
        self.cluster.pause_broker(broker)
        time.sleep(seconds)
        self.cluster.resume_broker(broker)
        return broker, f"SIGSTOP {seconds:.1f}s"

    def _pause_short(self) -> tuple[int | None, str]:
        return self._pause(self.rng.uniform(0.2, self.t.lag_s / 2))

    def _pause_lag(self) -> tuple[int | None, str]:
        return self._pause(self.rng.uniform(self.t.lag_s * 1.2, self.t.session_s * 0.8))

    def _pause_long(self) -> tuple[int | None, str]:
        return self._pause(self.rng.uniform(self.t.session_s * 1.2, self.t.session_s * 1.6))

    def _clean_stop(self, broker: int) -> str:
        """SIGTERM and wait (the launcher SIGKILLs after 30 s); says how long it took."""
        begin = time.monotonic()
        self.cluster.stop_broker(broker)
        took = time.monotonic() - begin
        if took > 20.0:
            self.harness_errors.append(f"broker {broker}: SIGTERM shutdown took {took:.0f}s")
        return f"stopped in {took:.1f}s"

    def _restart_clean(self) -> tuple[int | None, str]:
        broker = self._random_broker()
        stopped = self._clean_stop(broker)
        self.cluster.start_broker(broker)
        return broker, f"SIGTERM ({stopped}) + start"

    def _rolling_restart(self) -> tuple[int | None, str]:
        stops = []
        for broker in self.cluster.broker_ids:
            stops.append(self._clean_stop(broker))
            self.cluster.start_broker(broker)
            self.wait_healthy(self.t.heal_timeout_s)
        return None, "every broker SIGTERM + start in turn (" + ", ".join(stops) + ")"

    def _partition_zk(self) -> tuple[int | None, str]:
        broker = self._random_broker()
        seconds = self.rng.uniform(1.0, self.t.session_s * 1.5)
        proxy = self.cluster.zk_proxy[broker]
        proxy.cut()
        time.sleep(seconds)
        proxy.heal()
        return broker, f"cut from ZooKeeper {seconds:.1f}s"

    def _isolate_broker(self) -> tuple[int | None, str]:
        broker = self._random_broker()
        seconds = self.rng.uniform(1.0, 6.0)
        self.cluster.isolate(broker)
        time.sleep(seconds)
        isr = self.smallest_isr()
        self.cluster.unisolate(broker)
        return broker, f"clients and peers cut from it {seconds:.1f}s; {isr}"

    def _partition_clients(self) -> tuple[int | None, str]:
        broker = self._random_broker()
        seconds = self.rng.uniform(1.0, 6.0)
        proxy = self.cluster.broker_proxy[broker]
        proxy.cut()
        time.sleep(seconds)
        isr = self.smallest_isr()
        proxy.heal()
        return broker, f"clients cut from it {seconds:.1f}s (peers not); {isr}"

    def _partition_brokers(self) -> tuple[int | None, str]:
        broker = self._random_broker()
        rest = [b for b in self.cluster.broker_ids if b != broker]
        seconds = self.rng.uniform(self.t.session_s, self.t.session_s * 1.5)
        begin = time.monotonic()
        links = self.cluster.partition([broker])
        time.sleep(seconds)
        isr = self._smallest_isr_once(lambda isrs: any(len(i) < len(rest) + 1 for i in isrs))
        self.cluster.heal_links()
        cut_s = time.monotonic() - begin
        return broker, f"[{broker}] | {rest}: {len(links)} peer links cut {cut_s:.1f}s; {isr}"

    def _partition_asymmetric(self) -> tuple[int | None, str]:
        leader, followers = self._leader_and_followers()
        if leader is None or not followers:
            # No partition state to aim with: any ordered pair.
            leader, follower = self.rng.sample(self.cluster.broker_ids, 2)
        else:
            follower = self.rng.choice(followers)
        seconds = self.rng.uniform(self.t.lag_s * 2, max(self.t.lag_s * 2, self.t.session_s))
        begin = time.monotonic()
        self.cluster.cut_link(follower, leader)
        time.sleep(seconds)
        isr = self._smallest_isr_once(lambda isrs: any(follower not in i for i in isrs))
        self.cluster.heal_link(follower, leader)
        cut_s = time.monotonic() - begin
        return follower, f"{follower} -> {leader} cut one way {cut_s:.1f}s; {isr}"

    def _partition_rack(self) -> tuple[int | None, str]:
        rack = self.rng.choice(sorted(set(self.cluster.racks)))
        brokers = self.cluster.rack_brokers(rack)
        partitions = len(self.cluster.partitions(self.topic))
        seconds = self.rng.uniform(self.t.session_s * 1.2, self.t.session_s * 1.5)
        outside = [b for b in self.cluster.broker_ids if b not in brokers]
        leaders = self._leaders(outside)
        begin = time.monotonic()
        links = self.cluster.cut_rack(rack)
        acks = probe_writable(
            self.cluster.client_bootstrap,
            self.topic,
            partitions,
            begin + self.t.heal_timeout_s,
            f"f{len(self.records)}",
        )
        self.probe_acks.extend(acks)
        for a in acks:
            self._writable.setdefault(a.partition, a.offset)
        writable_after = time.monotonic() - begin
        time.sleep(max(0.0, begin + seconds - time.monotonic()))
        moved = self._leaders(outside)
        isr = self.smallest_isr()
        away = time.monotonic() - begin
        self.cluster.heal_links()
        led = sorted(p for p, b in leaders.items() if b in brokers)
        return None, (
            f"rack {rack} (brokers {brokers}) cut off {away:.1f}s ({len(links)} peer links, "
            f"their clients and ZooKeeper); it led {[f'p{p}' for p in led]}, leaders then "
            f"{_leader_list(moved)}; {len(self._writable)} of {partitions} partitions took an "
            f"acks=all record ({writable_after:.1f}s after the cut); {isr}"
        )

    def _leaders(self, brokers: Sequence[int]) -> dict[int, int]:
        """Each partition's leader (-1: none) as the first of ``brokers`` that answers says
        (over its real port; ``FaultCluster.partitions`` asks only brokers with no cut link,
        none while a rack is cut away)."""
        for broker in brokers:
            md = self.cluster.metadata_of(broker, [self.topic])
            if md is not None and self.topic in md.topics:
                return {p: m.leader_id for p, m in md.topics[self.topic].partitions.items()}
        return {}

    def _smallest_isr_once(self, shrunk: Callable[[Iterable[tuple[int, ...]]], bool]) -> str:
        """``smallest_isr`` once the cut has shown (``shrunk`` of the ISRs holds), the cut
        kept up to ``2 x session_s + 5`` s longer for it: on a loaded machine the leader's
        ISR check, AlterPartition and the metadata round trip may take longer than the
        drawn cut, and a cut healed before it shows tests nothing."""
        deadline = time.monotonic() + 2 * self.t.session_s + 5.0
        while True:
            isr = self.smallest_isr()
            if shrunk(self._isr_before_heal.values()) or time.monotonic() > deadline:
                return isr
            time.sleep(0.25)

    def smallest_isr(self) -> str:
        """Per partition, the smallest ISR any broker's metadata shows now (over the real
        listeners): ``isr p0 [1, 3] p1 [1, 2, 3]``; the proof a network fault cut
        replication (a follower that could not fetch left the ISR)."""
        smallest: dict[int, tuple[int, ...]] = {}
        for broker in self.cluster.broker_ids:
            md = self.cluster.metadata_of(broker, [self.topic])
            if md is None or self.topic not in md.topics:
                continue
            for p in md.topics[self.topic].partitions.values():
                if p.partition not in smallest or len(p.isr) < len(smallest[p.partition]):
                    smallest[p.partition] = tuple(sorted(p.isr))
        self._isr_before_heal = smallest
        return "isr " + " ".join(f"p{p} {sorted(isr)}" for p, isr in sorted(smallest.items()))

    def _torn_tail(self) -> tuple[int | None, str]:
        broker = self._random_broker()
        self.cluster.kill_broker(broker)
        detail = "SIGKILL, nothing to tear"
        dirs = sorted(self.cluster.log_dir(broker).glob(f"{self.topic}-*"))
        if dirs:
            partition_dir = self.rng.choice(dirs)
            segments = sorted(partition_dir.glob("*.log"))
            if segments:
                # A crash can only tear what was not fsynced: the bytes at or above the
                # recovery point (rule 5 of tidelog.storage.log; below it a torn file is
                # lost fsynced data, which the broker refuses to serve: log offline).
                active = segments[-1]
                size = active.stat().st_size
                floor = unflushed_position(active, recovery_point(partition_dir))
                if floor < size:
                    cut = self.rng.randrange(floor, size)
                    os.truncate(active, cut)
                    detail = (
                        f"SIGKILL, {partition_dir.name}/{active.name} torn at {cut} of {size} "
                        f"(unflushed from {floor})"
                    )
                else:
                    detail = f"SIGKILL, {partition_dir.name}: nothing unflushed to tear"
        time.sleep(self.rng.uniform(0.2, 1.0))
        self.cluster.start_broker(broker)
        return broker, detail

    def _disk_full(self) -> tuple[int | None, str]:
        mount = self.cluster.tmpfs_mount
        broker = self.cluster.tmpfs_broker
        if mount is None or broker is None:
            return None, "no tmpfs broker"
        filler = mount / "filler"
        fill(filler)
        time.sleep(self.rng.uniform(2.0, 5.0))
        state = self.cluster.broker_state(broker)
        filler.unlink()
        if state == "stopped":
            self.cluster.start_broker(broker)
            return broker, "filled: the broker exited; freed and restarted"
        if self.wait_healthy(10.0):
            return broker, "filled, freed: recovered by itself"
        self.cluster.stop_broker(broker)
        self.cluster.start_broker(broker)
        return broker, "filled, freed: restarted (log dir offline until restart)"

    def heal_all(self) -> None:
        """Heal every link, resume and start every broker."""
        self.cluster.heal_links()
        if self.cluster.tmpfs_mount is not None:
            with contextlib.suppress(FileNotFoundError):
                (self.cluster.tmpfs_mount / "filler").unlink()
        for broker in self.cluster.broker_ids:
            state = self.cluster.broker_state(broker)
            if state == "paused":
                self.cluster.resume_broker(broker)
            elif state == "stopped":
                for attempt in range(3):
                    try:
                        self.cluster.start_broker(broker)
                        break
                    except ClusterError as exc:
                        self.harness_errors.append(
                            f"start of broker {broker} (attempt {attempt + 1}) failed: "
                            + " | ".join(str(exc).splitlines()[-2:])
                        )


def _leader_list(leaders: Mapping[int, int]) -> str:
    return " ".join(f"p{p}:{b}" for p, b in sorted(leaders.items()))


def fill(path: Path) -> int:
    """Write zeros to ``path`` until the file system is full; returns the bytes written."""
    written = 0
    chunk = b"\0" * (1 << 20)
    with path.open("wb") as out:
        fd = out.fileno()
        while True:
            try:
                written += os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
    return written


def recovery_point(partition_dir: Path) -> int:
    """The partition's checkpointed recovery point (0 when unknown)."""
    topic, _, partition = partition_dir.name.rpartition("-")
    path = partition_dir.parent / "recovery-point-offset-checkpoint"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return 0
    for line in lines[2:]:
        fields = line.split()
        if len(fields) == 3 and fields[0] == topic and fields[1] == partition:
            return int(fields[2])
    return 0


def unflushed_position(segment: Path, recovery_offset: int) -> int:
    """Byte position in ``segment`` of the first batch at or above ``recovery_offset``
    (the file size when there is none)."""
    data = segment.read_bytes()
    pos = 0
    while pos + _BATCH_PREFIX.size <= len(data):
        base, length = _BATCH_PREFIX.unpack_from(data, pos)
        if base >= recovery_offset or length <= 0:
            return pos
        pos += _BATCH_PREFIX.size + length
    return len(data)
