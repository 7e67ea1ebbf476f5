"""``kafka.isolation.level`` without Spark: the option, the decoder's transaction rules
(KIP-98, as the Java consumer applies them) on hand-built batches, and ``read_range``'s
fetches, completion and end-of-log handling against a stub client."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

pytest.importorskip("pyarrow")  # the spark extra (scripts/bootstrap.sh spark)

import crc32c
import pyarrow as pa

from tidelog.client import READ_COMMITTED, READ_UNCOMMITTED, FetchResult, Record, build_batch
from tidelog.client.client import ListOffsetsResult
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.records import CRC_START, Compression, stamp_batch
from tidelog.spark.decode import Columns, decode_into
from tidelog.spark.errors import ConnectorError, DataLossError
from tidelog.spark.offset_reader import OffsetReader
from tidelog.spark.options import SparkOptionError, parse_read_options
from tidelog.spark.read_loop import read_range

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}
TP = TopicPartition("t", 0)
A, B, C = 1000, 2000, 3000  # producer ids
ABORT, COMMIT = False, True


# --- options -------------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [True, False])
def test_isolation_level_defaults_to_read_committed(streaming: bool) -> None:
    assert parse_read_options(BOOT, streaming=streaming).read_committed is True


@pytest.mark.parametrize(
    ("value", "read_committed"),
    [
        ("read_committed", True),
        ("read_uncommitted", False),
        ("READ_UNCOMMITTED", False),
        (" read_committed ", True),
    ],
)
def test_isolation_level_values(value: str, read_committed: bool) -> None:
    # Spark hands the options over with lower-cased keys.
    options = {**BOOT, "kafka.isolation.level": value}
    for given in (options, {k.lower(): v for k, v in options.items()}):
        assert parse_read_options(given, streaming=True).read_committed is read_committed


@pytest.mark.parametrize("value", ["", "committed", "read-committed", "1"])
def test_a_bad_isolation_level_is_named(value: str) -> None:
    with pytest.raises(SparkOptionError) as info:
        parse_read_options({**BOOT, "kafka.isolation.level": value}, streaming=False)
    assert str(info.value) == (
        f"option 'kafka.isolation.level' must be read_committed or read_uncommitted, not {value!r}"
    )


def test_isolation_level_is_not_a_write_option(caplog: pytest.LogCaptureFixture) -> None:
    from tidelog.spark.options import parse_write_options

    # A producer has no isolation.level: ignored with a warning, as a Kafka client does.
    parse_write_options(
        {"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.isolation.level": "x"}
    )
    assert (
        "option 'kafka.isolation.level' is not a Kafka client property tidelog uses for a write"
        in (caplog.text)
    )


# --- batches -------------------------------------------------------------------------------


def _control_batch(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, ts: int
) -> bytes:
    """A transaction marker as the broker writes it (used if the client's builder is absent):
    attributes 0x30, one record, key int16 version 0 + int16 type (0 abort, 1 commit),
    value int16 version 0 + int32 coordinator epoch."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    body = b"\x00\x00\x00" + bytes([len(key) * 2]) + key + bytes([len(value) * 2]) + value
    body += b"\x00"  # no headers
    record = bytes([len(body) * 2]) + body
    header = bytearray(
        struct.pack(
            ">qiibIhiqqqhii",
            0,
            61 - 12 + len(record),
            -1,
            2,
            0,
            0x30,
            0,
            ts,
            ts,
            producer_id,
            producer_epoch,
            -1,
            1,
        )
    )
    batch = header + record
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


try:
    from tidelog.client.records import build_control_batch as _build_control_batch
except ImportError:  # the client's builder is recent; same bytes either way
    _build_control_batch = _control_batch


def marker(offset: int, producer_id: int, commit: bool) -> bytes:
    batch = bytearray(_build_control_batch(producer_id, 0, commit, 5, 1_700_000_000_000))
    stamp_batch(batch, 0, offset, -1)
    return bytes(batch)


def data(
    offset: int,
    producer_id: int,
    count: int = 1,
    *,
    transactional: bool = True,
    compression: Compression = Compression.NONE,
) -> bytes:
    """``count`` records at ``offset``..: values ``b"<pid>@<offset>"``; producer_id -1 is
    a plain (non-idempotent) producer."""
    return build_batch(
        [Record(b"%d@%d" % (producer_id, offset + i)) for i in range(count)],
        base_offset=offset,
        base_timestamp_ms=1_700_000_000_000,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        is_transactional=transactional,
    )


def decode(
    buf: bytes,
    aborted: Sequence[tuple[int, int]] | None,
    from_offset: int = 0,
    until_offset: int = 1 << 40,
) -> tuple[list[int], int]:
    columns = Columns()
    next_offset = decode_into(
        buf,
        columns,
        from_offset=from_offset,
        until_offset=until_offset,
        include_headers=False,
        aborted_transactions=aborted,
    )
    values = [v.decode() for v in columns.values if v is not None]
    assert values == [f"{pid}@{o}" for pid, o in (v.split("@") for v in values)]
    assert [int(v.split("@")[1]) for v in values] == columns.offsets
    return columns.offsets, next_offset


def test_the_control_batch_builder_matches_the_spec() -> None:
    assert marker(7, A, ABORT)[21:23] == b"\x00\x30"  # attributes: transactional + control
    assert _control_batch(A, 0, COMMIT, 5, 1) == _build_control_batch(A, 0, COMMIT, 5, 1)


# Two producers' transactions interleaved in one partition: A's is aborted, B's committed;
# a plain producer and A's idempotent (non-transactional) batches in between; then A's
# next transaction, committed.
#   0-1 A txn | 2-3 B txn | 4 plain | 5 A txn | 6 A idempotent | 7-8 B txn | 9 A ABORT |
#   10 B txn | 11 B COMMIT | 12 A txn | 13 A COMMIT | 14 plain
INTERLEAVED = b"".join(
    [
        data(0, A, 2),
        data(2, B, 2),
        data(4, -1, transactional=False),
        data(5, A),
        data(6, A, transactional=False),
        data(7, B, 2),
        marker(9, A, ABORT),
        data(10, B),
        marker(11, B, COMMIT),
        data(12, A),
        marker(13, A, COMMIT),
        data(14, -1, transactional=False),
    ]
)
COMMITTED = [2, 3, 4, 6, 7, 8, 10, 12, 14]
EVERY_DATA_RECORD = [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14]


def test_read_committed_drops_aborted_transactions_and_markers() -> None:
    assert decode(INTERLEAVED, [(A, 0)]) == (COMMITTED, 15)


def test_read_uncommitted_keeps_aborted_records_but_drops_markers() -> None:
    assert decode(INTERLEAVED, None) == (EVERY_DATA_RECORD, 15)
    # read_committed with no aborted transaction listed keeps the same records.
    assert decode(INTERLEAVED, []) == (EVERY_DATA_RECORD, 15)


def test_the_aborted_list_need_not_be_sorted() -> None:
    buf = data(0, A) + data(1, B) + marker(2, B, ABORT) + data(3, C) + data(4, A)
    buf += marker(5, A, ABORT) + data(6, C) + marker(7, C, COMMIT)
    assert decode(buf, [(A, 0), (B, 1)]) == ([3, 6], 8)
    assert decode(buf, [(B, 1), (A, 0)]) == ([3, 6], 8)


def test_an_abort_marker_ends_the_aborted_state_and_a_commit_marker_does_not() -> None:
    buf = b"".join(
        [
            data(0, A),
            marker(1, A, COMMIT),  # not A's ending (the list says its transaction aborted)
            data(2, A),
            marker(3, A, ABORT),
            data(4, A),  # a new transaction: not listed as aborted
            marker(5, A, COMMIT),
        ]
    )
    assert decode(buf, [(A, 0)]) == ([4], 6)


def test_a_second_aborted_transaction_of_the_same_producer() -> None:
    buf = data(0, A) + marker(1, A, ABORT) + data(2, A) + marker(3, A, COMMIT)
    buf += data(4, A, 3) + marker(7, A, ABORT) + data(8, B)
    assert decode(buf, [(A, 0), (A, 4)]) == ([2, 8], 9)


def test_a_fetch_from_the_middle_of_an_aborted_transaction() -> None:
    # The broker lists the transaction (first offset 10) although the fetch starts at 12.
    buf = data(12, A, 2) + data(14, B) + marker(15, A, ABORT) + data(16, A)
    assert decode(buf, [(A, 10)], from_offset=12) == ([14, 16], 17)
    # The marker alone (the fetch starts at it): the transaction is entered and left there.
    assert decode(marker(15, A, ABORT) + data(16, A), [(A, 10)], from_offset=15) == ([16], 17)


def test_a_batch_straddling_the_start_of_the_range() -> None:
    # Fetching at 1 returns the whole batch 0-2 of an aborted transaction, then B's.
    buf = data(0, A, 3) + data(3, B) + marker(4, A, ABORT)
    assert decode(buf, [(A, 0)], from_offset=1) == ([3], 5)
    assert decode(buf, None, from_offset=1) == ([1, 2, 3], 5)


@pytest.mark.parametrize("compression", list(Compression))
def test_compressed_transactional_batches(compression: Compression) -> None:
    buf = data(0, A, 5, compression=compression) + data(5, B, 5, compression=compression)
    buf += marker(10, A, ABORT) + marker(11, B, COMMIT)
    assert decode(buf, [(A, 0)]) == (list(range(5, 10)), 12)
    assert decode(buf, None) == (list(range(10)), 12)


def test_a_range_that_ends_right_after_a_marker_is_complete() -> None:
    # [0, 10): the last offset of the range is a marker; the next fetch offset is 10.
    buf = data(0, B, 9) + marker(9, B, COMMIT) + data(10, B)
    assert decode(buf, [], until_offset=10) == (list(range(9)), 10)
    # [0, 10) where everything is aborted: no row, and still done.
    aborted = data(0, A, 9) + marker(9, A, ABORT) + data(10, B)
    assert decode(aborted, [(A, 0)], until_offset=10) == ([], 10)


def test_records_past_the_range_are_not_rows() -> None:
    assert decode(INTERLEAVED, [(A, 0)], from_offset=3, until_offset=11) == (
        [3, 4, 6, 7, 8, 10],
        11,
    )


# --- read_range and offsets against a stub client ------------------------------------------


class StubClient:
    """Answers each fetch with the next scripted result; records every call."""

    def __init__(self, results: Sequence[FetchResult]) -> None:
        self.results = list(results)
        self.fetches: list[tuple[int, int]] = []  # (fetch offset, isolation level)
        self.list_offsets_calls: list[tuple[dict[TopicPartition, int], int]] = []

    def fetch(self, partitions: Mapping[TopicPartition, Any], **kwargs: Any) -> Any:
        self.fetches.append((partitions[TP].fetch_offset, kwargs["isolation_level"]))
        if not self.results:
            raise AssertionError(f"an unexpected fetch at {partitions[TP].fetch_offset}")
        result = self.results[0] if len(self.results) == 1 else self.results.pop(0)
        return {TP: result}

    def list_offsets(self, partitions: Mapping[TopicPartition, int], **kwargs: Any) -> Any:
        self.list_offsets_calls.append((dict(partitions), kwargs["isolation_level"]))
        return {tp: ListOffsetsResult(ErrorCode.NONE, 42, -1) for tp in partitions}

    def metadata(self, topics: Any = None) -> None:
        pass

    def close(self) -> None:
        pass


SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
)


