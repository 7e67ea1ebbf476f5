"""What ``delete-records`` and ``get-offsets`` parse (no processes)."""

from __future__ import annotations

import re

import pytest

from tidelog.cli.delete_records import parse_offset_json
from tidelog.cli.get_offsets import (
    PartitionFilter,
    matching_partitions,
    parse_time,
    topic_filters,
    topic_partition_filters,
)
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


TOPICS = {
    "orders": frozenset({0, 1, 2, 3}),
    "orders-dlq": frozenset({0}),
    "__consumer_offsets": frozenset({0}),
}


def matching(filters: list[PartitionFilter], *, exclude_internal: bool = False) -> list[str]:
    return [
        f"{tp.topic}:{tp.partition}"
        for tp in matching_partitions(TOPICS, filters, exclude_internal=exclude_internal)
    ]


def test_topic_regex_matches_whole_names() -> None:
    assert matching(topic_filters("orders", None)) == [
        "orders:0",
        "orders:1",
        "orders:2",
        "orders:3",
    ]
    assert matching(topic_filters("orders.*", "0,2")) == ["orders:0", "orders:2", "orders-dlq:0"]
    everything = matching(topic_filters(None, None))
    assert "__consumer_offsets:0" in everything
    assert matching(topic_filters(None, None), exclude_internal=True) == [
        p for p in everything if not p.startswith("__")
    ]
    with pytest.raises(ValueError, match=r"^--topic '\(' is not a regular expression"):
        topic_filters("(", None)
    with pytest.raises(
        ValueError,
        match=r"^--partitions expects a comma separated list of numeric partition ids, but "
        r"received: 0-2$",
    ):
        topic_filters("orders", "0-2")


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        ("orders:1", ["orders:1"]),
        ("orders:1-3", ["orders:1", "orders:2"]),  # the upper bound is excluded
        ("orders:2-", ["orders:2", "orders:3"]),
        ("orders:-1,orders-dlq", ["orders:0", "orders-dlq:0"]),
        (":0", ["__consumer_offsets:0", "orders:0", "orders-dlq:0"]),
        ("orders-.*:", ["orders-dlq:0"]),
    ],
)
def test_topic_partition_patterns_as_kafka_reads_them(patterns: str, expected: list[str]) -> None:
    assert matching(topic_partition_filters(patterns)) == expected


def test_bad_topic_partition_patterns() -> None:
    with pytest.raises(ValueError, match=r"^Invalid topic-partition pattern: orders:x$"):
        topic_partition_filters("orders:x")
    with pytest.raises(ValueError, match=r"^--topic-partitions '\[' is not a regular expression"):
        topic_partition_filters("[:1")
