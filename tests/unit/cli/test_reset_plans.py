"""``reset_plans``: the offsets ``groups reset-offsets`` plans, and what it parses."""

from __future__ import annotations

import datetime

import pytest

from tidelog.cli.reset_plans import (
    FromFile,
    LogOffsets,
    PlanError,
    Scenario,
    ShiftBy,
    ToCurrent,
    ToEarliest,
    ToLatest,
    ToOffset,
    ToTimestamp,
    export_csv,
    parse_datetime_ms,
    parse_iso_duration_ms,
    parse_reset_csv,
    parse_topic_partitions,
    plan_reset,
)
from tidelog.model import TopicPartition

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)

#: t-0: log [5, 20), committed 10; t-1: log [0, 8), nothing committed.
LOGS = LogOffsets(
    committed={T0: 10},
    log_start={T0: 5, T1: 0},
    log_end={T0: 20, T1: 8},
    by_timestamp={T0: 12, T1: None},
)


@pytest.mark.parametrize(
    ("scenario", "expected", "warnings"),
    [
        (ToEarliest(), {T0: 5, T1: 0}, ()),
        (ToLatest(), {T0: 20, T1: 8}, ()),
        (ToCurrent(), {T0: 10, T1: 8}, ()),
        (ToOffset(7), {T0: 7, T1: 7}, ()),
        (
            ToOffset(30),
            {T0: 20, T1: 8},
            (
                "New offset (30) is higher than latest offset for topic partition t-0. "
                "Value will be set to 20",
                "New offset (30) is higher than latest offset for topic partition t-1. "
                "Value will be set to 8",
            ),
        ),
        (
            ToOffset(2),
            {T0: 5, T1: 2},
            (
                "New offset (2) is lower than earliest offset for topic partition t-0. "
                "Value will be set to 5",
            ),
        ),
        (
            ToTimestamp(1_000),
            {T0: 12, T1: 8},
            ("Partition 1 from topic t is empty. Falling back to latest known offset.",),
        ),
        (
            FromFile({T0: 25, T1: 3}),
            {T0: 20, T1: 3},
            (
                "New offset (25) is higher than latest offset for topic partition t-0. "
                "Value will be set to 20",
            ),
        ),
    ],
)
def test_plans_clamp_and_warn(
    scenario: Scenario, expected: dict[TopicPartition, int], warnings: tuple[str, ...]
) -> None:
    plan = plan_reset(scenario, [T1, T0], LOGS)
    assert plan.offsets == expected
    assert list(plan.offsets) == [T0, T1]
    assert plan.warnings == warnings


def test_shift_by_moves_from_the_committed_offset_and_clamps() -> None:
    assert plan_reset(ShiftBy(-3), [T0], LOGS).offsets == {T0: 7}
    assert plan_reset(ShiftBy(+4), [T0], LOGS).offsets == {T0: 14}
    low = plan_reset(ShiftBy(-100), [T0], LOGS)
    assert low.offsets == {T0: 5}
    assert low.warnings == (
        "New offset (-90) is lower than earliest offset for topic partition t-0. "
        "Value will be set to 5",
    )
    with pytest.raises(PlanError) as caught:
        plan_reset(ShiftBy(1), [T0, T1], LOGS)
    assert str(caught.value) == (
        "Cannot shift offset for partition t-1 since there is no current committed offset"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-06T20:00:00.000Z", datetime.datetime(2026, 12, 6, 20, tzinfo=datetime.UTC)),
        (
            "2026-12-06T20:00:00.250Z",
            datetime.datetime(2026, 12, 6, 20, 0, 0, 250_000, datetime.UTC),
        ),
        ("2026-12-06T20:00:00Z", datetime.datetime(2026, 12, 6, 20, tzinfo=datetime.UTC)),
        ("2026-12-06T22:00:00.000+02:00", datetime.datetime(2026, 12, 6, 20, tzinfo=datetime.UTC)),
        ("2026-12-06T15:30:00.000-0430", datetime.datetime(2026, 12, 6, 20, tzinfo=datetime.UTC)),
        ("2026-12-06T21:00:00.000+01", datetime.datetime(2026, 12, 6, 20, tzinfo=datetime.UTC)),
    ],
)
def test_datetimes_with_a_zone(text: str, expected: datetime.datetime) -> None:
    assert parse_datetime_ms(text) == int(expected.timestamp() * 1000)


