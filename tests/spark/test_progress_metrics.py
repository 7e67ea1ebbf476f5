"""``tidelog.spark.progress`` without Spark or brokers: offsets behind latest from a
progress, and the ``commitOffsetsToGroup`` options."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyarrow")  # the spark extra (scripts/bootstrap.sh spark)

from tidelog.model import TopicPartition
from tidelog.spark.options import SparkOptionError, parse_read_options
from tidelog.spark.progress import (
    behind_latest,
    java_double,
    offsets_behind_latest,
    source_metrics,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def test_offsets_behind_latest_is_sparks_kafka_formula() -> None:
    end = {"t": {"0": 40, "1": 16, "2": 4}}
    latest = {"t": {"0": 100, "1": 40, "2": 10}}
    assert behind_latest(end, latest) == {
        TopicPartition("t", 0): 60,
        TopicPartition("t", 1): 24,
        TopicPartition("t", 2): 6,
    }
    assert offsets_behind_latest(end, latest) == {
        "minOffsetsBehindLatest": "6",
        "maxOffsetsBehindLatest": "60",
        "avgOffsetsBehindLatest": "30.0",
    }
    # JSON text (what a progress holds) works the same; a partition the end offsets lack
    # is left out, one only they have (a deleted topic's) too.
    assert offsets_behind_latest(
        json.dumps({"t": {"0": 5}, "gone": {"0": 9}}), json.dumps({"t": {"0": 7, "1": 3}})
    ) == {
        "minOffsetsBehindLatest": "2",
        "maxOffsetsBehindLatest": "2",
        "avgOffsetsBehindLatest": "2.0",
    }


@pytest.mark.parametrize(
    ("end", "latest"),
    [
        (None, {"t": {"0": 1}}),
        ({"t": {"0": 1}}, None),
        ("null", '{"t": {"0": 1}}'),
        ('{"t": {"0": 1}}', "not json"),
        ({"index": 3}, {"index": 5}),  # not Kafka's offsets (another Python source)
        ({"t": {"x": 1}}, {"t": {"x": 2}}),
        ({"t": {"0": 1}}, {"u": {"0": 2}}),  # nothing in common
    ],
)
def test_no_metrics_without_two_kafka_offset_maps(end: object, latest: object) -> None:
    assert offsets_behind_latest(end, latest) == {}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0.0"),
        (30.0, "30.0"),
        (2.5, "2.5"),
        (1 / 3, "0.3333333333333333"),
        (9_999_999.0, "9999999.0"),
        (1e7, "1.0E7"),
        (12_345_678.0, "1.2345678E7"),
        (0.0005, "5.0E-4"),
        (-2.5, "-2.5"),
    ],
)
def test_java_double(value: float, text: str) -> None:
    assert java_double(value) == text


def test_source_metrics_of_a_progress_dict_and_json() -> None:
    progress = {
        "id": "q",
        "batchId": 3,
        "sources": [
            {
                "description": "tidelog",
                "startOffset": '{"t":{"0":0,"1":0}}',
                "endOffset": '{"t":{"0":10,"1":20}}',
                "latestOffset": '{"t":{"0":15,"1":20}}',
                "metrics": {},
            },
            {"description": "rate", "endOffset": "7", "latestOffset": "9", "metrics": {}},
            {"description": "first batch", "endOffset": '{"t":{"0":1}}', "latestOffset": None},
        ],
    }
    expected = [
        {
            "minOffsetsBehindLatest": "0",
            "maxOffsetsBehindLatest": "5",
            "avgOffsetsBehindLatest": "2.5",
        },
        {},
        {},
    ]
    assert source_metrics(progress) == expected
    assert source_metrics(json.dumps(progress)) == expected
    assert source_metrics({"sources": []}) == []


def test_commit_offsets_to_group_options() -> None:
    parsed = parse_read_options(
        {**BOOT, "commitoffsetstogroup": "true", "kafka.group.id": " watchers "}, streaming=True
    )
    assert parsed.commit_group == "watchers"
    assert parse_read_options(BOOT, streaming=True).commit_group is None
    off = {**BOOT, "commitOffsetsToGroup": "false"}
    assert parse_read_options(off, streaming=True).commit_group is None
    # A group id alone is accepted (Spark's option) and commits nothing.
    alone = parse_read_options({**BOOT, "kafka.group.id": "g"}, streaming=True)
    assert (alone.group_id, alone.commit_group) == ("g", None)


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        (
            {"commitOffsetsToGroup": "true"},
            True,
            "option 'commitOffsetsToGroup' needs 'kafka.group.id': the consumer group to "
            "commit the query's offsets to",
        ),
        (
            {"commitOffsetsToGroup": "true", "kafka.group.id": "  "},
            True,
            "option 'kafka.group.id' is empty",
        ),
        (
            {"commitOffsetsToGroup": "true", "groupIdPrefix": "g"},
            True,
            "option 'commitOffsetsToGroup' needs 'kafka.group.id'",
        ),
        (
            {"commitOffsetsToGroup": "true", "kafka.group.id": "g"},
            False,
            "option 'commitOffsetsToGroup' is for streaming queries only",
        ),
        (
            {"commitOffsetsToGroup": "yes", "kafka.group.id": "g"},
            True,
            "option 'commitOffsetsToGroup' must be true or false, not 'yes'",
        ),
    ],
)
def test_commit_offsets_to_group_errors(
    options: dict[str, str], streaming: bool, message: str
) -> None:
    with pytest.raises(SparkOptionError, match=message):
        parse_read_options({**BOOT, **options}, streaming=streaming)
