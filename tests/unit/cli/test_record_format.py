"""``produce``'s line reader and ``consume``'s formatter (Kafka's LineMessageReader and
DefaultMessageFormatter), and the ``--property`` parsing both use; no broker."""

from __future__ import annotations

import io
import json

import pytest

from tidelog.cli.output import CommandError, UsageError
from tidelog.cli.produce import read_batches
from tidelog.cli.record_format import (
    FORMATTER_PROPERTIES,
    READER_PROPERTIES,
    LineReader,
    MessageFormatter,
    json_line,
    parse_properties,
)
from tidelog.client import ConsumerRecord, Record
from tidelog.model import TopicPartition
from tidelog.protocol.records import TimestampType

TP = TopicPartition("t", 3)


def _reader(*props: str, key_separator: str | None = None) -> LineReader:
    return LineReader.from_properties(
        parse_properties(list(props), READER_PROPERTIES), key_separator
    )


def test_a_plain_line_is_the_value() -> None:
    assert _reader().read("a\tb:c", 1) == Record(value=b"a\tb:c")


def test_key_separator_flag_and_parse_key_property_split_at_the_first_separator() -> None:
    assert _reader(key_separator=":").read("k1:v:1", 1) == Record(key=b"k1", value=b"v:1")
    assert _reader("parse.key=true").read("k\tv\tw", 1) == Record(key=b"k", value=b"v\tw")
    assert _reader("parse.key=TRUE", "key.separator=::").read("k::v", 1) == Record(
        key=b"k", value=b"v"
    )


def test_headers_then_key_then_value() -> None:
    reader = _reader(
        "parse.headers=true", "parse.key=true", "key.separator=:", "headers.delimiter=|"
    )
    assert reader.read("h1:v1,h2:v2|key:value", 1) == Record(
        key=b"key", value=b"value", headers=(("h1", b"v1"), ("h2", b"v2"))
    )
    tabbed = _reader("parse.headers=true", "headers.separator=;", "headers.key.separator==")
    assert tabbed.read("a=1;b=\tval", 1) == Record(value=b"val", headers=(("a", b"1"), ("b", b"")))


def test_the_null_marker_makes_keys_values_and_header_values_null() -> None:
    reader = _reader("parse.key=true", "parse.headers=true", "null.marker=<null>")
    assert reader.read("h:<null>\t<null>\t<null>", 1) == Record(
        key=None, value=None, headers=(("h", None),)
    )
    assert reader.read("<null>\tk\tv", 1) == Record(key=b"k", value=b"v")


@pytest.mark.parametrize(
    ("props", "line", "message"),
    [
        (
            ("parse.key=true", "key.separator=:"),
            "novalue",
            "No key separator found on line number 4: 'novalue'",
        ),
        (
            ("parse.headers=true",),
            "no-delimiter",
            "No headers delimiter found on line number 4: 'no-delimiter'",
        ),
        (
            ("parse.headers=true",),
            "h1:v,h2\tx",
            "No header key separator found in pair 'h2' on line number 4",
        ),
        (
            ("parse.headers=true", "null.marker=N"),
            "N:v\tx",
            "Header keys should not be equal to the null marker 'N'",
        ),
    ],
)
def test_lines_without_a_needed_separator_are_errors_naming_the_line(
    props: tuple[str, ...], line: str, message: str
) -> None:
    with pytest.raises(CommandError) as caught:
        _reader(*props).read(line, 4)
    assert str(caught.value).startswith(message)


def test_ignore_error_keeps_going_as_kafka_does() -> None:
    reader = _reader("parse.key=true", "parse.headers=true", "ignore.error=true")
    assert reader.read("h\tno-key-separator", 1) == Record(
        value=b"no-key-separator", headers=(("h", None),)
    )


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (["nokey"], "--property 'nokey' is not KEY=VALUE"),
        (["print.key=true"], "--property 'print.key' is not a property this command reads"),
        (["key.separator="], "--property key.separator must not be empty"),
        (["headers.separator=:"], "headers.separator and headers.key.separator may not be equal"),
    ],
)
def test_bad_reader_properties_are_usage_errors(props: list[str], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        _reader(*props)
    assert str(caught.value) == message
    assert caught.value.exit_code == 2


def test_read_batches_groups_lines_and_strips_newlines() -> None:
    stream = io.StringIO("a\nb\r\nc\nd\ne")
    batches = list(read_batches(stream, 2))
    assert [line for batch in batches for line in batch] == ["a", "b", "c", "d", "e"]
    assert all(len(batch) <= 2 for batch in batches)


def _record(
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: tuple[tuple[str, bytes | None], ...] = (),
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
) -> ConsumerRecord:
    return ConsumerRecord(
        offset=5,
        timestamp_ms=1700000000000,
        timestamp_type=timestamp_type,
        key=key,
        value=value,
        headers=headers,
        leader_epoch=0,
    )


def _formatter(*props: str, print_key: bool = False) -> MessageFormatter:
    return MessageFormatter.from_properties(
        parse_properties(list(props), FORMATTER_PROPERTIES), print_key=print_key
    )


def test_default_formatter_prints_the_value_only() -> None:
    assert _formatter().format(TP, _record()) == "v\n"
    assert _formatter().format(TP, _record(value=None)) == "null\n"


def test_every_column_in_kafkas_order() -> None:
    formatter = _formatter(
        "print.timestamp=true",
        "print.partition=true",
        "print.offset=true",
        "print.headers=true",
        "print.key=true",
    )
    record = _record(headers=(("h1", b"a"), ("h2", None)))
    assert formatter.format(TP, record) == (
        "CreateTime:1700000000000\tPartition:3\tOffset:5\th1:a,h2:null\tk\tv\n"
    )
    no_headers = _record(key=None, timestamp_type=TimestampType.LOG_APPEND_TIME)
    assert formatter.format(TP, no_headers) == (
        "LogAppendTime:1700000000000\tPartition:3\tOffset:5\tNO_HEADERS\tnull\tv\n"
    )


def test_separators_null_literal_and_print_value_false() -> None:
    formatter = _formatter(
        "print.key=true",
        "print.value=false",
        "print.offset=true",
        "key.separator= | ",
        "line.separator=;",
        "null.literal=-",
    )
    assert formatter.format(TP, _record(key=None)) == "Offset:5 | -;"
    assert _formatter(print_key=True).format(TP, _record()) == "k\tv\n"
    assert _formatter("print.value=false").format(TP, _record()) == ""


def test_json_line_carries_headers_and_timestamp_type() -> None:
    line = json_line(TP, _record(key=None, value=b"\xff", headers=(("h", b"x"),)))
    assert line.endswith("\n")
    assert json.loads(line) == {
        "topic": "t",
        "partition": 3,
        "offset": 5,
        "timestamp": 1700000000000,
        "timestamp_type": "CreateTime",
        "key": None,
        "value": "\ufffd",
        "headers": [{"key": "h", "value": "x"}],
    }
