"""``tidelog cluster status --bootstrap-server``: the health rules and the report on made-up
observations (pure), the ``srvr`` reader on made-up answers and on a loopback socket, and
option mistakes in-process. The real cluster is in tests/integration/cli/test_cluster_status.py."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tidelog.cli.cluster_remote import (
    EXIT_CRITICAL,
    EXIT_DEGRADED,
    EXIT_HEALTHY,
    Observed,
    assess,
    format_status,
    status_json,
)
from tidelog.cli.main import main
from tidelog.client.metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from tidelog.errors import ErrorCode
from tidelog.zk.four_letter import MemberState, member_state, members, parse_srvr

BS = "10.0.0.1:9092,10.0.0.2:9092,10.0.0.3:9092"


def _partition(
    index: int, leader: int, replicas: tuple[int, ...], isr: tuple[int, ...]
) -> PartitionMetadata:
    return PartitionMetadata(index, ErrorCode.NONE, leader, 0, replicas, isr)


def _metadata(
    brokers: tuple[int, ...] = (1, 2, 3),
    partitions: Mapping[str, tuple[PartitionMetadata, ...]] | None = None,
    controller: int = 1,
) -> ClusterMetadata:
    parts = partitions or {"orders": (_partition(0, 1, (1, 2, 3), (1, 2, 3)),)}
    return ClusterMetadata(
        cluster_id="abc",
        controller_id=controller,
        brokers={
            b: BrokerMetadata(b, f"10.0.0.{b}", 9092, "r1" if b == 1 else None) for b in brokers
        },
        topics={
            name: TopicMetadata(name, ErrorCode.NONE, None, {p.partition: p for p in ps})
            for name, ps in parts.items()
        },
    )


def _up(*ids: int) -> dict[int, str | None]:
    return dict.fromkeys(ids)


def _zk(*modes: str | None) -> tuple[MemberState, ...]:
    return tuple(
        MemberState(
            f"10.0.0.{i}", 2181, mode, mode is not None, "" if mode else "connection refused"
        )
        for i, mode in enumerate(modes, start=1)
    )


def test_a_healthy_cluster_is_one_line_per_fact_and_exit_0() -> None:
    observed = Observed(
        BS, _metadata(), answers=_up(1, 2, 3), zookeeper=_zk("follower", "leader", "follower")
    )
    status = assess(observed)
    assert status.exit_code == EXIT_HEALTHY
    assert format_status(status) == [
        f"bootstrap: {BS}",
        "cluster id: abc",
        "broker 1 10.0.0.1:9092 rack r1 up",
        "broker 2 10.0.0.2:9092 rack - up",
        "broker 3 10.0.0.3:9092 rack - up",
        "controller: 1",
        "zookeeper 10.0.0.1:2181 follower",
        "zookeeper 10.0.0.2:2181 leader",
        "zookeeper 10.0.0.3:2181 follower",
        "under-replicated partitions: 0",
        "offline partitions: 0",
        "health: healthy",
    ]


def test_without_zookeeper_one_line_says_it_was_not_checked() -> None:
    lines = format_status(assess(Observed(BS, _metadata(), answers=_up(1, 2, 3))))
    assert "zookeeper: not checked (no --zookeeper)" in lines
    assert not [line for line in lines if line.startswith("zookeeper ")]


def test_a_broker_gone_from_the_metadata_is_down_and_its_partitions_under_replicated() -> None:
    partitions = {
        "orders": (
            _partition(0, 1, (3, 1, 2), (1, 2)),
            _partition(1, 2, (1, 2), (1, 2)),
        ),
        "audit": (_partition(0, 2, (2, 3), (2,)),),
    }
    observed = Observed(BS, _metadata((1, 2), partitions), answers=_up(1, 2))
    status = assess(observed)
    assert status.exit_code == EXIT_DEGRADED
    lines = format_status(status)
    assert "broker 3 - rack - down (not registered; a replica of 2 partitions)" in lines
    assert [line for line in lines if line.startswith("under-replicated")] == [
        "under-replicated partitions: 2",
        "under-replicated: audit-0 leader 2 replicas 2,3 isr 2",
        "under-replicated: orders-0 leader 1 replicas 3,1,2 isr 1,2",
    ]
    assert lines[-1] == "health: degraded: 2 under-replicated partitions; broker 3 down"


def test_a_registered_broker_that_does_not_answer_is_degraded() -> None:
    answers = {1: None, 2: "no answer within 10s", 3: None}
    status = assess(Observed(BS, _metadata(), answers=answers))
    assert status.exit_code == EXIT_DEGRADED
    assert "broker 2 10.0.0.2:9092 rack - not answering (no answer within 10s)" in format_status(
        status
    )
    assert status.reasons == ("broker 2 not answering",)


@pytest.mark.parametrize(
    ("leader", "brokers"),
    [(-1, (1, 2, 3)), (3, (1, 2))],
    ids=["no leader", "leader not registered"],
)
def test_an_offline_partition_is_critical(leader: int, brokers: tuple[int, ...]) -> None:
    partitions = {"solo": (_partition(0, leader, (3,), (3,)),)}
    status = assess(Observed(BS, _metadata(brokers, partitions), answers=_up(*brokers)))
    assert status.exit_code == EXIT_CRITICAL
    leader_text = "none" if leader < 0 else "3"
    assert f"offline: solo-0 leader {leader_text} replicas 3 isr 3" in format_status(status)
    assert status.reasons[0] == "1 offline partition"
    assert status_json(status)["offline_partitions"] == [
        {"topic": "solo", "partition": 0, "leader": leader, "replicas": [3], "isr": [3]}
    ]


def test_no_controller_is_critical() -> None:
    status = assess(Observed(BS, _metadata(controller=-1), answers=_up(1, 2, 3)))
    assert status.exit_code == EXIT_CRITICAL
    assert "controller: none" in format_status(status)


def test_zookeeper_members_not_serving_degrade_and_none_serving_is_critical() -> None:
    one = assess(
        Observed(BS, _metadata(), answers=_up(1, 2, 3), zookeeper=_zk("leader", "follower", None))
    )
    assert one.exit_code == EXIT_DEGRADED
    assert "zookeeper 10.0.0.3:2181 not serving (connection refused)" in format_status(one)
    assert one.reasons == ("ZooKeeper 10.0.0.3:2181 not serving",)
    none = assess(Observed(BS, _metadata(), answers=_up(1, 2, 3), zookeeper=_zk(None, None)))
    assert none.exit_code == EXIT_CRITICAL
    assert none.reasons == ("no ZooKeeper member serving",)


def test_an_unreachable_cluster_is_critical_and_says_why() -> None:
    status = assess(Observed(BS, None, "cannot connect to 10.0.0.1:9092: refused"))
    assert status.exit_code == EXIT_CRITICAL
    assert format_status(status) == [
        f"bootstrap: {BS}",
        "brokers: unreachable (cannot connect to 10.0.0.1:9092: refused)",
        "zookeeper: not checked (no --zookeeper)",
        "health: critical: cannot reach the cluster",
    ]
    data = status_json(status)
    assert (data["reachable"], data["exit_code"], data["brokers"]) == (False, EXIT_CRITICAL, [])


# --- srvr -------------------------------------------------------------------------------


SRVR_LEADER = """Zookeeper version: 3.8.0-debian, built on 2023-01-01
Latency min/avg/max: 0/0.0/0
Received: 3
Sent: 2
Connections: 1
Outstanding: 0
Zxid: 0x100000002
Mode: leader
Node count: 5
"""


@pytest.mark.parametrize(
    ("answer", "mode", "serving", "detail"),
    [
        (SRVR_LEADER, "leader", True, ""),
        ("Mode: standalone\n", "standalone", True, ""),
        (
            "This ZooKeeper instance is not currently serving requests\n",
            None,
            False,
            "not in a quorum",
        ),
        (
            "srvr is not executed because it is not in the whitelist.\n",
            None,
            None,
            "srvr is not in its 4lw.commands.whitelist",
        ),
        ("", None, None, "closed the connection without an answer"),
    ],
)
def test_parse_srvr(answer: str, mode: str | None, serving: bool | None, detail: str) -> None:
    assert parse_srvr("h", 2181, answer) == MemberState("h", 2181, mode, serving, detail)


@pytest.mark.parametrize(
    ("connect", "expected"),
    [
        ("a:2181,b:2182/kafka", [("a", 2181), ("b", 2182)]),
        ("a", [("a", 2181)]),
        ("[::1]:2181, 10.0.0.1:2181", [("::1", 2181), ("10.0.0.1", 2181)]),
    ],
)
def test_members(connect: str, expected: list[tuple[str, int]]) -> None:
    assert members(connect) == expected


@pytest.mark.parametrize("connect", ["a:x", ":2181", "a:2181,", "::1:2181", "[::1", "a:0"])
def test_members_refuses_a_bad_connect_string(connect: str) -> None:
    with pytest.raises(ValueError, match="ZooKeeper member"):
        members(connect)


@pytest.fixture
def srvr_server() -> Iterator[tuple[str, int]]:
    """A loopback socket that answers one connection with SRVR_LEADER after reading srvr."""
    server = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            seen.append(conn.recv(4))
            conn.sendall(SRVR_LEADER.encode())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()
    thread.join(10)
    server.close()
    assert seen == [b"srvr"]


def test_member_state_reads_the_mode_over_a_socket(srvr_server: tuple[str, int]) -> None:
    host, port = srvr_server
    assert member_state(host, port, 5.0) == MemberState(host, port, "leader", True)


def test_member_state_of_a_closed_port_is_not_serving() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    state = member_state("127.0.0.1", port, 2.0)
    assert (state.serving, state.mode) == (False, None)
    assert "refused" in state.detail.lower()


# --- options ----------------------------------------------------------------------------


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["cluster", "status", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--bootstrap-server", "nohost"],
            "--bootstrap-server: bootstrap server 'nohost' is not host:port",
        ),
        (
            ["--bootstrap-server", "h:1", "--zookeeper", "h:x"],
            "--zookeeper: ZooKeeper member 'h:x' has no valid port",
        ),
        (["--bootstrap-server", "h:1", "--timeout", "0"], "--timeout must be positive"),
        (["--zookeeper", "h:2181"], "--zookeeper needs --bootstrap-server"),
        (["--command-config", "x.properties"], "--command-config needs --bootstrap-server"),
    ],
)
def test_option_mistakes_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str
) -> None:
    code, out, err = _run(capsys, "--dir", str(tmp_path), *argv)
    assert code == 2
    assert out == ""
    assert err.splitlines()[0] == f"tidelog cluster: error: {message}"
    assert "Traceback" not in err


def test_a_missing_command_config_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nope.properties"
    code, _, err = _run(
        capsys, "--bootstrap-server", "127.0.0.1:1", "--command-config", str(missing)
    )
    assert code == 2
    assert (
        err.splitlines()[0] == f"tidelog cluster: error: --command-config {missing}: no such file"
    )
