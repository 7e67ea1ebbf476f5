"""Crash recovery: torn tails, flipped bytes, broken indexes, corruption below the recovery
point. Each case damages a copy of one real log and checks that reopening keeps exactly the
intact prefix (or refuses the log, naming file and offset)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidelog.errors import ErrorCode
from tidelog.protocol.records import iter_batches
from tidelog.storage.checkpoints import LEADER_EPOCH_CHECKPOINT
from tidelog.storage.errors import CorruptLogError
from tidelog.storage.log import Log, LogConfig

from .batches import build_batch, read_all

CONFIG = LogConfig(segment_bytes=4000, index_interval_bytes=256)
EPOCH_FIELD = range(12, 16)  # partitionLeaderEpoch: outside the CRC, see docs/storage.md


@dataclass(frozen=True)
class StoredBatch:
    segment: str  # .log file name
    position: int  # in that file
    size: int
    base: int
    last: int


@dataclass(frozen=True)
class Template:
    directory: Path
    batches: tuple[StoredBatch, ...]
    segments: tuple[str, ...]
    contents: bytes  # every batch, in order

    def batches_in(self, segment: str) -> list[StoredBatch]:
        return [b for b in self.batches if b.segment == segment]

    def base_of(self, segment: str) -> int:
        return int(segment.removesuffix(".log"))


@pytest.fixture(scope="module")
def template() -> Iterator[Template]:
    root = Path(tempfile.mkdtemp(prefix="tidelog-recovery-"))
    directory = root / "topic-0"
    log = Log.open(directory, CONFIG, now_ms=0)
    for i in range(45):
        log.append_as_leader(
            build_batch(1 + i % 4, value_size=40 + 37 * (i % 7), seed=i, base_ts=1000 * i),
            leader_epoch=i // 15,
            now_ms=i,
        )
    contents = read_all(log)
    log.close()
    segments = tuple(sorted(p.name for p in directory.glob("*.log")))
    stored = []
    for name in segments:
        data = (directory / name).read_bytes()
        for pos, header in iter_batches(data):
            stored.append(
                StoredBatch(name, pos, header.size, header.base_offset, header.last_offset)
            )
    assert len(segments) >= 4
    yield Template(directory, tuple(stored), segments, contents)
    shutil.rmtree(root)


@pytest.fixture
def copy_of(template: Template) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="tidelog-crash-"))
    directory = root / "topic-0"
    shutil.copytree(template.directory, directory)
    yield directory
    shutil.rmtree(root)


def fresh_copy(template: Template) -> Path:
    root = Path(tempfile.mkdtemp(prefix="tidelog-crash-"))
    directory = root / "topic-0"
    shutil.copytree(template.directory, directory)
    return directory


def surviving_prefix(template: Template, segment: str, cut_position: int) -> bytes:
    """The batches before the first one in ``segment`` that reaches ``cut_position``."""
    keep = []
    for b in template.batches:
        if b.segment == segment and b.position + b.size > cut_position:
            break
        keep.append(b)
    return template.contents[: sum(b.size for b in keep)]


CRASH_SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@CRASH_SETTINGS
@given(data=st.data())
def test_torn_tail_is_truncated_to_the_intact_prefix(
    template: Template, data: st.DataObject
) -> None:
    # Recovery point at the start of the damaged segment: everything from there on is
    # re-validated (as after an unclean stop with the active segment unflushed).
    segment = data.draw(st.sampled_from(template.segments), label="segment")
    size = (template.directory / segment).stat().st_size
    cut = data.draw(st.integers(0, size - 1), label="cut")
    directory = fresh_copy(template)
    try:
        with open(directory / segment, "r+b") as f:
            f.truncate(cut)
        log = Log.open(directory, CONFIG, now_ms=0, recovery_point=template.base_of(segment))
        expected = surviving_prefix(template, segment, cut)
        assert read_all(log) == expected
        survivors = len(expected)
        kept = []
        for b in template.batches:
            if survivors < b.size:
                break
            survivors -= b.size
            kept.append(b)
        assert log.log_end_offset == (kept[-1].last + 1 if kept else 0)
        # Later segments are gone, and the damaged one is now the active one.
        assert log.segment_base_offsets[-1] <= template.base_of(segment)
        # Appends continue right after the intact prefix.
        info = log.append_as_leader(build_batch(2), leader_epoch=5, now_ms=1)
        assert info.first_offset == log.log_end_offset - 2
        log.close()
        reopened = Log.open(directory, CONFIG, now_ms=2, recovery_point=log.recovery_point)
        assert read_all(reopened)[: len(expected)] == expected
        reopened.close()
    finally:
        shutil.rmtree(directory.parent)


@CRASH_SETTINGS
@given(data=st.data())
def test_flipped_byte_truncates_from_the_damaged_batch(
    template: Template, data: st.DataObject
) -> None:
    segment = data.draw(st.sampled_from(template.segments), label="segment")
    batch = data.draw(st.sampled_from(template.batches_in(segment)), label="batch")
    offset_in_batch = data.draw(
        st.integers(0, batch.size - 1).filter(lambda i: i not in EPOCH_FIELD), label="byte"
    )
    flip = data.draw(st.integers(1, 255), label="xor")
    directory = fresh_copy(template)
    try:
        path = directory / segment
        raw = bytearray(path.read_bytes())
        raw[batch.position + offset_in_batch] ^= flip
        path.write_bytes(raw)
        log = Log.open(directory, CONFIG, now_ms=0, recovery_point=template.base_of(segment))
        assert read_all(log) == surviving_prefix(template, segment, batch.position + 1)
        assert log.log_end_offset == batch.base
        log.close()
    finally:
        shutil.rmtree(directory.parent)


def test_corruption_below_recovery_point_is_refused_with_file_and_offset(
    template: Template, copy_of: Path
) -> None:
    # Below the recovery point only framing is re-read (from the last index entry on, as
    # Kafka trusts flushed data); a broken magic byte there is refused, not truncated.
    segment = template.segments[-1]
    index = (copy_of / segment.replace(".log", ".index")).read_bytes()
    last_entry_position = int.from_bytes(index[-4:], "big")
    (victim,) = [b for b in template.batches_in(segment) if b.position == last_entry_position]
    path = copy_of / segment
    raw = bytearray(path.read_bytes())
    raw[victim.position + 16] = 7  # magic
    path.write_bytes(raw)
    with pytest.raises(CorruptLogError) as info:
        Log.open(copy_of, CONFIG, now_ms=0, recovery_point=template.batches[-1].last + 1)
    assert info.value.code is ErrorCode.KAFKA_STORAGE_ERROR
    assert info.value.path == path
    assert info.value.position == victim.position
    assert victim.base <= info.value.offset <= victim.last
    assert f"{path} is corrupt at byte {victim.position}" in str(info.value)
    assert "magic 7" in str(info.value)
    assert path.read_bytes() == raw  # nothing was truncated


def test_rebuilding_a_lost_index_below_recovery_point_detects_corruption(
    template: Template, copy_of: Path
) -> None:
    segment = template.segments[1]
    victim = template.batches_in(segment)[2]
    path = copy_of / segment
    raw = bytearray(path.read_bytes())
    raw[victim.position + victim.size - 1] ^= 0xFF  # inside the records: only the CRC sees it
    path.write_bytes(raw)
    (copy_of / segment.replace(".log", ".index")).unlink()
    with pytest.raises(CorruptLogError, match="CRC-32C") as info:
        Log.open(copy_of, CONFIG, now_ms=0, recovery_point=template.batches[-1].last + 1)
    assert info.value.path == path
    assert info.value.offset == victim.base


@pytest.mark.parametrize("damage", ["delete", "odd-size", "garbage"])
def test_broken_indexes_are_rebuilt_identically(
    template: Template, copy_of: Path, damage: str
) -> None:
    for segment in template.segments:
        for suffix in (".index", ".timeindex"):
            path = copy_of / segment.replace(".log", suffix)
            if damage == "delete":
                path.unlink()
            elif damage == "odd-size":
                path.write_bytes(path.read_bytes() + b"\x01")
            else:
                data = path.read_bytes()
                path.write_bytes(data[::-1] if len(data) > 8 else b"\xff" * 24)
    log = Log.open(copy_of, CONFIG, now_ms=0, recovery_point=template.batches[-1].last + 1)
    assert read_all(log) == template.contents
    for batch in template.batches[::5]:
        fetched = log.read(batch.last, 1)
        assert fetched is not None
        assert fetched.first_offset == batch.base
    log.close()
    for segment in template.segments:
        for suffix in (".index", ".timeindex"):
            name = segment.replace(".log", suffix)
            assert (copy_of / name).read_bytes() == (template.directory / name).read_bytes(), name


def test_lost_epoch_checkpoint_is_rebuilt_from_batch_headers(
    template: Template, copy_of: Path
) -> None:
    expected = (template.directory / LEADER_EPOCH_CHECKPOINT).read_text()
    (copy_of / LEADER_EPOCH_CHECKPOINT).write_text("garbage")
    log = Log.open(copy_of, CONFIG, now_ms=0, recovery_point=template.batches[-1].last + 1)
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [
        (0, 0),
        (1, template.batches[15].base),
        (2, template.batches[30].base),
    ]
    log.close()
    assert (copy_of / LEADER_EPOCH_CHECKPOINT).read_text() == expected


def test_unflushed_tail_of_a_crashed_log_is_revalidated(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", CONFIG, now_ms=0)
    log.append_as_leader(build_batch(3), leader_epoch=0, now_ms=0)
    log.flush()
    flushed = log.recovery_point
    log.append_as_leader(build_batch(2), leader_epoch=0, now_ms=1)
    assert log.recovery_point == flushed == 3
    tail = log.read(3, 1 << 20)
    assert tail is not None
    position = tail.position
    log.close_without_flush()
    # Tear the unflushed batch in half.
    with open(tmp_path / "t-0" / "00000000000000000000.log", "r+b") as f:
        f.truncate(position + 30)
    reopened = Log.open(tmp_path / "t-0", CONFIG, now_ms=2, recovery_point=flushed)
    assert reopened.log_end_offset == 3
    assert reopened.recovery_point == 3
    reopened.close()
