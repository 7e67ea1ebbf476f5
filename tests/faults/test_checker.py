"""The checker on hand-made histories: each kind of anomaly is reported, and a clean
history reports nothing (unit tests: no processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.client import Record, build_batch
from tidelog.testing.faults.checker import (
    check_histories,
    check_replicas,
    committed_batches,
    unavailability,
)
from tidelog.testing.faults.workload import Ack, Read


def _ack(p: int, o: int, v: bytes, at: float = 0.0) -> Ack:
    return Ack(0, p, o, v, at)


def _read(who: str, p: int, o: int, v: bytes) -> Read:
    return Read(who, p, o, v, 0.0)


FINAL = [_read("final", 0, o, b"p0-%d" % o) for o in range(5)]
HW = {0: 5}


def test_a_clean_history_has_no_findings() -> None:
    acks = [_ack(0, o, b"p0-%d" % o) for o in range(5)]
    reads = [_read("c0", 0, o, b"p0-%d" % o) for o in range(3)]
    f = check_histories(acks, reads, FINAL, HW)
    assert f.ok
    assert f.failures == {}
    assert f.lost_count == 0
    assert f.acknowledged == 5


def test_lost_and_moved_acknowledgements() -> None:
    acks = [_ack(0, 9, b"p0-9"), _ack(0, 4, b"p0-3")]
    f = check_histories(acks, [], FINAL, HW)
    assert f.lost_values == [b"p0-9"]
    assert f.lost_count == 1
    assert len(f.moved) == 1
    assert "stored at [(0, 3)]" in f.moved[0]
    assert not f.ok


def test_vanished_and_inconsistent_reads() -> None:
    reads = [_read("c0", 0, 2, b"other"), _read("c1", 0, 7, b"p0-7")]
    f = check_histories([], reads, FINAL, HW)
    assert len(f.inconsistent) == 1
    assert "c0 saw b'other'" in f.inconsistent[0]
    assert len(f.vanished) == 1
    assert "above the final hw 5" in f.vanished[0]


def test_reordered_reads_and_producer_order_and_duplicates() -> None:
    reads = [_read("c0", 0, 3, b"p0-3"), _read("c0", 0, 1, b"p0-1")]
    final = [
        _read("final", 0, 0, b"p0-0"),
        _read("final", 0, 1, b"p0-2"),
        _read("final", 0, 2, b"p0-1"),
        _read("final", 0, 3, b"p0-2"),
    ]
    f = check_histories([], reads, final, {0: 4})
    assert any("c0 read 0/1 after 3" in r for r in f.reordered)
    assert any("seq 1 at offset 2 after seq 2" in r for r in f.reordered)
    # The second copy of p0-2 is a duplicate, not a reordering.
    assert f.duplicated == ["b'p0-2' at [(0, 1), (0, 3)]"]
    assert len(f.reordered) == 2


def test_incomplete_final_read() -> None:
    f = check_histories([], [], FINAL[:3], HW)
    assert f.incomplete == ["partition 0: final read got 3 of 5 offsets"]


def _segment(directory: Path, *batches: bytes) -> None:
    directory.mkdir(parents=True)
    (directory / "00000000000000000000.log").write_bytes(b"".join(batches))


def test_replicas_compared_below_the_hw_only(tmp_path: Path) -> None:
    b0 = build_batch([Record(b"a"), Record(b"b")], base_offset=0, base_timestamp_ms=1)
    b2 = build_batch([Record(b"c")], base_offset=2, base_timestamp_ms=1)
    other = build_batch([Record(b"X")], base_offset=2, base_timestamp_ms=1)
    _segment(tmp_path / "1" / "t-0", b0, b2)
    _segment(tmp_path / "2" / "t-0", b0, other)  # differs at offset 2 only
    _segment(tmp_path / "3" / "t-0", b0, b2[:20])  # a torn tail after offset 1
    dirs = {b: tmp_path / str(b) for b in (1, 2, 3)}
    assert committed_batches(dirs[3] / "t-0", 10) == [b0]
    assert check_replicas(dirs, "t", {0: 2}, {0: [1, 2, 3]}) == []
    problems = check_replicas(dirs, "t", {0: 3}, {0: [1, 2, 3]})
    assert problems == [
        "partition 0: broker 2 has 2 batches below hw 3, broker 1 2; first difference at batch 1",
        "partition 0: broker 3 has 1 batches below hw 3, broker 1 2; first difference at batch 1",
    ]


def test_unavailability_is_the_longest_gap_without_acks() -> None:
    gaps = unavailability([1.0, 2.0, 6.0, 6.5], [("kill", 0.5, 7.0), ("pause", 6.6, 9.0)])
    assert [k for k, _ in gaps] == ["kill", "pause"]
    assert [g for _, g in gaps] == pytest.approx([4.0, 2.4])


def test_producer_order_is_informational_without_idempotence() -> None:
    final = [_read("final", 0, 0, b"p0-2"), _read("final", 0, 1, b"p0-1")]
    strict = check_histories([], [], final, {0: 2})
    assert strict.reordered
    assert not strict.ok
    loose = check_histories([], [], final, {0: 2}, producer_order_guaranteed=False)
    assert loose.reordered == []
    assert loose.producer_reordered == [
        "partition 0: producer 0 seq 1 at offset 1 after seq 2 at offset 0"
    ]
    assert loose.ok
    assert "producer_reordered (not idempotent, not a failure): 1" in loose.summary()
