"""LogSegment: Kafka's sparse-index rule, lookups, rebuild-by-scan, truncation."""

from __future__ import annotations

from pathlib import Path

from tidelog.protocol.records import parse_header
from tidelog.storage.segment import LogSegment

from .batches import build_batch


def make_segment(tmp_path: Path, base: int = 100, interval: int = 500) -> LogSegment:
    return LogSegment(
        tmp_path, base, index_interval_bytes=interval, max_index_entries=100, now_ms=0
    )


def append(segment: LogSegment, raw: bytes) -> None:
    header = parse_header(raw)
    segment.append([raw], len(raw), [(len(raw), header.last_offset, header.max_timestamp)], 0)


def fill(segment: LogSegment, count: int) -> list[tuple[int, int, int]]:
    """Appends ``count`` batches of 3 records; returns (position, base, last) of each."""
    placed = []
    offset = segment.base_offset
    for i in range(count):
        raw = bytearray(build_batch(3, seed=i, base_ts=1000 * i))
        raw[0:8] = offset.to_bytes(8, "big")
        placed.append((segment.size, offset, offset + 2))
        append(segment, bytes(raw))
        offset += 3
    return placed


def test_index_entry_after_more_than_interval_bytes(tmp_path: Path) -> None:
    segment = make_segment(tmp_path)
    placed = fill(segment, 8)
    size = placed[1][0]  # every batch has the same size
    # Kafka's rule: before appending a batch, if more than index.interval.bytes were
    # appended since the last entry, index (that batch's last offset -> its position).
    expected = []
    since = 0
    for position, _, last in placed:
        if since > 500:
            expected.append((last, position))
            since = 0
        since += size
    assert list(zip(segment.offset_index.offsets, segment.offset_index.positions, strict=True)) == (
        expected
    )
    assert expected  # the test exercises the rule
    assert segment.next_offset == 100 + 24
    assert segment.max_timestamp == parse_header(build_batch(3, seed=7, base_ts=7000)).max_timestamp
    segment.close()


def test_find_batch_and_read_extent(tmp_path: Path) -> None:
    segment = make_segment(tmp_path)
    placed = fill(segment, 8)
    for position, base, last in placed:
        for offset in (base, last):
            found = segment.find_batch(offset)
            assert found is not None
            assert found[0] == position
            assert found[1].base_offset == base
    assert segment.find_batch(124) is None
    size = placed[1][0]
    # From offset 107 (third batch), at most 2.5 batches of bytes: two whole batches.
    assert segment.read_extent(107, int(size * 2.5), None, True) == (2 * size, 2 * size, 106)
    # max_offset 112 is inside the fifth batch (112..114): stop before it.
    assert segment.read_extent(107, 1 << 20, 112, True) == (2 * size, 2 * size, 106)
    assert segment.read_extent(107, 1, None, True) == (2 * size, size, 106)
    assert segment.read_extent(107, 1, None, False) is None
    segment.close()


def test_full_scan_rebuilds_the_same_indexes(tmp_path: Path) -> None:
    segment = make_segment(tmp_path)
    fill(segment, 10)
    offsets = list(segment.offset_index.offsets)
    positions = list(segment.offset_index.positions)
    times = list(segment.time_index.timestamps)
    size = segment.size
    result = segment.scan(verify_from_offset=0, full=True)
    assert result.error is None
    assert (result.valid_size, result.next_offset) == (size, 130)
    assert list(segment.offset_index.offsets) == offsets
    assert list(segment.offset_index.positions) == positions
    assert list(segment.time_index.timestamps) == times
    segment.close()


def test_truncate_at_cuts_file_and_indexes(tmp_path: Path) -> None:
    segment = make_segment(tmp_path)
    placed = fill(segment, 10)
    position, base, _ = placed[6]
    removed = segment.truncate_at(position, base)
    assert removed == placed[-1][0] + (placed[1][0]) - position
    assert segment.size == position
    assert segment.next_offset == base
    assert all(p < position for p in segment.offset_index.positions)
    assert all(o < base for o in segment.time_index.offsets)
    assert (tmp_path / "00000000000000000100.log").stat().st_size == position
    segment.close()
