"""Transactions in the log (KIP-98): the last stable offset, the aborted-transaction index,
marker checks, and their survival of restarts, truncations and log start moves."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import NamedTuple

import pytest

from tidelog.client.records import Record, build_batch, build_control_batch
from tidelog.errors import ErrorCode
from tidelog.protocol.records import CorruptRecordBatchError, iter_batches, stamp_batch
from tidelog.storage.log import AppendOrigin, Log, LogConfig
from tidelog.storage.producer_state import (
    SNAPSHOT_VERSION,
    BatchMetadata,
    ProducerStateEntry,
    decode_snapshot_file,
    snapshot_file_name,
)
from tidelog.storage.txn_index import AbortedTxn, decode_entries

TS = 1_700_000_000_000


def txn(pid: int, epoch: int, seq: int, n: int = 1, *, ts: int = TS) -> bytes:
    """A transactional data batch of ``n`` records."""
    records = [Record(value=f"t{pid}-{epoch}-{seq}-{i}".encode()) for i in range(n)]
    return build_batch(
        records,
        base_timestamp_ms=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )


def idem(pid: int, epoch: int, seq: int, n: int = 1, *, ts: int = TS) -> bytes:
    """A non-transactional idempotent batch."""
    records = [Record(value=f"i{pid}-{epoch}-{seq}-{i}".encode()) for i in range(n)]
    return build_batch(
        records, base_timestamp_ms=ts, producer_id=pid, producer_epoch=epoch, base_sequence=seq
    )


def plain(n: int = 1, *, ts: int = TS) -> bytes:
    return build_batch([Record(value=b"plain") for _ in range(n)], base_timestamp_ms=ts)


def marker(pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0, ts: int = TS) -> bytes:
    return build_control_batch(pid, epoch, commit, coordinator_epoch, ts)


def stamped(raw: bytes, base: int, epoch: int = 0) -> bytes:
    buf = bytearray(raw)
    stamp_batch(buf, 0, base, epoch)
    return bytes(buf)


def origin_of(raw: bytes) -> AppendOrigin:
    """Markers are the broker's own writes (a client's control batch is INVALID_RECORD)."""
    control = any(header.is_control for _, header in iter_batches(raw))
    return AppendOrigin.COORDINATOR if control else AppendOrigin.CLIENT


def open_log(tmp_path: Path, config: LogConfig | None = None, **kwargs: int) -> Log:
    return Log.open(tmp_path / "t-0", config or LogConfig(), now_ms=TS, **kwargs)


def lead(log: Log, raw: bytes, *, now_ms: int = TS) -> tuple[int, int]:
    """Append as leader, expecting success; returns (first, last) offsets."""
    info = log.append_as_leader(raw, leader_epoch=0, now_ms=now_ms, origin=origin_of(raw))
    assert info.error == ErrorCode.NONE, info
    assert not info.duplicate
    return info.first_offset, info.last_offset


def refused(log: Log, raw: bytes) -> ErrorCode:
    leo = log.log_end_offset
    info = log.append_as_leader(raw, leader_epoch=0, now_ms=TS, origin=origin_of(raw))
    assert log.log_end_offset == leo  # nothing written
    assert (info.first_offset, info.num_batches) == (-1, 0)
    return info.error


class TxnView(NamedTuple):
    """Everything transactional a log exposes, for before/after comparisons."""

    producers: dict[int, ProducerStateEntry]
    ongoing: dict[int, int]
    first_unstable: int | None
    lso: int
    aborted: list[tuple[int, int]]
    indexes: list[list[AbortedTxn]]


def view(log: Log, hw: int | None = None) -> TxnView:
    hw = log.log_end_offset if hw is None else hw
    lso = log.last_stable_offset(hw)  # first: it forgets transactions replicated by hw
    return TxnView(
        dict(log.producer_state.producers),
        dict(log.producer_state.ongoing_txns),
        log.first_unstable_offset(),
        lso,
        log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset + 1),
        [list(s.txn_index.entries) for s in log._local.segments],
    )


def txnindex_on_disk(log: Log, base: int) -> list[AbortedTxn]:
    path = log.directory / f"{base:020d}.txnindex"
    return decode_entries(path.read_bytes(), base)


# ---------------------------------------------------------------------------- LSO


def test_plain_and_idempotent_logs_have_lso_equal_to_the_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    lead(log, plain(3))
    lead(log, idem(1, 0, 0, 2))
    assert log.first_unstable_offset() is None
    assert [log.last_stable_offset(hw) for hw in (0, 3, 5)] == [0, 3, 5]
    assert log.collect_aborted_transactions(0, 5) == []
    assert log.producer_state.last_entry(1) == ProducerStateEntry(
        1, 0, (BatchMetadata(0, 1, 3, 4, TS),)
    )
    log.close()


def test_lso_with_one_ongoing_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    lead(log, plain(2))  # 0-1
    assert lead(log, txn(1, 0, 0, 2)) == (2, 3)
    lead(log, plain())  # 4
    lead(log, txn(1, 0, 2))  # 5: same transaction, still from 2
    assert dict(log.producer_state.ongoing_txns) == {2: 1}
    assert log.first_unstable_offset() == 2
    assert log.last_stable_offset(6) == 2
    assert log.last_stable_offset(1) == 1  # never above the high watermark
    entry = log.producer_state.last_entry(1)
    assert entry is not None
    assert entry.current_txn_first_offset == 2
    assert entry.coordinator_epoch == -1
    log.close()


def test_lso_after_commit_waits_for_the_marker_to_be_replicated(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    lead(log, plain(2))  # 0-1
    lead(log, txn(1, 0, 0, 2))  # 2-3
    assert lead(log, marker(1, 0, commit=True, coordinator_epoch=4)) == (4, 4)
    assert log.producer_state.ongoing_txns == {}
    # The commit marker at 4 is not below the high watermark yet: the transaction still
    # holds the LSO (Kafka's unreplicatedTxns).
    assert log.last_stable_offset(4) == 2
    assert log.first_unstable_offset() == 2
    assert log.last_stable_offset(5) == 5  # replicated: forgotten
    assert log.first_unstable_offset() is None
    assert log.collect_aborted_transactions(0, 5) == []
    entry = log.producer_state.last_entry(1)
    assert entry is not None
    assert (entry.current_txn_first_offset, entry.coordinator_epoch) == (-1, 4)
    assert (entry.last_marker_offset, entry.last_marker_timestamp) == (4, TS)
    log.close()


def test_lso_after_abort_and_the_aborted_index(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    lead(log, txn(1, 0, 0, 2))  # 0-1
    lead(log, txn(2, 0, 0))  # 2
    lead(log, txn(1, 0, 2))  # 3
    assert log.last_stable_offset(4) == 0
    lead(log, marker(1, 0, commit=False))  # 4: aborts producer 1's transaction
    # Producer 2's transaction from 2 is still ongoing: the entry's LSO field says so.
    assert txnindex_on_disk(log, 0) == [AbortedTxn(1, 0, 4, 2)]
    assert log.last_stable_offset(5) == 2
    lead(log, marker(2, 0, commit=False))  # 5
    assert txnindex_on_disk(log, 0) == [AbortedTxn(1, 0, 4, 2), AbortedTxn(2, 2, 5, 6)]
    assert log.last_stable_offset(5) == 2  # marker 5 not replicated yet
    assert log.last_stable_offset(6) == 6
    assert log.collect_aborted_transactions(0, 6) == [(1, 0), (2, 2)]
    assert log.collect_aborted_transactions(5, 6) == [(2, 2)]
    assert log.collect_aborted_transactions(0, 1) == [(1, 0)]
    assert log.collect_aborted_transactions(0, 0) == []
    log.close()


def test_lso_never_goes_below_the_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=300, file_delete_delay_ms=0))
    lead(log, txn(1, 0, 0))  # 0
    for _ in range(6):
        lead(log, plain(2))  # 1-12
    assert log.last_stable_offset(13) == 0
    log.delete_records_before(5)
    # Kafka keeps the transaction; it counts from the log start.
    assert dict(log.producer_state.ongoing_txns) == {0: 1}
    assert log.first_unstable_offset() == 5
    assert log.last_stable_offset(13) == 5
    # Retention deletes the segment where the transaction started: still ongoing, also
    # after a restart (the snapshot at the first segment's base carries it).
    log.delete_records_before(9)
    assert log.segment_base_offsets[0] > 0
    assert log.last_stable_offset(13) == 9
    entry = log.producer_state.last_entry(1)
    assert entry is not None
    assert entry.current_txn_first_offset == 0
    # Its batches are gone (rule 1): the broker that removed them says so for a sequence
    # it cannot check (producer_state rule 2g), as for a producer removed altogether.
    assert entry.batches == ()
    assert refused(log, txn(1, 0, 5)) == ErrorCode.UNKNOWN_PRODUCER_ID
    before = view(log)
    log.close()
    log = open_log(tmp_path, LogConfig(segment_bytes=300), recovery_point=13, log_start_offset=9)
    assert view(log) == before
    # After a restart nobody remembers: any sequence goes (Kafka would have dropped the
    # entry at its reload and accepted it too).
    assert lead(log, txn(1, 0, 1)) == (13, 13)
    lead(log, marker(1, 0, commit=False))
    assert log.collect_aborted_transactions(9, 15) == [(1, 0)]
    assert log.last_stable_offset(15) == 15
    log.close()


# ---------------------------------------------------------------------------- the index


def test_aborted_transaction_spanning_segments(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=350)
    log = open_log(tmp_path, config)
    lead(log, txn(1, 0, 0, 2))  # 0-1: producer 1's transaction starts
    seq = 2
    while len(log.segment_base_offsets) < 3:
        lead(log, txn(1, 0, seq))
        lead(log, plain())
        seq += 1
    lead(log, txn(2, 0, 0))  # producer 2 starts a transaction
    m1 = lead(log, marker(1, 0, commit=False))[0]
    lead(log, marker(2, 0, commit=True))
    while len(log.segment_base_offsets) < 5:
        lead(log, plain())
    t3 = lead(log, txn(3, 0, 0))[0]
    lead(log, marker(3, 0, commit=False))
    bases = log.segment_base_offsets
    marker_segment = max(b for b in bases if b <= m1)
    assert marker_segment > 0  # the entry lives with the marker, not the start
    assert txnindex_on_disk(log, marker_segment)[0] == AbortedTxn(1, 0, m1, m1 - 1)
    assert all(
        not s.txn_index.entries for s in log._local.segments if s.base_offset < marker_segment
    )
    leo = log.log_end_offset
    assert log.collect_aborted_transactions(0, leo) == [(1, 0), (3, t3)]
    # From a middle segment (the transaction's data from 0 continues there).
    assert log.collect_aborted_transactions(bases[1], leo) == [(1, 0), (3, t3)]
    assert log.collect_aborted_transactions(m1 + 1, leo) == [(3, t3)]
    assert log.collect_aborted_transactions(0, t3) == [(1, 0)]
    log.close()


def test_collect_finds_an_abort_in_a_segment_above_the_upper_bound(tmp_path: Path) -> None:
    """A transaction starting below the LSO may be aborted in a segment based ABOVE the
    LSO while another transaction holds the LSO low: a consumer reading up to the LSO must
    still learn that the first one aborted (so stopping at segments based at or above the
    bound would be wrong)."""
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    lead(log, txn(1, 0, 0))  # 0: A starts
    lead(log, txn(2, 0, 0))  # 1: B starts (stays open)
    while len(log.segment_base_offsets) < 3:
        lead(log, plain())
    m = lead(log, marker(1, 0, commit=False))[0]  # A aborted in the third segment
    hw = log.log_end_offset
    lso = log.last_stable_offset(hw)
    assert lso == 1  # B
    assert log.segment_base_offsets[-1] > lso
    assert log.collect_aborted_transactions(0, lso) == [(1, 0)]
    assert txnindex_on_disk(log, log.segment_base_offsets[-1]) == [AbortedTxn(1, 0, m, 1)]
    log.close()


def test_deleted_segments_take_their_txnindex_along(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=300, file_delete_delay_ms=0))
    lead(log, txn(1, 0, 0))
    lead(log, marker(1, 0, commit=False))
    while len(log.segment_base_offsets) < 3:
        lead(log, plain())
    directory = log.directory
    assert (directory / f"{0:020d}.txnindex").exists()
    log.delete_records_before(log.segment_base_offsets[1])
    log.maybe_flush(TS)
    assert not list(directory.glob(f"{0:020d}.txnindex*"))
    assert sorted(p.name for p in directory.glob("*.txnindex")) == [
        f"{b:020d}.txnindex" for b in log.segment_base_offsets
    ]
    assert log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset) == []
    log.close()


def test_truncate_fully_at_the_same_base_keeps_the_new_segments_files(tmp_path: Path) -> None:
    """The retired segment's files follow their rename, so deleting them later does not
    remove the new segment's files of the same base offset."""
    log = open_log(tmp_path, LogConfig(file_delete_delay_ms=0))
    lead(log, txn(1, 0, 0))
    lead(log, marker(1, 0, commit=False))
    log.truncate_fully_and_start_at(0)
    log.maybe_flush(TS)  # deletes the retired files
    names = sorted(p.name for p in log.directory.iterdir())
    assert [n for n in names if n.startswith("0000")] == [
        f"{0:020d}{suffix}" for suffix in (".index", ".log", ".timeindex", ".txnindex")
    ]
    assert view(log).aborted == []
    assert log.producer_state.producers == {}
    lead(log, txn(1, 0, 0))
    lead(log, marker(1, 0, commit=False))
    log.close()
    log = open_log(tmp_path, recovery_point=2)
    assert log.collect_aborted_transactions(0, 2) == [(1, 0)]
    log.close()