def test_a_datetime_without_a_zone_is_local_time() -> None:
    local = datetime.datetime(2026, 7, 1, 12, 30, 15, 5_000)  # naive: the local zone
    assert parse_datetime_ms("2026-07-01T12:30:15.005") == round(local.timestamp() * 1000)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "2026-12-06 20:00:00",
            "Error parsing timestamp '2026-12-06 20:00:00'. It does not contain a 'T' "
            "according to ISO8601 format",
        ),
        (
            "2026-12-06T20:00",
            "Error parsing timestamp '2026-12-06T20:00': expected YYYY-MM-DDTHH:mm:SS.sss",
        ),
        (
            "2026-13-06T20:00:00.000Z",
            "Error parsing timestamp '2026-13-06T20:00:00.000Z': month must be in 1..12",
        ),
    ],
)
def test_bad_datetimes(text: str, message: str) -> None:
    with pytest.raises(PlanError) as caught:
        parse_datetime_ms(text)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("PT1H", 3_600_000),
        ("P1D", 86_400_000),
        ("P1DT2H3M4S", 86_400_000 + 2 * 3_600_000 + 3 * 60_000 + 4_000),
        ("PT0.5S", 500),
        ("PT-1.5S", -1_500),
        ("-PT10M", -600_000),
        ("pt15m", 900_000),
        ("PT1H-30M", 1_800_000),
    ],
)
def test_iso_durations_as_java_reads_them(text: str, ms: int) -> None:
    assert parse_iso_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["P", "PT", "P1H", "1H", "PT1.5M", "P1W", "", "P1DT"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(PlanError) as caught:
        parse_iso_duration_ms(text)
    assert str(caught.value) == f"Text '{text}' cannot be parsed to a Duration (e.g. P1DT2H30M)"


def test_topic_partition_specs() -> None:
    assert parse_topic_partitions("orders") == ("orders", None)
    assert parse_topic_partitions("orders:2,0") == ("orders", (0, 2))
    with pytest.raises(PlanError, match=r"partitions must be integers, e\.g\. orders:0,1"):
        parse_topic_partitions("orders:a")
    with pytest.raises(PlanError, match="names no topic"):
        parse_topic_partitions(":1")


def test_csv_round_trip_one_group_and_several() -> None:
    plans = {"g1": {T0: 5, T1: 7}, "g2": {T0: 9}}
    one = export_csv({"g1": plans["g1"]}, with_group=False)
    assert one == "t,0,5\nt,1,7\n"
    assert parse_reset_csv(one, ["g1"]) == {"g1": plans["g1"]}
    both = export_csv(plans, with_group=True)
    assert both == "g1,t,0,5\ng1,t,1,7\ng2,t,0,9\n"
    assert parse_reset_csv(both + "\n", ["g1", "g2"]) == plans


@pytest.mark.parametrize(
    ("text", "groups", "message"),
    [
        ("t,0\n", ["g"], "line 1: 't,0' is not topic,partition,offset"),
        ("t,0,5\n", ["g", "h"], "line 1: 't,0,5' is not group,topic,partition,offset"),
        ("t,0,5\nt,x,5\n", ["g"], "line 2: 't,x,5': the partition and offset must be integers"),
    ],
)
def test_bad_csv(text: str, groups: list[str], message: str) -> None:
    with pytest.raises(PlanError) as caught:
        parse_reset_csv(text, groups)
    assert str(caught.value) == message
