"""``tidelog cluster status --bootstrap-server ... --zookeeper ...`` against a real
three-broker cluster on a real ZooKeeper: healthy (exit 0) -> a broker stopped: its
partitions under-replicated (exit 3) -> the broker holding a one-replica topic stopped too:
that partition offline (exit 4). And an address where no broker listens: exit 4, one error
line, no traceback (the real command as a subprocess)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.harness import BrokerCluster, free_port
from tests.integration.cli.conftest import Result, Tidelog
from tidelog.cli.cluster_remote import EXIT_CRITICAL, EXIT_DEGRADED, EXIT_HEALTHY
from tidelog.cli.main import main
from tidelog.testing.zookeeper import ZooKeeperProcess

pytestmark = pytest.mark.integration


def _status_until(
    status: Callable[[], Result], ok: Callable[[Result], bool], what: str, timeout: float = 90.0
) -> Result:
    """Poll the status until ``ok``: the cluster notices a stopped broker in its own time."""
    deadline = time.monotonic() + timeout
    while True:
        result = status()
        if ok(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"no status with {what}; last:\n{result.stdout}{result.stderr}")
        time.sleep(0.5)


def test_status_of_a_deployed_cluster_healthy_degraded_and_offline(
    tmp_path_factory: pytest.TempPathFactory,
    zookeeper: ZooKeeperProcess,
    capsys: pytest.CaptureFixture[str],
) -> None:
    directory = tmp_path_factory.mktemp("status-cli")
    zk_connect = f"{zookeeper.connect_string}/{directory.name}"
    cluster = BrokerCluster(directory, zk_connect).start()
    try:
        bootstrap = cluster.bootstrap
        args = ["--bootstrap-server", bootstrap, "--zookeeper", zk_connect, "--timeout", "5"]

        def command(*argv: str) -> Result:
            code = main([*argv])
            out, err = capsys.readouterr()
            return Result(code, out, err)

        def status() -> Result:
            return command("cluster", "status", *args)

        topics = {
            "orders": ("--partitions", "3", "--replication-factor", "3"),
            "solo": ("--replica-assignment", "1"),
        }
        for topic, placement in topics.items():
            created = command(
                "topics", "create", "--bootstrap-server", bootstrap, "--topic", topic, *placement
            )
            assert created.returncode == 0, created.stderr

        healthy = _status_until(status, lambda r: r.returncode == EXIT_HEALTHY, "exit 0")
        lines = healthy.stdout.splitlines()
        assert lines[0] == f"bootstrap: {bootstrap}"
        assert [line for line in lines if line.startswith("broker ")] == [
            f"broker {b.broker_id} {b.bootstrap} rack - up" for b in cluster.brokers
        ]
        assert f"controller: {cluster.metadata().controller_id}" in lines
        assert f"zookeeper {zookeeper.connect_string} standalone" in lines
        assert lines[-3:] == [
            "under-replicated partitions: 0",
            "offline partitions: 0",
            "health: healthy",
        ]
        assert healthy.stderr == ""

        cluster.broker(2).stop()
        degraded = _status_until(
            status,
            lambda r: (
                r.returncode == EXIT_DEGRADED and "under-replicated partitions: 3" in r.stdout
            ),
            "exit 3 and orders' 3 partitions under-replicated",
        )
        lines = degraded.stdout.splitlines()
        assert [
            line.split(" isr ")[0] for line in lines if line.startswith("under-replicated:")
        ] == [
            f"under-replicated: orders-{p} leader {leader} replicas {replicas}"
            for p, leader, replicas in _orders(cluster)
        ]
        assert any(line.startswith("broker 2 ") and not line.endswith(" up") for line in lines)
        assert "offline partitions: 0" in lines
        assert lines[-1].startswith("health: degraded: 3 under-replicated partitions; broker 2")

        cluster.broker(1).stop()
        critical = _status_until(
            status,
            lambda r: r.returncode == EXIT_CRITICAL and "offline partitions: 1" in r.stdout,
            "exit 4 and solo-0 offline",
        )
        lines = critical.stdout.splitlines()
        assert "offline: solo-0 leader none replicas 1 isr 1" in lines
        assert lines[-1].startswith("health: critical: 1 offline partition;")
    finally:
        cluster.stop()


def _orders(cluster: BrokerCluster) -> list[tuple[int, int, str]]:
    """Each partition of orders: (index, leader, replicas as printed), from the metadata."""
    topic = cluster.metadata(["orders"]).topics["orders"]
    return [
        (p, topic.partitions[p].leader_id, ",".join(map(str, topic.partitions[p].replicas)))
        for p in sorted(topic.partitions)
    ]


def test_an_unreachable_bootstrap_is_exit_4_with_one_error_and_no_traceback(
    tidelog: Tidelog,
) -> None:
    address = f"127.0.0.1:{free_port()}"
    result = tidelog("cluster", "status", "--bootstrap-server", address, "--timeout", "5")
    assert result.returncode == EXIT_CRITICAL
    assert result.stdout.splitlines()[0] == f"bootstrap: {address}"
    assert result.stdout.splitlines()[-1] == "health: critical: cannot reach the cluster"
    assert result.stderr.startswith(
        f"tidelog cluster: error: cannot reach the cluster at {address}: "
    )
    assert "Traceback" not in result.stderr
