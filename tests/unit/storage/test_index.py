"""Offset and time indexes: Kafka's byte format, lookups, load checks, truncation."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tidelog.storage.index import IndexCorruptError, OffsetIndex, TimeIndex


def test_offset_index_file_is_kafkas_format(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100, max_entries=10)
    index.append(105, 4100)
    index.append(120, 8300)
    index.flush()
    assert (tmp_path / "00000000000000000100.index").read_bytes() == struct.pack(
        ">iiii", 5, 4100, 20, 8300
    )
    index.close()


@pytest.mark.parametrize(
    ("target", "expected"),
    [(99, (-1, 0)), (104, (-1, 0)), (105, (105, 4100)), (119, (105, 4100)), (500, (120, 8300))],
)
def test_offset_lookup_is_largest_entry_at_or_below(
    tmp_path: Path, target: int, expected: tuple[int, int]
) -> None:
    index = OffsetIndex(tmp_path / "x.index", 100, max_entries=10)
    index.append(105, 4100)
    index.append(120, 8300)
    assert index.lookup(target) == expected
    index.close()


def test_offset_index_reload_and_truncate(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    index = OffsetIndex(path, 0, max_entries=3)
    for i in range(3):
        index.append(10 * (i + 1), 1000 * (i + 1))
    assert index.is_full
    index.truncate_to_position(2000)  # keep batches that start before byte 2000
    assert list(index.offsets) == [10]
    index.close()
    reloaded = OffsetIndex(path, 0, max_entries=3)
    reloaded.load(log_size=5000)
    assert list(zip(reloaded.offsets, reloaded.positions, strict=True)) == [(10, 1000)]
    reloaded.close()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (struct.pack(">ii", 5, 10) + b"\x00", "not a multiple of 8"),
        (struct.pack(">iiii", 5, 10, 5, 20), "out of order"),
        (struct.pack(">iiii", 5, 10, 6, 5), "out of order"),
        (struct.pack(">ii", 5, 9999), "out of order"),  # position beyond the log
        (struct.pack(">ii", -1, 10), "out of order"),
    ],
)
def test_offset_index_load_check(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(content)
    index = OffsetIndex(path, 0, max_entries=10)
    with pytest.raises(IndexCorruptError, match=reason):
        index.load(log_size=1000)
    index.close()


def test_time_index_format_lookup_and_monotonicity(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000050.timeindex"
    index = TimeIndex(path, 50)
    index.maybe_append(1000, 52)
    index.maybe_append(1000, 55)  # not newer: ignored
    index.maybe_append(900, 56)  # older: ignored
    index.maybe_append(2000, 60)
    index.flush()
    assert path.read_bytes() == struct.pack(">qiqi", 1000, 2, 2000, 10)
    assert index.lookup(500) == 50  # nothing below: start of the segment
    assert index.lookup(1000) == 50
    assert index.lookup(1001) == 52
    assert index.lookup(5000) == 60
    assert index.last_entry() == (2000, 60)
    index.truncate_to_offset(60)
    assert index.last_entry() == (1000, 52)
    index.close()
    reloaded = TimeIndex(path, 50)
    reloaded.load()
    assert reloaded.last_entry() == (1000, 52)
    reloaded.close()


def test_time_index_load_check(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    path.write_bytes(struct.pack(">qiqi", 2000, 1, 1000, 2))
    index = TimeIndex(path, 0)
    with pytest.raises(IndexCorruptError, match="out of order"):
        index.load()
    index.close()
