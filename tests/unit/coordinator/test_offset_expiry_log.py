"""Offset expiry through one broker's group coordinator on real storage, with its clock
moved: tombstones in ``__consumer_offsets``, a replay that agrees with memory, OffsetCommit
v2's ``retention_time_ms``; and loads of a partition the log cleaner compacted (offset gaps
inside batches, a segment ending in a gap, tombstones)."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c
import pytest
from kio.index import load_request_schema

from tests.unit.server.coordinators import group_coordinator
from tidelog.client.records import Record, build_batch, decode_records
from tidelog.coordinator.records import (
    GroupRecord,
    OffsetAndMetadata,
    decode_key,
    group_key,
    group_value,
    offset_key,
    offset_value,
)
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.protocol.messages import build
from tidelog.protocol.records import iter_batches
from tidelog.server.apis.kafka_apis import KafkaApis
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.coordinators.group import OFFSETS_TOPIC, GroupCoordinator
from tidelog.server.coordinators.internal_topics import replay_batches
from tidelog.server.metadata.local import MetadataStore
from tidelog.server.replica.manager import ReplicaManager, log_config_for, now_ms
from tidelog.storage.log_manager import LogManager

G = "g"
TOPIC = "t"
OFFSETS_TP = TopicPartition(OFFSETS_TOPIC, 0)
RETENTION_MS = 60_000
CHECK_MS = 1_000
T0 = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def groups(tmp_path: Path) -> Iterator[GroupCoordinator]:
    """One broker, ``__consumer_offsets`` with one partition, topic ``t`` with two; the
    coordinator's clock at ``T0``, retention 60 s (the tidelog ms knob), checks every 1 s."""
    config = load_broker_config(
        {
            "log.dirs": str(tmp_path),
            "offsets.topic.num.partitions": "1",
            "tidelog.offsets.retention.ms": str(RETENTION_MS),
            "offsets.retention.check.interval.ms": str(CHECK_MS),
        }
    )
    logs = LogManager(
        [tmp_path], log_config_for(effective_topic_config(config, {})), now_ms=now_ms()
    )
    apis = KafkaApis.alone(config, MetadataStore(tmp_path), ReplicaManager(config, logs), {})
    apis.create_topic(OFFSETS_TOPIC, 1, {"cleanup.policy": "compact", "retention.ms": -1})
    apis.create_topic(TOPIC, 2, {})
    coordinator = group_coordinator(apis)
    coordinator.clock = Clock()
    yield coordinator
    logs.close()


def clock(groups: GroupCoordinator) -> Clock:
    assert isinstance(groups.clock, Clock)
    return groups.clock


def run(groups: GroupCoordinator, api: ApiKey, version: int, data: dict[str, Any]) -> Any:
    async def inside() -> Any:
        body = build(load_request_schema(api, version), data)
        answer = groups.handlers()[api](RequestHeader(int(api), version, 1, "test"), body)
        return await answer if isinstance(answer, asyncio.Future) else answer

    return asyncio.run(inside())


def commit(
    groups: GroupCoordinator, offsets: dict[int, int], *, version: int = 8, retention_ms: int = -1
) -> None:
    """A standalone consumer's OffsetCommit (generation -1) of partitions of ``t``."""
    data: dict[str, Any] = {
        "group_id": G,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": o,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                    for p, o in offsets.items()
                ],
            }
        ],
    }
    if 2 <= version <= 4:
        data["retention_time"] = retention_ms
    answer = run(groups, ApiKey.OFFSET_COMMIT, version, data)
    assert [int(p.error_code) for t in answer.topics for p in t.partitions] == [0] * len(offsets)


def fetch(groups: GroupCoordinator) -> dict[int, int]:
    answer = run(
        groups,
        ApiKey.OFFSET_FETCH,
        7,
        {
            "group_id": G,
            "topics": [{"name": TOPIC, "partition_indexes": [0, 1]}],
            "require_stable": False,
        },
    )
    assert answer.error_code == ErrorCode.NONE
    return {
        int(p.partition_index): int(p.committed_offset) for t in answer.topics for p in t.partitions
    }


