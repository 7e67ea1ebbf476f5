"""The consumer protocol's subscription and assignment bytes, and the range assignor."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidelog.client.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)
from tidelog.model import TopicPartition


def test_subscription_v0_bytes() -> None:
    assert encode_subscription(["ab"]) == (b"\x00\x00\x00\x00\x00\x01\x00\x02ab\xff\xff\xff\xff")
    assert decode_subscription(encode_subscription(["a", "b"])) == ("a", "b")


def test_a_later_subscription_version_is_read_for_its_topics() -> None:
    # v1: owned partitions after the user data; a v0 reader stops before them.
    v1 = b"\x00\x01\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff\x00\x00\x00\x00"
    assert decode_subscription(v1) == ("t",)


def test_assignment_v0_bytes_sorted_by_topic() -> None:
    raw = encode_assignment(
        [TopicPartition("b", 0), TopicPartition("a", 2), TopicPartition("a", 1)]
    )
    assert raw == (
        b"\x00\x00" b"\x00\x00\x00\x02"
        b"\x00\x01a" b"\x00\x00\x00\x02" b"\x00\x00\x00\x01" b"\x00\x00\x00\x02"
        b"\x00\x01b" b"\x00\x00\x00\x01" b"\x00\x00\x00\x00"
        b"\xff\xff\xff\xff"
    )  # fmt: skip


def test_unreadable_bytes_decode_to_nothing() -> None:
    assert decode_subscription(b"\x00\x00\x00\x00\x00\x05\x00") == ()
    assert decode_assignment(b"\x00") == ()
    assert decode_assignment(b"") == ()


@given(
    st.lists(
        st.tuples(st.text(min_size=1, max_size=5), st.integers(0, 2**31 - 1)),
        max_size=20,
        unique=True,
    )
)
def test_assignment_round_trip(pairs: list[tuple[str, int]]) -> None:
    tps = [TopicPartition(t, p) for t, p in pairs]
    assert decode_assignment(encode_assignment(tps)) == tuple(sorted(tps))


def _tps(topic: str, *partitions: int) -> tuple[TopicPartition, ...]:
    return tuple(TopicPartition(topic, p) for p in partitions)


def test_range_gives_the_first_members_one_more() -> None:
    # Kafka's RangeAssignorTest.testMultipleConsumersMixedTopics shape: 3 partitions, 2 members.
    assigned = range_assign({"c1": ["t"], "c0": ["t"]}, {"t": 3})
    assert assigned == {"c0": _tps("t", 0, 1), "c1": _tps("t", 2)}


def test_range_per_topic_only_among_its_subscribers() -> None:
    assigned = range_assign(
        {"a": ["t1", "t2"], "b": ["t1"], "c": ["t2"], "d": []}, {"t1": 2, "t2": 5}
    )
    assert assigned == {
        "a": _tps("t1", 0) + _tps("t2", 0, 1, 2),
        "b": _tps("t1", 1),
        "c": _tps("t2", 3, 4),
        "d": (),
    }


def test_more_members_than_partitions_and_unknown_topics() -> None:
    assigned = range_assign({"m1": ["t", "gone"], "m2": ["t"], "m3": ["t"]}, {"t": 2})
    assert assigned == {"m1": _tps("t", 0), "m2": _tps("t", 1), "m3": ()}


@given(
    st.dictionaries(st.text(min_size=1, max_size=4), st.just(["t"]), min_size=1, max_size=8),
    st.integers(0, 40),
)
def test_range_assigns_every_partition_once_and_evenly(
    members: dict[str, list[str]], count: int
) -> None:
    assigned = range_assign(members, {"t": count})
    everything = [tp for tps in assigned.values() for tp in tps]
    assert sorted(everything) == list(_tps("t", *range(count)))
    sizes = [len(tps) for tps in assigned.values()]
    assert max(sizes) - min(sizes) <= 1
