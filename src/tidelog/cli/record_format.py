"""Records as text: ``produce``'s input lines and ``consume``'s output lines.

- ``--property KEY=VALUE`` (repeatable) configures both sides, as the ``--property`` of
  kafka-console-producer.sh and kafka-console-consumer.sh does; a key either side does not
  know is a usage error (Kafka ignores it; a typo then silently changes nothing).
- ``LineReader`` is Kafka's ``LineMessageReader``: a line is
  ``[HEADERS<headers.delimiter>][KEY<key.separator>]VALUE``, the parts present as
  ``parse.headers`` and ``parse.key`` say; HEADERS is ``k1:v1,k2:v2`` (``headers.separator``,
  ``headers.key.separator``; split on the literal string, where Kafka's ``split`` takes a
  regular expression). A key, value or header value equal to ``null.marker`` is null. A
  line without a separator it needs is an error naming the line, unless ``ignore.error``.
- ``MessageFormatter`` is Kafka's ``DefaultMessageFormatter``: the columns ``print.timestamp``
  (``CreateTime:1700000000000``), ``print.partition`` (``Partition:0``), ``print.offset``
  (``Offset:5``), ``print.headers`` (``k1:v1,k2:v2`` or ``NO_HEADERS``), ``print.key`` and
  ``print.value`` (default true), in that order, joined by ``key.separator`` (a tab) and
  ended by ``line.separator`` (a newline); a null key, value or header value prints as
  ``null.literal`` (``null``). ``json_line`` is tidelog's ``--json`` instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from tidelog.cli.output import CommandError, UsageError
from tidelog.client import ConsumerRecord, Record
from tidelog.model import TopicPartition
from tidelog.protocol.records import TimestampType

TRUE: Final = "true"
#: How Kafka names a record's timestamp type (``TimestampType.toString``).
TIMESTAMP_NAMES: Final = {
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}
READER_PROPERTIES: Final = frozenset(
    {
        "parse.key",
        "key.separator",
        "parse.headers",
        "headers.delimiter",
        "headers.separator",
        "headers.key.separator",
        "ignore.error",
        "null.marker",
    }
)
FORMATTER_PROPERTIES: Final = frozenset(
    {
        "print.timestamp",
        "print.key",
        "print.offset",
        "print.partition",
        "print.headers",
        "print.value",
        "key.separator",
        "line.separator",
        "headers.separator",
        "null.literal",
    }
)


def parse_properties(
    values: Sequence[str] | None, known: frozenset[str], option: str = "--property"
) -> dict[str, str]:
    """``KEY=VALUE`` strings -> a dict (the last of a key wins); malformed or unknown keys
    are usage errors."""
    props: dict[str, str] = {}
    for item in values or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{option} {item!r} is not KEY=VALUE")
        if key not in known:
            raise UsageError(
                f"{option} {key!r} is not a property this command reads",
                hint="known: " + ", ".join(sorted(known)),
            )
        props[key] = value
    return props


def _flag(props: Mapping[str, str], key: str, default: bool = False) -> bool:
    """A boolean property as Kafka reads one: ``true`` in any case, else false."""
    value = props.get(key)
    return default if value is None else value.strip().lower() == TRUE


@dataclass(frozen=True, slots=True)
class LineReader:
    """Kafka's LineMessageReader; see the module docstring."""

    parse_key: bool = False
    key_separator: str = "\t"
    parse_headers: bool = False
    headers_delimiter: str = "\t"
    headers_separator: str = ","
    headers_key_separator: str = ":"
    ignore_error: bool = False
    null_marker: str | None = None

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], key_separator: str | None = None
    ) -> LineReader:
        """From ``--property`` values; ``key_separator`` (``--key-separator``) turns on
        ``parse.key`` with that separator."""
        reader = cls(
            parse_key=_flag(props, "parse.key") or key_separator is not None,
            key_separator=key_separator or props.get("key.separator", "\t"),
            parse_headers=_flag(props, "parse.headers"),
            headers_delimiter=props.get("headers.delimiter", "\t"),
            headers_separator=props.get("headers.separator", ","),
            headers_key_separator=props.get("headers.key.separator", ":"),
            ignore_error=_flag(props, "ignore.error"),
            null_marker=props.get("null.marker"),
        )
        for name, value in (
            ("key.separator", reader.key_separator),
            ("headers.delimiter", reader.headers_delimiter),
            ("headers.separator", reader.headers_separator),
            ("headers.key.separator", reader.headers_key_separator),
        ):
            if not value:
                raise UsageError(f"--property {name} must not be empty")
        if reader.headers_separator == reader.headers_key_separator:
            raise UsageError("headers.separator and headers.key.separator may not be equal")
        if reader.null_marker == "":
            raise UsageError("null.marker may not be empty")
        return reader

    def _null(self, text: str) -> bytes | None:
        return None if text == self.null_marker else text.encode()

    def _part(self, line: str, start: int, separator: str, name: str, number: int) -> str | None:
        index = line.find(separator, start)
        if index < 0:
            if self.ignore_error:
                return None
            raise CommandError(
                f"No {name} found on line number {number}: {line!r}",
                hint=f"every line must hold the {name} {separator!r}",
            )
        return line[start:index]

    def read(self, line: str, number: int) -> Record:
        """One input line (without its line end), the ``number``-th, as a record."""
        headers = None
        if self.parse_headers:
            headers = self._part(line, 0, self.headers_delimiter, "headers delimiter", number)
        start = 0 if headers is None else len(headers) + len(self.headers_delimiter)
        key = None
        if self.parse_key:
            key = self._part(line, start, self.key_separator, "key separator", number)
        if key is not None:
            start += len(key) + len(self.key_separator)
        return Record(
            key=None if key is None else self._null(key),
            value=self._null(line[start:]),
            headers=()
            if headers is None or headers == self.null_marker
            else self._headers(headers, number),
        )

    def _headers(self, text: str, number: int) -> tuple[tuple[str, bytes | None], ...]:
        out: list[tuple[str, bytes | None]] = []
        for pair in text.split(self.headers_separator):
            key, sep, value = pair.partition(self.headers_key_separator)
            if not sep:
                if not self.ignore_error:
                    raise CommandError(
                        f"No header key separator found in pair {pair!r} on line number {number}"
                    )
                out.append((pair, None))
                continue
            if key == self.null_marker:
                raise CommandError(
                    f"Header keys should not be equal to the null marker {self.null_marker!r} "
                    "as they can't be null"
                )
            out.append((key, self._null(value)))
        return tuple(out)