def fetched(
    records: bytes, hw: int, lso: int, aborted: Sequence[tuple[int, int]] = ()
) -> FetchResult:
    return FetchResult(ErrorCode.NONE, hw, lso, 0, records, aborted_transactions=list(aborted))


def read(options: dict[str, str], until: int, stub: StubClient, start: int = 0) -> list[int]:
    parsed = parse_read_options({**BOOT, **options}, streaming=False)
    batches = read_range(parsed, TP, start, until, SCHEMA, client=stub)  # type: ignore[arg-type]
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_read_range_fetches_read_committed_and_stops_after_a_trailing_marker() -> None:
    # One fetch returns [0, 15); the range [0, 14) ends right after A's COMMIT marker at 13,
    # so it is done after that fetch (a second one would fail the stub).
    stub = StubClient([fetched(INTERLEAVED, 15, 15, [(A, 0)])])
    assert read({}, 14, stub) == [2, 3, 4, 6, 7, 8, 10, 12]
    assert stub.fetches == [(0, READ_COMMITTED)]


def test_read_range_read_uncommitted() -> None:
    # The broker sends no aborted list for read_uncommitted; even if one came, it is unused.
    stub = StubClient([fetched(INTERLEAVED, 15, 15, [(A, 0)])])
    assert read({"kafka.isolation.level": "read_uncommitted"}, 15, stub) == EVERY_DATA_RECORD
    assert stub.fetches == [(0, READ_UNCOMMITTED)]


