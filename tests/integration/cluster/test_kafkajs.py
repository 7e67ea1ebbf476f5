"""kafkajs, the fifth client family (issue 30 point 7), unchanged against three broker
processes: an admin round, an idempotent acks=-1 producer, a consumer group that rebalances
when a second member joins, transactions (sendOffsets, a fenced zombie) read with both
isolation levels, and deletions (records, groups, topics).

``tests/js/scenario.mjs`` runs every step once against this module's cluster and prints its
findings as JSON; each test here asserts on one step. kafkajs 2.2.4 is pinned by
``tests/js/package-lock.json`` and installed by ``scripts/bootstrap.sh`` (``npm ci``), which
also installs Debian's nodejs and npm: a machine without them fails here, it does not skip.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.harness import BrokerCluster
from tidelog.testing.zookeeper import ZooKeeperProcess

pytestmark = pytest.mark.integration

JS_DIR = Path(__file__).resolve().parents[2] / "js"
KAFKAJS_VERSION = "2.2.4"
ADMIN_TOPIC, GROUP_TOPIC, TXN_TOPIC = "kafkajs-admin", "kafkajs-group", "kafkajs-txn"
BATCH = 200  # records per produce round (scenario.mjs)
PER_TXN = 20  # records per transaction (scenario.mjs)


def _kafkajs_ready() -> str:
    """The node binary, once node and the pinned kafkajs are there; fails naming the fix."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: scripts/bootstrap.sh installs Debian's nodejs and npm")
    installed = JS_DIR / "node_modules" / "kafkajs" / "package.json"
    if not installed.is_file():
        pytest.fail("kafkajs is not installed in tests/js: scripts/bootstrap.sh runs `npm ci`")
    version = json.loads(installed.read_text())["version"]
    if version != KAFKAJS_VERSION:
        pytest.fail(f"tests/js has kafkajs {version}, not {KAFKAJS_VERSION}: run `npm ci` there")
    return node


