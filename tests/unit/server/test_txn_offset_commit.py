"""TxnOffsetCommit (28) and OffsetFetch ``require_stable`` on one broker's group coordinator,
on real storage: the error answers for bad input, offsets pending until the producer's
marker (``complete_txn``), and the replay of ``__consumer_offsets`` holding transactional
batches and COMMIT/ABORT control batches."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crc32c
import pytest
from kio.index import load_request_schema

from tidelog.client.records import Record, build_batch
from tidelog.coordinator.records import OffsetAndMetadata, offset_key, offset_value
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import SUPPORTED_VERSIONS, ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.protocol.messages import build
from tidelog.server.apis.kafka_apis import KafkaApis
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.coordinators.group import OFFSETS_TOPIC, GroupCoordinator
from tidelog.server.metadata.local import MetadataStore
from tidelog.server.replica.manager import ReplicaManager, log_config_for, now_ms
from tidelog.storage.log_manager import LogManager

from .coordinators import group_coordinator

G = "g"
PID = 4000
TOPIC = "t"
OFFSETS_TP = TopicPartition(OFFSETS_TOPIC, 0)


@pytest.fixture
def groups(tmp_path: Path) -> Iterator[GroupCoordinator]:
    """One broker with ``__consumer_offsets`` (one partition: every group lives in it) and
    topic ``t`` (two partitions)."""
    config = load_broker_config({"log.dirs": str(tmp_path), "offsets.topic.num.partitions": "1"})
    logs = LogManager(
        [tmp_path], log_config_for(effective_topic_config(config, {})), now_ms=now_ms()
    )
    apis = KafkaApis.alone(config, MetadataStore(tmp_path), ReplicaManager(config, logs), {})
    apis.create_topic(OFFSETS_TOPIC, 1, {"retention.ms": -1})
    apis.create_topic(TOPIC, 2, {})
    yield group_coordinator(apis)
    logs.close()


def run(groups: GroupCoordinator, api: ApiKey, version: int, data: dict[str, Any]) -> Any:
    """The handler's answer to a request built from ``data``, awaited when it is parked
    (inside a running loop: handlers that append need one)."""
    assert SUPPORTED_VERSIONS[api][0] <= version <= SUPPORTED_VERSIONS[api][1]

    async def inside() -> Any:
        body = build(load_request_schema(api, version), data)
        answer = groups.handlers()[api](RequestHeader(int(api), version, 1, "test"), body)
        return await answer if isinstance(answer, asyncio.Future) else answer

    return asyncio.run(inside())


def txn_commit(
    groups: GroupCoordinator,
    offsets: dict[int, int],
    *,
    group: str = G,
    version: int = 3,
    member_id: str = "",
    generation: int = -1,
    metadata: str = "",
) -> dict[int, ErrorCode]:
    """TxnOffsetCommit of ``offsets`` (partition of ``t`` -> offset): errors by partition."""
    answer = run(
        groups,
        ApiKey.TXN_OFFSET_COMMIT,
        version,
        {
            "transactional_id": "tx",
            "group_id": group,
            "producer_id": PID,
            "producer_epoch": 0,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": None,
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {
                            "partition_index": p,
                            "committed_offset": o,
                            "committed_leader_epoch": -1,
                            "committed_metadata": metadata,
                        }
                        for p, o in offsets.items()
                    ],
                }
            ],
        },
    )
    (topic,) = answer.topics
    assert topic.name == TOPIC
    return {int(p.partition_index): ErrorCode(int(p.error_code)) for p in topic.partitions}


def fetch(
    groups: GroupCoordinator, *, require_stable: bool, version: int = 7
) -> dict[int, tuple[int, ErrorCode]]:
    """OffsetFetch of both partitions of ``t``: (offset, error) by partition."""
    topics = [{"name": TOPIC, "partition_indexes": [0, 1]}]
    if version >= 8:
        data: dict[str, Any] = {
            "groups": [{"group_id": G, "topics": topics}],
            "require_stable": require_stable,
        }
    else:
        data = {"group_id": G, "topics": topics, "require_stable": require_stable}
    answer = run(groups, ApiKey.OFFSET_FETCH, version, data)
    if version >= 8:
        (answer,) = answer.groups
    assert answer.error_code == ErrorCode.NONE
    (topic,) = answer.topics
    return {
        int(p.partition_index): (int(p.committed_offset), ErrorCode(int(p.error_code)))
        for p in topic.partitions
    }


# --- bad input ---------------------------------------------------------------------------


def test_an_empty_group_id_is_invalid(groups: GroupCoordinator) -> None:
    assert txn_commit(groups, {0: 5}, group="") == {0: ErrorCode.INVALID_GROUP_ID}


def test_an_unknown_member_is_refused(groups: GroupCoordinator) -> None:
    errors = txn_commit(groups, {0: 5, 1: 6}, member_id="ghost", generation=1)
    assert errors == {0: ErrorCode.UNKNOWN_MEMBER_ID, 1: ErrorCode.UNKNOWN_MEMBER_ID}
    assert fetch(groups, require_stable=True) == {0: (-1, ErrorCode.NONE), 1: (-1, ErrorCode.NONE)}


def test_too_large_metadata_and_unknown_partitions_are_refused(groups: GroupCoordinator) -> None:
    errors = txn_commit(groups, {0: 5}, metadata="x" * 4097)
    assert errors == {0: ErrorCode.OFFSET_METADATA_TOO_LARGE}
    assert txn_commit(groups, {7: 5}) == {7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert not groups.loaded[0].manager.pending_txn


def test_a_broker_not_hosting_the_partition_is_not_the_coordinator(
    groups: GroupCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(groups.replica_manager.partitions, OFFSETS_TP)
    assert txn_commit(groups, {0: 5}) == {0: ErrorCode.NOT_COORDINATOR}


# --- pending until the marker, require_stable -----------------------------------------------


def test_offsets_are_pending_until_the_commit_marker(groups: GroupCoordinator) -> None:
    assert txn_commit(groups, {0: 5}, version=0) == {0: ErrorCode.NONE}
    assert fetch(groups, require_stable=False) == {0: (-1, ErrorCode.NONE), 1: (-1, ErrorCode.NONE)}
    stable = {0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT), 1: (-1, ErrorCode.NONE)}
    assert fetch(groups, require_stable=True) == stable
    assert fetch(groups, require_stable=True, version=8) == stable
    # One transactional batch of the producer, without a sequence number.
    the_log = groups.replica_manager.partitions[OFFSETS_TP].log
    data = the_log.read(0, 1 << 20, max_offset=None, min_one_batch=True)
    assert data is not None
    raw = data.read_bytes()
    attributes, _, _, _, producer_id, _, base_sequence = struct.unpack_from(">hiqqqhi", raw, 21)
    assert (attributes & 0x30, producer_id, base_sequence) == (0x10, PID, -1)

    groups.complete_txn(0, PID, commit=True)
    committed = {0: (5, ErrorCode.NONE), 1: (-1, ErrorCode.NONE)}
    assert fetch(groups, require_stable=True) == committed
    assert fetch(groups, require_stable=False) == committed


def test_an_aborted_transaction_leaves_the_committed_offset(groups: GroupCoordinator) -> None:
    assert txn_commit(groups, {1: 8}) == {1: ErrorCode.NONE}
    groups.complete_txn(0, PID + 1, commit=True)  # another producer: nothing happens
    groups.complete_txn(3, PID, commit=True)  # a partition not loaded here: nothing either
    assert fetch(groups, require_stable=True)[1] == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
    groups.complete_txn(0, PID, commit=False)
    assert fetch(groups, require_stable=True)[1] == (-1, ErrorCode.NONE)


def test_delete_groups_with_an_open_transaction(groups: GroupCoordinator) -> None:
    assert txn_commit(groups, {0: 5}) == {0: ErrorCode.NONE}
    offset_delete = run(
        groups,
        ApiKey.OFFSET_DELETE,
        0,
        {"group_id": G, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]},
    )
    assert offset_delete.error_code == ErrorCode.NONE
    deleted = run(groups, ApiKey.DELETE_GROUPS, 2, {"groups_names": [G]})
    assert [int(r.error_code) for r in deleted.results] == [ErrorCode.NONE]
    groups.complete_txn(0, PID, commit=True)
    assert fetch(groups, require_stable=True)[0] == (-1, ErrorCode.NONE)


# --- replay ---------------------------------------------------------------------------------


def control_batch(base_offset: int, producer_id: int, commit: bool) -> bytes:
    """A transaction marker as Kafka writes it: attributes transactional + control, one
    record with key (version 0, type 1 COMMIT / 0 ABORT) and value (version 0, coordinator
    epoch)."""
    key = b"\x00\x00\x00\x01" if commit else b"\x00\x00\x00\x00"
    raw = bytearray(
        build_batch(
            [Record(key=key, value=b"\x00\x00" + struct.pack(">i", 0))],
            base_offset=base_offset,
            base_timestamp_ms=1,
            producer_id=producer_id,
            producer_epoch=0,
            is_transactional=True,
        )
    )
    struct.pack_into(">h", raw, 21, 0x30)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    return bytes(raw)


def offsets_batch(base_offset: int, producer_id: int, offsets: dict[int, int]) -> bytes:
    """Offset records of group G for partitions of ``t``; a producer id: transactional."""
    return build_batch(
        [
            Record(
                key=offset_key(G, TopicPartition(TOPIC, p)),
                value=offset_value(OffsetAndMetadata(o)),
            )
            for p, o in offsets.items()
        ],
        base_offset=base_offset,
        base_timestamp_ms=1,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        is_transactional=producer_id >= 0,
    )


def test_replay_applies_markers_and_keeps_open_transactions_pending(
    groups: GroupCoordinator,
) -> None:
    the_log = groups.replica_manager.partitions[OFFSETS_TP].log
    batches = [
        offsets_batch(0, -1, {0: 1, 1: 1}),  # plain commit
        offsets_batch(2, PID, {0: 10}),  # committed below: overrides offset 1
        offsets_batch(3, PID + 1, {1: 20}),  # aborted below
        control_batch(4, PID, commit=True),
        control_batch(5, PID + 1, commit=False),
        offsets_batch(6, PID + 2, {1: 30}),  # open at the end of the log
    ]
    the_log.append_as_follower(b"".join(batches), now_ms=now_ms())
    groups._unload(0)  # the next request loads the partition again
    assert fetch(groups, require_stable=False) == {0: (10, ErrorCode.NONE), 1: (1, ErrorCode.NONE)}
    assert fetch(groups, require_stable=True)[1] == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
    groups.complete_txn(0, PID + 2, commit=True)  # the open transaction's marker comes
    assert fetch(groups, require_stable=True) == {0: (10, ErrorCode.NONE), 1: (30, ErrorCode.NONE)}
