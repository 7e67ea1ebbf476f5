"""Issue 32 point 4: a whole rack partitioned away. With RF=3 placed over 3 racks and
``min.insync.replicas=2``, losing one rack (every broker of it cut off at once: clients,
ZooKeeper, every link to another rack) loses no acknowledged record and leaves every
partition writable with ``acks=all``.

The first tests wire ``cut_rack`` and the command line without broker processes; the last
runs the harness on real processes: 6 brokers over 3 racks, one rack cut away."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.faults.test_proxy import Target
from tidelog.testing.cluster import BrokerInfo, ClusterState
from tidelog.testing.faults import __main__ as faults_main
from tidelog.testing.faults.cluster import FaultCluster
from tidelog.testing.faults.nemesis import ALL_KINDS, EVERY_KIND, PARTITION_RACK, Nemesis
from tidelog.testing.faults.racks import probe_value
from tidelog.testing.faults.run import RunConfig, RunResult, run

RACKS = ("a", "b", "c")
BROKERS = (1, 2, 3, 4, 5, 6)


@pytest.fixture
def racked(tmp_path: Path) -> Iterator[FaultCluster]:
    """A FaultCluster of 6 brokers over racks a, b, c wired to loopback stand-ins."""
    targets = {b: Target() for b in BROKERS}
    cluster = FaultCluster(tmp_path / "cluster", brokers=len(BROKERS), racks=RACKS)
    cluster.directory.mkdir(parents=True)
    cluster._save(
        ClusterState(
            directory=str(cluster.directory),
            zookeeper_port=None,
            zookeeper_pid=None,
            brokers=tuple(
                BrokerInfo(b, targets[b].port, str(cluster.directory / f"broker-{b}"))
                for b in BROKERS
            ),
            racks=RACKS,
        )
    )
    try:
        for b in BROKERS:
            cluster.broker_properties(cluster.broker(b))
        yield cluster
    finally:
        cluster.stop()
        for target in targets.values():
            target.close()


def test_brokers_get_their_racks_and_a_rack_cut_cuts_every_link_leaving_it(
    racked: FaultCluster,
) -> None:
    cluster = racked
    assert [cluster.broker_properties(cluster.broker(b))["broker.rack"] for b in BROKERS] == [
        "a",
        "b",
        "c",
        "a",
        "b",
        "c",
    ]
    assert cluster.rack_brokers("b") == [2, 5]
    links = cluster.cut_rack("b")
    # Every peer link between {2, 5} and the other racks, both ways; 2 <-> 5 stays up.
    others = (1, 3, 4, 6)
    expected = sorted(link for a in (2, 5) for o in others for link in ((a, o), (o, a)))
    assert links == expected
    assert cluster.cut_links() == expected
    assert (2, 5) not in cluster.cut_links()
    assert (5, 2) not in cluster.cut_links()
    # Their clients are cut too, nobody else's.
    assert [b for b, p in cluster.broker_proxy.items() if p.is_cut] == [2, 5]
    cluster.heal_links()
    assert cluster.cut_links() == []
    assert not any(p.is_cut for p in cluster.all_proxies())
    with pytest.raises(ValueError, match="no broker in rack 'd'"):
        cluster.cut_rack("d")


def test_the_rack_kind_needs_two_racks() -> None:
    assert PARTITION_RACK in EVERY_KIND
    assert PARTITION_RACK not in ALL_KINDS
    assert callable(getattr(Nemesis, f"_{PARTITION_RACK}", None))
    for racks, offered in (((), False), (("a",), False), (("a", "a"), False), (RACKS, True)):
        cluster: Any = SimpleNamespace(tmpfs_mount=None, racks=racks)
        nemesis = Nemesis(cluster, "t", None, None)  # type: ignore[arg-type]
        assert (PARTITION_RACK in nemesis.kinds()) is offered, racks
    # Probe values never look like a workload producer's p<producer>-<seq>.
    assert probe_value("f0", 2, 1) == b"rack-probe-f0-p2-1"


def test_the_command_line_takes_racks_and_brokers(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[RunConfig] = []

    def fake_run(config: RunConfig, log: object = None) -> RunResult:
        seen.append(config)
        raise SystemExit(0)

    monkeypatch.setattr(faults_main, "run", fake_run)
    with pytest.raises(SystemExit):
        faults_main.main(["--brokers", "6", "--racks", "a,b,c", "--faults", "1"])
    assert seen[-1].brokers == 6
    assert tuple(seen[-1].racks) == RACKS
    assert tuple(seen[-1].kinds) == (*ALL_KINDS, PARTITION_RACK)
    with pytest.raises(SystemExit):
        faults_main.main(["--racks", "a,b,c", "--kinds", PARTITION_RACK])
    assert tuple(seen[-1].kinds) == (PARTITION_RACK,)
    assert tuple(seen[-1].racks) == RACKS
    calls = len(seen)
    # Usage errors (exit 2) before anything runs.
    for argv in (
        ["--kinds", PARTITION_RACK],
        ["--racks", "a", "--kinds", PARTITION_RACK],
        ["--racks", "a,,b"],
        ["--brokers", "2"],
        ["--workload", "transactions", "--racks", "a,b,c"],
    ):
        with pytest.raises(SystemExit) as exited:
            faults_main.main(argv)
        assert exited.value.code == 2, argv
    assert len(seen) == calls


@pytest.mark.integration
def test_a_rack_cut_away_loses_nothing_acknowledged_and_every_partition_stays_writable(
    tmp_path: Path,
) -> None:
    """6 brokers over racks a, b, c, a topic of 6 partitions (RF=3, placed rack-aware:
    each broker leads one, so the cut rack leads two), min.insync.replicas=2, the workload's
    acks=all producers of three clients; one rack cut away past its ZooKeeper sessions,
    then healed."""
    began = time.monotonic()
    result = run(
        RunConfig(
            faults=1,
            seed=32,
            brokers=len(BROKERS),
            racks=RACKS,
            partitions=6,
            kinds=(PARTITION_RACK,),
            directory=tmp_path,
            gap_s=(0.1, 0.2),
            session_ms=4000,
            lag_ms=1000,
        ),
        log=print,
    )
    print(result.findings.summary(), f"wall {time.monotonic() - began:.1f}s")
    # Each partition's three replicas sit on three distinct racks (as Metadata registers
    # them: broker.rack reached the brokers).
    assert sorted(result.replica_racks) == list(range(6))
    for partition, racks in result.replica_racks.items():
        assert sorted(r or "" for r in racks) == list(RACKS), (partition, racks)

    (fault,) = result.faults
    assert fault.kind == PARTITION_RACK
    assert fault.healthy, fault.detail
    # Every partition took an acks=all record while the rack was away (through the
    # clients' proxies, the cut rack's among them: so through a leader of another rack).
    assert sorted(fault.writable) == list(range(6)), fault.detail
    # The cut did cut replication: just before the heal every partition's ISR had lost a
    # replica (its replica in the cut rack; under load a slow follower may be out too).
    assert sorted(fault.isr_before_heal) == list(range(6)), fault.detail
    assert all(len(isr) < 3 for isr in fault.isr_before_heal.values()), fault.detail

    # acks=all, min.insync.replicas=2: nothing acknowledged is lost (the probe's records
    # included), and the checker saw enough traffic for that to mean something.
    assert result.findings.acknowledged > 300
    assert result.findings.failures == {}, result.findings.summary()
    assert result.findings.lost_count == 0
