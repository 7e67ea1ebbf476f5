"""The guide's ZooKeeper backup and restore (docs/deploy.md, "Backing up and restoring
ZooKeeper") on three hosts with ZooKeeper ACLs on: a copy of one stopped follower's
``version-2`` is taken while the cluster runs; after every member's state is deleted, the
copy restored on each member brings back the same cluster: its id, the topic, every record,
and the ACLs."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.harness import wait_until
from tests.integration.cluster.helpers import consume_all, produce
from tests.integration.hosts.guide import (
    GUIDE_BOOTSTRAP,
    run_guide_block,
    tidelog,
    wait_fully_replicated,
)
from tidelog.client import BlockingClient
from tidelog.testing.hosts import HostsCluster, ensemble_settled

pytestmark = pytest.mark.integration

TOPIC = "kept"


def _cluster_id(bootstrap: str) -> str | None:
    with BlockingClient(bootstrap, request_timeout_s=5.0) as client:
        return client.metadata([]).cluster_id


def _mode(hosts: HostsCluster, host: int) -> str:
    """The guide's ``zkServer.sh status`` on host ``host``'s member: its ``Mode:`` line."""
    config = str(hosts.host(host).zookeeper_dir / "zoo.cfg")
    done = run_guide_block("zk-mode", {"/etc/zookeeper/conf/zoo.cfg": config}, stop_on_error=False)
    modes = [ln for ln in done.stdout.splitlines() if ln.startswith("Mode:")]
    return modes[0] if modes else f"(no mode: {done.stdout} {done.stderr})"


def _data_env(hosts: HostsCluster, host: int, backup: Path) -> dict[str, str]:
    return {"ZK_DATA_DIR": str(hosts.host(host).zookeeper_dir / "data"), "BACKUP": str(backup)}


def test_a_follower_copy_restores_the_cluster_after_the_ensemble_lost_its_state(
    guide_hosts: HostsCluster, tmp_path: Path
) -> None:
    hosts = guide_hosts
    bootstrap = hosts.bootstrap_servers
    tidelog(
        "topics", "create", "--bootstrap-server", bootstrap, "--topic", TOPIC,
        "--partitions", "1", "--replication-factor", "3",
    )  # fmt: skip
    values = [b"kept-%d" % i for i in range(30)]
    assert produce(bootstrap, TOPIC, values) == list(range(30))
    cluster_id = _cluster_id(bootstrap)
    assert cluster_id

    modes = {h: _mode(hosts, h) for h in (1, 2, 3)}
    assert sorted(modes.values()) == ["Mode: follower", "Mode: follower", "Mode: leader"]
    follower = min(h for h, mode in modes.items() if mode == "Mode: follower")
    backup = tmp_path / "zookeeper-backup.tar.gz"
    hosts.stop_zookeeper(follower)
    listed = run_guide_block("zk-backup", env=_data_env(hosts, follower, backup)).stdout
    assert "version-2/snapshot." in listed
    hosts.start_zookeepers([follower])

    # The disaster: every member's state gone (brokers and members stopped first).
    for host in (1, 2, 3):
        assert hosts.stop_broker(host) == 0
    for host in (1, 2, 3):
        hosts.stop_zookeeper(host)
        shutil.rmtree(hosts.host(host).zookeeper_dir / "data" / "version-2")

    for host in (1, 2, 3):
        run_guide_block("zk-restore", env=_data_env(hosts, host, backup))
    hosts.start_zookeepers([1, 2, 3])
    wait_until(lambda: ensemble_settled(hosts.ensemble_modes()), 60, "one leader, two followers")
    restored_at = time.monotonic()
    for host in (1, 2, 3):
        hosts.start_broker(host, wait=False)
    hosts.wait_ready(120)
    wait_fully_replicated(bootstrap, timeout_s=120)
    print(f"restore: ensemble settled to ISRs full in {time.monotonic() - restored_at:.1f} s")

    assert _cluster_id(bootstrap) == cluster_id
    assert consume_all(bootstrap, TOPIC, len(values), timeout=60) == values
    zk = hosts.host(1).zookeeper_connect
    check = run_guide_block(
        "zk-acl-check", {"10.0.0.1:2181": zk, "orders": TOPIC}, stop_on_error=False
    )
    output = check.stdout + check.stderr
    assert '"partitions":{"0":[' in output, output
    assert f"Insufficient permission : /brokers/topics/{TOPIC}" in output, output
    # The restored cluster still answers the guide's check the way the rolling restart uses.
    assert run_guide_block("under-replicated", {GUIDE_BOOTSTRAP: bootstrap}).stdout == ""
