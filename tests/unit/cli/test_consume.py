"""``tidelog consume``'s steps without a broker: fetch errors, retries through a leader
change (ListOffsets and Fetch), printing records and moving positions, read_committed, and
the option checks."""

from __future__ import annotations

import io
from typing import Any, Final, cast

import pytest

from tidelog.cli import consume_fetch
from tidelog.cli.consume import group_settings
from tidelog.cli.consume_fetch import MAX_FAILED_ROUNDS, Consumption, fetched_cleanly
from tidelog.cli.consume_offsets import list_offsets
from tidelog.cli.output import CommandError, UsageError
from tidelog.cli.record_format import MessageFormatter
from tidelog.client import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    BlockingClient,
    ClientConnectionError,
    ClientTimeoutError,
    FetchResult,
    Record,
    build_batch,
)
from tidelog.client.offsets import ListOffsetsResult
from tidelog.client.records import build_control_batch
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

TP = TopicPartition("t", 0)


def _result(
    code: ErrorCode, records: bytes = b"", aborted: list[tuple[int, int]] | None = None
) -> FetchResult:
    return FetchResult(
        code,
        high_watermark=9,
        last_stable_offset=9,
        log_start_offset=2,
        records=records,
        aborted_transactions=aborted or [],
    )


def test_a_clean_fetch_is_used_and_a_retriable_error_asks_for_a_refresh() -> None:
    assert fetched_cleanly(_result(ErrorCode.NONE), TP, 5)
    assert not fetched_cleanly(_result(ErrorCode.NOT_LEADER_OR_FOLLOWER), TP, 5)


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (ErrorCode.OFFSET_OUT_OF_RANGE, "t-0: offset 12 is outside [2, 9]"),
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, "t-0"),
    ],
)
def test_other_fetch_errors_stop_the_command(code: ErrorCode, text: str) -> None:
    with pytest.raises(CommandError) as caught:
        fetched_cleanly(_result(code), TP, 12)
    assert caught.value.code == code
    assert caught.value.message == text


def _consumption(
    max_messages: int | None, position: int, isolation_level: int = READ_UNCOMMITTED
) -> tuple[Consumption, io.StringIO]:
    out = io.StringIO()
    consumption = Consumption(
        cast(BlockingClient, None),  # print_records never touches the client
        "t",
        out,
        MessageFormatter(print_key=True).format,
        isolation_level=isolation_level,
        max_messages=max_messages,
    )
    consumption.assign({TP: position})
    return consumption, out


def test_records_before_the_position_are_skipped_and_the_position_advances() -> None:
    batch = build_batch(
        [Record(b"a", b"k0"), Record(b"b", b"k1"), Record(b"c", b"k2")], base_offset=10
    )
    consumption, out = _consumption(None, 11)
    consumption.print_records(TP, _result(ErrorCode.NONE, batch))
    assert out.getvalue() == "k1\tb\nk2\tc\n"
    assert consumption.positions[TP] == 13
    assert consumption.printed == 2


def test_printing_stops_at_max_messages_and_the_position_stays_after_the_last_printed() -> None:
    batch = build_batch([Record(b"a"), Record(b"b"), Record(b"c")], base_offset=0)
    consumption, out = _consumption(2, 0)
    consumption.print_records(TP, _result(ErrorCode.NONE, batch))
    assert out.getvalue() == "null\ta\nnull\tb\n"
    assert consumption.positions[TP] == 2
    assert consumption.done


def _txn_batch(base_offset: int, producer_id: int, values: list[bytes]) -> bytes:
    return build_batch(
        [Record(v) for v in values],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )


def _marker(producer_id: int, *, commit: bool, base_offset: int) -> bytes:
    return build_control_batch(
        producer_id, 0, commit, coordinator_epoch=0, timestamp_ms=1, base_offset=base_offset
    )


def test_read_committed_drops_aborted_records_and_moves_past_markers() -> None:
    records = b"".join(
        [
            _txn_batch(0, 7, [b"aborted-0", b"aborted-1"]),
            _txn_batch(2, 8, [b"committed"]),
            _marker(7, commit=False, base_offset=3),
            _marker(8, commit=True, base_offset=4),
        ]
    )
    committed, out = _consumption(None, 0, READ_COMMITTED)
    committed.print_records(TP, _result(ErrorCode.NONE, records, aborted=[(7, 0)]))
    assert out.getvalue() == "null\tcommitted\n"
    assert committed.positions[TP] == 5  # past both markers

    uncommitted, out = _consumption(None, 0)
    uncommitted.print_records(TP, _result(ErrorCode.NONE, records, aborted=[(7, 0)]))
    assert out.getvalue() == "null\taborted-0\nnull\taborted-1\nnull\tcommitted\n"
    assert uncommitted.positions[TP] == 5


def test_group_settings_follow_kafkas_console_consumer() -> None:
    assert group_settings({}, from_beginning=False).auto_offset_reset == "latest"
    assert group_settings({}, from_beginning=True).auto_offset_reset == "earliest"
    settings = group_settings(
        {"enable.auto.commit": "false", "auto.commit.interval.ms": "100"}, from_beginning=False
    )
    assert not settings.enable_auto_commit
    assert settings.auto_commit_interval_ms == 100


