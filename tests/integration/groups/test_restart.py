"""One broker killed (SIGKILL) and restarted: it reloads its groups from __consumer_offsets,
so committed offsets, deletions and a Stable group's generation are all still there."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import BrokerProcess, wait_until
from tests.integration.groups.test_bad_input import commit, member
from tests.integration.rawclient import Raw, create
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey

pytestmark = pytest.mark.integration


def fetch(raw: Raw, group: str) -> list[tuple[str, int, int]]:
    body = raw.call(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": None}]})
    assert body.groups[0].error_code == ErrorCode.NONE
    return sorted(
        (t.name, p.partition_index, p.committed_offset)
        for t in body.groups[0].topics
        for p in t.partitions
    )


def test_groups_survive_sigkill_and_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path, {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}
    ).start()
    try:
        raw = Raw(broker)
        create(raw, "t")
        # Group requests before any FindCoordinator: the coordinator does not exist yet.
        assert commit(raw, "early", "", -1) == ErrorCode.NOT_COORDINATOR
        found = raw.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["x"]})
        assert found.coordinators[0].error_code == ErrorCode.NONE
        member_id, generation = member(raw, "stable-group")
        assert commit(raw, "stable-group", member_id, generation, offset=42) == ErrorCode.NONE
        assert commit(raw, "simple-group", "", -1, offset=7) == ErrorCode.NONE
        assert commit(raw, "gone-group", "", -1, offset=3) == ErrorCode.NONE
        deleted = raw.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["gone-group"]})
        assert deleted.results[0].error_code == ErrorCode.NONE
        raw.close()

        broker.restart(crash=True)
        raw = Raw(broker)
        assert fetch(raw, "stable-group") == [("t", 0, 42)]
        assert fetch(raw, "simple-group") == [("t", 0, 7)]
        assert fetch(raw, "gone-group") == []
        # The Stable group came back at its generation: its member carries on, no rejoin.
        beat = raw.call(
            ApiKey.HEARTBEAT,
            3,
            {"group_id": "stable-group", "generation_id": generation, "member_id": member_id},
        )
        assert beat.error_code == ErrorCode.NONE
        listed = raw.call(ApiKey.LIST_GROUPS, 4, {"states_filter": []})
        assert sorted((g.group_id, g.group_state) for g in listed.groups) == [
            ("simple-group", "Empty"),
            ("stable-group", "Stable"),
        ]
        raw.close()
    finally:
        broker.stop()
    assert wait_until(lambda: not broker.alive(), 10, "the broker to stop")
