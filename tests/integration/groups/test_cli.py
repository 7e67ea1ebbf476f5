"""``tidelog groups list|describe|delete`` against a broker with a real group."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.harness import BrokerProcess, wait_until
from tests.integration.groups.helpers import GROUP_OVERRIDES, Member, create_topic, produce

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("groups-cli"), GROUP_OVERRIDES).start()
    try:
        yield process
    finally:
        process.stop()


def tidelog(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidelog", "groups", *args, "--bootstrap-server", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def rows(out: str) -> list[list[str]]:
    """The rows of the per-partition table (the one whose header starts with GROUP)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("GROUP "))
    return [line.split() for line in lines[start + 1 :] if line.strip()]


def test_describe_shows_members_offsets_and_lag(cli_broker: BrokerProcess) -> None:
    create_topic(cli_broker.bootstrap, "clicks", 2)
    produce(cli_broker.bootstrap, "clicks", 2, 10)
    member = Member("confluent", cli_broker.bootstrap, "dashboards", "clicks", records=True)
    try:
        wait_until(lambda: len(member.records) == 20, 60, "the member to read all 20 records")

        def caught_up() -> str | None:
            # The last commit lands just after the last record is printed.
            result = tidelog(cli_broker, "describe", "--group", "dashboards")
            table = rows(result.stdout)
            done = len(table) == 2 and all(row[3] == "10" for row in table)
            return result.stdout if done else None

        out = wait_until(caught_up, 30, "describe to show the commits")
        assert isinstance(out, str)
        header = out.splitlines()[0]
        assert header.startswith("Consumer group 'dashboards': Stable, 1 member(s), coordinator 0")
        members_header = next(line for line in out.splitlines() if line.startswith("CONSUMER-ID"))
        assert members_header.split() == [
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
            "#PARTITIONS",
            "ASSIGNMENT",
        ]
        member_line = next(line for line in out.splitlines() if line.startswith("confluent-"))
        member_id = member_line.split()[0]
        assert member_line.split()[1:] == ["/127.0.0.1", "confluent", "2", "clicks-0,clicks-1"]
        assert rows(out) == [
            ["dashboards", "clicks", "0", "10", "10", "0", member_id, "/127.0.0.1", "confluent"],
            ["dashboards", "clicks", "1", "10", "10", "0", member_id, "/127.0.0.1", "confluent"],
        ]
        listed = tidelog(cli_broker, "list")
        assert listed.returncode == 0
        assert listed.stdout.split() == [
            "GROUP",
            "STATE",
            "PROTOCOL-TYPE",
            "COORDINATOR",
            "dashboards",
            "Stable",
            "consumer",
            "0",
        ]
        # ListGroups v5's filters: the state (any case) and the type (every group is classic).
        chosen = tidelog(cli_broker, "list", "--state", "Empty,stable", "--type", "classic")
        assert chosen.stdout.split()[4:] == ["dashboards", "Stable", "consumer", "0"]
        assert tidelog(cli_broker, "list", "--state", "Empty").stdout == ""
        assert tidelog(cli_broker, "list", "--type", "consumer").stdout == ""
        refused = tidelog(cli_broker, "delete", "--group", "dashboards")
        assert refused.returncode == 1
        assert refused.stderr.splitlines() == [
            "tidelog groups: error: NON_EMPTY_GROUP: group 'dashboards'",
            "hint: the group has members; stop its consumers first",
        ]
        assert member.leave() == 0
    finally:
        member.stop()

    produce(cli_broker.bootstrap, "clicks", 1, 5)  # 5 more on partition 0: a lag of 5
    described = tidelog(cli_broker, "describe", "--group", "dashboards", "--json")
    assert described.returncode == 0
    view = json.loads(described.stdout)[0]
    assert (view["state"], view["members"]) == ("Empty", [])
    assert [
        (p["partition"], p["current_offset"], p["log_end_offset"], p["lag"])
        for p in view["partitions"]
    ] == [
        (0, 10, 15, 5),
        (1, 10, 10, 0),
    ]
    deleted = tidelog(cli_broker, "delete", "--group", "dashboards")
    assert (deleted.returncode, deleted.stdout) == (0, "Deleted group 'dashboards'.\n")
    assert tidelog(cli_broker, "list").stdout == ""
    missing = tidelog(cli_broker, "delete", "--group", "dashboards")
    assert (
        missing.stderr.splitlines()[0]
        == "tidelog groups: error: GROUP_ID_NOT_FOUND: group 'dashboards'"
    )
