"""``tidelog transactions`` without a cluster: its tables, find-hanging's and abort's choices,
argument errors, and the DescribeTransactions answer read with a start time of -1."""

from __future__ import annotations

import pytest

from tidelog.cli import transactions_views as txn
from tidelog.cli.main import build_parser, main
from tidelog.client import describe_txn
from tidelog.coordinator.txn import TxnMetadata, TxnState
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader, encode_response
from tidelog.protocol.errors import InvalidResponseError
from tidelog.protocol.messages import build
from tidelog.server.apis.kafka_apis import KafkaApis
from tidelog.server.apis.txn_admin import describe_entry

NOW = 1_700_000_000_000
TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)


def producer(
    pid: int, start: int = -1, last_ts: int = NOW, coord_epoch: int = -1
) -> txn.ProducerView:
    return txn.ProducerView(
        producer_id=pid,
        producer_epoch=3,
        last_sequence=9,
        last_timestamp=last_ts,
        coordinator_epoch=coord_epoch,
        current_txn_start_offset=start,
    )


def description(partitions: tuple[TopicPartition, ...], start: int | None) -> txn.TxnDescription:
    return txn.TxnDescription(
        coordinator=2,
        transactional_id="t1",
        producer_id=4000,
        producer_epoch=1,
        state="Ongoing" if start is not None else "Empty",
        timeout_ms=60_000,
        start_ms=start,
        partitions=partitions,
    )


# --- tables --------------------------------------------------------------------------------


def test_list_table() -> None:
    table = txn.format_listings(
        [
            txn.TxnListing("a-long-transactional-id", 0, 4000, "Ongoing"),
            txn.TxnListing("b", 2, 4001, "CompleteCommit"),
        ]
    )
    assert table.splitlines() == [
        "TransactionalId          Coordinator  ProducerId  TransactionState",
        "a-long-transactional-id  0            4000        Ongoing",
        "b                        2            4001        CompleteCommit",
    ]
    assert txn.format_listings([]) == "TransactionalId  Coordinator  ProducerId  TransactionState"


def test_describe_table_running_and_idle() -> None:
    running = txn.format_description(description((TP0, TP1), NOW - 1_500), NOW)
    header, row = running.splitlines()
    assert header.split() == [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    ]
    assert row.split() == [
        "2", "t1", "4000", "1", "Ongoing", "60000", str(NOW - 1_500), "1500",
        "orders-0,orders-1",
    ]  # fmt: skip
    idle = txn.format_description(description((), None), NOW).splitlines()[1]
    assert idle.split() == ["2", "t1", "4000", "1", "Empty", "60000", "None", "None", "-"]
    as_json = txn.description_to_json(description((TP0,), None), NOW)
    assert as_json["start_time_ms"] is None
    assert as_json["duration_ms"] is None
    assert as_json["partitions"] == [{"topic": "orders", "partition": 0}]


def test_producers_table() -> None:
    table = txn.format_producers([producer(5, start=12, coord_epoch=4), producer(6)])
    assert [line.split() for line in table.splitlines()] == [
        [
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ],
        ["5", "3", "4", "9", str(NOW), "12"],
        ["6", "3", "-1", "9", str(NOW), "None"],
    ]
    assert txn.producer_to_json(producer(6))["current_txn_start_offset"] is None
    assert txn.producer_to_json(producer(5, start=0))["current_txn_start_offset"] == 0


def test_hanging_table() -> None:
    table = txn.format_hanging(
        [txn.OpenTxn(TP1, producer(5, start=12, last_ts=NOW - 31 * 60_000))], NOW
    )
    assert [line.split() for line in table.splitlines()] == [
        [
            "Topic",
            "Partition",
            "ProducerId",
            "ProducerEpoch",
            "CoordinatorEpoch",
            "StartOffset",
            "LastTimestamp",
            "Duration(min)",
        ],
        ["orders", "1", "5", "3", "-1", "12", str(NOW - 31 * 60_000), "31"],
    ]


# --- find-hanging and abort ----------------------------------------------------------------


def test_open_transactions_are_the_open_ones_idle_for_longer_than_the_timeout() -> None:
    quiet = NOW - 20 * 60_000
    producers = {
        TP1: [producer(1, start=5, last_ts=quiet), producer(2, last_ts=quiet)],
        TP0: [producer(3, start=0, last_ts=NOW - 1_000), producer(4, start=7, last_ts=quiet)],
    }
    found = txn.open_transactions(producers, NOW, 15 * 60_000)
    assert [(t.tp, t.producer.producer_id) for t in found] == [(TP0, 4), (TP1, 1)]
    assert txn.open_transactions(producers, NOW, 0) == [
        txn.OpenTxn(TP0, producers[TP0][0]),
        txn.OpenTxn(TP0, producers[TP0][1]),
        txn.OpenTxn(TP1, producers[TP1][0]),
    ]


