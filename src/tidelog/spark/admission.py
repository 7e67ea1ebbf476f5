# ruff: noqa: N802  (method names are PySpark's)
"""The stream reader's admission control, and what a read task hands to Spark.

1. ``maxOffsetsPerTrigger``: the default read limit is ``ReadMaxRows``; each micro-batch
   admits at most that many offsets, split over the partitions by backlog
   (``tidelog.spark.offsets.rate_limit``).
2. ``minOffsetsPerTrigger`` + ``maxTriggerDelay`` (Spark's meaning): a trigger that finds
   fewer new offsets than the minimum admits none (its end offsets are its start offsets,
   so Spark runs no micro-batch) until ``maxTriggerDelay`` (default 15m) has passed since
   the last trigger that admitted; then it admits what there is. The first trigger of a
   run admits. With only the minimum set the default read limit is ``ReadMinRows``.
   ``Trigger.AvailableNow`` (and a ``ReadAllAvailable`` limit) never waits: it reads what
   was there when the query started.
3. ``kafka.max.poll.records``: a read task yields Arrow batches of at most that many rows
   (slices of what each fetch decoded, no copy).
4. Options that fail on a stream reach the user with the connector's message: PySpark's
   stream runner turns an error raised while the reader is made into ``UnboundLocalError``
   (its cleanup calls ``stop`` on a reader that does not exist), so the data source makes
   an ``OptionErrorStreamReader`` instead, which raises the error from its first call.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
)

from tidelog.model import TopicPartition
from tidelog.spark.offsets import TriggerDelay
from tidelog.spark.options import ReadOptions, SparkOptionError


def default_read_limit(options: ReadOptions) -> ReadLimit:
    """Rules 1-2: the limit Spark passes back to ``latestOffset``."""
    if options.max_offsets_per_trigger is not None:
        return ReadMaxRows(options.max_offsets_per_trigger)
    if options.min_offsets_per_trigger is not None:
        return ReadMinRows(options.min_offsets_per_trigger)
    return ReadAllAvailable()


def trigger_delay(options: ReadOptions) -> TriggerDelay | None:
    """Rule 2's state for a stream reader (None: no ``minOffsetsPerTrigger``)."""
    if options.min_offsets_per_trigger is None:
        return None
    return TriggerDelay(
        options.min_offsets_per_trigger,
        options.max_trigger_delay_ms,
        lambda: time.monotonic() * 1000,
    )


def admits(
    delay: TriggerDelay | None,
    limit: ReadLimit,
    target: Mapping[TopicPartition, int] | None,
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
) -> bool:
    """Rule 2: whether this trigger admits new offsets (``target``: AvailableNow's)."""
    if delay is None or target is not None or isinstance(limit, ReadAllAvailable):
        return True
    return delay.admits(start, latest)


def limit_rows(batches: Iterator[pa.RecordBatch], max_rows: int | None) -> Iterator[pa.RecordBatch]:
    """Rule 3."""
    if max_rows is None:
        yield from batches
        return
    for batch in batches:
        for offset in range(0, batch.num_rows, max_rows):
            yield batch.slice(offset, max_rows)


class OptionErrorStreamReader(DataSourceStreamReader):
    """Rule 4: a stream reader whose every call raises the options' error."""

    def __init__(self, error: SparkOptionError) -> None:
        self.error = error

    def _fail(self) -> NoReturn:
        raise SparkOptionError(str(self.error))

    def initialOffset(self) -> dict[str, Any]:
        self._fail()

    def getDefaultReadLimit(self) -> ReadLimit:
        self._fail()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._fail()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        self._fail()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        self._fail()

    def commit(self, end: dict[str, Any]) -> None:
        pass

    def stop(self) -> None:
        pass