def test_read_range_advances_over_fetches_that_give_no_rows() -> None:
    # Fetches cut at batch boundaries: an aborted batch alone, then its marker alone.
    stub = StubClient(
        [
            fetched(data(0, A, 3), 6, 6, [(A, 0)]),
            fetched(marker(3, A, ABORT), 6, 6, [(A, 0)]),
            fetched(data(4, B, 2), 6, 6, []),
        ]
    )
    assert read({}, 6, stub) == [4, 5]
    assert stub.fetches == [(0, 1), (3, 1), (4, 1)]


def test_an_lso_held_back_by_an_open_transaction_is_waited_for_not_loss() -> None:
    # Planned [0, 4), e.g. by a read_uncommitted run of the query; offsets 2-3 are an open
    # transaction: the LSO is 2, the HW 4. Empty fetches at 2 until the marker is written.
    stub = StubClient(
        [
            fetched(data(0, B, 2), 4, 2),
            fetched(b"", 4, 2),
            fetched(b"", 4, 2),
            fetched(data(2, A, 2) + marker(4, A, COMMIT), 5, 5),
        ]
    )
    assert read({"kafkaConsumer.pollTimeoutMs": "5000"}, 4, stub) == [0, 1, 2, 3]
    # It never ends: after kafkaConsumer.pollTimeoutMs the task fails, not as data loss.
    stuck = StubClient([fetched(data(0, B, 2), 4, 2), fetched(b"", 4, 2)])
    with pytest.raises(ConnectorError) as info:
        read({"kafkaConsumer.pollTimeoutMs": "300"}, 4, stuck)
    assert not isinstance(info.value, DataLossError)
    assert "the last stable offset stayed at 2 (high watermark 4)" in str(info.value)


