"""Log compaction (``tidelog.storage.cleaner``): what a clean keeps, at which offsets, and
how a crash during its swap is recovered."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.client.records import (
    ConsumerRecord,
    Record,
    build_batch,
    build_control_batch,
    decode_records,
)
from tidelog.errors import ErrorCode
from tidelog.protocol.records import Compression, iter_batches, parse_header
from tidelog.storage import segment_swap
from tidelog.storage.checkpoints import OffsetCheckpointFile
from tidelog.storage.cleaner import (
    CLEANER_CHECKPOINT,
    CleanerConfig,
    LogCleaner,
    clean_log,
    cleanable_log,
)
from tidelog.storage.log import AppendOrigin, Log, LogConfig
from tidelog.storage.offset_map import OffsetMap

TS = 1_700_000_000_000
DAY = 86_400_000
COMPACT = LogConfig(cleanup_policy="compact", segment_bytes=1024)


def open_log(directory: Path, config: LogConfig = COMPACT) -> Log:
    return Log.open(directory, config, now_ms=TS)


def keyed(pairs: list[tuple[str, str | None]], *, ts: int = TS, **kwargs: object) -> bytes:
    records = [Record(key=k.encode(), value=None if v is None else v.encode()) for k, v in pairs]
    return build_batch(records, base_timestamp_ms=ts, **kwargs)  # type: ignore[arg-type]


def lead(log: Log, raw: bytes, *, now_ms: int = TS) -> tuple[int, int]:
    control = any(h.is_control for _, h in iter_batches(raw))
    info = log.append_as_leader(
        raw,
        leader_epoch=0,
        now_ms=now_ms,
        origin=AppendOrigin.COORDINATOR if control else AppendOrigin.CLIENT,
    )
    assert info.error is ErrorCode.NONE, info
    return info.first_offset, info.last_offset


def all_bytes(log: Log) -> bytes:
    out = bytearray()
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        fetched = log.read(offset, 1 << 30)
        if fetched is None:
            break
        chunk = fetched.read_bytes()
        out += chunk
        offset = [h for _, h in iter_batches(chunk)][-1].next_offset
    return bytes(out)


def records(log: Log) -> list[ConsumerRecord]:
    return list(decode_records(all_bytes(log)))


def seal(log: Log) -> int:
    """Roll and flush: everything written becomes cleanable (rule 1)."""
    log.roll(TS)
    log.flush()
    return log.log_end_offset


def updates(log: Log, rounds: int, keys: int, *, ts: int = TS) -> dict[int, tuple[str, str]]:
    """``rounds`` batches each updating every key; returns offset -> (key, value)."""
    written: dict[int, tuple[str, str]] = {}
    for r in range(rounds):
        pairs = [(f"k{i}", f"v{r}-{i}") for i in range(keys)]
        first, _ = lead(log, keyed([(k, v or "") for k, v in pairs], ts=ts))
        for i, (k, v) in enumerate(pairs):
            written[first + i] = (k, v or "")
    return written


def latest(written: dict[int, tuple[str, str]]) -> dict[int, tuple[str, str]]:
    by_key: dict[str, int] = {}
    for offset, (key, _) in sorted(written.items()):
        by_key[key] = offset
    return {o: written[o] for o in sorted(by_key.values())}


def as_map(recs: list[ConsumerRecord]) -> dict[int, tuple[str, str | None]]:
    return {
        r.offset: (
            (r.key or b"").decode(),
            None if r.value is None else r.value.decode(),
        )
        for r in recs
    }


# ---------------------------------------------------------------------- what is kept


def test_latest_value_per_key_kept_at_its_offset_and_reads_skip_the_gaps(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    written = updates(log, rounds=40, keys=7)
    seal(log)
    segments_before = len(log.segment_base_offsets)
    assert segments_before > 4
    size_before = log.size_bytes
    stats = clean_log(log, None, CleanerConfig(), now_ms=TS, high_watermark=log.log_end_offset)
    assert stats.complete
    assert stats.end_offset == log.log_end_offset
    assert as_map(records(log)) == latest(written)
    assert log.size_bytes < size_before / 5
    # Groups are made of source segments within segment.bytes (Kafka's groupSegmentsBySize):
    # the next clean merges the now small segments.
    assert len(log.segment_base_offsets) == segments_before
    stats = clean_log(
        log, stats.end_offset, CleanerConfig(), now_ms=TS, high_watermark=log.log_end_offset
    )
    assert len(log.segment_base_offsets) == 2  # one cleaned segment + the active one
    assert as_map(records(log)) == latest(written)
    # A fetch at any offset, cleaned away or not, answers with the next batch kept.
    kept = sorted(latest(written))
    for offset in range(log.log_start_offset, log.log_end_offset):
        fetched = log.read(offset, 1 << 20)
        following = [o for o in kept if o >= offset]
        if not following:
            assert fetched is None or not list(decode_records(fetched.read_bytes()))
            continue
        assert fetched is not None
        # The batch holding ``offset`` or the next one (a consumer skips what is below).
        got = [r.offset for r in decode_records(fetched.read_bytes()) if r.offset >= offset]
        assert got[0] == following[0]
    # A restart recovers the log with its gaps (from the files alone, too).
    log.close()
    for recovery_point in (log.log_end_offset, 0):
        reopened = Log.open(tmp_path / "t-0", COMPACT, now_ms=TS, recovery_point=recovery_point)
        assert as_map(records(reopened)) == latest(written)
        assert reopened.log_end_offset == log.log_end_offset
        reopened.close()


def test_only_below_the_active_segment_and_the_last_stable_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    written = updates(log, rounds=20, keys=3)
    leo = log.log_end_offset
    log.flush()
    stats = clean_log(log, None, CleanerConfig(), now_ms=TS, high_watermark=leo)
    active_base = log.segment_base_offsets[-1]
    assert stats.end_offset == active_base
    got = as_map(records(log))
    # Below the active segment: one record a key (that is the latest there); above, all.
    assert {o: v for o, v in got.items() if o >= active_base} == {
        o: v for o, v in written.items() if o >= active_base
    }
    below = latest({o: v for o, v in written.items() if o < active_base})
    assert {o: v for o, v in got.items() if o < active_base} == below
    # Nothing beyond the high watermark: the first uncleanable offset is below it.
    log2 = open_log(tmp_path / "u-0")
    updates(log2, rounds=20, keys=3)
    seal(log2)
    stats = clean_log(log2, None, CleanerConfig(), now_ms=TS, high_watermark=30)
    assert stats.end_offset <= 30


def test_tombstones_kept_then_removed_after_delete_retention(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(cleanup_policy="compact", segment_bytes=2048))
    updates(log, rounds=10, keys=4)
    first, _ = lead(log, keyed([("k1", None), ("k2", None)]))
    lead(log, keyed([("k0", "last")]))
    seal(log)
    config = CleanerConfig()
    stats = clean_log(log, None, config, now_ms=TS + 1000, high_watermark=log.log_end_offset)
    got = as_map(records(log))
    assert got[first] == ("k1", None)
    assert got[first + 1] == ("k2", None)
    assert sorted(k for k, _ in got.values()) == ["k0", "k1", "k2", "k3"]
    # delete.retention.ms later the tombstones go, and with them every record of their keys.
    stats = clean_log(
        log, stats.end_offset, config, now_ms=TS + DAY + 1, high_watermark=log.log_end_offset
    )
    assert stats.complete
    got = as_map(records(log))
    assert sorted(k for k, _ in got.values()) == ["k0", "k3"]
    assert ("k0", "last") in got.values()


def test_keyless_records_refused_by_a_compacted_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    raw = build_batch([Record(key=b"a", value=b"1"), Record(value=b"no key")])
    info = log.append_as_leader(raw, leader_epoch=0, now_ms=TS)
    assert info.error is ErrorCode.INVALID_RECORD
    assert info.error_message == (
        "Compacted topic cannot accept message without key in topic partition t-0."
    )
    assert log.log_end_offset == 0
    # A delete-policy log takes them.
    plain = open_log(tmp_path / "u-0", LogConfig())
    assert plain.append_as_leader(raw, leader_epoch=0, now_ms=TS).error is ErrorCode.NONE


# ---------------------------------------------------------------------- producers, transactions


def test_last_batch_of_a_producer_survives_empty(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    pid = 7
    lead(log, keyed([("x", "1"), ("y", "1")], producer_id=pid, producer_epoch=0, base_sequence=0))
    first, last = lead(
        log, keyed([("x", "2"), ("y", "2")], producer_id=pid, producer_epoch=0, base_sequence=2)
    )
    lead(log, keyed([("x", "3"), ("y", "3")]))  # no producer id
    seal(log)
    clean_log(log, None, CleanerConfig(), now_ms=TS, high_watermark=log.log_end_offset)
    headers = [h for _, h in iter_batches(all_bytes(log))]
    # The producer's first batch went; its last stays, empty, with its offsets and sequence.
    assert [(h.base_offset, h.records_count) for h in headers] == [(first, 0), (last + 1, 2)]
    empty = headers[0]
    assert (empty.last_offset, empty.producer_id, empty.base_sequence) == (last, pid, 2)
    assert as_map(records(log)) == {last + 1: ("x", "3"), last + 2: ("y", "3")}
    log.close()
    reopened = Log.open(tmp_path / "t-0", COMPACT, now_ms=TS, recovery_point=0)
    entry = reopened.producer_state.last_entry(pid)
    assert entry is not None
    assert (entry.last_seq, entry.last_offset) == (3, last)
    # The producer's next batch is in sequence.
    lead(reopened, keyed([("x", "4")], producer_id=pid, producer_epoch=0, base_sequence=4))


def test_aborted_transactions_removed_markers_kept(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    lead(log, keyed([("a", "plain")]))
    a_first, _ = lead(
        log,
        keyed(
            [("a", "aborted"), ("b", "aborted")],
            producer_id=1,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        ),
    )
    c_first, _ = lead(
        log,
        keyed(
            [("c", "committed")],
            producer_id=2,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        ),
    )
    abort_at, _ = lead(log, build_control_batch(1, 0, False, 0, TS))
    commit_at, _ = lead(log, build_control_batch(2, 0, True, 0, TS))
    lead(log, keyed([("z", "later")]))
    seal(log)
    clean_log(log, None, CleanerConfig(), now_ms=TS, high_watermark=log.log_end_offset)
    got = as_map(records(log))
    # The aborted records never win over the plain one, and are gone.
    assert got == {0: ("a", "plain"), c_first: ("c", "committed"), commit_at + 1: ("z", "later")}
    controls = [h.base_offset for _, h in iter_batches(all_bytes(log)) if h.is_control]
    assert controls == [abort_at, commit_at]
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [(1, a_first)]
    # delete.retention.ms later: the commit marker still covers kept data; the abort
    # marker is producer 1's last batch (its state needs it), so both stay.
    clean_log(
        log,
        log.log_end_offset,
        CleanerConfig(),
        now_ms=TS + 2 * DAY,
        high_watermark=log.log_end_offset,
    )
    controls = [h.base_offset for _, h in iter_batches(all_bytes(log)) if h.is_control]
    assert controls == [abort_at, commit_at]


def test_markers_go_after_delete_retention_once_nothing_needs_them(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    lead(
        log,
        keyed(
            [("a", "old")], producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True
        ),
    )
    abort_at, _ = lead(log, build_control_batch(1, 0, False, 0, TS))
    # The producer moves on: its later batch is its last one.
    lead(log, keyed([("a", "new")], producer_id=1, producer_epoch=1, base_sequence=0))
    seal(log)
    clean_log(log, None, CleanerConfig(), now_ms=TS + 2 * DAY, high_watermark=log.log_end_offset)
    controls = [h.base_offset for _, h in iter_batches(all_bytes(log)) if h.is_control]
    assert controls == []
    assert as_map(records(log)) == {abort_at + 1: ("a", "new")}
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []


# ---------------------------------------------------------------------- codecs, map, choice


@pytest.mark.parametrize(
    "codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
)
def test_compressed_batches_keep_their_codec(tmp_path: Path, codec: Compression) -> None:
    log = open_log(tmp_path / "t-0")
    written: dict[int, tuple[str, str]] = {}
    for r in range(12):
        pairs = [(f"k{i}", f"v{r}-{i}" * 10) for i in range(5 if r % 3 else 3)]
        first, _ = lead(log, keyed(pairs, compression=codec))  # type: ignore[arg-type]
        written.update({first + i: p for i, p in enumerate(pairs)})
    seal(log)
    clean_log(log, None, CleanerConfig(), now_ms=TS, high_watermark=log.log_end_offset)
    assert as_map(records(log)) == latest(written)
    assert {h.compression for _, h in iter_batches(all_bytes(log))} == {codec}


def test_a_full_offset_map_cleans_up_to_where_it_fits(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    written = updates(log, rounds=10, keys=30)
    seal(log)
    tiny = CleanerConfig(dedupe_buffer_size=20 * 24, io_buffer_load_factor=1.0)
    assert tiny.max_map_entries == 20
    stats = clean_log(log, None, tiny, now_ms=TS, high_watermark=log.log_end_offset)
    assert stats.complete
    assert stats.end_offset == 20  # the 21st key did not fit
    got = as_map(records(log))
    assert all(written[o] == v for o, v in got.items())
    assert set(latest(written)) <= set(got)
    offset_map = OffsetMap(2)
    assert offset_map.put(b"a", 1)
    assert offset_map.put(b"b" * 40, 2)
    assert offset_map.put(b"a", 3)
    assert not offset_map.put(b"c", 4)
    assert (offset_map.get(b"a"), offset_map.get(b"b" * 40), offset_map.get(b"c")) == (3, 2, -1)


def test_dirtiest_log_first_and_checkpoints(tmp_path: Path) -> None:
    log_dir = tmp_path / "data"
    dirty = open_log(log_dir / "dirty-0")
    updates(dirty, rounds=30, keys=3)
    seal(dirty)
    half = open_log(log_dir / "half-0")
    updates(half, rounds=30, keys=3)
    seal(half)
    cleaner = LogCleaner(CleanerConfig())
    logs = {dirty.topic_partition: dirty, half.topic_partition: half}
    hws = {tp: log.log_end_offset for tp, log in logs.items()}
    deleted = open_log(log_dir / "plain-0", LogConfig(segment_bytes=4096))
    updates(deleted, rounds=30, keys=3)
    seal(deleted)
    logs[deleted.topic_partition] = deleted
    # "half" was cleaned up to its first third before: its ratio is below "dirty"'s 1.0.
    cleaner._set_checkpoint(half, half.segment_base_offsets[len(half.segment_base_offsets) // 3])
    first = cleaner.clean_once(logs, hws, TS)
    assert first is not None
    assert first.topic_partition == dirty.topic_partition
    second = cleaner.clean_once(logs, hws, TS)
    assert second is not None
    assert second.topic_partition == half.topic_partition
    # Clean now, nothing dirty: nothing to do (the delete-policy log is never compacted).
    assert cleaner.clean_once(logs, hws, TS) is None
    saved = OffsetCheckpointFile(log_dir / CLEANER_CHECKPOINT).read()
    assert saved == {
        dirty.topic_partition: dirty.log_end_offset,
        half.topic_partition: half.log_end_offset,
    }
    # Below min.cleanable.dirty.ratio a log waits; a little more dirt is not enough.
    lead(half, keyed([("k0", "x")]))
    seal(half)
    assert cleaner.clean_once(logs, {half.topic_partition: half.log_end_offset}, TS) is None
    assert LogCleaner(CleanerConfig(enable=False)).clean_once(logs, hws, TS) is None


# ---------------------------------------------------------------------- crash safety


class _Crash(BaseException):
    pass


def test_crash_with_cleaned_files_keeps_the_old_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "t-0")
    written = updates(log, rounds=30, keys=4)
    seal(log)
    before = all_bytes(log)

    def crash(self: object) -> None:
        raise _Crash

    monkeypatch.setattr(segment_swap.CleanedSegment, "to_swap", crash)
    monkeypatch.setattr(segment_swap.CleanedSegment, "discard", lambda self: None)
    with pytest.raises(_Crash):
        clean_log(log, None, CleanerConfig(), now_ms=TS, high_watermark=log.log_end_offset)
    assert any(p.name.endswith(".cleaned") for p in (tmp_path / "t-0").iterdir())
    log.close_without_flush()
    reopened = Log.open(tmp_path / "t-0", COMPACT, now_ms=TS, recovery_point=0)
    assert not any(p.name.endswith(".cleaned") for p in (tmp_path / "t-0").iterdir())
    assert all_bytes(reopened) == before
    assert as_map(records(reopened)) == written


def test_crash_with_swap_files_completes_the_swap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "t-0")
    written = updates(log, rounds=30, keys=4)
    seal(log)
    leo = log.log_end_offset

    def crash(self: Log, *args: object) -> bool:
        raise _Crash

    monkeypatch.setattr(Log, "replace_segments", crash)
    monkeypatch.setattr(segment_swap.CleanedSegment, "discard", lambda self: None)
    with pytest.raises(_Crash):
        clean_log(log, None, CleanerConfig(), now_ms=TS, high_watermark=leo)
    names = [p.name for p in (tmp_path / "t-0").iterdir()]
    assert any(n.endswith(".log.swap") for n in names)
    log.close_without_flush()
    monkeypatch.undo()
    reopened = Log.open(tmp_path / "t-0", COMPACT, now_ms=TS, recovery_point=leo)
    assert not any(p.name.endswith(".swap") for p in (tmp_path / "t-0").iterdir())
    got = as_map(records(reopened))
    # Every key's latest value is there at its offset; what else stayed is older values of
    # segments past the swapped one's last batch (as in Kafka), never a duplicate offset.
    assert set(latest(written).items()) <= set(got.items())
    assert all(written[o] == v for o, v in got.items())
    offsets = [r.offset for r in records(reopened)]
    assert offsets == sorted(set(offsets))
    assert reopened.log_end_offset == leo
    # A clean after the restart finishes the job.
    clean_log(reopened, None, CleanerConfig(), now_ms=TS, high_watermark=leo)
    assert as_map(records(reopened)) == latest(written)


def test_followers_of_a_compacted_log_take_batches_with_gaps(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "t-0")
    written = updates(leader, rounds=20, keys=3)
    seal(leader)
    clean_log(leader, None, CleanerConfig(), now_ms=TS, high_watermark=leader.log_end_offset)
    follower = open_log(tmp_path / "f" / "t-0")
    data = all_bytes(leader)
    assert parse_header(data).records_count < parse_header(data).last_offset_delta + 1 or any(
        h.base_offset != 0 for _, h in iter_batches(data)
    )
    follower.append_as_follower(data, now_ms=TS)
    assert as_map(records(follower)) == latest(written)
    # A delete-policy follower still insists on contiguous offsets.
    strict = open_log(tmp_path / "g" / "t-0", LogConfig())
    with pytest.raises(Exception, match=r"starts at offset|records but last offset delta"):
        strict.append_as_follower(data, now_ms=TS)


def test_compact_only_logs_are_not_deleted_by_retention(tmp_path: Path) -> None:
    config = LogConfig(cleanup_policy="compact", segment_bytes=4096, retention_ms=1)
    log = open_log(tmp_path / "t-0", config)
    updates(log, rounds=10, keys=3)
    seal(log)
    assert log.apply_retention(TS + DAY) == 0
    both = LogConfig(cleanup_policy="compact,delete", segment_bytes=4096, retention_ms=1)
    log.update_config(both)
    assert log.apply_retention(TS + DAY) > 0


def test_truncation_into_the_clean_section(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    written = updates(log, rounds=40, keys=7)
    seal(log)
    stats = clean_log(log, None, CleanerConfig(), now_ms=TS, high_watermark=log.log_end_offset)
    # An offset in the gap at the end of a cleaned segment (its records were superseded).
    bases = log.segment_base_offsets
    kept = sorted(latest(written))
    cut = next(b - 1 for b in bases[1:] if b - 1 not in kept and b - 2 not in kept)
    log.truncate_to(cut)
    assert log.log_end_offset == cut
    assert as_map(records(log)) == {o: v for o, v in latest(written).items() if o < cut}
    # The first dirty offset follows the lowered recovery point, whatever the checkpoint.
    assert (
        cleanable_log(log, stats.end_offset, now_ms=TS, high_watermark=cut).first_dirty_offset
        <= cut
    )
    # A follower continues at the new end.
    again = keyed([("k0", "again")])
    buf = bytearray(again)
    buf[0:8] = cut.to_bytes(8, "big")
    log.append_as_follower(bytes(buf), now_ms=TS)
    assert as_map(records(log))[cut] == ("k0", "again")
