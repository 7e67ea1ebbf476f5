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


def test_recent_batches_answer_as_the_index_does(tmp_path: Path) -> None:
    # More batches than the segment remembers (it trims), with an index entry only every
    # 500 bytes: every offset's lookup still lands on its own batch, and the latest ones
    # come from the remembered places.
    segment = make_segment(tmp_path)
    placed = fill(segment, 200)
    for position, base, last in placed:
        for offset in (base, base + 1, last):
            found = segment.find_batch(offset)
            assert found is not None
            assert (found[0], found[1].base_offset) == (position, base)
    remembered = [base for position, base, _ in placed if segment._find_recent(base, 0) is not None]
    assert 30 <= len(remembered) <= 64
    assert remembered == [base for _, base, _ in placed[-len(remembered) :]]
    # A start position past the batch wanted: the first batch from there, as the walk does.
    position, base, _ = placed[-2]
    found = segment.find_batch(placed[-5][1], start_position=position)
    assert found is not None
    assert found[0] == position
    segment.close()


def test_recent_batches_follow_a_truncation(tmp_path: Path) -> None:
    # After a cut, the places past it are forgotten: batches appended again at the same
    # offsets (a follower re-fetching a divergent tail) are found where they now are.
    segment = make_segment(tmp_path)
    placed = fill(segment, 20)
    position, base, _ = placed[15]
    segment.truncate_at(position, base)
    assert segment.find_batch(base) is None
    raw = bytearray(build_batch(1, seed=99, value_size=7))
    raw[0:8] = base.to_bytes(8, "big")
    append(segment, bytes(raw))
    second = segment.size
    raw = bytearray(build_batch(5, seed=98))
    raw[0:8] = (base + 1).to_bytes(8, "big")
    append(segment, bytes(raw))
    found = segment.find_batch(base + 3)
    assert found is not None
    assert (found[0], found[1].base_offset) == (second, base + 1)
    assert second != placed[16][0]  # not where the cut batch was
    assert segment._find_recent(base + 3, 0) is not None
    assert segment.find_batch(base + 6) is None
    segment.close()


def test_recent_batches_skip_a_compacted_gap(tmp_path: Path) -> None:
    # Offsets a cleaner removed belong to no batch: a lookup lands on the next batch.
    segment = make_segment(tmp_path)
    offsets = [100, 110, 111, 130]
    positions = []
    for i, base in enumerate(offsets):
        raw = bytearray(build_batch(1, seed=i))
        raw[0:8] = base.to_bytes(8, "big")
        positions.append(segment.size)
        append(segment, bytes(raw))
    for offset, index in ((105, 1), (110, 1), (111, 2), (112, 3), (130, 3)):
        found = segment.find_batch(offset)
        assert found is not None
        assert (found[0], found[1].base_offset) == (positions[index], offsets[index])
    assert segment._find_recent(112, 0) is not None
    segment.close()


def test_a_rolled_segment_forgets_its_recent_batches(tmp_path: Path) -> None:
    # Reads at the log end go to the next segment: a segment no longer active keeps no
    # places (memory per hosted partition), and its lookups walk from the index again.
    segment = make_segment(tmp_path)
    placed = fill(segment, 10)
    assert segment._find_recent(placed[-1][1], 0) is not None
    segment.on_become_inactive()
    assert segment._find_recent(placed[-1][1], 0) is None
    for position, base, _ in placed:
        found = segment.find_batch(base)
        assert found is not None
        assert found[0] == position
    segment.close()
