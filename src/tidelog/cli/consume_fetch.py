"""``tidelog consume``'s reading: fetch the assigned partitions from their leaders, print
what the isolation level lets through, keep each partition's position.

A ``Consumption`` holds the partitions being read and, per partition, the next offset to
read (its position). ``poll`` runs one round: one Fetch per leader (waiting up to 500 ms
when there is one leader, 100 ms each when there are several), the records at or past the
position printed in log order until ``--max-messages``, and the position moved past the
last record printed, or past the last whole batch once every record of the answer is
printed (transaction markers and aborted records take offsets too). A leader that moved,
answers an error of ``RETRY_ERRORS`` or does not answer costs a metadata refresh, a
backoff and a retry; more than 50 failed rounds in a row end the command. A position
outside the log (OFFSET_OUT_OF_RANGE: the records were deleted, or the topic recreated)
starts again where ``reset_offset`` says, when there is one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Final, TextIO

from tidelog.cli.output import CommandError, kafka_error
from tidelog.client import (
    READ_COMMITTED,
    BlockingClient,
    ClientConnectionError,
    ClientTimeoutError,
    ConsumerRecord,
    FetchRequestPartition,
    FetchResult,
)
from tidelog.client.fetched_records import decode_fetched
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

#: Errors after which a metadata refresh and a retry may succeed (Kafka's consumer:
#: ``FetchCollector.handleInitializeErrors``, ``OffsetFetcherUtils``): a leader that moved
#: or is not elected yet, a new leader that does not know its high watermark yet
#: (OFFSET_NOT_AVAILABLE, KIP-207), a replica or log dir that is not available.
RETRY_ERRORS: Final = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NOT_ENOUGH_REPLICAS,
    }
)
MAX_FAILED_ROUNDS: Final = 50


def retry_backoff_s(failed_rounds: int) -> float:
    """The pause after the ``failed_rounds``-th failure in a row: 0.1 s more each time,
    at most 1 s."""
    return min(1.0, 0.1 * failed_rounds)


#: A record's output text (line end included) for the partition it came from.
Format = Callable[[TopicPartition, ConsumerRecord], str]


def fetched_cleanly(r: FetchResult, tp: TopicPartition, position: int) -> bool:
    """False for an error after which a metadata refresh and a retry may succeed; raises
    for any other error."""
    if r.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
        raise kafka_error(
            r.error_code,
            f"offset {position} is outside [{r.log_start_offset}, {r.high_watermark}]",
            f"{tp.topic}-{tp.partition}",
        )
    if r.error_code != ErrorCode.NONE:
        if r.error_code not in RETRY_ERRORS:
            raise kafka_error(r.error_code, None, f"{tp.topic}-{tp.partition}")
        return False
    return True


class Consumption:
    """The partitions being read, their positions, and how many records were printed."""

    def __init__(
        self,
        client: BlockingClient,
        topic: str,
        out: TextIO,
        format_record: Format,
        *,
        isolation_level: int,
        max_messages: int | None,
        max_wait_ms: int = 500,
        reset_offset: Callable[[TopicPartition], int] | None = None,
    ) -> None:
        self.client = client
        self.topic = topic
        self.out = out
        self.format_record = format_record
        self.isolation_level = isolation_level
        self.max_messages = max_messages
        self.max_wait_ms = max_wait_ms
        #: Where a partition whose position left the log starts again (a group's
        #: auto.offset.reset); None: OFFSET_OUT_OF_RANGE ends the command.
        self.reset_offset = reset_offset
        self.positions: dict[TopicPartition, int] = {}
        self.printed = 0
        self._failed_rounds = 0

    @property
    def done(self) -> bool:
        return self.max_messages is not None and self.printed >= self.max_messages

    def assign(self, positions: Mapping[TopicPartition, int]) -> None:
        """Read these partitions from these offsets (and no others)."""
        self.positions = dict(positions)

    def poll(self) -> bool:
        """One fetch round; whether it printed anything."""
        if not self.positions:
            time.sleep(self.max_wait_ms / 1000)
            return False
        by_leader = self._partitions_by_leader()
        if -1 in by_leader:
            self._failed(refresh=True)
            return False
        before = self.printed
        clean = True
        for leader, tps in sorted(by_leader.items()):
            wait_ms = self.max_wait_ms if len(by_leader) == 1 else min(100, self.max_wait_ms)
            clean = self._fetch_from(leader, tps, wait_ms) and clean
            if self.done:
                break
        self.out.flush()
        if clean:
            self._failed_rounds = 0
        else:
            self._failed(refresh=True)
        return self.printed > before

    def _failed(self, *, refresh: bool) -> None:
        self._failed_rounds += 1
        if self._failed_rounds > MAX_FAILED_ROUNDS:
            raise CommandError("the partitions' leaders keep failing; giving up")
        time.sleep(retry_backoff_s(self._failed_rounds))
        if refresh:
            with contextlib.suppress(ClientConnectionError, ClientTimeoutError):
                self.client.metadata([self.topic])

    def _partitions_by_leader(self) -> dict[int, list[TopicPartition]]:
        """The partitions by their leader in the client's metadata; -1 holds those without."""
        md = self.client.client.cluster
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in sorted(self.positions):
            leader = md.leader_for(tp) if md is not None else None
            by_leader.setdefault(-1 if leader is None else leader, []).append(tp)
        return by_leader

    def _fetch_from(self, leader: int, tps: list[TopicPartition], wait_ms: int) -> bool:
        """One Fetch of ``tps`` from ``leader``, its records printed; False when a partition
        (or the connection) needs a metadata refresh and a retry."""
        try:
            results = self.client.fetch(
                {tp: FetchRequestPartition(self.positions[tp]) for tp in tps},
                max_wait_ms=wait_ms,
                isolation_level=self.isolation_level,
                node_id=leader,
            )
        except (ClientConnectionError, ClientTimeoutError):
            return False  # the leader is gone or paused: a refresh finds the next one
        clean = True
        for tp in tps:
            r = results.get(tp)
            if r is None:
                continue
            if r.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and self.reset_offset is not None:
                self.positions[tp] = self.reset_offset(tp)
                continue
            if not fetched_cleanly(r, tp, self.positions[tp]):
                clean = False
                continue
            self.print_records(tp, r)
            if self.done:
                break
        return clean

    def print_records(self, tp: TopicPartition, r: FetchResult) -> None:
        """Print ``tp``'s fetched records at or past its position, moving the position on;
        stops at ``max_messages``."""
        fetched = decode_fetched(
            r.records,
            aborted_transactions=r.aborted_transactions
            if self.isolation_level == READ_COMMITTED
            else None,
        )
        for rec in fetched.records:
            if rec.offset < self.positions[tp]:
                continue
            if self.done:
                return
            self.out.write(self.format_record(tp, rec))
            self.positions[tp] = rec.offset + 1
            self.printed += 1
        if fetched.next_offset is not None and not self.done:
            self.positions[tp] = max(self.positions[tp], fetched.next_offset)
