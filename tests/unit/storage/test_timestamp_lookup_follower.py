"""Offsets by time on a follower's log (issue 30 point 3): the batches a follower appends
unchanged keep its time index and max timestamps as a leader's appends do, across segment
rolls, restarts and records older than the segments before them; so a follower turned
leader finds what the previous leader found (Kafka's ``LogSegment.findOffsetByTimestamp``:
the first record whose timestamp is >= the one asked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.protocol.records import Compression, iter_batches
from tidelog.storage.log import Log, LogConfig
from tidelog.storage.record_scan import record_offsets_and_timestamps

from .batches import build_batch, read_all

#: Explicit CreateTime timestamps from 2001.
OLD = 1_000_000_000_000


def leader_batches() -> list[bytes]:
    """30 batches of 1-3 records; batches 10-14 hold timestamps older than every batch
    before them, batch 20 decreases within itself."""
    batches = []
    for i in range(30):
        base = OLD - 3_600_000 + i if 10 <= i < 15 else OLD + 10_000 * i
        batches.append(
            build_batch(
                1 + i % 3,
                base_ts=base,
                ts_step=-7 if i == 20 else 1000,
                compression=int(Compression.GZIP if i % 4 == 0 else Compression.NONE),
                value_size=150,
                seed=i,
            )
        )
    return batches


def records(log: Log) -> list[tuple[int, int]]:
    data = read_all(log)
    return [
        pair
        for pos, h in iter_batches(data)
        for pair in record_offsets_and_timestamps(data[pos : pos + h.size])
    ]


def first_at_or_after(pairs: list[tuple[int, int]], target: int) -> tuple[int, int] | None:
    return next(((o, t) for o, t in pairs if t >= target), None)


@pytest.mark.parametrize("index_interval_bytes", [1, 4096])
def test_a_follower_log_answers_as_its_leader(tmp_path: Path, index_interval_bytes: int) -> None:
    config = LogConfig(segment_bytes=1200, index_interval_bytes=index_interval_bytes)
    leader = Log.open(tmp_path / "leader" / "t-0", config, now_ms=0)
    follower = Log.open(tmp_path / "follower" / "t-0", config, now_ms=0)
    for raw in leader_batches():
        info = leader.append_as_leader(raw, leader_epoch=3, now_ms=0)
        # What a fetch from the leader returns, appended unchanged.
        follower.append_as_follower(read_all(leader, info.first_offset), now_ms=0)
    assert len(follower.segment_base_offsets) > 5
    assert follower.segment_base_offsets == leader.segment_base_offsets
    pairs = records(leader)
    targets = sorted({t + d for _, t in pairs for d in (-1, 0, 1)} | {0, OLD + 10**9})
    expected = [first_at_or_after(pairs, t) for t in targets]
    assert [leader.offset_for_timestamp(t) for t in targets] == expected
    assert [follower.offset_for_timestamp(t) for t in targets] == expected
    assert follower.latest_timestamp() == leader.latest_timestamp()
    # After a restart (the time index reloaded, the active segment rescanned) as well.
    follower.close()
    follower = Log.open(tmp_path / "follower" / "t-0", config, now_ms=0)
    try:
        assert [follower.offset_for_timestamp(t) for t in targets] == expected
        assert follower.latest_timestamp() == leader.latest_timestamp()
    finally:
        follower.close()
        leader.close()
