"""The pure parts of ``tidelog broker-api-versions`` and ``tidelog features``: Kafka's
names and lines."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tidelog.cli.api_versions import api_line, api_name, node_block
from tidelog.cli.features import describe_lines, parse_updates, update_report
from tidelog.cli.output import UsageError
from tidelog.protocol.apis import ApiKey


def test_kafka_api_names() -> None:
    assert api_name(ApiKey.OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"
    assert api_name(ApiKey.INIT_PRODUCER_ID) == "InitProducerId"
    assert api_name(ApiKey.LEADER_AND_ISR) == "LeaderAndIsr"


def test_api_lines() -> None:
    assert api_line(ApiKey.FETCH, (4, 16)) == "Fetch(1): 4 to 16 [usable: 16]"
    assert api_line(ApiKey.DESCRIBE_QUORUM, None) == "DescribeQuorum(55): UNSUPPORTED"
    assert api_line(ApiKey.LEADER_AND_ISR, (0, 7)) == "LeaderAndIsr(4): 0 to 7 [usable: 0]"
    assert api_line(ApiKey.FETCH, (90, 99)) == "Fetch(1): 90 to 99 [unusable: node too new]"
    assert api_line(ApiKey.PRODUCE, (0, 1)) == "Produce(0): 0 to 1 [unusable: node too old]"


def test_node_block() -> None:
    block = node_block("h:1 (id: 0 rack: null)", {0: (0, 12)})
    lines = block.splitlines()
    assert lines[0] == "h:1 (id: 0 rack: null) -> ("
    assert lines[1] == "\tProduce(0): 0 to 12 [usable: 12],"
    assert lines[2] == "\tFetch(1): UNSUPPORTED,"
    assert not lines[-2].endswith(",")
    assert lines[-1] == ")"
    assert len(lines) == len(ApiKey) + 2


def test_describe_lines() -> None:
    response = SimpleNamespace(
        supported_features=(
            SimpleNamespace(name="z", min_version=1, max_version=3),
            SimpleNamespace(name="a", min_version=0, max_version=0),
        ),
        finalized_features=(SimpleNamespace(name="z", max_version_level=2),),
        finalized_features_epoch=-1,
    )
    assert describe_lines(response) == [
        "Feature: a\tSupportedMinVersion: 0\tSupportedMaxVersion: 0\tFinalizedVersionLevel: 0"
        "\tEpoch: -",
        "Feature: z\tSupportedMinVersion: 1\tSupportedMaxVersion: 3\tFinalizedVersionLevel: 2"
        "\tEpoch: -",
    ]


def test_parse_updates() -> None:
    assert parse_updates("upgrade", ["a=2", "b=1"], None) == {"a": 2, "b": 1}
    assert parse_updates("upgrade", ["a"], 3) == {"a": 3}
    assert parse_updates("disable", ["a", "b"], None) == {"a": 0, "b": 0}
    for op, features, version, message in (
        ("upgrade", [], None, "You must specify at least one feature to upgrade"),
        ("upgrade", ["a"], None, "--feature must be NAME=LEVEL"),
        ("upgrade", ["a", "b"], 2, "--feature must be NAME=LEVEL"),
        ("upgrade", ["a=x"], None, "the level of 'a' is not a number"),
        ("disable", ["a=1"], None, "--feature for disable takes a name"),
    ):
        with pytest.raises(UsageError, match=message):
            parse_updates(op, features, version)


def test_update_report() -> None:
    lines, failures = update_report("upgrade", {"b": 2, "a": 1}, {"b": "No."}, dry_run=False)
    assert (lines, failures) == (["a was upgraded to 1.", "Could not upgrade b to 2. No."], 1)
    lines, failures = update_report("disable", {"a": 0}, {}, dry_run=True)
    assert (lines, failures) == (["a can be disabled."], 0)
    lines, _ = update_report("downgrade", {"a": 1}, {"a": "No."}, dry_run=True)
    assert lines == ["Can not downgrade a to 1. No."]
