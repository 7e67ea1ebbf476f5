"""``tidelog topics/produce/consume`` as subprocesses against one real broker process."""

from __future__ import annotations

import json

import pytest

from tests.harness import BrokerProcess
from tests.integration.cli.conftest import Tidelog

pytestmark = pytest.mark.integration


def test_create_list_describe_alter_delete(broker: BrokerProcess, tidelog: Tidelog) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    created = tidelog(
        "topics", "create", *bs, "--topic", "cli-t1", "--partitions", "2",
        "--config", "retention.ms=60000",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert created.stdout.strip() == "Created topic cli-t1."
    listed = tidelog("topics", "list", *bs)
    assert "cli-t1" in listed.stdout.splitlines()

    described = tidelog("topics", "describe", *bs, "--topic", "cli-t1")
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    assert lines[0].startswith("Topic: cli-t1\tTopicId: ")
    assert "\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: retention.ms=60000" in lines[0]
    assert lines[1].startswith("\tTopic: cli-t1\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0")

    altered = tidelog(
        "topics", "alter", *bs, "--topic", "cli-t1", "--partitions", "3",
        "--config", "retention.ms=120000",
    )  # fmt: skip
    assert altered.returncode == 0, altered.stderr
    data = json.loads(tidelog("topics", "describe", *bs, "--topic", "cli-t1", "--json").stdout)
    topic = data["topics"][0]
    assert topic["partition_count"] == 3
    assert topic["configs"] == {"retention.ms": "120000"}

    deleted = tidelog("topics", "delete", *bs, "--topic", "cli-t1")
    assert deleted.stdout.strip() == "Deleted topic cli-t1."
    assert "cli-t1" not in tidelog("topics", "list", *bs).stdout.splitlines()


def test_produce_then_consume_round_trip(broker: BrokerProcess, tidelog: Tidelog) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    assert (
        tidelog("topics", "create", *bs, "--topic", "cli-rt", "--partitions", "3").returncode == 0
    )
    lines = [f"key-{i % 7}|value {i}" for i in range(200)]
    produced = tidelog(
        "produce", *bs, "--topic", "cli-rt", "--key-separator", "|", "--acks", "all",
        input="\n".join(lines) + "\n",
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    assert "produced 200 records to cli-rt" in produced.stderr

    consumed = tidelog(
        "consume", *bs, "--topic", "cli-rt", "--from-beginning", "--max-messages", "200", "--json"
    )
    assert consumed.returncode == 0, consumed.stderr
    records = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert sorted(f"{r['key']}|{r['value']}" for r in records) == sorted(lines)
    # One key, one partition, in production order.
    by_key: dict[str, set[int]] = {}
    for r in records:
        by_key.setdefault(r["key"], set()).add(r["partition"])
    assert all(len(parts) == 1 for parts in by_key.values())
    key0 = [r["value"] for r in records if r["key"] == "key-0"]
    assert key0 == [f"value {i}" for i in range(0, 200, 7)]

    # --partition/--offset: from offset 2 of one partition, values only.
    some = records[0]["partition"]
    tail = tidelog(
        "consume", *bs, "--topic", "cli-rt", "--partition", str(some), "--offset", "2",
        "--timeout-ms", "1500",
    )  # fmt: skip
    expected = [r["value"] for r in records if r["partition"] == some and r["offset"] >= 2]
    assert tail.stdout.splitlines() == expected


def test_bad_input_prints_kafka_error_and_hint(broker: BrokerProcess, tidelog: Tidelog) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    unknown = tidelog("topics", "describe", *bs, "--topic", "no-such-topic")
    assert unknown.returncode == 1
    assert unknown.stderr.splitlines() == [
        "tidelog topics: error: UNKNOWN_TOPIC_OR_PARTITION: topic 'no-such-topic'",
        "hint: check the name with `tidelog topics list`",
    ]

    bad_config = tidelog(
        "topics", "create", *bs, "--topic", "cli-bad", "--config", "retention.ms=soon"
    )
    assert bad_config.returncode == 1
    assert bad_config.stderr.startswith("tidelog topics: error: INVALID_CONFIG: topic 'cli-bad': ")
    assert "retention.ms" in bad_config.stderr
    assert "cli-bad" not in tidelog("topics", "list", *bs).stdout.splitlines()

    assert tidelog("topics", "create", *bs, "--topic", "cli-dup").returncode == 0
    dup = tidelog("topics", "create", *bs, "--topic", "cli-dup")
    assert dup.returncode == 1
    assert "TOPIC_ALREADY_EXISTS" in dup.stderr

    no_sep = tidelog(
        "produce", *bs, "--topic", "cli-dup", "--key-separator", ":", input="k:v\nnovalue\n"
    )
    assert no_sep.returncode == 1
    assert "No key separator found on line number 2: 'novalue'" in no_sep.stderr

    to_unknown = tidelog("produce", *bs, "--topic", "no-such-topic-2", input="x\n")
    assert to_unknown.returncode == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION: topic 'no-such-topic-2'" in to_unknown.stderr

    out_of_range = tidelog(
        "consume", *bs, "--topic", "cli-dup", "--partition", "0", "--offset", "999",
        "--timeout-ms", "1000",
    )  # fmt: skip
    assert out_of_range.returncode == 1
    assert "OFFSET_OUT_OF_RANGE" in out_of_range.stderr

    unreachable = tidelog("topics", "list", "--bootstrap-server", "127.0.0.1:1")
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith("tidelog topics: error: cannot reach the cluster")
