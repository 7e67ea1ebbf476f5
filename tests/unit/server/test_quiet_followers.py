"""``tidelog.server.replica.quiet``: a follower's quiet partition is tested once and then
trusted until its partition changes or ``RECHECK_MS`` passes; the fetch times kept meanwhile
are folded into the leader's replica state only while the follower still stands at the log
end. On a real replica manager, real storage and the real replication core."""

from __future__ import annotations

from pathlib import Path

from tests.unit.server.test_quiet_follower_fetch import A, led_and_replicated
from tests.unit.server.test_replica_manager import batch
from tidelog.model import BrokerId, TopicPartition
from tidelog.server.replica.fetch_session import SessionPartition
from tidelog.server.replica.manager import ReplicaManager
from tidelog.server.replica.quiet import RECHECK_MS

F = BrokerId(1)


class CountingTest:
    """The replica manager's full quiet test, counting its calls."""

    def __init__(self, rm: ReplicaManager) -> None:
        self.rm = rm
        self.calls = 0

    def __call__(  # noqa: PLR0917
        self,
        follower: BrokerId,
        tp: TopicPartition,
        fetch_offset: int,
        epoch: int,
        hw: int,
        log_start: int,
        now: int,
    ) -> bool:
        self.calls += 1
        return self.rm.quiet_for_follower(follower, tp, fetch_offset, epoch, hw, log_start, now)


def session_part() -> SessionPartition:
    """A's session partition for follower 1, as its last answer left it (HW 1, log start 0)."""
    part = SessionPartition("t", None, 0, 1, 1 << 20, 3, high_watermark=1, log_start_offset=0)
    part.tp = A
    return part


def test_a_tested_quiet_partition_is_trusted_until_it_changes(tmp_path: Path) -> None:
    rm = led_and_replicated(tmp_path)
    full = CountingTest(rm)
    part = session_part()
    assert rm.quiet.test(F, set(), 1000, full)(A, part)
    assert full.calls == 1
    # The next fetches: no full test, the fetch time kept on the session partition.
    assert rm.quiet.test(F, set(), 1400, full)(A, part)
    assert rm.quiet.test(F, set(), 1800, full)(A, part)
    assert full.calls == 1
    assert part.quiet_ms == 1800
    # An append stamps A (the fetch purgatory's check): the full test again, and A is not
    # quiet any more (the follower is behind the log end).
    rm.append_records({A: batch(b"b")}, acks=1)
    assert not rm.quiet.test(F, set(), 1900, full)(A, part)
    assert full.calls == 2
    assert part.quiet_stamp == -1
    rm.shutdown()
    rm.log_manager.close()


def test_a_listed_partition_and_an_old_test_go_the_full_way(tmp_path: Path) -> None:
    rm = led_and_replicated(tmp_path)
    full = CountingTest(rm)
    part = session_part()
    assert rm.quiet.test(F, set(), 1000, full)(A, part)
    # Listed in the request (the follower moved): never quiet, the trust dropped.
    assert not rm.quiet.test(F, {id(part)}, 1100, full)(A, part)
    assert part.quiet_stamp == -1
    assert rm.quiet.test(F, set(), 1200, full)(A, part)
    assert full.calls == 2
    # RECHECK_MS after the last full test, the full test runs again.
    assert rm.quiet.test(F, set(), 1200 + RECHECK_MS - 1, full)(A, part)
    assert full.calls == 2
    assert rm.quiet.test(F, set(), 1200 + RECHECK_MS, full)(A, part)
    assert full.calls == 3
    rm.shutdown()
    rm.log_manager.close()


def test_the_fold_credits_kept_fetch_times_only_at_the_log_end(tmp_path: Path) -> None:
    rm = led_and_replicated(tmp_path)
    state = rm.partitions[A].partition.replica_states[F]
    part = session_part()
    full = CountingTest(rm)
    first = state.last_fetch_time_ms + 10_000
    assert rm.quiet.test(F, set(), first, full)(A, part)
    assert (state.last_fetch_time_ms, state.last_caught_up_time_ms) == (first, first)
    assert rm.quiet.test(F, set(), first + 500, full)(A, part)
    # Not in the replica state until folded (the ISR shrink pass folds first).
    assert state.last_caught_up_time_ms == first
    rm.quiet.fold(A)
    assert (state.last_fetch_time_ms, state.last_caught_up_time_ms) == (first + 500, first + 500)
    # A later quiet fetch, then an append before the fold: the follower is no longer at
    # the log end, so the kept time is not credited (it is seen at the next full test).
    assert rm.quiet.test(F, set(), first + 900, full)(A, part) is True
    rm.append_records({A: batch(b"b")}, acks=1)
    rm.quiet.fold(A)
    assert state.last_caught_up_time_ms == first + 500
    rm.shutdown()
    rm.log_manager.close()
