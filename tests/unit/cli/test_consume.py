"""``tidelog consume``'s steps without a broker: fetch errors and printing records."""

from __future__ import annotations

import argparse
import io

import pytest

from tidelog.cli.output import CommandError
from tidelog.cli.records import _fetched_cleanly, _print_records
from tidelog.client import FetchResult, Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

TP = TopicPartition("t", 0)


def _result(code: ErrorCode, records: bytes = b"") -> FetchResult:
    return FetchResult(
        code, high_watermark=9, last_stable_offset=9, log_start_offset=2, records=records
    )


def test_a_clean_fetch_is_used_and_a_retriable_error_asks_for_a_refresh() -> None:
    assert _fetched_cleanly(_result(ErrorCode.NONE), TP, 5)
    assert not _fetched_cleanly(_result(ErrorCode.NOT_LEADER_OR_FOLLOWER), TP, 5)


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (ErrorCode.OFFSET_OUT_OF_RANGE, "offset 12 is outside [2, 9]"),
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, "t-0"),
    ],
)
def test_other_fetch_errors_stop_the_command(code: ErrorCode, text: str) -> None:
    with pytest.raises(CommandError, match=text.replace("[", r"\[").replace("]", r"\]")):
        _fetched_cleanly(_result(code), TP, 12)


def _args(max_messages: int | None) -> argparse.Namespace:
    return argparse.Namespace(max_messages=max_messages, json=False, print_key=True)


def test_records_before_the_position_are_skipped_and_the_position_advances() -> None:
    batch = build_batch(
        [Record(b"a", b"k0"), Record(b"b", b"k1"), Record(b"c", b"k2")], base_offset=10
    )
    positions = {TP: 11}
    out = io.StringIO()
    assert _print_records(batch, TP, positions, _args(None), out, printed=4) == 6
    assert out.getvalue() == "k1\tb\nk2\tc\n"
    assert positions[TP] == 13


def test_printing_stops_at_max_messages() -> None:
    batch = build_batch([Record(b"a"), Record(b"b"), Record(b"c")], base_offset=0)
    positions = {TP: 0}
    out = io.StringIO()
    assert _print_records(batch, TP, positions, _args(2), out, printed=1) == 2
    assert out.getvalue() == "\ta\n"
    assert positions[TP] == 1
