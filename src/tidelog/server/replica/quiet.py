"""A follower's quiet partitions between its session fetches (KIP-227), tested once and then
trusted until they change.

A partition is *quiet* for a follower when the follower stands at the leader's log end, in
the ISR, with the high watermark there and nothing new to tell it
(``ReplicaManager.quiet_for_follower``, the full test, which also records the fetch as
caught up). An idle follower's incremental fetch lists none of its partitions, so each of
its fetches (about two a second per leader at ``replica.fetch.wait.max.ms`` = 500 ms) ran
the full test over every partition of the session: with 5,000 replicas per broker the
largest part of an idle broker's CPU. Rules:

1. Change stamps: the fetch purgatory reports every key it is told changed (an append, a
   high watermark move, a leadership change, a partition leaving: ``Purgatory.on_check``),
   and the key is stamped with the next value of a counter.
2. A session partition that passes the full test carries the counter's value then
   (``quiet_stamp``) and the time (``quiet_checked_ms``). A later fetch that does not list it
   finds it quiet without the full test while its partition has no newer stamp and the test
   is younger than ``RECHECK_MS``; that fetch's time is kept on the session partition
   (``quiet_ms``) instead of in the leader's replica state.
3. Whoever reads a follower's fetch times first folds the kept time in (``fold``: the ISR
   shrink pass, DescribeQuorum): the full test's replica half
   (``Partition.note_quiet_follower_fetch``) is run again now, with the kept time. It passes
   only while the follower still stands at the leader's log end in the same leader epoch;
   the log end never moves back within an epoch, so the follower stood there at the kept
   time too. A fold never credits a fetch the follower did not make at the log end.
4. A change the stamps do not see (a log start offset moved by retention or DeleteRecords)
   reaches the follower at the next full test, at most ``RECHECK_MS`` later.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Final

from tidelog.model import BrokerId, TopicPartition
from tidelog.server.replica.fetch_session import SessionPartition
from tidelog.server.replica.reads import HostedPartition

#: Rule 4: the longest a session partition is trusted quiet without the full test.
RECHECK_MS: Final = 2000

#: The full test (``ReplicaManager.quiet_for_follower``'s arguments after ``tp``).
FullTest = Callable[[BrokerId, TopicPartition, int, int, int, int, int], bool]


class QuietFollowers:
    """Rules 1-3 for one broker's leaders."""

    def __init__(self, partitions: Mapping[TopicPartition, HostedPartition]) -> None:
        self._partitions = partitions
        self._stamps: dict[Hashable, int] = {}
        self._counter = 0
        #: The session partition each (partition, follower) was last found quiet in.
        self._kept: dict[tuple[TopicPartition, BrokerId], SessionPartition] = {}

    def changed(self, key: Hashable) -> None:
        """Rule 1 (the fetch purgatory's ``on_check``)."""
        self._counter += 1
        self._stamps[key] = self._counter

    def test(
        self, follower: BrokerId, asked: set[int], now: int, full: FullTest
    ) -> Callable[[TopicPartition, SessionPartition], bool]:
        """The quiet test of one follower fetch: rule 2 over ``full``. ``asked``: the ids of
        the session partitions the request lists (never quiet: the follower moved)."""
        stamps_get = self._stamps.get
        kept = self._kept
        counter = self._counter

        def is_quiet(tp: TopicPartition, part: SessionPartition) -> bool:
            if id(part) in asked:
                part.quiet_stamp = -1
                return False
            stamp = part.quiet_stamp
            if (
                stamp >= 0
                and stamps_get(tp, -1) <= stamp
                and now - part.quiet_checked_ms < RECHECK_MS
            ):
                part.quiet_ms = now
                return True
            if full(
                follower,
                tp,
                part.fetch_offset,
                part.current_leader_epoch,
                part.high_watermark,
                part.log_start_offset,
                now,
            ):
                part.quiet_stamp = counter
                part.quiet_checked_ms = part.quiet_ms = now
                kept[tp, follower] = part
                return True
            part.quiet_stamp = -1
            return False

        return is_quiet

    def fold(self, tp: TopicPartition) -> None:
        """Rule 3 for every follower of ``tp`` (led here)."""
        hosted = self._partitions.get(tp)
        if hosted is None:
            return
        partition = hosted.partition
        for follower, state in partition.replica_states.items():
            part = self._kept.get((tp, follower))
            if (
                part is None
                or part.quiet_stamp < 0
                or part.quiet_ms <= state.last_fetch_time_ms
                or part.current_leader_epoch not in (-1, partition.leader_epoch)
            ):
                continue
            partition.note_quiet_follower_fetch(
                follower,
                fetch_offset=part.fetch_offset,
                leader_log_end_offset=hosted.log.log_end_offset,
                now_ms=part.quiet_ms,
            )


__all__ = ["RECHECK_MS", "FullTest", "QuietFollowers"]
