"""Formatting and parsing of the CLI (no processes): describe layout, errors, partitioner."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from tidelog.cli import admin
from tidelog.cli.output import CommandError, format_table, parse_key_value
from tidelog.cli.topics import report_election
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.partitioner import murmur2, partition_for_key


def test_report_election_summarises_like_kafka_and_fails_on_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ok = admin.ElectionResult(ErrorCode.NONE, None)
    not_needed = admin.ElectionResult(ErrorCode.ELECTION_NOT_NEEDED, None)
    results = {TopicPartition("t", 0): ok, TopicPartition("t", 1): not_needed}
    assert report_election(results, "PREFERRED", as_json=False) == 0
    out = capsys.readouterr().out
    assert "Successfully completed leader election (PREFERRED) for partitions t-0" in out
    assert "Valid replica already elected for partitions t-1" in out
    failed = {
        TopicPartition("t", 2): admin.ElectionResult(
            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, "broker 1 is down"
        )
    }
    assert report_election(failed, "PREFERRED", as_json=False) == 1
    out = capsys.readouterr().out
    assert "PREFERRED_LEADER_NOT_AVAILABLE" in out
    assert "broker 1 is down" in out


def test_command_error_renders_kafka_name_and_hint() -> None:
    error = CommandError("topic 'x'", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert error.render("topics") == (
        "tidelog topics: error: UNKNOWN_TOPIC_OR_PARTITION: topic 'x'\n"
        "hint: check the name with `tidelog topics list`"
    )
    assert CommandError("plain").render("consume") == "tidelog consume: error: plain"


def test_parse_key_value() -> None:
    assert parse_key_value("retention.ms = 1000") == ("retention.ms", "1000")
    assert parse_key_value("a=b=c") == ("a", "b=c")
    with pytest.raises(CommandError, match="'nope' is not KEY=VALUE"):
        parse_key_value("nope")
    with pytest.raises(CommandError, match="is not KEY=VALUE"):
        parse_key_value("=x")


def test_format_table_aligns_columns() -> None:
    text = format_table(("A", "LONGER"), [(1, "x"), (22222, None)])
    assert text.splitlines() == ["A      LONGER", "1      x", "22222"]


@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(data: bytes) -> None:
    # kafka-python returns the hash unsigned; Kafka's Java (and ours) signed.
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)


def test_murmur2_signed_like_kafkas_utils() -> None:
    # Vectors of Kafka's UtilsTest.testMurmur2.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482


@given(st.binary(min_size=1, max_size=32), st.integers(min_value=1, max_value=64))
def test_partition_for_key_in_range(key: bytes, n: int) -> None:
    assert 0 <= partition_for_key(key, n) < n