@pytest.mark.parametrize(
    ("props", "from_beginning", "message"),
    [
        (
            {"auto.offset.reset": "latest"},
            True,
            "Can't simultaneously specify --from-beginning and 'auto.offset.reset=latest'",
        ),
        (
            {"auto.offset.reset": "smallest"},
            False,
            "--consumer-property auto.offset.reset='smallest': "
            "expected one of earliest, latest, none",
        ),
        (
            {"session.timeout.ms": "soon"},
            False,
            "--consumer-property session.timeout.ms='soon' is not a number",
        ),
    ],
)
def test_bad_group_settings_are_usage_errors(
    props: dict[str, str], from_beginning: bool, message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        group_settings(props, from_beginning)
    assert str(caught.value) == message


class _OneLeaderClient:
    """A client whose metadata puts every partition on broker 0 and whose fetches and
    ListOffsets answer from scripts (an exception in a script is raised); metadata
    refreshes are counted."""

    def __init__(
        self,
        answers: list[FetchResult | Exception],
        offsets: list[ListOffsetsResult | Exception] | None = None,
    ) -> None:
        self.answers = answers
        self.offsets = offsets or []
        self.fetched_from: list[int] = []
        self.refreshes = 0
        self.client = self
        self.cluster = self

    def leader_for(self, tp: TopicPartition) -> int:
        return 0

    def metadata(self, topics: list[str] | None = None, **kwargs: Any) -> None:
        assert topics == ["t"]
        self.refreshes += 1

    def fetch(self, partitions: dict[TopicPartition, Any], **kwargs: Any) -> Any:
        self.fetched_from.append(partitions[TP].fetch_offset)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return {TP: answer}

    def list_offsets(self, partitions: dict[TopicPartition, int], **kwargs: Any) -> Any:
        assert list(partitions) == [TP]
        answer = self.offsets.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return {TP: answer}


def _offset(code: ErrorCode, offset: int = -1) -> ListOffsetsResult:
    return ListOffsetsResult(code, offset, -1)


#: A leader change as clients see it: the old leader, no leader yet, the new leader before
#: it knows its high watermark (KIP-207), a leader that went away or paused.
LEADER_CHANGE: Final = (
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.OFFSET_NOT_AVAILABLE,
    ClientConnectionError("connection to broker 0 lost"),
    ClientTimeoutError("no answer in time"),
)


def test_start_offsets_are_asked_again_through_a_leader_change() -> None:
    script: list[ListOffsetsResult | Exception] = [
        e if isinstance(e, Exception) else _offset(e) for e in LEADER_CHANGE
    ]
    client = _OneLeaderClient([], [*script, _offset(ErrorCode.NONE, 7)])
    pauses: list[float] = []
    got = list_offsets(cast(BlockingClient, client), [TP], False, 0, sleep=pauses.append)
    assert got == {TP: 7}
    assert client.refreshes == len(LEADER_CHANGE)
    assert pauses == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])


def test_start_offsets_end_the_command_on_other_errors_or_after_the_retries() -> None:
    client = _OneLeaderClient([], [_offset(ErrorCode.TOPIC_AUTHORIZATION_FAILED)])
    with pytest.raises(CommandError) as refused:
        list_offsets(cast(BlockingClient, client), [TP], True, 0, sleep=lambda _s: None)
    assert (refused.value.code, refused.value.message) == (
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        "listing offsets of t-0",
    )
    stuck = [_offset(ErrorCode.OFFSET_NOT_AVAILABLE)] * (MAX_FAILED_ROUNDS + 1)
    client = _OneLeaderClient([], list(stuck))
    with pytest.raises(CommandError) as gave_up:
        list_offsets(cast(BlockingClient, client), [TP], True, 0, sleep=lambda _s: None)
    assert (gave_up.value.code, gave_up.value.message) == (
        ErrorCode.OFFSET_NOT_AVAILABLE,
        f"listing offsets of t-0: still failing after {MAX_FAILED_ROUNDS} retries",
    )
    assert client.offsets == []


def test_a_fetch_through_a_leader_change_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(consume_fetch.time, "sleep", pauses.append)
    script: list[FetchResult | Exception] = [
        e if isinstance(e, Exception) else _result(e) for e in LEADER_CHANGE
    ]
    script += [_result(ErrorCode.KAFKA_STORAGE_ERROR), _result(ErrorCode.REPLICA_NOT_AVAILABLE)]
    client = _OneLeaderClient([*script, _result(ErrorCode.NONE, build_batch([Record(b"x")]))])
    out = io.StringIO()
    consumption = Consumption(
        cast(BlockingClient, client),
        "t",
        out,
        MessageFormatter().format,
        isolation_level=READ_UNCOMMITTED,
        max_messages=None,
    )
    consumption.assign({TP: 0})
    for _ in script:
        assert not consumption.poll()
    assert consumption.poll()
    assert out.getvalue() == "x\n"
    assert client.fetched_from == [0] * (len(script) + 1)
    assert client.refreshes == len(script)
    assert len(pauses) == len(script)


def test_a_position_outside_the_log_starts_again_where_reset_offset_says() -> None:
    batch = build_batch([Record(b"x")], base_offset=2)
    client = _OneLeaderClient(
        [_result(ErrorCode.OFFSET_OUT_OF_RANGE), _result(ErrorCode.NONE, batch)]
    )
    out = io.StringIO()
    consumption = Consumption(
        cast(BlockingClient, client),
        "t",
        out,
        MessageFormatter().format,
        isolation_level=READ_UNCOMMITTED,
        max_messages=None,
        reset_offset=lambda tp: 2,
    )
    consumption.assign({TP: 40})
    assert not consumption.poll()
    assert consumption.poll()
    assert client.fetched_from == [40, 2]
    assert out.getvalue() == "x\n"
    assert consumption.positions[TP] == 3