def test_an_lso_and_hw_below_the_planned_end_is_loss_named_by_the_lso() -> None:
    stub = StubClient([fetched(data(0, B, 2), 2, 2), fetched(b"", 2, 2)])
    with pytest.raises(DataLossError, match="the last stable offset is 2, below the planned end 4"):
        read({"kafkaConsumer.pollTimeoutMs": "300"}, 4, stub)
    uncommitted = StubClient([fetched(data(0, B, 2), 2, 2), fetched(b"", 2, 2)])
    with pytest.raises(DataLossError, match="the high watermark is 2, below the planned end 4"):
        read(
            {"kafkaConsumer.pollTimeoutMs": "300", "kafka.isolation.level": "read_uncommitted"},
            4,
            uncommitted,
        )


@pytest.mark.parametrize(
    ("level", "expected"),
    [("read_committed", READ_COMMITTED), ("read_uncommitted", READ_UNCOMMITTED)],
)
def test_offset_look_ups_use_the_isolation_level(level: str, expected: int) -> None:
    reader = OffsetReader(
        parse_read_options({**BOOT, "kafka.isolation.level": level}, streaming=True)
    )
    stub = StubClient([])
    reader.session._client = stub  # type: ignore[assignment]
    assert reader.latest([TP]) == {TP: 42}
    assert reader.earliest([TP]) == {TP: 42}
    assert stub.list_offsets_calls == [({TP: -1}, expected), ({TP: -2}, expected)]
