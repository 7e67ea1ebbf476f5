"""confluent-kafka, kafka-python and aiokafka consumers in one group against one broker:
joins split the partitions, a leave moves them, a killed member's session expires."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import BrokerProcess, wait_until
from tests.integration.groups.helpers import (
    GROUP_OVERRIDES,
    Member,
    create_topic,
    produce,
    wait_for_split,
)

pytestmark = pytest.mark.integration

PARTITIONS = 6


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("groups"), GROUP_OVERRIDES).start()
    try:
        yield process
    finally:
        process.stop()


def test_three_clients_share_leave_and_die(group_broker: BrokerProcess, tmp_path: Path) -> None:
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "shared", PARTITIONS)
    members: list[Member] = []
    try:
        first = Member("confluent", bootstrap, "mixed", "shared")
        members.append(first)
        wait_for_split([first], PARTITIONS)
        second = Member("kafka-python", bootstrap, "mixed", "shared")
        members.append(second)
        wait_for_split([first, second], PARTITIONS)
        third = Member("aiokafka", bootstrap, "mixed", "shared")
        members.append(third)
        wait_for_split([first, second, third], PARTITIONS)
        # kafka-python leaves cleanly (LeaveGroup): its partitions move to the others.
        assert second.leave() == 0
        wait_for_split([first, third], PARTITIONS)
        # aiokafka dies without a word: its session (3 s) expires, confluent gets everything.
        third.kill()
        wait_for_split([first], PARTITIONS)
    finally:
        for m in members:
            m.stop()


def test_group_consumes_every_record_once_across_a_rebalance(group_broker: BrokerProcess) -> None:
    """Members commit after each poll; a second member joining mid-way re-reads nothing
    that was committed, and together they read every record."""
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "counted", 2)
    produce(bootstrap, "counted", 2, 50)
    members: list[Member] = []
    try:
        a = Member("confluent", bootstrap, "counting", "counted", records=True)
        members.append(a)
        wait_until(lambda: len(a.records) == 100, 60, "the first member to read all 100")
        assert a.leave() == 0
        produce(bootstrap, "counted", 2, 25)
        b = Member("kafka-python", bootstrap, "counting", "counted", records=True)
        members.append(b)
        wait_until(lambda: len(b.records) == 50, 60, "the second member to read the 50 new ones")
        # It resumed at the committed offsets: exactly offsets 50..74 of each partition.
        assert sorted(b.records) == [(p, o) for p in range(2) for o in range(50, 75)]
    finally:
        for m in members:
            m.stop()
