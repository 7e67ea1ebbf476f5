"""``tidelog consume``'s start positions: ListOffsets for the earliest offset or the end of
each partition, retried through a leader change as Kafka's consumer does.

A partition whose leader answers an error of ``RETRY_ERRORS`` (a leader that moved,
NOT_LEADER_OR_FOLLOWER; none elected yet, LEADER_NOT_AVAILABLE; a new leader whose high
watermark is not known yet, OFFSET_NOT_AVAILABLE, KIP-207), or that cannot be reached, is
asked again after a metadata refresh and a backoff (``retry_backoff_s``), up to
``MAX_FAILED_ROUNDS`` times; then, or at any other error, the command ends naming the
partition and the error.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence

from tidelog.cli.consume_fetch import MAX_FAILED_ROUNDS, RETRY_ERRORS, retry_backoff_s
from tidelog.cli.output import kafka_error
from tidelog.client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    BlockingClient,
    ClientConnectionError,
    ClientTimeoutError,
)
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition


def list_offsets(
    client: BlockingClient,
    tps: Sequence[TopicPartition],
    earliest: bool,
    isolation_level: int,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[TopicPartition, int]:
    """Each partition's first offset, or its end (the last stable offset for read_committed)."""
    timestamp = EARLIEST_TIMESTAMP if earliest else LATEST_TIMESTAMP
    offsets: dict[TopicPartition, int] = {}
    pending = list(tps)
    failed_rounds = 0
    while True:
        try:
            results = client.list_offsets(
                dict.fromkeys(pending, timestamp), isolation_level=isolation_level
            )
        except (ClientConnectionError, ClientTimeoutError):
            results = {}  # the leader is gone or paused: every partition asked again
        retry: list[tuple[TopicPartition, ErrorCode]] = []
        for tp in pending:
            r = results.get(tp)
            code = ErrorCode.LEADER_NOT_AVAILABLE if r is None else r.error_code
            if code == ErrorCode.NONE and r is not None:
                offsets[tp] = r.offset
            elif code in RETRY_ERRORS:
                retry.append((tp, code))
            else:
                raise kafka_error(code, None, f"listing offsets of {tp.topic}-{tp.partition}")
        if not retry:
            return {tp: offsets[tp] for tp in tps}
        failed_rounds += 1
        if failed_rounds > MAX_FAILED_ROUNDS:
            tp, code = retry[0]
            raise kafka_error(
                code,
                f"still failing after {MAX_FAILED_ROUNDS} retries",
                f"listing offsets of {tp.topic}-{tp.partition}",
            )
        sleep(retry_backoff_s(failed_rounds))
        with contextlib.suppress(ClientConnectionError, ClientTimeoutError):
            client.metadata(sorted({tp.topic for tp, _ in retry}))
        pending = [tp for tp, _ in retry]


__all__ = ["list_offsets"]
