"""Structured broker logs: ``log.format=json``, one JSON object per line.

Kafka logs through log4j, and operators who ship its logs to a search engine swap the
pattern layout for a JSON one (log4j2's ``JsonTemplateLayout``); Kafka's own lines carry
the partition and epoch only inside the text (``[Partition orders-0 broker=1] ISR updated
to 1,2 and version updated to 7``). tidelog does the same with a ``logging.Formatter``: the
log calls stay as they are, and the formatter lifts the replication fields out of them.

Theory of operation:

1. Every record becomes one line, a JSON object (``json.dumps``: quotes, backslashes,
   newlines and control characters in a message are escaped, so a line never splits):
   ``time`` (ISO-8601 UTC with milliseconds, ``2026-11-26T07:01:02.345Z``), ``level``
   (``INFO``, ...), ``logger`` (``tidelog.server.cluster.node``), ``message`` (the formatted
   text, as the text format shows it), ``broker_id`` (the configured ``broker.id``; null
   when it is -1, generated at registration), then the partition fields when the record
   concerns a partition, then ``exc_info`` (the formatted traceback) when the call passed
   one (``log.exception``), ``stack_info`` when asked for, and any other ``extra=`` field.
2. Partition fields: ``topic`` (string), ``partition`` (int), ``leader_epoch`` (int).
   Taken first from ``extra=``: ``extra={"topic_partition": tp, "leader_epoch": n}`` (a
   ``TopicPartition``) or ``extra={"topic": t, "partition": p}``. When ``extra`` gives
   none, parsed from the message by tidelog's conventions (rule 3).
3. The conventions: a log line about one partition starts with the partition as
   ``TopicPartition.__str__`` writes it, ``<topic>-<partition>`` followed by ``:`` (``orders-0:
   leader, epoch 7, ISR [1, 2]``); only that leading form is parsed (a partition named
   further in the text may be one of many, or not the subject). Within such a line the
   leader epoch is written ``epoch N`` (or ``leader epoch N``); ``broker epoch``,
   ``controller epoch`` and ``partition epoch`` are other counters and are not taken. A
   line without a leading partition gets no ``leader_epoch`` from its text either
   (``broker 1 is the controller (epoch 3)`` is a controller epoch).
4. A topic name holds ``[A-Za-z0-9._-]`` (Kafka's ``Topic.validate``), so ``my-topic-12``
   is topic ``my-topic`` partition 12: the last ``-digits`` is the partition.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
from collections.abc import Mapping
from typing import Any, Final

#: The formats ``log.format`` accepts.
LOG_FORMATS: Final = ("text", "json")

#: The text format's layout (``tidelog broker`` without ``log.format=json``).
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: Rule 3: ``<topic>-<partition>:`` at the start of the message.
_LEADING_PARTITION = re.compile(r"(?P<topic>[A-Za-z0-9._-]+)-(?P<partition>[0-9]+):")
#: Rule 3: ``epoch N`` not preceded by another counter's name.
_LEADER_EPOCH = re.compile(
    r"(?<![A-Za-z_])(?<!broker )(?<!controller )(?<!partition )epoch (-?[0-9]+)"
)

#: Attributes every ``LogRecord`` has: anything else on a record came from ``extra=``.
_STANDARD: Final = frozenset(
    logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None).__dict__
) | {"message", "asctime"}
#: The ``extra=`` keys rule 2 consumes (not repeated as free fields).
_PARTITION_KEYS: Final = frozenset({"topic_partition", "topic", "partition", "leader_epoch"})


def iso_time(created: float) -> str:
    """``2026-11-26T07:01:02.345Z``: UTC, milliseconds."""
    moment = datetime.datetime.fromtimestamp(created, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def partition_fields(message: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    """Rules 2 and 3: ``topic``, ``partition`` and ``leader_epoch`` of one record (those
    known; none when it concerns no partition)."""
    fields: dict[str, Any] = {}
    tp = extra.get("topic_partition")
    if tp is not None:
        fields["topic"], fields["partition"] = str(tp.topic), int(tp.partition)
    elif "topic" in extra:
        fields["topic"] = str(extra["topic"])
        if extra.get("partition") is not None:
            fields["partition"] = int(extra["partition"])
    if "leader_epoch" in extra:
        fields["leader_epoch"] = int(extra["leader_epoch"])
    if "topic" in fields:
        return fields
    match = _LEADING_PARTITION.match(message)
    if match is None:
        return fields
    fields["topic"] = match.group("topic")
    fields["partition"] = int(match.group("partition"))
    if "leader_epoch" not in fields and (epoch := _LEADER_EPOCH.search(message, match.end())):
        fields["leader_epoch"] = int(epoch.group(1))
    return fields


class JsonFormatter(logging.Formatter):
    """One JSON object per record (the module docstring's rule 1)."""

    def __init__(self, broker_id: int | None = None) -> None:
        super().__init__()
        self.broker_id = broker_id if broker_id is not None and broker_id >= 0 else None

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        extra = {k: v for k, v in record.__dict__.items() if k not in _STANDARD}
        line: dict[str, Any] = {
            "time": iso_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
            "broker_id": self.broker_id,
        }
        line.update(partition_fields(message, extra))
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc_info"] = record.exc_text
        if record.stack_info:
            line["stack_info"] = self.formatStack(record.stack_info)
        for key, value in extra.items():
            if key not in _PARTITION_KEYS and key not in line:
                line[key] = value
        return json.dumps(line, default=str)


def use_log_format(log_format: str, broker_id: int | None = None) -> None:
    """Give the root logger's handlers the chosen format (``tidelog broker`` calls this
    once the configuration is read; the handlers were made by ``logging.basicConfig``)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}")
    formatter = JsonFormatter(broker_id) if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)