# ---------------------------------------------------------------------------- leader checks


def test_marker_epoch_and_coordinator_epoch_fencing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    lead(log, txn(1, 2, 0))
    lead(log, marker(1, 2, commit=True, coordinator_epoch=5))
    lead(log, txn(1, 2, 1))
    # Kafka's order: the producer epoch first, then the coordinator epoch.
    assert refused(log, marker(1, 1, True, coordinator_epoch=9)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert refused(log, marker(1, 1, True, coordinator_epoch=4)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert (
        refused(log, marker(1, 2, True, coordinator_epoch=4))
        == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    )
    assert dict(log.producer_state.ongoing_txns) == {2: 1}  # untouched
    lead(log, marker(1, 2, commit=False, coordinator_epoch=5))  # same coordinator epoch: fine
    lead(log, txn(1, 2, 2))
    lead(log, marker(1, 3, commit=True, coordinator_epoch=6))  # newer epochs: fine
    # The refused markers' error messages say why.
    info = log.append_as_leader(
        marker(1, 3, True, 5), leader_epoch=0, now_ms=TS, origin=origin_of(marker(1, 3, True, 5))
    )
    assert info.error == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert "coordinator epoch 5" in (info.error_message or "")
    # An unknown producer's marker is accepted (nothing to fence against).
    lead(log, marker(77, 0, commit=False, coordinator_epoch=0))
    assert log.producer_state.last_entry(77) == ProducerStateEntry(77, 0, (), -1, 0, 6, TS)
    log.close()


def test_non_transactional_batch_during_a_transaction_is_invalid_txn_state(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    lead(log, txn(1, 0, 0))
    info = log.append_as_leader(idem(1, 0, 1), leader_epoch=0, now_ms=TS)
    assert info.error == ErrorCode.INVALID_TXN_STATE
    assert "ongoing" in (info.error_message or "")
    # Also inside one multi-batch append (the check sees the earlier batch).
    assert refused(log, txn(2, 0, 0) + idem(2, 0, 1)) == ErrorCode.INVALID_TXN_STATE
    # Sequence and epoch errors come first (Kafka checks them before the transaction).
    assert refused(log, idem(1, 0, 5)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    lead(log, marker(1, 0, commit=True))
    lead(log, idem(1, 0, 1))  # no transaction any more: fine, the sequence continues
    log.close()


def test_sequence_restarts_at_zero_after_a_marker_bumped_the_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    lead(log, txn(1, 0, 0, 3))
    lead(log, marker(1, 0, commit=True))
    # A marker of the same epoch keeps the sequence: transactions of one epoch share it.
    assert refused(log, txn(1, 0, 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    lead(log, txn(1, 0, 3))
    # The coordinator aborts with a bumped epoch (KIP-360): the retained batches go.
    lead(log, marker(1, 1, commit=False, coordinator_epoch=1))
    entry = log.producer_state.last_entry(1)
    assert entry is not None
    assert (entry.producer_epoch, entry.batches, entry.current_txn_first_offset) == (1, (), -1)
    assert refused(log, txn(1, 1, 4)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert refused(log, txn(1, 0, 4)) == ErrorCode.INVALID_PRODUCER_EPOCH
    lead(log, txn(1, 1, 0))
    assert log.collect_aborted_transactions(0, 10) == [(1, 4)]
    log.close()


def test_markers_end_nothing_without_a_transaction_and_are_never_duplicates(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    lead(log, idem(1, 0, 0))
    lead(log, marker(1, 0, commit=False, coordinator_epoch=3))
    lead(log, marker(1, 0, commit=False, coordinator_epoch=3))  # a resend: written again
    assert log.log_end_offset == 3
    assert view(log).indexes == [[]]
    entry = log.producer_state.last_entry(1)
    assert entry is not None
    assert (entry.coordinator_epoch, entry.last_marker_offset) == (3, 2)
    assert entry.batches == (BatchMetadata(0, 0, 0, 0, TS),)
    assert log.last_stable_offset(3) == 3
    log.close()


def test_control_batches_that_are_not_markers(tmp_path: Path) -> None:
    key, value = struct.pack(">hh", 0, 2), struct.pack(">hi", 0, 0)  # type 2: not a marker
    bogus = build_batch(
        [Record(key=key, value=value)], producer_id=1, producer_epoch=0, is_control=True
    )
    log = open_log(tmp_path)
    # From a client any control batch is refused; from the broker, one that is no marker.
    info = log.append_as_leader(bogus, leader_epoch=0, now_ms=TS)
    assert info.error == ErrorCode.INVALID_RECORD
    assert info.error_message == "control records are not allowed to be appended by clients"
    with pytest.raises(CorruptRecordBatchError) as raised:
        log.append_as_leader(bogus, leader_epoch=0, now_ms=TS, origin=AppendOrigin.COORDINATOR)
    assert raised.value.code == ErrorCode.INVALID_RECORD
    assert log.log_end_offset == 0
    # A follower keeps what its leader wrote, with no effect on the producer state.
    lead(log, txn(1, 0, 0))
    log.append_as_follower(stamped(bogus, 1), now_ms=TS)
    assert log.log_end_offset == 2
    assert dict(log.producer_state.ongoing_txns) == {0: 1}
    # A control batch without a producer id (e.g. KRaft's) never reaches the state.
    lead(log, build_batch([Record(key=key, value=value)], is_control=True))
    assert log.producer_state.producers.keys() == {1}
    before = view(log)
    log.close()
    log = open_log(tmp_path, recovery_point=0)  # replays everything
    assert view(log) == before
    log.close()


def test_follower_appends_apply_markers_unchecked(tmp_path: Path) -> None:
    leader = Log.open(tmp_path / "l-0", LogConfig(segment_bytes=400), now_ms=TS)
    follower = Log.open(tmp_path / "f-0", LogConfig(segment_bytes=400), now_ms=TS)
    appends = [
        txn(1, 0, 0, 2),
        txn(2, 0, 0),
        plain(),
        marker(1, 0, commit=False, coordinator_epoch=2),
        txn(1, 0, 2),
        marker(2, 0, commit=True, coordinator_epoch=2),
        marker(1, 1, commit=False, coordinator_epoch=3),
        txn(3, 0, 0) + plain() + marker(3, 0, commit=False),
    ]
    for raw in appends:
        first, _ = lead(leader, raw)
        fetched = leader.read(first, 1 << 20)
        assert fetched is not None
        follower.append_as_follower(fetched.read_bytes(), now_ms=TS)
    assert view(follower) == view(leader)
    assert follower.segment_base_offsets == leader.segment_base_offsets
    # Unchecked: a stale marker the leader accepted is applied as it is.
    stale = stamped(marker(1, 0, commit=True, coordinator_epoch=0), follower.log_end_offset)
    follower.append_as_follower(stale, now_ms=TS)
    entry = follower.producer_state.last_entry(1)
    assert entry is not None
    assert (entry.producer_epoch, entry.coordinator_epoch) == (0, 0)
    leader.close()
    follower.close()


# ---------------------------------------------------------------------------- restarts


def build_history(log: Log) -> int:
    """Several segments, ongoing and aborted transactions; returns the offset of a final
    ABORT marker (the last batch)."""
    lead(log, txn(1, 0, 0, 2))
    lead(log, txn(2, 0, 0))
    lead(log, plain(2))
    lead(log, marker(1, 0, commit=False, coordinator_epoch=1))
    lead(log, txn(3, 0, 0))
    lead(log, idem(4, 0, 0))
    lead(log, marker(3, 0, commit=True, coordinator_epoch=1))
    log.maybe_flush(TS)
    lead(log, txn(1, 0, 2, 2))
    lead(log, plain(3))
    lead(log, txn(5, 0, 0))
    lead(log, marker(5, 0, commit=False, coordinator_epoch=2))
    lead(log, txn(3, 0, 1))
    return lead(log, marker(1, 0, commit=False, coordinator_epoch=1))[0]


@pytest.mark.parametrize(
    "how",
    ["clean", "unclean", "unclean_lost_txnindex", "lost_txnindex", "corrupt_txnindex"],
)
def test_restart_gives_the_same_transactions(tmp_path: Path, how: str) -> None:
    config = LogConfig(segment_bytes=500)
    log = open_log(tmp_path, config)
    build_history(log)
    assert len(log.segment_base_offsets) >= 3
    assert any(s.txn_index.entries for s in log._local.segments[:-1])
    hw = log.log_end_offset - 3
    expected = view(log, hw)
    assert expected.ongoing
    assert expected.aborted
    assert expected.lso < hw
    recovery_point = log.recovery_point
    if how == "clean" or (how.endswith("_txnindex") and not how.startswith("unclean")):
        log.close()
        recovery_point = log.log_end_offset
    else:
        assert recovery_point < log.log_end_offset
        log.close_without_flush()
    directory = log.directory
    indexed = [s.base_offset for s in log._local.segments if s.txn_index.entries]
    victim = directory / f"{indexed[0]:020d}.txnindex"
    assert indexed[0] < recovery_point  # a trusted segment's index
    if how.endswith("lost_txnindex"):
        victim.unlink()
    elif how == "corrupt_txnindex":
        victim.write_bytes(victim.read_bytes()[:-1])
    log = open_log(tmp_path, config, recovery_point=recovery_point)
    assert view(log, hw) == expected
    assert (
        txnindex_on_disk(log, indexed[0])
        == expected.indexes[log.segment_base_offsets.index(indexed[0])]
    )
    log.close()


def test_restart_after_a_torn_marker_reopens_its_transaction(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=500)
    log = open_log(tmp_path, config)
    lead(log, txn(1, 0, 0))
    lead(log, plain())
    log.flush()
    lead(log, txn(2, 0, 0))
    expected = view(log)
    last = lead(log, marker(1, 0, commit=False))[0]
    assert view(log).aborted == [(1, 0)]
    recovery_point = log.recovery_point
    active = log._local.segments[-1].log_path
    log.close_without_flush()
    with active.open("r+b") as f:
        f.truncate(active.stat().st_size - 5)  # a torn write of the marker
    log = open_log(tmp_path, config, recovery_point=recovery_point)
    assert log.log_end_offset == last
    assert view(log) == expected
    assert dict(log.producer_state.ongoing_txns) == {0: 1, 2: 2}
    lead(log, marker(1, 0, commit=True))  # the coordinator's resend
    assert log.collect_aborted_transactions(0, 10) == []
    log.close()


def encode_v1_snapshot(end_offset: int, entries: list[ProducerStateEntry]) -> bytes:
    """A version-1 snapshot file, as written before transactions (producer_state rule 4)."""
    import crc32c

    parts = [struct.pack(">qi", end_offset, len(entries))]
    for e in entries:
        parts.append(struct.pack(">qhB", e.producer_id, e.producer_epoch, len(e.batches)))
        for m in e.batches:
            fields = (m.first_seq, m.last_seq, m.first_offset, m.last_offset, m.timestamp)
            parts.append(struct.pack(">iiqqq", *fields))
    body = b"".join(parts)
    return struct.pack(">4shI", b"TLPS", 1, crc32c.crc32c(body)) + body


def test_version_1_snapshot_still_loads(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    lead(log, idem(1, 0, 0, 2))
    lead(log, idem(2, 3, 7))
    lead(log, plain())
    expected = dict(log.producer_state.producers)
    log.close()
    path = log.directory / snapshot_file_name(4)
    assert decode_snapshot_file(path.read_bytes()).end_offset == 4
    assert path.read_bytes()[4:6] == struct.pack(">h", SNAPSHOT_VERSION) == b"\x00\x02"
    path.write_bytes(encode_v1_snapshot(4, list(expected.values())))
    log = open_log(tmp_path, recovery_point=4)
    assert path.exists()  # loaded, not discarded as corrupt
    assert dict(log.producer_state.producers) == expected
    assert log.producer_state.ongoing_txns == {}
    assert log.append_as_leader(idem(1, 0, 0, 2), leader_epoch=0, now_ms=TS).duplicate
    lead(log, txn(1, 0, 2))
    lead(log, marker(1, 0, commit=False))
    assert log.collect_aborted_transactions(0, 10) == [(1, 4)]
    log.close()
    assert (
        decode_snapshot_file(path.with_name(snapshot_file_name(6)).read_bytes())
        .producers[1]
        .coordinator_epoch
        == 0
    )


# ---------------------------------------------------------------------------- truncation


def test_truncation_removing_a_marker_reopens_the_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=400))
    lead(log, txn(1, 0, 0, 2))  # 0-1
    lead(log, txn(2, 0, 0))  # 2
    lead(log, plain(3))
    expected = view(log)
    m = lead(log, marker(1, 0, commit=False, coordinator_epoch=3))[0]
    lead(log, plain())
    assert view(log).aborted == [(1, 0)]
    log.truncate_to(m)
    assert view(log) == expected
    assert log.last_stable_offset(log.log_end_offset) == 0
    # The same marker again (a new leader's coordinator resends it).
    lead(log, marker(1, 0, commit=False, coordinator_epoch=3))
    assert log.collect_aborted_transactions(0, 10) == [(1, 0)]
    # Cutting the start of an ongoing transaction forgets it (and cutting the marker again
    # reopens producer 1's).
    log.truncate_to(2)
    assert dict(log.producer_state.ongoing_txns) == {0: 1}
    assert log.producer_state.last_entry(2) is None
    assert log.last_stable_offset(2) == 0
    assert view(log).aborted == []
    log.close()


def test_truncation_cutting_an_expired_producers_marker_reopens_its_transaction(
    tmp_path: Path,
) -> None:
    config = LogConfig(producer_id_expiration_ms=1000)
    log = open_log(tmp_path, config)
    lead(log, txn(1, 0, 0))
    lead(log, plain())
    m = lead(log, marker(1, 0, commit=True))[0]
    log.apply_retention(TS + 5000)
    assert log.producer_state.producers == {}  # expired
    log.truncate_to(m)  # the marker goes: the transaction is ongoing again
    assert dict(log.producer_state.ongoing_txns) == {0: 1}
    assert log.last_stable_offset(m) == 0
    before = view(log)
    log.close()
    log = Log.open(tmp_path / "t-0", config, now_ms=TS + 5000, recovery_point=m)
    assert view(log) == before  # ongoing transactions never expire
    log.close()


def test_truncation_keeps_earlier_aborted_entries(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    lead(log, txn(1, 0, 0))
    lead(log, marker(1, 0, commit=False))
    lead(log, txn(1, 0, 1))
    m2 = lead(log, marker(1, 0, commit=False))[0]
    while len(log.segment_base_offsets) < 3:
        lead(log, plain())
    lead(log, txn(1, 0, 2))
    lead(log, marker(1, 0, commit=False))
    assert [first for _, first in view(log).aborted][:2] == [0, 2]
    log.truncate_to(m2)
    assert view(log).aborted == [(1, 0)]
    assert txnindex_on_disk(log, 0) == [AbortedTxn(1, 0, 1, 2)]
    assert dict(log.producer_state.ongoing_txns) == {2: 1}
    log.close()


# ---------------------------------------------------------------------------- expiration


def test_expiration_keeps_producers_with_an_ongoing_transaction(tmp_path: Path) -> None:
    config = LogConfig(producer_id_expiration_ms=1000)
    log = open_log(tmp_path, config)
    lead(log, txn(1, 0, 0))  # ongoing
    lead(log, txn(2, 0, 0))
    lead(log, marker(2, 0, commit=True, ts=TS + 500))  # committed, marker at TS + 500
    lead(log, idem(3, 0, 0))
    log.apply_retention(TS + 1200)
    assert log.producer_state.producers.keys() == {1, 2}  # 2's marker is recent enough
    log.apply_retention(TS + 1500)
    assert log.producer_state.producers.keys() == {1}
    assert log.last_stable_offset(log.log_end_offset) == 0
    log.close()
    log = Log.open(tmp_path / "t-0", config, now_ms=TS + 10**9, recovery_point=0)
    assert log.producer_state.producers.keys() == {1}
    lead(log, marker(1, 0, commit=False), now_ms=TS + 10**9)
    assert log.collect_aborted_transactions(0, 10) == [(1, 0)]
    log.apply_retention(TS + 10**9)
    assert log.producer_state.producers == {}  # the marker's timestamp is old too
    log.close()


# ---------------------------------------------------------------------------- coordinator


def test_coordinator_appends_skip_the_sequence_checks(tmp_path: Path) -> None:
    """producer_state rule 9: the group coordinator writes a transactional producer's
    offset commits itself, without a sequence (Kafka's AppendOrigin.Coordinator)."""
    offsets = build_batch(
        [Record(key=b"k", value=b"offset")],
        producer_id=1,
        producer_epoch=2,
        base_sequence=-1,
        is_transactional=True,
    )
    log = open_log(tmp_path)
    assert refused(log, offsets) == ErrorCode.INVALID_RECORD  # a client may not
    info = log.append_as_leader(offsets, leader_epoch=0, now_ms=TS, origin=AppendOrigin.COORDINATOR)
    assert (info.error, info.first_offset) == (ErrorCode.NONE, 0)
    # Again: no duplicate detection for the coordinator's own batches.
    again = log.append_as_leader(
        offsets, leader_epoch=0, now_ms=TS, origin=AppendOrigin.COORDINATOR
    )
    assert (again.duplicate, again.first_offset) == (False, 1)
    assert dict(log.producer_state.ongoing_txns) == {0: 1}
    # Epochs and the transaction state are still checked.
    stale = build_batch(
        [Record(value=b"x")],
        producer_id=1,
        producer_epoch=1,
        base_sequence=-1,
        is_transactional=True,
    )
    info = log.append_as_leader(stale, leader_epoch=0, now_ms=TS, origin=AppendOrigin.COORDINATOR)
    assert info.error == ErrorCode.INVALID_PRODUCER_EPOCH
    plain_commit = build_batch([Record(value=b"x")], producer_id=1, producer_epoch=2)
    info = log.append_as_leader(
        plain_commit, leader_epoch=0, now_ms=TS, origin=AppendOrigin.COORDINATOR
    )
    assert info.error == ErrorCode.INVALID_TXN_STATE
    lead(log, marker(1, 2, commit=False))
    assert log.collect_aborted_transactions(0, 10) == [(1, 0)]
    before = view(log)
    log.close()
    log = open_log(tmp_path, recovery_point=0)
    assert view(log) == before
    log.close()


def test_a_data_dir_from_before_transactions_opens(tmp_path: Path) -> None:
    """No .txnindex files and version-1 snapshots, as an older tidelog left them."""
    config = LogConfig(segment_bytes=300)
    log = open_log(tmp_path, config)
    for k in range(12):
        lead(log, idem(k % 3, 0, k // 3))
        lead(log, plain())
    expected = dict(log.producer_state.producers)
    log.close()
    directory = log.directory
    for path in directory.glob("*.txnindex"):
        path.unlink()
    for path in directory.glob("*.snapshot"):
        snapshot = decode_snapshot_file(path.read_bytes())
        path.write_bytes(encode_v1_snapshot(snapshot.end_offset, [*snapshot.producers.values()]))
    log = open_log(tmp_path, config, recovery_point=24)
    assert dict(log.producer_state.producers) == expected
    assert sorted(p.name for p in directory.glob("*.txnindex")) == [
        f"{b:020d}.txnindex" for b in log.segment_base_offsets
    ]
    assert all(p.stat().st_size == 0 for p in directory.glob("*.txnindex"))
    log.close()
