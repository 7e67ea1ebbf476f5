"""Units of the transaction pieces below the Log: the ``.txnindex`` file and its in-memory
form (``tidelog.storage.txn_index``), marker parsing and the LSO tracker
(``tidelog.storage.transactions``), and the control batches ``build_control_batch`` writes
(checked against kafka-python's independent decoder)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from tidelog.client.records import Compression, Record, build_batch, build_control_batch
from tidelog.protocol.records import parse_header
from tidelog.storage.transactions import EndTxnMarker, TxnTracker, parse_end_txn_marker
from tidelog.storage.txn_index import (
    TXN_ENTRY_SIZE,
    AbortedTxn,
    TransactionIndex,
    TxnIndexCorruptError,
    decode_entries,
    encode_entries,
)

TS = 1_700_000_000_000

# ---------------------------------------------------------------------------- markers


@pytest.mark.parametrize("commit", [True, False])
def test_build_control_batch_is_a_kafka_marker(commit: bool) -> None:
    raw = build_control_batch(7, 3, commit, 42, TS)
    header = parse_header(raw)
    assert header.is_control
    assert header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, -1)
    assert (header.records_count, header.compression, header.max_timestamp) == (1, 0, TS)
    # kafka-python's decoder (independent of ours) reads the same marker.
    batch = DefaultRecordBatch(raw)
    assert batch.is_control_batch
    assert batch.is_transactional
    (record,) = list(batch)
    assert record.commit is commit
    assert record.abort is not commit
    assert record.value == struct.pack(">hi", 0, 42)
    assert parse_end_txn_marker(raw) == EndTxnMarker(commit, 42)


def test_parse_end_txn_marker_refuses_what_is_not_a_marker() -> None:
    data = build_batch([Record(value=b"v")], producer_id=1, producer_epoch=0, base_sequence=0)
    assert parse_end_txn_marker(data) is None  # not a control batch
    control_key = struct.pack(">hh", 0, 1)
    value = struct.pack(">hi", 0, 5)

    def control(records: list[Record], compression: Compression = Compression.NONE) -> bytes:
        return build_batch(
            records, producer_id=1, producer_epoch=0, is_control=True, compression=compression
        )

    assert parse_end_txn_marker(control([Record(key=control_key, value=value)])) == (True, 5)
    two = [Record(key=control_key, value=value)] * 2
    assert parse_end_txn_marker(control(two)) is None
    leader_change = struct.pack(">hh", 0, 2)
    assert parse_end_txn_marker(control([Record(key=leader_change, value=value)])) is None
    assert parse_end_txn_marker(control([Record(key=b"\x00", value=value)])) is None
    assert parse_end_txn_marker(control([Record(key=control_key, value=b"\x00\x00")])) is None
    assert parse_end_txn_marker(control([Record(key=control_key, value=None)])) is None
    gz = control([Record(key=control_key, value=value)], Compression.GZIP)
    assert parse_end_txn_marker(gz) is None
    # Newer key / value versions with longer fields are read as Kafka does.
    newer = [Record(key=struct.pack(">hhh", 1, 0, 9), value=struct.pack(">hiq", 1, 8, 0))]
    assert parse_end_txn_marker(control(newer)) == (False, 8)
    # A record cut short (a varint running past the batch) is no marker either.
    good = control([Record(key=control_key, value=value)])
    torn = bytearray(good[:-3])
    struct.pack_into(">i", torn, 8, len(torn) - 12)
    assert parse_end_txn_marker(bytes(torn)) is None


# ---------------------------------------------------------------------------- the file


def entry(pid: int, first: int, last: int, lso: int | None = None) -> AbortedTxn:
    return AbortedTxn(pid, first, last, last + 1 if lso is None else lso)


def test_entries_round_trip_in_kafka_layout() -> None:
    entries = [entry(1, 0, 5), entry(2, 3, 9, 4), entry(2**62, 10, 11, 2)]
    data = encode_entries(entries)
    assert len(data) == 3 * TXN_ENTRY_SIZE == 102
    assert data[:TXN_ENTRY_SIZE] == struct.pack(">hqqqq", 0, 1, 0, 5, 6)
    assert decode_entries(data, 0) == entries


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (encode_entries([entry(1, 0, 5)])[:-1], "multiple of 34"),
        (struct.pack(">hqqqq", 1, 1, 0, 5, 6), "version"),
        (encode_entries([entry(1, 0, 5), entry(2, 0, 5)]), "out of order"),
        (encode_entries([entry(1, 6, 5)]), "out of order"),
        (encode_entries([entry(1, 0, 5, 7)]), "out of order"),
        (encode_entries([entry(1, 0, 2)]), "out of order"),  # below the base offset 3
    ],
)
def test_decode_refuses_unsound_files(data: bytes, match: str) -> None:
    with pytest.raises(TxnIndexCorruptError, match=match):
        decode_entries(data, 3)


def test_index_file_append_truncate_load(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000010.txnindex"
    index = TransactionIndex(path, 10, create=True)
    assert path.exists()
    assert path.stat().st_size == 0
    assert index.append(entry(1, 2, 12))
    assert index.append(entry(2, 11, 15, 13))
    assert not index.append(entry(1, 2, 12))  # a replay of an indexed marker: no-op
    assert not index.append(entry(3, 14, 14))
    assert path.stat().st_size == 2 * TXN_ENTRY_SIZE
    index.flush()
    index.truncate_to(15)
    assert index.entries == [entry(1, 2, 12)]
    assert path.stat().st_size == TXN_ENTRY_SIZE
    index.close()
    again = TransactionIndex(path, 10, create=False)
    assert again.load()
    assert again.entries == [entry(1, 2, 12)]
    again.truncate_to(0)  # the fd was never opened: truncates by path
    assert path.stat().st_size == 0
    again.flush()


@pytest.mark.parametrize("damage", ["missing", "torn", "version"])
def test_unsound_file_is_rebuilt_whole(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path, 0, create=True)
    index.append(entry(1, 0, 4))
    index.close()
    if damage == "missing":
        path.unlink()
    elif damage == "torn":
        path.write_bytes(path.read_bytes()[:-5])
    else:
        path.write_bytes(b"\x00\x07" + path.read_bytes()[2:])
    index = TransactionIndex(path, 0, create=False)
    assert not index.load()
    assert index.rebuilding
    assert index.entries == []
    assert not path.exists()  # until the rebuild is complete (invariant 2)
    index.append(entry(1, 0, 4))
    index.append(entry(2, 1, 7))
    assert not path.exists()
    assert index.finish_rebuild()
    assert not index.finish_rebuild()
    assert decode_entries(path.read_bytes(), 0) == [entry(1, 0, 4), entry(2, 1, 7)]
    assert not list(tmp_path.glob("*.tmp"))


def test_collect_stops_at_an_entry_whose_lso_reaches_the_bound(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "0.txnindex", 0, create=True)
    index.append(entry(1, 0, 5, 2))  # producer 2's transaction from 2 was still open
    index.append(entry(3, 8, 9, 10))
    index.append(entry(2, 2, 20, 21))
    out: list[AbortedTxn] = []
    assert index.collect(0, 1, out)  # the first entry's lso 2 >= 1: nothing later matters
    assert out == [entry(1, 0, 5, 2)]
    out = []
    assert index.collect(6, 9, out)  # entry 1 ends before 6; entry 2 has lso 10 >= 9
    assert out == [entry(3, 8, 9, 10)]
    out = []
    assert not index.collect(0, 100, out)  # no lso reaches 100: later segments may matter
    assert out == index.entries
    out = []
    assert index.collect(10, 3, out)  # only producer 2's (first 2 < 3, marker 20 >= 10)
    assert out == [entry(2, 2, 20, 21)]


# ---------------------------------------------------------------------------- LSO tracker


def test_tracker_lso_and_aborted_entries() -> None:
    t = TxnTracker()
    assert t.last_stable_offset(10, 0) == 10
    assert t.first_unstable_offset() is None
    t.start(1, 3)
    t.start(2, 5)
    assert list(t.ongoing) == [3, 5]
    assert t.last_stable_offset(10, 0) == 3
    assert t.last_stable_offset(10, 4) == 4  # counted from the log start
    assert t.last_stable_offset(2, 0) == 2
    assert t.end(1, 3, 7, commit=True) is None
    assert t.last_marker_offset == 7
    assert t.last_stable_offset(7, 0) == 3  # the marker is not below the high watermark
    assert t.last_stable_offset(8, 0) == 5  # it is now: only producer 2's remains
    assert t.end(2, 5, 9, commit=False) == AbortedTxn(2, 5, 9, 10)
    assert t.last_stable_offset(9, 0) == 5
    assert t.last_stable_offset(10, 0) == 10
    assert t.end(3, -1, 11, commit=False) is None  # no ongoing transaction: nothing
    assert t.last_marker_offset == 11


@given(
    st.lists(
        st.tuples(st.integers(0, 30), st.integers(1, 20)), min_size=1, max_size=30
    ),  # (first offset, marker offset - first offset) per completed transaction
    st.lists(st.integers(0, 120), min_size=1, max_size=10),
)
@settings(max_examples=200, deadline=None)
def test_tracker_sliding_minimum_matches_the_plain_minimum(
    txns: list[tuple[int, int]], watermarks: list[int]
) -> None:
    """Invariant 2: the reduced deque answers as the full list for a growing watermark."""
    t = TxnTracker()
    completed: list[tuple[int, int]] = []  # (marker, first), markers increasing
    marker = 0
    for first, length in txns:
        marker = max(marker + 1, first + length)
        t.start(9, first)
        t.end(9, first, marker, commit=True)
        completed.append((marker, first))
    for hw in sorted(watermarks):
        firsts = [f for m, f in completed if m >= hw]
        expected = min(hw, *firsts) if firsts else hw
        assert t.last_stable_offset(hw, 0) == expected


def test_an_empty_rebuilt_index_is_just_created(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path, 0, create=False)
    assert not index.load()
    assert not index.finish_rebuild()  # nothing to make durable: no directory fsync
    assert path.exists()
    assert path.stat().st_size == 0
    assert not index.rebuilding
