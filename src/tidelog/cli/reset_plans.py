"""The pure half of ``tidelog groups reset-offsets``: what kafka-consumer-groups.sh
``--reset-offsets`` parses and the offsets it plans, without IO.

Rules (Kafka's ``ConsumerGroupCommand.prepareOffsetsToReset``):

1. ``--to-earliest`` / ``--to-latest``: the log start / log end offset.
2. ``--to-current``: the committed offset; a partition without one gets the log end.
3. ``--to-offset N``, ``--shift-by N`` (from the committed offset; a partition without one is
   an error) and ``--from-file``: the offset, clamped to [log start, log end] with a warning
   naming the partition and both values.
4. ``--to-datetime`` / ``--by-duration``: the first offset whose timestamp is at or after the
   time (ListOffsets); a partition with no such record gets the log end, with a warning.
5. ``--export``'s CSV, which ``--from-file`` reads back, is ``topic,partition,offset`` lines
   for one group and ``group,topic,partition,offset`` lines for several.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from tidelog.model import TopicPartition


class PlanError(ValueError):
    """The options or the offsets they meet make no plan (the message says why)."""


@dataclass(frozen=True, slots=True)
class ToEarliest:
    pass


@dataclass(frozen=True, slots=True)
class ToLatest:
    pass


@dataclass(frozen=True, slots=True)
class ToCurrent:
    pass


@dataclass(frozen=True, slots=True)
class ToOffset:
    offset: int


@dataclass(frozen=True, slots=True)
class ShiftBy:
    shift: int


@dataclass(frozen=True, slots=True)
class ToTimestamp:
    """``--to-datetime`` and ``--by-duration`` (now minus the duration), in ms."""

    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class FromFile:
    offsets: Mapping[TopicPartition, int]


Scenario = ToEarliest | ToLatest | ToCurrent | ToOffset | ShiftBy | ToTimestamp | FromFile


@dataclass(frozen=True, slots=True)
class LogOffsets:
    """What the plan reads about each partition: committed offsets (the group's), log start
    and log end offsets, and for ``ToTimestamp`` the offset found for the time (None: no
    record at or after it)."""

    committed: Mapping[TopicPartition, int]
    log_start: Mapping[TopicPartition, int]
    log_end: Mapping[TopicPartition, int]
    by_timestamp: Mapping[TopicPartition, int | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ResetPlan:
    offsets: dict[TopicPartition, int]
    warnings: tuple[str, ...]


def _clamp(tp: TopicPartition, offset: int, logs: LogOffsets, warnings: list[str]) -> int:
    """Rule 3 (Kafka's ``checkOffsetRange``)."""
    end = logs.log_end[tp]
    if offset > end:
        warnings.append(
            f"New offset ({offset}) is higher than latest offset for topic partition "
            f"{tp.topic}-{tp.partition}. Value will be set to {end}"
        )
        return end
    start = logs.log_start[tp]
    if offset < start:
        warnings.append(
            f"New offset ({offset}) is lower than earliest offset for topic partition "
            f"{tp.topic}-{tp.partition}. Value will be set to {start}"
        )
        return start
    return offset


def _one(scenario: Scenario, tp: TopicPartition, logs: LogOffsets, warnings: list[str]) -> int:
    match scenario:
        case ToEarliest():
            return logs.log_start[tp]
        case ToLatest():
            return logs.log_end[tp]
        case ToCurrent():
            return logs.committed.get(tp, logs.log_end[tp])
        case ToOffset(offset):
            return _clamp(tp, offset, logs, warnings)
        case ShiftBy(shift):
            if tp not in logs.committed:
                raise PlanError(
                    f"Cannot shift offset for partition {tp.topic}-{tp.partition} since there "
                    "is no current committed offset"
                )
            return _clamp(tp, logs.committed[tp] + shift, logs, warnings)
        case ToTimestamp():
            found = logs.by_timestamp.get(tp)
            if found is None or found < 0:
                warnings.append(
                    f"Partition {tp.partition} from topic {tp.topic} is empty. Falling back "
                    "to latest known offset."
                )
                return logs.log_end[tp]
            return found
        case FromFile(offsets):
            return _clamp(tp, offsets[tp], logs, warnings)


def plan_reset(
    scenario: Scenario, partitions: Iterable[TopicPartition], logs: LogOffsets
) -> ResetPlan:
    """Rules 1-4: each partition's new offset, and the warnings met on the way."""
    warnings: list[str] = []
    offsets = {tp: _one(scenario, tp, logs, warnings) for tp in sorted(set(partitions))}
    return ResetPlan(offsets, tuple(warnings))


# --- parsing the options ------------------------------------------------------------------

EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

_DATETIME: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,3}))?"
    r"(Z|[+-]\d{2}(?::?\d{2})?)?"
)


