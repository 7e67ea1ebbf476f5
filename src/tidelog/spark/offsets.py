"""Offset bookkeeping of the source (pure): offset JSON, admission control, splitting.

Spark stores a source's offsets as JSON in the query's checkpoint; ours are Spark's Kafka
spelling, ``{"topic": {"0": 23, "1": 7}}``, each value the *next* offset to read (so a
batch covers ``[start, end)`` per partition).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tidelog.model import TopicPartition

PartitionOffsets = dict[TopicPartition, int]


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    result: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        result.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return result


def from_json(data: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    return {
        TopicPartition(topic, int(partition)): int(offset)
        for topic, parts in data.items()
        for partition, offset in parts.items()
    }


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_offsets: int
) -> PartitionOffsets:
    """End offsets admitting at most ``max_offsets`` records, split over the partitions in
    proportion to their backlog (``latest - start``).

    Shares are floored, then the leftover units go to the largest remainders (ties: the
    larger backlog, then the partition order), so the total is exactly
    ``min(max_offsets, total backlog)`` — never more, and progress whenever there is a
    backlog. Partitions missing from ``start`` start at ``latest`` (nothing to admit).
    """
    backlog = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(backlog.values())
    if total <= max_offsets:
        return dict(latest)
    shares = {tp: max_offsets * b // total for tp, b in backlog.items()}
    left = max_offsets - sum(shares.values())
    order = sorted(
        backlog,
        key=lambda tp: (-(max_offsets * backlog[tp] % total), -backlog[tp], tp),
    )
    for tp in order:
        if left == 0:
            break
        if shares[tp] < backlog[tp]:
            shares[tp] += 1
            left -= 1
    return {tp: start.get(tp, latest[tp]) + shares[tp] for tp in latest}


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """``[from_offset, until_offset)`` of one partition: one Spark task's work."""

    tp: TopicPartition
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    return [
        OffsetRange(
            r.tp,
            r.from_offset + r.size * i // parts,
            r.from_offset + r.size * (i + 1) // parts,
        )
        for i in range(parts)
    ]


def split_ranges(
    ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None = None
) -> list[OffsetRange]:
    """Spark's Kafka rules (``KafkaOffsetRangeCalculator``): with ``maxRecordsPerPartition``
    (``max_records``) each range is cut into ``ceil(size / max_records)`` even pieces; then,
    with ``minPartitions`` above the number of pieces, large pieces are cut again in
    proportion to their size (each piece at least one offset), so there are about
    ``minPartitions`` tasks; otherwise one range per partition.
    """
    ranges = [r for r in ranges if r.size > 0]
    if max_records is not None:
        ranges = [p for r in ranges for p in _divide(r, -(-r.size // max_records))]
    if min_partitions is None or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    result: list[OffsetRange] = []
    for r in ranges:
        result.extend(_divide(r, max(1, min(r.size, round(min_partitions * r.size / total)))))
    return result


class TriggerDelay:
    """``minOffsetsPerTrigger`` + ``maxTriggerDelay`` (Spark's ``delayBatch``): a trigger
    admits new offsets only when at least ``min_offsets`` are available or ``max_delay_ms``
    has passed since the last trigger that admitted (the first trigger of a run admits:
    no trigger has run yet). ``now_ms`` is the clock (a parameter, for tests)."""

    def __init__(self, min_offsets: int, max_delay_ms: int, now_ms: Callable[[], float]) -> None:
        self.min_offsets = min_offsets
        self.max_delay_ms = max_delay_ms
        self.now_ms = now_ms
        self.last_trigger_ms: float | None = None

    def admits(
        self, start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]
    ) -> bool:
        now = self.now_ms()
        waited = self.last_trigger_ms is None or now - self.last_trigger_ms >= self.max_delay_ms
        available = sum(max(0, o - start.get(tp, o)) for tp, o in latest.items())
        if waited or available >= self.min_offsets:
            self.last_trigger_ms = now
            return True
        return False