@pytest.fixture(scope="module")
def kafkajs_run(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperProcess
) -> dict[str, Any]:
    """scenario.mjs's findings, a key per step, and its stderr (kafkajs' warnings)."""
    node = _kafkajs_ready()
    directory = tmp_path_factory.mktemp("kafkajs-cluster")
    chroot = f"{zookeeper.connect_string}/kafkajs-{directory.name}"
    # No initial rebalance delay: the scenario's four groups each start empty.
    overrides = {"group.initial.rebalance.delay.ms": "0"}
    cluster = BrokerCluster(directory, chroot, overrides=overrides).start()
    try:
        done = subprocess.run(
            [
                *(node, "scenario.mjs", "--bootstrap", cluster.bootstrap),
                *("--admin-topic", ADMIN_TOPIC, "--group-topic", GROUP_TOPIC),
                *("--txn-topic", TXN_TOPIC),
            ],
            cwd=JS_DIR,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        cluster.stop()
    assert done.returncode == 0, done.stderr[-4000:]
    findings: dict[str, Any] = json.loads(done.stdout)
    findings["stderr"] = done.stderr
    return findings


def _step(run: dict[str, Any], name: str) -> dict[str, Any]:
    step: dict[str, Any] = run[name]
    assert "error" not in step, f"{name}: {step}\nkafkajs log:\n{run['stderr'][-3000:]}"
    return step


def test_admin_round(kafkajs_run: dict[str, Any]) -> None:
    admin = _step(kafkajs_run, "admin")
    assert admin["brokers"] == [0, 1, 2]
    assert admin["controller"] in (0, 1, 2)
    assert admin["created"] is True
    assert admin["createdAgain"] is False  # TOPIC_ALREADY_EXISTS, which kafkajs turns into false
    assert admin["tooManyReplicas"] == ["INVALID_REPLICATION_FACTOR"]  # 5 replicas, 3 brokers
    # Three partitions created, two added by createPartitions; three replicas each, all in sync.
    assert [p["partition"] for p in admin["partitions"]] == [0, 1, 2, 3, 4]
    for p in admin["partitions"]:
        assert sorted(p["replicas"]) == [0, 1, 2]
        assert sorted(p["isr"]) == [0, 1, 2]
        assert p["leader"] in p["replicas"]
    assert admin["configs"] == {"retention.ms": "3600000", "cleanup.policy": "delete"}
    assert admin["alteredRetentionMs"] == "7200000"
    assert admin["listed"] == [ADMIN_TOPIC, GROUP_TOPIC, TXN_TOPIC]


def test_idempotent_producer_acks_all(kafkajs_run: dict[str, Any]) -> None:
    produce = _step(kafkajs_run, "produce")
    per_partition = BATCH // 4
    assert produce["acked"] == [
        {"partition": p, "errorCode": 0, "baseOffset": "0"} for p in range(4)
    ]
    assert produce["highWatermarks"] == [
        {"partition": p, "low": 0, "high": per_partition} for p in range(4)
    ]
    # ListOffsets by timestamp is record-exact inside a batch (record i has create time base+i).
    assert produce["byTimestamp"] == [
        {"partition": 0, "offset": 26},
        {"partition": 1, "offset": 25},
        {"partition": 2, "offset": 25},
        {"partition": 3, "offset": 25},
    ]


def test_group_rebalance_splits_partitions_and_reads_each_record_once(
    kafkajs_run: dict[str, Any],
) -> None:
    group = _step(kafkajs_run, "group")
    first, second = group["firstAssignments"], group["secondAssignments"]
    assert first[0] == [0, 1, 2, 3]  # alone in the group: every partition
    # After the second member joined: two partitions each, none shared.
    assert len(first[-1]) == 2
    assert len(second[-1]) == 2
    assert sorted(first[-1] + second[-1]) == [0, 1, 2, 3]
    consumed = group["firstRecords"] + group["secondRecords"]
    produced = [f"r{r}-{i}" for r in range(2) for i in range(BATCH)]
    assert sorted(consumed) == sorted(produced)  # every record once, between the two
    # The second member read only the second round, and only from its own partitions.
    assert group["secondRecords"]
    assert all(
        v.startswith("r1-") and int(v.split("-")[1]) % 4 in second[-1]
        for v in group["secondRecords"]
    )
    assert group["committed"] == 2 * BATCH
    assert (group["describedState"], group["describedMembers"]) == ("Stable", 2)


def test_transactions_read_committed_and_uncommitted(kafkajs_run: dict[str, Any]) -> None:
    txn = _step(kafkajs_run, "transaction")
    assert len(txn["committed"]) == 3 * PER_TXN  # two, then the successor's
    assert len(txn["aborted"]) == PER_TXN
    assert len(txn["zombie"]) == PER_TXN  # aborted by the successor's InitProducerId
    assert sorted(txn["readCommitted"]) == sorted(txn["committed"])
    everything = txn["committed"] + txn["aborted"] + txn["zombie"]
    assert sorted(txn["readUncommitted"]) == sorted(everything)
    # Per partition: 50 records and five markers (one per transaction, committed or not).
    assert txn["highWatermarks"] == [5 * PER_TXN // 2 + 5] * 2
    # sendOffsets: the committed transactions' offsets count, the aborted one's does not.
    assert txn["transformOffsets"] == [
        {"partition": 0, "offset": 10},
        {"partition": 1, "offset": -1},
        {"partition": 2, "offset": 30},
        {"partition": 3, "offset": -1},
    ]


def test_zombie_producer_is_fenced(kafkajs_run: dict[str, Any]) -> None:
    txn = _step(kafkajs_run, "transaction")
    # The fenced producer's next send (Produce: its partition is already in the transaction)
    # and its commit (EndTxn).
    assert txn["zombieRefused"] == ["INVALID_PRODUCER_EPOCH", "INVALID_PRODUCER_EPOCH"]
    assert "late" not in txn["readUncommitted"]


def test_delete_records_groups_and_topics(kafkajs_run: dict[str, Any]) -> None:
    cleanup = _step(kafkajs_run, "cleanup")
    assert cleanup["lowWatermarks"] == [
        {"partition": 0, "low": 10},
        {"partition": 1, "low": 0},
        {"partition": 2, "low": 0},
        {"partition": 3, "low": 0},
    ]
    # The emptied group goes; one that never existed answers GROUP_ID_NOT_FOUND (69).
    assert cleanup["groupDeleted"] is True
    assert cleanup["deleteGroupsRefused"] == [
        {"groupId": "kafkajs-group-group-never-joined", "errorCode": 69}
    ]
    assert cleanup["remaining"] == []  # deleteTopics took the admin topic
