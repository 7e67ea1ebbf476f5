"""Retention's choice of segments (``tidelog.storage.log_retention``) over a real segment
list, without a Log: counts only, nothing deleted."""

from __future__ import annotations

import os
from pathlib import Path

from tidelog.protocol.records import parse_header
from tidelog.storage.local_log import LocalLog
from tidelog.storage.log_config import LogConfig
from tidelog.storage.log_retention import (
    below_log_start,
    excess_by_size,
    expired_by_time,
    largest_timestamp,
)
from tidelog.storage.segment import LogSegment

from .batches import BASE_TS, build_batch

CONFIG = LogConfig()


def three_segments(directory: Path) -> LocalLog:
    """Segments [0, 3) [3, 5) [5, 6), the last one active, a batch each; the batches'
    timestamps are BASE_TS + 0 .. n - 1 (so the largest are BASE_TS + 2, + 1, + 0)."""
    directory.mkdir()
    segment = LogSegment(directory, 0, index_interval_bytes=4096, max_index_entries=100, now_ms=0)
    local = LocalLog(directory, CONFIG, [segment])
    for base, n in ((0, 3), (3, 2), (5, 1)):
        if base:
            local.seal_active()
            local.add_segment(base, now_ms=0)
        batch = bytearray(build_batch(n))
        batch[0:8] = base.to_bytes(8, "big")
        header = parse_header(bytes(batch))
        local.active.append(
            [bytes(batch)], len(batch), [(len(batch), base + n - 1, header.max_timestamp)], 0
        )
    return local


def test_time_retention_counts_the_leading_expired_segments(tmp_path: Path) -> None:
    local = three_segments(tmp_path / "t-0")
    config = LogConfig(retention_ms=10)
    assert expired_by_time(local, config, BASE_TS + 12, None) == 0  # the first is 10 ms old
    assert expired_by_time(local, config, BASE_TS + 13, None) == 3
    assert expired_by_time(local, config, BASE_TS + 13, 5) == 2  # the active one reaches 6
    assert expired_by_time(local, LogConfig(retention_ms=-1), BASE_TS + 99, None) == 0
    compacted = LogConfig(retention_ms=10, cleanup_policy="compact")
    assert expired_by_time(local, compacted, BASE_TS + 99, None) == 0
    local.close(delete_pending=True)


def test_size_retention_keeps_the_log_at_or_above_retention_bytes(tmp_path: Path) -> None:
    local = three_segments(tmp_path / "t-0")
    sizes = [seg.size for seg in local.segments]
    total = sum(sizes)
    assert excess_by_size(local, LogConfig(retention_bytes=total), None) == 0
    assert excess_by_size(local, LogConfig(retention_bytes=total - sizes[0]), None) == 1
    assert excess_by_size(local, LogConfig(retention_bytes=total - sizes[0] - 1), None) == 1
    assert excess_by_size(local, LogConfig(retention_bytes=0), None) == 3
    assert excess_by_size(local, LogConfig(retention_bytes=0), 3) == 1
    assert excess_by_size(local, LogConfig(retention_bytes=-1), None) == 0
    local.close(delete_pending=True)


def test_log_start_retention_counts_segments_ending_at_or_below_it(tmp_path: Path) -> None:
    local = three_segments(tmp_path / "t-0")
    assert below_log_start(local, 2, None) == 0
    assert below_log_start(local, 3, None) == 1
    assert below_log_start(local, 5, None) == 2
    assert below_log_start(local, 6, None) == 3
    assert below_log_start(local, 6, 5) == 2
    local.close(delete_pending=True)


def test_largest_timestamp_falls_back_to_the_files_mtime(tmp_path: Path) -> None:
    local = three_segments(tmp_path / "t-0")
    assert largest_timestamp(local.segments[0]) == BASE_TS + 2
    local.seal_active()
    empty = local.add_segment(6, now_ms=0)
    os.utime(empty.log_path, ns=(1_234_000_000, 1_234_000_000))
    assert largest_timestamp(empty) == 1_234
    local.close(delete_pending=True)