@dataclass(frozen=True, slots=True)
class MessageFormatter:
    """Kafka's DefaultMessageFormatter; see the module docstring."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: str = "\t"
    line_separator: str = "\n"
    headers_separator: str = ","
    null_literal: str = "null"

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], *, print_key: bool = False
    ) -> MessageFormatter:
        """From ``--property`` values; ``print_key`` (``--print-key``) is ``print.key=true``."""
        return cls(
            print_timestamp=_flag(props, "print.timestamp"),
            print_partition=_flag(props, "print.partition"),
            print_offset=_flag(props, "print.offset"),
            print_headers=_flag(props, "print.headers"),
            print_key=_flag(props, "print.key") or print_key,
            print_value=_flag(props, "print.value", default=True),
            key_separator=props.get("key.separator", "\t"),
            line_separator=props.get("line.separator", "\n"),
            headers_separator=props.get("headers.separator", ","),
            null_literal=props.get("null.literal", "null"),
        )

    def _text(self, value: bytes | None) -> str:
        if value is None:
            return self.null_literal
        return value.decode("utf-8", errors="replace")

    def format(self, tp: TopicPartition, record: ConsumerRecord) -> str:
        """The record's output, line separator included ("" when no column is printed)."""
        columns = []
        if self.print_timestamp:
            name = TIMESTAMP_NAMES.get(record.timestamp_type, "CreateTime")
            columns.append(f"{name}:{record.timestamp_ms}")
        if self.print_partition:
            columns.append(f"Partition:{tp.partition}")
        if self.print_offset:
            columns.append(f"Offset:{record.offset}")
        if self.print_headers:
            columns.append(
                self.headers_separator.join(f"{k}:{self._text(v)}" for k, v in record.headers)
                or "NO_HEADERS"
            )
        if self.print_key:
            columns.append(self._text(record.key))
        if self.print_value:
            columns.append(self._text(record.value))
        if not columns:
            return ""
        return self.key_separator.join(columns) + self.line_separator


def _json_text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", errors="replace")


def json_line(tp: TopicPartition, record: ConsumerRecord) -> str:
    """``--json``: one object per record, newline-terminated."""
    return (
        json.dumps(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "offset": record.offset,
                "timestamp": record.timestamp_ms,
                "timestamp_type": TIMESTAMP_NAMES.get(record.timestamp_type, "CreateTime"),
                "key": _json_text(record.key),
                "value": _json_text(record.value),
                "headers": [{"key": k, "value": _json_text(v)} for k, v in record.headers],
            }
        )
        + "\n"
    )
