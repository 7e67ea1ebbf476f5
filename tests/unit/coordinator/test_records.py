"""``__consumer_offsets`` records in Kafka's key/value format: byte-exact and round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.coordinator.records import (
    GroupKey,
    GroupRecord,
    MemberRecord,
    OffsetAndMetadata,
    OffsetKey,
    RecordFormatError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    group_key,
    group_value,
    offset_key,
    offset_value,
    subscribed_topics,
)
from tidelog.model import TopicPartition


def test_offset_key_is_kafkas_bytes() -> None:
    # version 1, group "g", topic "t", partition 3
    assert offset_key("g", TopicPartition("t", 3)) == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x03"
    assert group_key("g") == b"\x00\x02\x00\x01g"


def test_offset_value_is_kafkas_v3() -> None:
    raw = offset_value(OffsetAndMetadata(5, 2, "m", 7))
    assert raw == (
        b"\x00\x03"
        + (5).to_bytes(8, "big")
        + (2).to_bytes(4, "big")
        + b"\x00\x01m"
        + (7).to_bytes(8, "big")
    )


texts = st.text(max_size=20)


@given(
    texts,
    texts,
    st.integers(0, 2**31 - 1),
    st.integers(-1, 2**62),
    st.integers(-1, 2**31 - 1),
    texts,
)
def test_offset_round_trip(  # noqa: PLR0917 - hypothesis passes them positionally
    group: str, topic: str, partition: int, offset: int, epoch: int, metadata: str
) -> None:
    tp = TopicPartition(topic, partition)
    assert decode_key(offset_key(group, tp)) == OffsetKey(group, tp)
    value = OffsetAndMetadata(offset, epoch, metadata, 123)
    assert decode_offset_value(offset_value(value)) == value


members = st.builds(
    MemberRecord,
    texts,
    st.none() | texts,
    texts,
    texts,
    st.integers(1, 2**31 - 1),
    st.integers(1, 2**31 - 1),
    st.binary(max_size=30),
    st.binary(max_size=30),
)


@given(
    texts,
    texts,
    st.integers(0, 2**31 - 1),
    st.none() | texts,
    st.none() | texts,
    st.lists(members, max_size=4),
)
def test_group_round_trip(  # noqa: PLR0917 - hypothesis passes them positionally
    group: str,
    protocol_type: str,
    generation: int,
    protocol: str | None,
    leader: str | None,
    member_list: list[MemberRecord],
) -> None:
    assert decode_key(group_key(group)) == GroupKey(group)
    record = GroupRecord(protocol_type, generation, protocol, leader, 99, tuple(member_list))
    assert decode_group_value(group_value(record)) == record


@pytest.mark.parametrize("raw", [b"", b"\x00", b"\x00\x09\x00\x01g", b"\x00\x01\x00\x05g"])
def test_bad_keys_are_refused(raw: bytes) -> None:
    with pytest.raises(RecordFormatError):
        decode_key(raw)


def test_consumer_subscription_topics() -> None:
    raw = b"\x00\x00" + b"\x00\x00\x00\x02" + b"\x00\x01a" + b"\x00\x02bc" + b"\xff\xff\xff\xff"
    assert subscribed_topics("consumer", raw) == ["a", "bc"]
    assert subscribed_topics("connect", raw) is None
    assert subscribed_topics("consumer", b"\x00") is None