def maintain(groups: GroupCoordinator) -> None:
    """One maintenance pass at the clock's time, its appends replicated (one broker)."""

    async def inside() -> None:
        groups.maintain(groups.clock())
        await asyncio.sleep(0)

    asyncio.run(inside())


def records(groups: GroupCoordinator) -> list[tuple[object, bytes | None]]:
    """Every data record of ``__consumer_offsets``-0: (decoded key, value)."""
    data = groups.replica_manager.partitions[OFFSETS_TP].log.read_records(0, 1 << 24)
    return [(decode_key(r.key), r.value) for r in decode_records(data, verify_crc=False) if r.key]


def reload(groups: GroupCoordinator) -> None:
    groups._unload(0)  # the next request replays the partition


def test_standalone_offsets_expire_by_commit_time_with_tombstones(
    groups: GroupCoordinator, caplog: pytest.LogCaptureFixture
) -> None:
    commit(groups, {0: 5})
    clock(groups).now += 30_000
    commit(groups, {1: 6})
    maintain(groups)  # schedules the first round one interval on
    clock(groups).now = T0 + RETENTION_MS - 1
    with caplog.at_level(logging.INFO, logger="tidelog.server.coordinators.group"):
        maintain(groups)  # a round: nothing is old enough
    assert "Removed 0 expired offsets in 0 milliseconds." in caplog.messages
    assert fetch(groups) == {0: 5, 1: 6}
    clock(groups).now = T0 + RETENTION_MS + CHECK_MS
    with caplog.at_level(logging.INFO, logger="tidelog.server.coordinators.group"):
        maintain(groups)
    assert "Removed 1 expired offsets in 0 milliseconds." in caplog.messages
    assert fetch(groups) == {0: -1, 1: 6}
    tail = records(groups)[-1]
    assert tail == (decode_key(offset_key(G, TopicPartition(TOPIC, 0))), None)
    # The replay agrees with memory.
    reload(groups)
    assert fetch(groups) == {0: -1, 1: 6}
    # The last one goes: the group dies, without a group tombstone (generation 0).
    clock(groups).now = T0 + 30_000 + RETENTION_MS + CHECK_MS
    maintain(groups)
    assert fetch(groups) == {0: -1, 1: -1}
    assert G not in groups.loaded[0].manager.groups
    assert records(groups)[-1] == (decode_key(offset_key(G, TopicPartition(TOPIC, 1))), None)
    assert all(key != decode_key(group_key(G)) for key, _ in records(groups))
    reload(groups)
    assert fetch(groups) == {0: -1, 1: -1}
    assert G not in groups.loaded[0].manager.groups


def test_offset_commit_v2_retention_time_sets_the_expire_time(groups: GroupCoordinator) -> None:
    commit(groups, {0: 5}, version=2, retention_ms=5_000)
    commit(groups, {1: 6}, version=2)  # -1: the broker's retention
    maintain(groups)
    clock(groups).now = T0 + 5_000
    maintain(groups)
    assert fetch(groups) == {0: -1, 1: 6}
    # Persisted with its expire time (value version 1): a reload keeps the rule.
    commit(groups, {0: 7}, version=2, retention_ms=1_000)
    reload(groups)
    clock(groups).now = T0 + 6_000
    maintain(groups)  # loads the partition again, and a round is due
    assert fetch(groups) == {0: -1, 1: 6}


def test_empty_group_tombstone_after_failover_uses_the_recorded_empty_time(
    groups: GroupCoordinator,
) -> None:
    """A consumer group that became Empty at T0 (its group record says so) with offsets:
    loaded later, it expires at T0 + retention and gets a group tombstone."""
    the_log = groups.replica_manager.partitions[OFFSETS_TP].log
    record = GroupRecord("consumer", 3, None, None, T0, ())
    tp = TopicPartition(TOPIC, 0)
    batch = build_batch(
        [
            Record(offset_value(OffsetAndMetadata(9, -1, "", T0 - 10)), offset_key(G, tp)),
            Record(group_value(record), group_key(G)),
        ],
        base_offset=0,
    )
    the_log.append_as_follower(batch, now_ms=now_ms())
    clock(groups).now = T0 + RETENTION_MS - CHECK_MS
    maintain(groups)  # loads the partition, schedules the round
    assert groups.loaded[0].manager.groups[G].state_timestamp_ms == T0
    clock(groups).now = T0 + RETENTION_MS
    maintain(groups)
    assert fetch(groups) == {0: -1, 1: -1}
    tail = records(groups)[-2:]
    assert tail == [(decode_key(offset_key(G, tp)), None), (decode_key(group_key(G)), None)]
    reload(groups)
    maintain(groups)
    assert G not in groups.loaded[0].manager.groups


