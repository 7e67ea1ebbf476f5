"""GroupOffsets on its own: the offsets half of the group coordinator core
(tidelog.coordinator.group_offsets), without a GroupManager around it."""

from __future__ import annotations

from tidelog.coordinator.group_offsets import GroupOffsets
from tidelog.coordinator.group_state import Group, GroupState
from tidelog.coordinator.records import OffsetAndMetadata
from tidelog.model import TopicPartition

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def test_apply_says_whether_the_group_still_has_committed_offsets() -> None:
    store = GroupOffsets()
    assert store.apply("g", {TP0: OffsetAndMetadata(5)}, 10)
    assert store.has_committed("g")
    assert store.committed("g") == {TP0: OffsetAndMetadata(5)}
    assert not store.apply("g", {TP0: None}, 11)
    assert not store.has_committed("g")
    assert store.committed("g") == {}


def test_an_earlier_batch_does_not_replace_a_later_offset() -> None:
    store = GroupOffsets()
    store.apply("g", {TP0: OffsetAndMetadata(9)}, 20)
    store.apply("g", {TP0: OffsetAndMetadata(3), TP1: OffsetAndMetadata(4)}, 10)
    assert store.committed("g") == {TP0: OffsetAndMetadata(9), TP1: OffsetAndMetadata(4)}


def test_an_in_flight_commit_counts_until_every_prepare_is_done() -> None:
    store = GroupOffsets()
    store.prepare_commit("g", [TP0])
    store.prepare_commit("g", [TP0])
    assert store.has_any("g")
    store.commit_done("g", [TP0])
    assert store.has_any("g")
    store.commit_done("g", [TP0])
    assert not store.has_any("g")
    store.commit_done("unknown", [TP0])  # nothing announced: nothing happens


def test_expiry_of_a_group_without_protocol_counts_from_each_commit() -> None:
    store = GroupOffsets()
    store.apply("g", {TP0: OffsetAndMetadata(1, commit_timestamp_ms=100)}, 0)
    store.apply("g", {TP1: OffsetAndMetadata(1, commit_timestamp_ms=500)}, 1)
    group = Group("g", state=GroupState.EMPTY)
    assert store.expired(group, 1099, 1000) == []
    assert store.remove_expired(group, 1100, 1000) == [TP0]
    assert store.committed("g") == {TP1: OffsetAndMetadata(1, commit_timestamp_ms=500)}
    assert store.remove_expired(group, 1500, 1000) == [TP1]
    assert not store.has_committed("g")


def test_an_explicit_expire_timestamp_wins_and_an_in_flight_commit_never_expires() -> None:
    store = GroupOffsets()
    store.apply("g", {TP0: OffsetAndMetadata(1, commit_timestamp_ms=0, expire_timestamp_ms=50)}, 0)
    store.apply("g", {TP1: OffsetAndMetadata(1, commit_timestamp_ms=0)}, 1)
    store.prepare_commit("g", [TP1])
    group = Group("g", state=GroupState.EMPTY)
    assert store.expired(group, 50, 10_000) == [TP0]
    assert store.expired(group, 20_000, 10_000) == [TP0]


def test_transactional_offsets_commit_into_the_groups_they_name() -> None:
    store = GroupOffsets()
    store.add_txn("g", 7, {TP0: OffsetAndMetadata(3)}, 40)
    store.add_txn("h", 7, {TP1: OffsetAndMetadata(4)}, 40)
    assert store.has_pending_txn("g", TP0)
    assert store.has_any("h")
    assert sorted(store.complete_txn(7, commit=True)) == ["g", "h"]
    assert store.committed("g") == {TP0: OffsetAndMetadata(3)}
    assert not store.has_pending_txn("g", TP0)


def test_an_aborted_or_failed_transaction_leaves_nothing() -> None:
    store = GroupOffsets()
    store.add_txn("g", 7, {TP0: OffsetAndMetadata(3)}, 40)
    assert store.complete_txn(7, commit=False) == []
    store.add_txn("g", 8, {TP0: OffsetAndMetadata(3)}, 50)
    store.fail_txn("g", 8, 50)
    assert not store.has_any("g")
    assert store.committed("g") == {}


def test_drop_group_returns_its_partitions_and_forgets_its_pending_offsets() -> None:
    store = GroupOffsets()
    store.apply("g", {TP0: OffsetAndMetadata(1), TP1: OffsetAndMetadata(2)}, 0)
    store.add_txn("g", 7, {TP0: OffsetAndMetadata(3)}, 40)
    assert sorted(store.drop_group("g")) == [TP0, TP1]
    assert not store.has_any("g")
    assert store.complete_txn(7, commit=True) == []
