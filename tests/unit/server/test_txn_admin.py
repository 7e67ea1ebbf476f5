"""DescribeTransactions (65), ListTransactions (66) and DescribeProducers (61) on one broker
(``tidelog.server.apis.txn_admin``), on real storage and a real transaction coordinator whose
``__transaction_state`` partition holds the state given here."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema

from tidelog.client.records import Record, build_batch, build_control_batch
from tidelog.coordinator.txn import TxnMetadata, TxnState
from tidelog.coordinator.txn_records import encode_txn_key, encode_txn_value
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader, encode_response
from tidelog.protocol.messages import build
from tidelog.server.apis.kafka_apis import KafkaApis
from tidelog.server.apis.txn_admin import (
    ListFilters,
    TxnAdmin,
    active_producers,
    describe_entry,
    kafka_datetime,
    list_transactions,
)
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.coordinators.txn import TXN_TOPIC
from tidelog.server.metadata.local import MetadataStore
from tidelog.server.replica.manager import ReplicaManager, log_config_for, now_ms
from tidelog.storage.log_manager import LogManager
from tidelog.storage.producer_state import AppendOrigin

from .coordinators import group_coordinator, transaction_coordinator

TOPIC = "t"
NOW = 1_700_000_000_000


def meta(
    txn_id: str,
    state: TxnState,
    *,
    pid: int = 7,
    epoch: int = 2,
    start: int = -1,
    partitions: frozenset[TopicPartition] = frozenset(),
) -> TxnMetadata:
    return TxnMetadata(
        transactional_id=txn_id,
        producer_id=pid,
        producer_epoch=epoch,
        timeout_ms=60_000,
        state=state,
        partitions=partitions,
        txn_start_ms=start,
        last_update_ms=NOW,
    )


ONGOING = meta(
    "open",
    TxnState.ONGOING,
    pid=11,
    start=NOW - 5_000,
    partitions=frozenset({TopicPartition("b", 1), TopicPartition("a", 2), TopicPartition("a", 0)}),
)
EMPTY = meta("idle", TxnState.EMPTY, pid=12)
COMMITTED = meta("done", TxnState.COMPLETE_COMMIT, pid=13)
DEAD = meta("gone", TxnState.DEAD, pid=14)


# --- the pure parts ------------------------------------------------------------------------


def test_describe_entry_groups_partitions_by_topic_and_names_the_state() -> None:
    entry = describe_entry("open", ONGOING, ErrorCode.NONE)
    assert entry["error_code"] == ErrorCode.NONE
    assert entry["transaction_state"] == "Ongoing"
    assert (entry["producer_id"], entry["producer_epoch"]) == (11, 2)
    assert entry["transaction_timeout"] == 60_000
    assert entry["transaction_start_time"] == kafka_datetime(NOW - 5_000)
    assert entry["topics"] == [
        {"topic": "a", "partitions": [0, 2]},
        {"topic": "b", "partitions": [1]},
    ]


@pytest.mark.parametrize(
    ("known", "error", "expected"),
    [
        (None, ErrorCode.NONE, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND),
        (DEAD, ErrorCode.NONE, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND),
        (None, ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_COORDINATOR),
        (None, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST),
    ],
)
def test_describe_entry_errors(
    known: TxnMetadata | None, error: ErrorCode, expected: ErrorCode
) -> None:
    entry = describe_entry("x", known, error)
    assert entry["error_code"] == expected
    assert "topics" not in entry  # Kafka's defaults (build fills them)


def test_kafka_datetime_is_exact_for_minus_one_and_real_times() -> None:
    for ms in (-1, 0, NOW, NOW + 1):
        assert round(kafka_datetime(ms).timestamp() * 1000) == ms


def test_list_filters() -> None:
    everything = [ONGOING, EMPTY, COMMITTED, DEAD]

    def ids(filters: ListFilters) -> list[str]:
        return [r["transactional_id"] for r in list_transactions(everything, filters, NOW)]

    # Dead ids are never listed; rows come by id.
    assert ids(ListFilters()) == ["done", "idle", "open"]
    assert ids(ListFilters(states=frozenset({"Ongoing", "Empty"}))) == ["idle", "open"]
    assert ids(ListFilters(states=frozenset({"Dead"}))) == []
    assert ids(ListFilters(producer_ids=frozenset({12, 13, 99}))) == ["done", "idle"]
    assert ids(ListFilters(states=frozenset({"Empty"}), producer_ids=frozenset({11}))) == []
    # Running longer than the duration; a transaction that is not running never passes.
    assert ids(ListFilters(duration_ms=4_999)) == ["open"]
    assert ids(ListFilters(duration_ms=5_000)) == []
    assert ids(ListFilters(duration_ms=0, states=frozenset({"Empty"}))) == []
    # An unknown state name matches nothing; with a known one, the known one applies.
    only_unknown = ListFilters(states=frozenset({"Bogus"}))
    assert (ids(only_unknown), only_unknown.unknown_states) == ([], ["Bogus"])
    mixed = ListFilters(states=frozenset({"Bogus", "Ongoing"}))
    assert (ids(mixed), mixed.unknown_states) == (["open"], ["Bogus"])
    assert list_transactions([ONGOING], ListFilters(), NOW) == [
        {"transactional_id": "open", "producer_id": 11, "transaction_state": "Ongoing"}
    ]


# --- the handlers on a broker --------------------------------------------------------------


@pytest.fixture
def admin(tmp_path: Path) -> Iterator[TxnAdmin]:
    """One broker: ``__transaction_state`` with one partition (every id lives there) holding
    ONGOING, EMPTY and DEAD, and topic ``t`` with two partitions."""
    config = load_broker_config(
        {
            "log.dirs": str(tmp_path),
            "transaction.state.log.num.partitions": "1",
            "offsets.topic.num.partitions": "1",
        }
    )
    logs = LogManager(
        [tmp_path], log_config_for(effective_topic_config(config, {})), now_ms=now_ms()
    )
    apis = KafkaApis.alone(config, MetadataStore(tmp_path), ReplicaManager(config, logs), {})
    apis.create_topic(TXN_TOPIC, 1, {"retention.ms": -1})
    apis.create_topic(TOPIC, 2, {})

    async def allocate() -> int:
        return 1

    coordinator = transaction_coordinator(
        apis, group_coordinator(apis), allocate, apis.handlers[ApiKey.INIT_PRODUCER_ID]
    )
    _p, loaded, error = coordinator._lookup("open")
    assert error == ErrorCode.NONE
    assert loaded is not None
    loaded.manager.load({m.transactional_id: m for m in (ONGOING, EMPTY, DEAD)})
    yield TxnAdmin(apis.helper, apis.replica_manager, coordinator)
    logs.close()


def call(admin: TxnAdmin, api: ApiKey, version: int, data: dict[str, Any]) -> Any:
    async def inside() -> Any:
        body = build(load_request_schema(api, version), data)
        header = RequestHeader(int(api), version, 1, "test")
        answer = admin.handlers()[api](header, body)
        # The answer encodes (a start time of -1 included).
        encode_response(header, answer)
        return answer

    return asyncio.run(inside())


def test_describe_transactions(admin: TxnAdmin) -> None:
    answer = call(
        admin,
        ApiKey.DESCRIBE_TRANSACTIONS,
        0,
        {"transactional_ids": ["open", "idle", "gone", "never", ""]},
    )
    states = {s.transactional_id: s for s in answer.transaction_states}
    assert [s.transactional_id for s in answer.transaction_states] == [
        "open",
        "idle",
        "gone",
        "never",
        "",
    ]
    ongoing = states["open"]
    assert ongoing.error_code == ErrorCode.NONE
    assert (ongoing.transaction_state, ongoing.producer_id, ongoing.producer_epoch) == (
        "Ongoing",
        11,
        2,
    )
    assert ongoing.transaction_timeout == datetime.timedelta(seconds=60)
    assert round(ongoing.transaction_start_time.timestamp() * 1000) == NOW - 5_000
    assert [(t.topic, list(t.partitions)) for t in ongoing.topics] == [("a", [0, 2]), ("b", [1])]
    idle = states["idle"]
    assert (idle.error_code, idle.transaction_state, idle.topics) == (ErrorCode.NONE, "Empty", ())
    assert round(idle.transaction_start_time.timestamp() * 1000) == -1
    assert states["gone"].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    assert states["never"].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    assert states[""].error_code == ErrorCode.INVALID_REQUEST


def test_describe_transactions_elsewhere_is_not_coordinator(admin: TxnAdmin) -> None:
    hosted = admin.replica_manager.partitions.pop(TopicPartition(TXN_TOPIC, 0))
    try:
        answer = call(admin, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["open"]})
        assert answer.transaction_states[0].error_code == ErrorCode.NOT_COORDINATOR
        listed = call(admin, ApiKey.LIST_TRANSACTIONS, 0, {})
        assert listed.transaction_states == ()
    finally:
        admin.replica_manager.partitions[TopicPartition(TXN_TOPIC, 0)] = hosted


@pytest.mark.parametrize("version", [0, 1, 2])
def test_list_transactions(admin: TxnAdmin, version: int) -> None:
    def listed(**filters: Any) -> tuple[list[tuple[str, int, str]], list[str]]:
        answer = call(admin, ApiKey.LIST_TRANSACTIONS, version, filters)
        assert answer.error_code == ErrorCode.NONE
        rows = [
            (t.transactional_id, t.producer_id, t.transaction_state)
            for t in answer.transaction_states
        ]
        return rows, list(answer.unknown_state_filters)

    assert listed() == ([("idle", 12, "Empty"), ("open", 11, "Ongoing")], [])
    assert listed(state_filters=["Ongoing"]) == ([("open", 11, "Ongoing")], [])
    assert listed(state_filters=["Nope"]) == ([], ["Nope"])
    assert listed(producer_id_filters=[12]) == ([("idle", 12, "Empty")], [])
    if version >= 1:
        assert listed(duration_filter=0) == ([("open", 11, "Ongoing")], [])
        assert listed(duration_filter=10**12) == ([], [])
    if version >= 2:
        # KIP-1152: the whole id must match; null and empty patterns keep everything.
        assert listed(transactional_id_pattern="op.*") == ([("open", 11, "Ongoing")], [])
        assert listed(transactional_id_pattern="op") == ([], [])
        assert listed(transactional_id_pattern="") == listed()
        assert listed(transactional_id_pattern=None) == listed()


def test_list_transactions_invalid_pattern(admin: TxnAdmin) -> None:
    answer = call(admin, ApiKey.LIST_TRANSACTIONS, 2, {"transactional_id_pattern": "op[en"})
    assert answer.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION == 128
    assert answer.transaction_states == ()


@pytest.mark.parametrize("loaded", ["not yet", "at the previous leader epoch"])
def test_list_transactions_loads_a_partition_led_here_first(admin: TxnAdmin, loaded: str) -> None:
    """A ``__transaction_state`` partition led here that the coordinator has not loaded at
    its current leader epoch (its next tick would): ListTransactions lists what the log
    holds, never nothing or the previous epoch's state (Kafka answers
    COORDINATOR_LOAD_IN_PROGRESS while it loads; here the load runs in place)."""
    written = meta(
        "from-log",
        TxnState.ONGOING,
        pid=21,
        start=NOW,
        partitions=frozenset({TopicPartition(TOPIC, 0)}),
    )
    record = Record(key=encode_txn_key("from-log"), value=encode_txn_value(written))
    _append(admin, TopicPartition(TXN_TOPIC, 0), build_batch([record]))
    if loaded == "not yet":
        admin.coordinator.loaded.clear()
    else:
        admin.coordinator.loaded[0].coordinator_epoch -= 1
    answer = call(admin, ApiKey.LIST_TRANSACTIONS, 1, {})
    assert answer.error_code == ErrorCode.NONE
    rows = [
        (t.transactional_id, t.producer_id, t.transaction_state) for t in answer.transaction_states
    ]
    assert rows == [("from-log", 21, "Ongoing")]
    described = call(admin, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["from-log"]})
    assert described.transaction_states[0].producer_id == 21


def _append(admin: TxnAdmin, tp: TopicPartition, batch: bytes) -> None:
    async def inside() -> None:
        # As the broker writes markers (a client's Produce may not carry control batches).
        appended = admin.replica_manager.append_records(
            {tp: batch}, 1, origin=AppendOrigin.COORDINATOR
        )
        ((result, _required),) = appended.values()
        assert result.error == ErrorCode.NONE, result

    asyncio.run(inside())


def test_describe_producers(admin: TxnAdmin) -> None:
    tp = TopicPartition(TOPIC, 0)
    records = [Record(key=None, value=b"v%d" % i) for i in range(3)]
    _append(admin, tp, build_batch(records, base_timestamp_ms=NOW))  # no producer
    _append(
        admin,
        tp,
        build_batch(records, base_timestamp_ms=NOW, producer_id=5, producer_epoch=1,
                    base_sequence=0),
    )  # fmt: skip
    _append(
        admin,
        tp,
        build_batch(records, base_timestamp_ms=NOW + 1, producer_id=9, producer_epoch=0,
                    base_sequence=0, is_transactional=True),
    )  # fmt: skip
    _append(
        admin,
        tp,
        build_batch(records, base_timestamp_ms=NOW + 2, producer_id=8, producer_epoch=3,
                    base_sequence=0, is_transactional=True),
    )  # fmt: skip
    _append(admin, tp, build_control_batch(8, 3, False, 4, NOW + 3))  # 8's ends (abort)

    answer = call(
        admin,
        ApiKey.DESCRIBE_PRODUCERS,
        0,
        {"topics": [{"name": TOPIC, "partition_indexes": [0, 1, 7]}, {"name": "nope",
                                                                     "partition_indexes": [0]}]},
    )  # fmt: skip
    (t, nope) = answer.topics
    by_partition = {p.partition_index: p for p in t.partitions}
    assert by_partition[1].error_code == ErrorCode.NONE
    assert by_partition[1].active_producers == ()
    assert by_partition[7].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert nope.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    p0 = by_partition[0]
    assert p0.error_code == ErrorCode.NONE
    assert [
        (
            p.producer_id,
            p.producer_epoch,
            p.last_sequence,
            p.last_timestamp,
            p.coordinator_epoch,
            p.current_txn_start_offset,
        )
        for p in p0.active_producers
    ] == [
        (5, 1, 2, NOW, -1, -1),
        (8, 3, 2, NOW + 3, 4, -1),  # the marker: its coordinator epoch and time
        (9, 0, 2, NOW + 1, -1, 6),  # open since offset 6
    ]


def test_describe_producers_on_a_follower(admin: TxnAdmin) -> None:
    tp = TopicPartition(TOPIC, 1)
    hosted = admin.replica_manager.partitions[tp]
    part = hosted.partition
    other = BrokerId(99)
    part.make_follower(
        leader_id=other,
        leader_epoch=part.leader_epoch + 1,
        partition_epoch=part.partition_epoch + 1,
        replicas=(other, part.local_broker_id),
        isr=(other, part.local_broker_id),
        log_end_offset=part.log_end_offset,
    )
    answer = call(
        admin, ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": TOPIC, "partition_indexes": [1]}]}
    )
    assert answer.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_active_producers_is_empty_for_no_producers() -> None:
    assert active_producers({}) == []