# --- loading a compacted partition --------------------------------------------------------


def compacted(batch: bytes, deltas: list[int]) -> bytes:
    """``batch`` as the log cleaner leaves it: its records keep their original offsets
    (``deltas``, each < 64 so one varint byte like the original 0, 1, 2...) and the batch
    its last offset delta; CRC-32C recomputed."""
    out = bytearray(batch)
    position = 61  # the records
    for delta in deltas:
        length_byte = out[position]
        assert length_byte < 0x80  # a one-byte varint record length
        # length, attributes int8, timestamp delta varlong (0: one byte), offset delta.
        assert out[position + 2] == 0
        out[position + 3] = delta << 1  # zigzag
        position += 1 + (length_byte >> 1)
    struct.pack_into(">i", out, 23, deltas[-1])
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def test_load_of_a_compacted_partition_with_offset_gaps(groups: GroupCoordinator) -> None:
    tp0, tp1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
    first = compacted(
        build_batch(
            [
                Record(offset_value(OffsetAndMetadata(1, -1, "", T0)), offset_key(G, tp0)),
                Record(offset_value(OffsetAndMetadata(2, -1, "", T0)), offset_key(G, tp1)),
                Record(offset_value(OffsetAndMetadata(3, -1, "", T0)), offset_key("h", tp0)),
            ],
            base_offset=0,
            base_timestamp_ms=T0,
        ),
        [3, 17, 40],
    )
    second = build_batch(
        [
            Record(offset_value(OffsetAndMetadata(10, -1, "", T0)), offset_key(G, tp0)),
            Record(None, offset_key("h", tp0)),  # a tombstone the cleaner has not dropped yet
        ],
        base_offset=41,
        base_timestamp_ms=T0,
    )
    the_log = groups.replica_manager.partitions[OFFSETS_TP].log
    the_log.append_as_follower(first + second, now_ms=now_ms())
    assert [h.base_offset for _, h in iter_batches(the_log.read_records(0, 1 << 20))] == [0, 41]
    reload(groups)
    assert fetch(groups) == {0: 10, 1: 2}
    assert set(groups.loaded[0].manager.groups) == {G}


@dataclass
class _Slice:
    data: bytes

    def read_bytes(self) -> bytes:
        return self.data


class _CompactedLog:
    """Two segments as the cleaner can leave them: [0, 10) whose batches end at offset 4
    (its tail was cleaned away, so a read at 5..9 finds nothing) and [10, 12)."""

    def __init__(self, batches: list[bytes]) -> None:
        self.batches = batches
        self.log_start_offset = 0
        self.log_end_offset = 12
        self.segment_base_offsets = (0, 10)

    def read(self, offset: int, max_bytes: int, **_: object) -> _Slice | None:
        found = [b for b in self.batches if _last_offset(b) >= offset]
        segment_end = 10 if offset < 10 else 12
        found = [b for b in found if _base_offset(b) < segment_end]
        return _Slice(b"".join(found)) if found else None


def _base_offset(batch: bytes) -> int:
    value: int = struct.unpack_from(">q", batch)[0]
    return value


def _last_offset(batch: bytes) -> int:
    value: int = struct.unpack_from(">i", batch, 23)[0]
    return _base_offset(batch) + value


def test_replay_goes_on_past_a_segment_that_ends_in_a_gap() -> None:
    tp = TopicPartition(TOPIC, 0)
    batches = [
        build_batch(
            [Record(offset_value(OffsetAndMetadata(o, -1, "", T0)), offset_key(G, tp))],
            base_offset=base,
        )
        for base, o in ((4, 1), (10, 2), (11, 3))
    ]
    fake: Any = _CompactedLog(batches)
    assert [header.base_offset for header, _, _ in replay_batches(fake)] == [4, 10, 11]
