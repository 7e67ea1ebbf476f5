"""``__transaction_state`` records in Kafka's key/value format (version 0): byte-exact,
round trips, replay, and every kind of malformed input refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.coordinator import partition_for
from tidelog.coordinator.txn import TxnMetadata, TxnState
from tidelog.coordinator.txn_records import (
    TxnRecordFormatError,
    apply_txn_record,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
    partition_for_txn,
)
from tidelog.model import TopicPartition


def i8(v: int) -> bytes:
    return v.to_bytes(1, "big", signed=True)


def i16(v: int) -> bytes:
    return v.to_bytes(2, "big", signed=True)


def i32(v: int) -> bytes:
    return v.to_bytes(4, "big", signed=True)


def i64(v: int) -> bytes:
    return v.to_bytes(8, "big", signed=True)


def s(v: str) -> bytes:
    return i16(len(v.encode())) + v.encode()


def meta(
    state: TxnState = TxnState.ONGOING,
    partitions: frozenset[TopicPartition] = frozenset(),
    txn_id: str = "tx",
) -> TxnMetadata:
    return TxnMetadata(
        transactional_id=txn_id,
        producer_id=1001,
        producer_epoch=3,
        timeout_ms=60_000,
        state=state,
        partitions=partitions,
        txn_start_ms=500,
        last_update_ms=700,
    )


def value_bytes(status: int = 1, partitions: bytes = i32(-1), version: int = 0) -> bytes:
    return (
        i16(version)
        + i64(1001)
        + i16(3)
        + i32(60_000)
        + i8(status)
        + partitions
        + i64(700)
        + i64(500)
    )


def test_key_is_kafkas_bytes() -> None:
    assert encode_txn_key("tx") == b"\x00\x00\x00\x02tx"
    assert decode_txn_key(b"\x00\x00\x00\x02tx") == "tx"
    assert decode_txn_key(encode_txn_key("é-ü")) == "é-ü"


def test_value_is_kafkas_v0_partitions_grouped_by_topic_sorted() -> None:
    tps = frozenset({TopicPartition("b", 2), TopicPartition("a", 7), TopicPartition("b", 0)})
    partitions = (
        i32(2) + s("a") + i32(1) + i32(7) + s("b") + i32(2) + i32(0) + i32(2)
    )  # topics "a" [7], "b" [0, 2]
    assert encode_txn_value(meta(TxnState.ONGOING, tps)) == value_bytes(1, partitions)
    assert decode_txn_value("tx", value_bytes(1, partitions)) == meta(TxnState.ONGOING, tps)


def test_empty_state_writes_null_partitions() -> None:
    assert encode_txn_value(meta(TxnState.EMPTY)) == value_bytes(0, i32(-1))
    # Other states with no partitions write an empty array; null reads back as none too.
    assert encode_txn_value(meta(TxnState.COMPLETE_COMMIT)) == value_bytes(4, i32(0))
    assert decode_txn_value("tx", value_bytes(4, i32(-1))) == meta(TxnState.COMPLETE_COMMIT)


def test_empty_state_with_partitions_is_not_written() -> None:
    with pytest.raises(ValueError, match="Empty"):
        encode_txn_value(meta(TxnState.EMPTY, frozenset({TopicPartition("a", 0)})))


@pytest.mark.parametrize(
    ("state", "code", "name"),
    [
        (TxnState.EMPTY, 0, "Empty"),
        (TxnState.ONGOING, 1, "Ongoing"),
        (TxnState.PREPARE_COMMIT, 2, "PrepareCommit"),
        (TxnState.PREPARE_ABORT, 3, "PrepareAbort"),
        (TxnState.COMPLETE_COMMIT, 4, "CompleteCommit"),
        (TxnState.COMPLETE_ABORT, 5, "CompleteAbort"),
        (TxnState.DEAD, 6, "Dead"),
        (TxnState.PREPARE_EPOCH_FENCE, 7, "PrepareEpochFence"),
    ],
)
def test_status_codes_are_kafkas(state: TxnState, code: int, name: str) -> None:
    assert state.code == code
    assert state.value == name
    assert TxnState.from_code(code) is state
    assert TxnState(name) is state
    assert decode_txn_value("tx", value_bytes(code)).state is state


texts = st.text(max_size=12)
tp_sets = st.frozensets(
    st.builds(TopicPartition, st.text(min_size=1, max_size=8), st.integers(0, 2**31 - 1)),
    max_size=8,
)


@given(
    texts,
    st.integers(-1, 2**63 - 1),
    st.integers(-1, 2**15 - 1),
    st.integers(-(2**31), 2**31 - 1),
    st.sampled_from(TxnState),
    tp_sets,
    st.integers(-1, 2**62),
    st.integers(-1, 2**62),
)
def test_round_trip(  # noqa: PLR0917 - hypothesis passes them positionally
    txn_id: str,
    producer_id: int,
    epoch: int,
    timeout_ms: int,
    state: TxnState,
    partitions: frozenset[TopicPartition],
    start_ms: int,
    update_ms: int,
) -> None:
    if state == TxnState.EMPTY:
        partitions = frozenset()
    value = TxnMetadata(
        txn_id, producer_id, epoch, timeout_ms, state, partitions, start_ms, update_ms
    )
    assert decode_txn_key(encode_txn_key(txn_id)) == txn_id
    assert decode_txn_value(txn_id, encode_txn_value(value)) == value


def test_in_memory_fields_are_not_persisted() -> None:
    remembered = TxnMetadata("tx", 1001, 3, 60_000, TxnState.EMPTY, frozenset(), -1, 700, 1000, 2)
    back = decode_txn_value("tx", encode_txn_value(remembered))
    assert (back.last_producer_id, back.last_producer_epoch) == (-1, -1)


# --- malformed input ----------------------------------------------------------------------


def _prefixes(raw: bytes) -> list[bytes]:
    return [raw[:n] for n in range(len(raw))]


@pytest.mark.parametrize("raw", _prefixes(encode_txn_key("tx")))
def test_truncated_key(raw: bytes) -> None:
    with pytest.raises(TxnRecordFormatError):
        decode_txn_key(raw)


_FULL_VALUE = encode_txn_value(
    meta(TxnState.ONGOING, frozenset({TopicPartition("a", 1), TopicPartition("b", 2)}))
)


@pytest.mark.parametrize("raw", _prefixes(_FULL_VALUE))
def test_truncated_value(raw: bytes) -> None:
    with pytest.raises(TxnRecordFormatError, match="truncated"):
        decode_txn_value("tx", raw)


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (i16(1) + s("tx"), "key version 1"),
        (i16(-1) + s("tx"), "key version -1"),
        (i16(0) + i16(-1), "string length -1"),
        (i16(0) + i16(-5) + b"tx", "string length -5"),
        (i16(0) + i16(2) + b"\xff\xfe", "decode"),
        (i16(0) + s("tx") + b"\x00", "trailing"),
    ],
)
def test_bad_keys_are_refused(raw: bytes, match: str) -> None:
    with pytest.raises(TxnRecordFormatError, match=match):
        decode_txn_key(raw)


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (value_bytes(version=1), "value version 1"),
        (value_bytes(version=-1), "value version -1"),
        (value_bytes(status=8), "state code 8"),
        (value_bytes(status=-1), "state code -1"),
        (value_bytes(partitions=i32(-2)), "array length -2"),
        (value_bytes(partitions=i32(1) + s("a") + i32(-1)), "array length -1"),
        (value_bytes(partitions=i32(1) + i16(-1) + i32(0)), "string length -1"),
        (value_bytes(partitions=i32(1) + i16(-3)), "string length -3"),
        (value_bytes() + b"\x00", "trailing"),
        (value_bytes(partitions=i32(5) + s("a") + i32(0)), "truncated"),
    ],
)
def test_bad_values_are_refused(raw: bytes, match: str) -> None:
    with pytest.raises(TxnRecordFormatError, match=match):
        decode_txn_value("tx", raw)


def test_format_error_is_a_value_error() -> None:
    assert issubclass(TxnRecordFormatError, ValueError)


# --- replay and placement -------------------------------------------------------------------


def test_replay_last_record_wins_and_tombstones_remove() -> None:
    state: dict[str, TxnMetadata] = {}
    first = meta(TxnState.EMPTY, txn_id="a")
    second = meta(TxnState.ONGOING, frozenset({TopicPartition("t", 0)}), txn_id="a")
    other = meta(TxnState.COMPLETE_ABORT, txn_id="b")
    apply_txn_record(state, encode_txn_key("a"), encode_txn_value(first))
    apply_txn_record(state, encode_txn_key("b"), encode_txn_value(other))
    apply_txn_record(state, encode_txn_key("a"), encode_txn_value(second))
    assert state == {"a": second, "b": other}
    apply_txn_record(state, encode_txn_key("b"), None)
    apply_txn_record(state, encode_txn_key("never-seen"), None)
    assert state == {"a": second}
    with pytest.raises(TxnRecordFormatError):
        apply_txn_record(state, encode_txn_key("a"), b"\x00\x07")
    with pytest.raises(TxnRecordFormatError):
        apply_txn_record(state, b"\x00\x01\x00\x01a", None)
    assert state == {"a": second}


def test_partition_for_txn_is_kafkas_hash() -> None:
    # Java: "a".hashCode() == 97, "my-txn".hashCode() == -1061187895 -> abs.
    assert partition_for_txn("a", 50) == 97 % 50
    assert partition_for_txn("my-txn", 50) == 1061187895 % 50
    for txn_id in ("", "x", "producer-1", "é"):
        assert partition_for_txn(txn_id, 7) == partition_for(txn_id, 7)