def parse_datetime_ms(text: str) -> int:
    """``--to-datetime``: ``YYYY-MM-DDTHH:mm:SS.sss`` with an optional zone (``Z``,
    ``+hh:mm``, ``+hhmm``, ``+hh``); without one, the local time zone (Kafka's
    ``Utils.getDateTime``). The milliseconds may be left out."""
    if "T" not in text:
        raise PlanError(
            f"Error parsing timestamp '{text}'. It does not contain a 'T' according to "
            "ISO8601 format"
        )
    match = _DATETIME.fullmatch(text)
    if match is None:
        raise PlanError(f"Error parsing timestamp '{text}': expected YYYY-MM-DDTHH:mm:SS.sss")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    millis = int((match.group(7) or "0").ljust(3, "0"))
    zone = match.group(8)
    tz: datetime.tzinfo | None = None
    if zone == "Z":
        tz = datetime.UTC
    elif zone:
        digits = zone[1:].replace(":", "")
        minutes = int(digits[:2]) * 60 + int(digits[2:] or "0")
        tz = datetime.timezone(datetime.timedelta(minutes=minutes if zone[0] == "+" else -minutes))
    try:
        moment = datetime.datetime(year, month, day, hour, minute, second, millis * 1000, tzinfo=tz)
    except ValueError as exc:
        raise PlanError(f"Error parsing timestamp '{text}': {exc}") from None
    if tz is None:
        moment = moment.astimezone()  # the local zone, as Java's SimpleDateFormat
    return (moment - EPOCH) // datetime.timedelta(milliseconds=1)


_DURATION: Final = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)


def parse_iso_duration_ms(text: str) -> int:
    """``--by-duration``: an ISO-8601 duration ``PnDTnHnMn.nS`` as Java's
    ``Duration.parse`` reads it (signs allowed on the whole and on each part), in ms."""
    match = _DURATION.fullmatch(text)
    if (
        match is None
        or match.group(3) in ("T", "t")
        or not any(match.group(i) for i in (2, 4, 5, 6))
    ):
        raise PlanError(f"Text '{text}' cannot be parsed to a Duration (e.g. P1DT2H30M)")
    sign, days, _, hours, minutes, seconds, fraction = match.groups()
    total = (
        int(days or 0) * 86_400_000
        + int(hours or 0) * 3_600_000
        + int(minutes or 0) * 60_000
        + int(seconds or 0) * 1000
    )
    if fraction:
        millis = int(fraction.ljust(9, "0")[:3])
        total += -millis if (seconds or "").startswith("-") else millis
    return -total if sign == "-" else total


def parse_topic_partitions(spec: str) -> tuple[str, tuple[int, ...] | None]:
    """``--topic T`` (every partition: None) or ``T:0,1`` (those partitions)."""
    topic, sep, rest = spec.partition(":")
    if not topic:
        raise PlanError(f"--topic '{spec}' names no topic")
    if not sep:
        return topic, None
    try:
        partitions = tuple(sorted({int(p) for p in rest.split(",")}))
    except ValueError:
        raise PlanError(
            f"--topic '{spec}': partitions must be integers, e.g. {topic}:0,1"
        ) from None
    if any(p < 0 for p in partitions):
        raise PlanError(f"--topic '{spec}': partitions cannot be negative")
    return topic, partitions


def parse_reset_csv(text: str, groups: Sequence[str]) -> dict[str, dict[TopicPartition, int]]:
    """Rule 5: ``--from-file``'s lines, per group. Three columns name no group and belong to
    the one ``--group`` (``groups``: the ``--group`` values; none with ``--all-groups``);
    four columns start with the group."""
    plans: dict[str, dict[TopicPartition, int]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 3 and len(groups) == 1:
            group, (topic, partition, offset) = groups[0], cells
        elif len(cells) == 4:
            group, topic, partition, offset = cells
        else:
            expected = (
                "topic,partition,offset" if len(groups) == 1 else "group,topic,partition,offset"
            )
            raise PlanError(f"line {number}: '{line}' is not {expected}")
        try:
            tp = TopicPartition(topic, int(partition))
            plans.setdefault(group, {})[tp] = int(offset)
        except ValueError:
            raise PlanError(
                f"line {number}: '{line}': the partition and offset must be integers"
            ) from None
    return plans


def export_csv(plans: Mapping[str, Mapping[TopicPartition, int]], *, with_group: bool) -> str:
    """Rule 5: the CSV ``--from-file`` reads."""
    return "".join(
        (f"{group}," if with_group else "") + f"{tp.topic},{tp.partition},{offset}\n"
        for group, plan in plans.items()
        for tp, offset in plan.items()
    )