def test_hanging_are_those_no_coordinator_will_end() -> None:
    unknown_pid = txn.OpenTxn(TP0, producer(1, start=3))
    id_not_found = txn.OpenTxn(TP0, producer(2, start=4))
    other_partition = txn.OpenTxn(TP1, producer(3, start=5))
    in_transaction = txn.OpenTxn(TP0, producer(3, start=6))
    hanging = txn.hanging_transactions(
        [unknown_pid, id_not_found, other_partition, in_transaction],
        {2: "gone", 3: "live"},
        {"gone": None, "live": description((TP0,), NOW)},
    )
    assert hanging == [unknown_pid, id_not_found, other_partition]


def test_abort_picks_the_transaction_starting_at_the_offset() -> None:
    producers = [producer(1), producer(2, start=10), producer(3, start=0)]
    assert txn.transaction_starting_at(producers, 10) == producers[1]
    assert txn.transaction_starting_at(producers, 0) == producers[2]
    assert txn.transaction_starting_at(producers, 11) is None
    assert txn.transaction_starting_at(producers, -1) is None
    assert txn.marker_coordinator_epoch(-1) == 0
    assert txn.marker_coordinator_epoch(0) == 0
    assert txn.marker_coordinator_epoch(7) == 7


# --- arguments -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["abort", "--topic", "t", "--partition", "0"], "one of the arguments"),
        (
            ["abort", "--topic", "t", "--partition", "0", "--start-offset", "1",
             "--producer-id", "2"],
            "not allowed with argument",
        ),
        (
            ["abort", "--topic", "t", "--partition", "0", "--producer-id", "2",
             "--producer-epoch", "1"],
            "--producer-id needs --producer-epoch and --coordinator-epoch",
        ),
        (
            ["abort", "--topic", "t", "--partition", "0", "--start-offset", "1",
             "--coordinator-epoch", "1"],
            "--start-offset takes no --producer-epoch or --coordinator-epoch",
        ),
        (["abort", "--topic", "t", "--partition", "-1", "--start-offset", "1"], "at least 0"),
        (["abort", "--partition", "0", "--start-offset", "1"], "--topic"),
        (["describe"], "--transactional-id"),
        (["describe-producers", "--topic", "t", "--partition", "x"], "not an integer"),
        (["find-hanging"], "needs --broker-id or --topic"),
        (["find-hanging", "--broker-id", "1", "--partition", "0"], "--partition needs --topic"),
        (["list", "--state", "ongoing"], "invalid choice"),
        (["list", "--duration-filter", "-5"], "at least 0"),
        ([], "required: ACTION"),
    ],
)  # fmt: skip
def test_bad_arguments_are_argparse_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["transactions", "--bootstrap-server", "127.0.0.1:1", *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_bootstrap_server_before_or_after_the_action() -> None:
    parser = build_parser()
    before = parser.parse_args(["transactions", "--bootstrap-server", "h:1", "list"])
    after = parser.parse_args(["transactions", "list", "--bootstrap-server", "h:2"])
    neither = parser.parse_args(["transactions", "list", "--state", "Ongoing", "--state", "Empty"])
    assert (before.bootstrap_server, after.bootstrap_server, neither.bootstrap_server) == (
        "h:1",
        "h:2",
        None,
    )
    assert neither.state == ["Ongoing", "Empty"]
    assert neither.producer_id == []
    assert neither.duration_filter is None


def test_unreachable_cluster_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["transactions", "--bootstrap-server", "127.0.0.1:1", "list"])
    assert code == 1
    assert "tidelog transactions: error: cannot reach the cluster" in capsys.readouterr().err


# --- DescribeTransactions as the broker encodes it -----------------------------------------


def _broker_answer(*entries: dict[str, object]) -> bytes:
    """A DescribeTransactions v0 response frame as a broker sends it, without its size."""
    header = RequestHeader(int(ApiKey.DESCRIBE_TRANSACTIONS), 0, 1, "test")
    body = build(KafkaApis.response_class(header), {"transaction_states": list(entries)})
    frame = encode_response(header, body)
    return frame[4:]


def test_describe_transactions_answer_with_no_transaction_running() -> None:
    idle = TxnMetadata("t1", 4000, 2, 60_000, TxnState.EMPTY, frozenset(), -1, NOW)
    running = TxnMetadata(
        "t2", 4001, 0, 30_000, TxnState.ONGOING, frozenset({TP1, TP0}), NOW - 10, NOW
    )
    payload = _broker_answer(
        describe_entry("t1", idle, ErrorCode.NONE),
        describe_entry("t2", running, ErrorCode.NONE),
        describe_entry("t3", None, ErrorCode.NONE),
    )
    first, second, third = describe_txn.decode(payload).transaction_states
    assert (first.error_code, first.transaction_state, first.transaction_start_time) == (
        0,
        "Empty",
        -1,
    )
    assert (first.producer_id, first.producer_epoch, first.transaction_timeout) == (4000, 2, 60_000)
    assert second.transaction_start_time == NOW - 10
    assert [(t.topic, list(t.partitions)) for t in second.topics] == [("orders", [0, 1])]
    assert third.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


def test_describe_transactions_answer_that_is_not_one() -> None:
    payload = _broker_answer()
    with pytest.raises(InvalidResponseError, match="cannot decode DescribeTransactions"):
        describe_txn.decode(payload[:5] + b"\xff\xff\xff")
