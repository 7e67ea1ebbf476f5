"""``log.format=json`` (``tidelog.server.observability.log_format``): one JSON object per record,
with the partition fields from ``extra=`` or from tidelog's message conventions, escaping, and
exceptions in ``exc_info``."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tidelog.errors import ConfigError
from tidelog.model import TopicPartition
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.observability.log_format import (
    JsonFormatter,
    iso_time,
    partition_fields,
    use_log_format,
)


@pytest.fixture
def logger() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter(broker_id=2))
    log = logging.getLogger("tests.log_format")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    try:
        yield log, stream
    finally:
        log.removeHandler(handler)
        log.propagate = True


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    out = stream.getvalue().splitlines()
    return [json.loads(line) for line in out]


def test_the_fields_of_a_plain_record(logger: tuple[logging.Logger, io.StringIO]) -> None:
    log, stream = logger
    log.info("broker %d registered, broker epoch %d", 2, 17)
    [line] = lines(stream)
    assert list(line) == ["time", "level", "logger", "message", "broker_id"]
    assert line["level"] == "INFO"
    assert line["logger"] == "tests.log_format"
    assert line["message"] == "broker 2 registered, broker epoch 17"
    assert line["broker_id"] == 2
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"])


def test_iso_time_is_utc_with_milliseconds() -> None:
    assert iso_time(0.0) == "1970-01-01T00:00:00.000Z"
    assert iso_time(1_790_000_000.9876) == "2026-09-21T14:13:20.987Z"


def test_a_partition_message_gets_topic_partition_and_epoch(
    logger: tuple[logging.Logger, io.StringIO],
) -> None:
    log, stream = logger
    tp = TopicPartition("my-orders.v2", 12)
    log.info("%s: leader, epoch %d, ISR %s", tp, 7, [1, 2])
    log.info("%s: truncating from %d to %d (leader %d, epoch %d)", tp, 90, 80, 3, 8)
    log.info("%s: ISR now %s", tp, [1])
    [leader, truncating, isr] = lines(stream)
    assert (leader["topic"], leader["partition"], leader["leader_epoch"]) == (
        "my-orders.v2",
        12,
        7,
    )
    assert truncating["leader_epoch"] == 8
    assert (isr["topic"], isr["partition"]) == ("my-orders.v2", 12)
    assert "leader_epoch" not in isr


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # Other counters named "epoch" are not the leader epoch.
        ("broker 1 is the controller (epoch 3)", {}),
        ("broker 1 re-registered, broker epoch 40", {}),
        ("t-0: AlterPartition at partition epoch 5 answered", {"topic": "t", "partition": 0}),
        ("t-0: leader epoch 9", {"topic": "t", "partition": 0, "leader_epoch": 9}),
        # Only the leading form names the subject.
        ("deleted the replicas a-0, b-1", {}),
        (
            "a-b-c-10: follower of 2, epoch 4",
            {"topic": "a-b-c", "partition": 10, "leader_epoch": 4},
        ),
        ("topic-x: nothing", {}),
    ],
)
def test_partition_fields_from_the_message(message: str, expected: dict[str, Any]) -> None:
    assert partition_fields(message, {}) == expected


def test_extra_fields_win_over_the_message(logger: tuple[logging.Logger, io.StringIO]) -> None:
    log, stream = logger
    tp = TopicPartition("orders", 1)
    log.info(
        "%s: follower of %d, epoch %d", tp, 3, 5, extra={"topic_partition": tp, "leader_epoch": 6}
    )
    log.info("fetching", extra={"topic": "other", "partition": 4, "request": "Fetch"})
    [first, second] = lines(stream)
    assert (first["topic"], first["partition"], first["leader_epoch"]) == ("orders", 1, 6)
    assert "topic_partition" not in first
    assert (second["topic"], second["partition"], second["request"]) == ("other", 4, "Fetch")
    assert "leader_epoch" not in second


def test_escaping_keeps_one_object_per_line(logger: tuple[logging.Logger, io.StringIO]) -> None:
    log, stream = logger
    nasty = 'quote " backslash \\ newline \n tab \t bell \x07 and é'
    log.warning("client said %s", nasty)
    text = stream.getvalue()
    assert text.count("\n") == 1
    [line] = lines(stream)
    assert line["message"] == f"client said {nasty}"
    assert line["level"] == "WARNING"


def test_an_exception_goes_in_exc_info(logger: tuple[logging.Logger, io.StringIO]) -> None:
    log, stream = logger
    try:
        raise OSError(28, "No space left on device")
    except OSError:
        log.exception("%s: writing the replica failed", TopicPartition("t", 0))
    [line] = lines(stream)
    assert line["level"] == "ERROR"
    assert line["message"] == "t-0: writing the replica failed"
    assert line["exc_info"].startswith("Traceback (most recent call last):")
    assert line["exc_info"].rstrip().endswith("OSError: [Errno 28] No space left on device")
    assert (line["topic"], line["partition"]) == ("t", 0)


def test_unknown_broker_id_is_null() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    assert json.loads(JsonFormatter(broker_id=-1).format(record))["broker_id"] is None


def test_use_log_format_sets_the_root_handlers_and_refuses_other_formats() -> None:
    root = logging.getLogger()
    handler = logging.StreamHandler(io.StringIO())
    root.addHandler(handler)
    try:
        use_log_format("json", 4)
        assert isinstance(handler.formatter, JsonFormatter)
        assert handler.formatter.broker_id == 4
        use_log_format("text")
        assert not isinstance(handler.formatter, JsonFormatter)
        with pytest.raises(ValueError, match="log format must be one of text, json"):
            use_log_format("xml")
    finally:
        root.removeHandler(handler)


def test_the_config_key() -> None:
    base = {"broker.id": "1", "log.dirs": "/tmp/x"}
    assert load_broker_config(base).get_str("log.format") == "text"
    assert load_broker_config({**base, "log.format": "JSON"}).get_str("log.format") == "json"
    with pytest.raises(
        ConfigError, match=re.escape("log.format: invalid value 'xml': must be one of text, json")
    ):
        load_broker_config({**base, "log.format": "xml"})
