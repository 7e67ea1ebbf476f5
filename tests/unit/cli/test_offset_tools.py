"""What ``delete-records`` and ``get-offsets`` parse (no processes)."""

from __future__ import annotations

import re

import pytest

from tidelog.cli.delete_records import parse_offset_json
from tidelog.cli.get_offsets import matching_partitions, parse_partitions, parse_time
from tidelog.model import TopicPartition


def test_offset_json_as_kafka_writes_it() -> None:
    text = (
        '{"partitions": [{"topic": "a", "partition": 0, "offset": 3},'
        ' {"topic": "a", "partition": 1, "offset": -1}], "version": 1}'
    )
    assert parse_offset_json(text) == {TopicPartition("a", 0): 3, TopicPartition("a", 1): -1}
    assert parse_offset_json('{"partitions": []}') == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "The input string is not a valid JSON"),
        ("[]", "The input string is not a JSON object"),
        ('{"partitions": [], "version": 2}', "Not supported version field value 2"),
        ('{"version": 1}', "Missing partitions field"),
        (
            '{"partitions": [{"topic": "a", "partition": "0", "offset": 1}]}',
            '{"topic": "a", "partition": "0", "offset": 1} is not '
            '{"topic": "T", "partition": <int>, "offset": <int>}',
        ),
        (
            '{"partitions": [{"topic": "a", "partition": 0, "offset": 1},'
            ' {"topic": "a", "partition": 0, "offset": 2}]}',
            "Offset json file contains duplicate topic partitions: a-0",
        ),
    ],
)
def test_bad_offset_json(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_offset_json(text)


@pytest.mark.parametrize(
    ("text", "timestamp"),
    [("-1", -1), ("latest", -1), ("-2", -2), ("EARLIEST", -2), ("-3", -3),
     ("max-timestamp", -3), ("0", 0), ("1765000000000", 1765000000000)],
)  # fmt: skip
def test_times(text: str, timestamp: int) -> None:
    assert parse_time(text) == timestamp


@pytest.mark.parametrize("text", ["-4", "yesterday", "1.5", ""])
def test_bad_times(text: str) -> None:
    message = (
        f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / "
        "-3 or max-timestamp, or a specified long format timestamp"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_time(text)


def test_partition_lists_and_ranges() -> None:
    assert parse_partitions("0,2-4") == {0, 2, 3, 4}
    with pytest.raises(ValueError, match="'3-1' is not a partition or a range"):
        parse_partitions("3-1")
    with pytest.raises(ValueError, match="expected partition ids or ranges"):
        parse_partitions("x")


def test_topic_regex_matches_whole_names() -> None:
    topics = {
        "orders": frozenset({0, 1}),
        "orders-dlq": frozenset({0}),
        "__consumer_offsets": frozenset({0}),
    }
    tp = TopicPartition
    assert matching_partitions(topics, "orders", None, exclude_internal=False) == [
        tp("orders", 0),
        tp("orders", 1),
    ]
    assert matching_partitions(topics, "orders.*", frozenset({0}), exclude_internal=False) == [
        tp("orders", 0),
        tp("orders-dlq", 0),
    ]
    assert matching_partitions(topics, None, None, exclude_internal=True) == [
        tp("orders", 0),
        tp("orders", 1),
        tp("orders-dlq", 0),
    ]
    assert tp("__consumer_offsets", 0) in matching_partitions(
        topics, None, None, exclude_internal=False
    )
    with pytest.raises(ValueError, match=r"--topic '\(' is not a regular expression"):
        matching_partitions(topics, "(", None, exclude_internal=False)
