"""Transactional offset commits in the pure core (KIP-98/KIP-447): offsets pending per
producer until its marker, the log-order rule between pending and plain commits, and the
replay of a partition holding transactional batches and markers."""

from __future__ import annotations

import itertools

import pytest

from tidelog.coordinator.group import GroupConfig, GroupManager, GroupState, JoinRequest
from tidelog.coordinator.records import (
    GroupRecord,
    OffsetAndMetadata,
    RecordFormatError,
    group_key,
    group_value,
    offset_key,
    offset_value,
)
from tidelog.coordinator.txn_offsets import (
    LoggedOffset,
    PartitionReplay,
    PendingTxnOffsets,
    marker_commits,
)
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

G = "g"
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
PID = 4000
OTHER_PID = 4001
COMMIT_KEY = b"\x00\x00\x00\x01"
ABORT_KEY = b"\x00\x00\x00\x00"


def manager() -> GroupManager:
    counter = itertools.count(1)
    return GroupManager(
        GroupConfig(initial_rebalance_delay_ms=0),
        new_member_id=lambda client_id: f"{client_id}-{next(counter)}",
    )


def stable_member(m: GroupManager) -> tuple[str, int]:
    """A one-member Stable group G: (member id, generation)."""
    request = JoinRequest(
        group_id=G,
        member_id="",
        group_instance_id="i1",
        client_id="c",
        client_host="/127.0.0.1",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=30_000,
        protocol_type="consumer",
        protocols=(("range", b""),),
        require_known_member_id=True,
    )
    _, member_id, effects = m.join_group(request, 0)
    generation = effects.joins[member_id].generation_id
    result, _ = m.sync_group(
        G,
        generation_id=generation,
        member_id=member_id,
        group_instance_id="i1",
        protocol_type=None,
        protocol_name=None,
        assignments={member_id: b"a"},
        now_ms=1,
    )
    assert result is not None
    assert result.error == ErrorCode.NONE
    assert m.groups[G].state == GroupState.STABLE
    return member_id, generation


# --- pending, commit, abort ------------------------------------------------------------


def test_pending_offsets_are_invisible_until_the_commit_marker() -> None:
    m = manager()
    m.add_txn_offsets(G, PID, {TP0: OffsetAndMetadata(10)}, log_offset=5)
    assert m.committed(G) == {}
    assert m.has_pending_txn(G, TP0)
    assert not m.has_pending_txn(G, TP1)
    assert G in m.groups  # Kafka creates the group for a txn offset commit
    assert m.groups[G].state == GroupState.EMPTY
    m.complete_txn(PID, commit=True)
    assert m.committed(G) == {TP0: OffsetAndMetadata(10)}
    assert not m.has_pending_txn(G, TP0)


def test_abort_drops_the_pending_offsets() -> None:
    m = manager()
    m.apply_offsets(G, {TP0: OffsetAndMetadata(3)}, log_offset=1)
    m.add_txn_offsets(G, PID, {TP0: OffsetAndMetadata(10), TP1: OffsetAndMetadata(11)}, 5)
    m.complete_txn(PID, commit=False)
    assert m.committed(G) == {TP0: OffsetAndMetadata(3)}
    assert not m.has_pending_txn(G, TP0)
    assert not m.has_pending_txn(G, TP1)
    m.complete_txn(PID, commit=True)  # nothing is left to commit
    assert m.committed(G) == {TP0: OffsetAndMetadata(3)}


def test_the_latest_pending_offset_of_a_producer_wins() -> None:
    m = manager()
    m.add_txn_offsets(G, PID, {TP0: OffsetAndMetadata(10)}, 5)
    m.add_txn_offsets(G, PID, {TP0: OffsetAndMetadata(20)}, 6)
    m.complete_txn(PID, commit=True)
    assert m.committed(G)[TP0].offset == 20


def test_a_marker_completes_only_its_own_producer() -> None:
    m = manager()
    m.add_txn_offsets(G, PID, {TP0: OffsetAndMetadata(10)}, 5)
    m.add_txn_offsets(G, OTHER_PID, {TP1: OffsetAndMetadata(30)}, 6)
    m.add_txn_offsets("h", PID, {TP1: OffsetAndMetadata(40)}, 5)
    m.complete_txn(PID, commit=True)
    assert m.committed(G) == {TP0: OffsetAndMetadata(10)}
    assert m.committed("h") == {TP1: OffsetAndMetadata(40)}  # every group of the producer
    assert m.has_pending_txn(G, TP1)
    m.complete_txn(OTHER_PID, commit=False)
    assert not m.has_pending_txn(G, TP1)


def test_an_unknown_producer_completes_nothing() -> None:
    m = manager()
    m.apply_offsets(G, {TP0: OffsetAndMetadata(3)}, log_offset=1)
    m.complete_txn(PID, commit=True)
    m.complete_txn(PID, commit=False)
    assert m.committed(G) == {TP0: OffsetAndMetadata(3)}


def test_a_plain_commit_written_after_the_transactional_one_wins() -> None:
    m = manager()
    m.add_txn_offsets(G, PID, {TP0: OffsetAndMetadata(10), TP1: OffsetAndMetadata(11)}, 5)
    m.apply_offsets(G, {TP0: OffsetAndMetadata(99)}, log_offset=7)  # later in the log
    assert m.committed(G) == {TP0: OffsetAndMetadata(99)}
    m.complete_txn(PID, commit=True)
    # Kafka compares log positions: the marker's arrival time does not matter.
    assert m.committed(G) == {TP0: OffsetAndMetadata(99), TP1: OffsetAndMetadata(11)}


def test_a_plain_commit_written_before_the_transactional_one_is_overridden() -> None:
    m = manager()
    m.apply_offsets(G, {TP0: OffsetAndMetadata(1)}, log_offset=2)
    m.add_txn_offsets(G, PID, {TP0: OffsetAndMetadata(10)}, 5)
    m.complete_txn(PID, commit=True)
    assert m.committed(G) == {TP0: OffsetAndMetadata(10)}
    # A plain commit replicated late but written earlier does not go back in time.
    m.apply_offsets(G, {TP0: OffsetAndMetadata(2)}, log_offset=3)
    assert m.committed(G) == {TP0: OffsetAndMetadata(10)}


def test_a_failed_append_drops_only_its_own_batch() -> None:
    m = manager()
    m.add_txn_offsets(G, PID, {TP0: OffsetAndMetadata(10)}, 5)
    m.add_txn_offsets(G, PID, {TP1: OffsetAndMetadata(11)}, 6)
    m.fail_txn_offsets(G, PID, 5)
    assert not m.has_pending_txn(G, TP0)
    assert m.has_pending_txn(G, TP1)
    m.fail_txn_offsets(G, PID, 6)
    assert not m.pending_txn


def test_unload_drops_the_pending_state() -> None:
    m = manager()
    m.add_txn_offsets(G, PID, {TP0: OffsetAndMetadata(10)}, 5)
    m.unload()
    assert not m.pending_txn
    m.complete_txn(PID, commit=True)
    assert m.committed(G) == {}


# --- deletes -----------------------------------------------------------------------------


def test_delete_group_with_an_open_transaction_deletes_it() -> None:
    m = manager()
    m.apply_offsets(G, {TP0: OffsetAndMetadata(3)}, log_offset=1)
    m.add_txn_offsets(G, PID, {TP1: OffsetAndMetadata(10)}, 5)
    assert m.delete_group(G, 10) == (ErrorCode.NONE, [TP0])
    assert not m.has_pending_txn(G, TP1)
    m.complete_txn(PID, commit=True)
    assert m.committed(G) == {}
    assert G not in m.groups


def test_offset_delete_drops_pending_offsets_written_before_it() -> None:
    m = manager()
    m.add_txn_offsets(G, PID, {TP0: OffsetAndMetadata(10)}, 5)
    m.add_txn_offsets(G, OTHER_PID, {TP0: OffsetAndMetadata(20)}, 9)
    m.apply_offsets(G, {TP0: None}, log_offset=7)
    assert m.pending_txn.by_producer == {
        OTHER_PID: {G: {TP0: LoggedOffset(OffsetAndMetadata(20), 9)}}
    }
    m.complete_txn(PID, commit=True)
    m.complete_txn(OTHER_PID, commit=True)
    assert m.committed(G) == {TP0: OffsetAndMetadata(20)}


def test_a_tombstone_older_than_the_committed_offset_leaves_it() -> None:
    m = manager()
    m.apply_offsets(G, {TP0: OffsetAndMetadata(3)}, log_offset=8)
    m.apply_offsets(G, {TP0: None}, log_offset=7)
    assert m.committed(G) == {TP0: OffsetAndMetadata(3)}
    m.apply_offsets(G, {TP0: None})  # unknown position: deletes
    assert m.committed(G) == {}


# --- validation (Kafka's validateOffsetCommit for transactions) ---------------------------


def test_validate_txn_commit_without_member_accepts_any_group() -> None:
    m = manager()
    assert m.validate_txn_commit("", -1, "", None) == ErrorCode.INVALID_GROUP_ID
    assert m.validate_txn_commit(G, -1, "", None) == ErrorCode.NONE  # unknown group
    stable_member(m)
    # v0-v2 carry no member: a transaction commits into a group with members too.
    assert m.validate_txn_commit(G, -1, "", None) == ErrorCode.NONE


def test_validate_txn_commit_checks_the_member_and_generation() -> None:
    m = manager()
    assert m.validate_txn_commit(G, 1, "ghost", None) == ErrorCode.UNKNOWN_MEMBER_ID
    member_id, generation = stable_member(m)
    assert m.validate_txn_commit(G, generation, member_id, "i1") == ErrorCode.NONE
    assert m.validate_txn_commit(G, generation, "ghost", None) == ErrorCode.UNKNOWN_MEMBER_ID
    assert m.validate_txn_commit(G, generation + 1, member_id, None) == ErrorCode.ILLEGAL_GENERATION
    assert m.validate_txn_commit(G, generation, member_id, "i2") == ErrorCode.FENCED_INSTANCE_ID


# --- load ----------------------------------------------------------------------------------


def test_load_keeps_pending_offsets_pending() -> None:
    pending = PendingTxnOffsets()
    pending.add(PID, "h", {TP0: OffsetAndMetadata(10)}, 5)
    m = manager()
    m.load({}, {G: {TP0: LoggedOffset(OffsetAndMetadata(3), 6)}}, 100, pending)
    assert m.groups["h"].state == GroupState.EMPTY  # known only from a pending offset
    assert m.committed("h") == {}
    m.complete_txn(PID, commit=True)
    assert m.committed("h") == {TP0: OffsetAndMetadata(10)}
    assert m.committed(G) == {TP0: OffsetAndMetadata(3)}


# --- control records and replay ------------------------------------------------------------


def test_marker_commits_reads_the_control_record_type() -> None:
    assert marker_commits(COMMIT_KEY) is True
    assert marker_commits(ABORT_KEY) is False
    assert marker_commits(b"\x00\x00\x00\x05") is None  # not a transaction marker
    assert marker_commits(b"\x00") is None
    assert marker_commits(None) is None


def offset_record(
    tp: TopicPartition, offset: int | None, group: str = G
) -> tuple[bytes, bytes | None]:
    value = None if offset is None else offset_value(OffsetAndMetadata(offset))
    return offset_key(group, tp), value


def test_replay_commits_aborts_and_leaves_open_transactions_pending() -> None:
    replay = PartitionReplay()
    replay.record(0, -1, *offset_record(TP0, 1))
    replay.record(1, PID, *offset_record(TP0, 10))  # committed below
    replay.record(1, PID, *offset_record(TP1, 11))
    replay.record(3, OTHER_PID, *offset_record(TP1, 66))  # aborted below
    replay.record(4, -1, *offset_record(TP1, 5))  # plain commit after PID's: wins
    replay.marker(PID, COMMIT_KEY)
    replay.marker(OTHER_PID, ABORT_KEY)
    replay.record(7, 4002, *offset_record(TP0, 77))  # still open at the end
    assert replay.committed() == {
        G: {
            TP0: LoggedOffset(OffsetAndMetadata(10), 1),
            TP1: LoggedOffset(OffsetAndMetadata(5), 4),
        }
    }
    assert replay.pending.by_producer == {4002: {G: {TP0: LoggedOffset(OffsetAndMetadata(77), 7)}}}
    m = manager()
    m.load(replay.groups, replay.committed(), 100, replay.pending)
    assert m.committed(G) == {TP0: OffsetAndMetadata(10), TP1: OffsetAndMetadata(5)}
    assert m.has_pending_txn(G, TP0)
    m.complete_txn(4002, commit=True)
    assert m.committed(G)[TP0].offset == 77


def test_replay_tombstones_and_group_deletion() -> None:
    replay = PartitionReplay()
    replay.record(0, PID, *offset_record(TP0, 10))
    replay.record(1, PID, *offset_record(TP0, None))  # a tombstone inside the transaction
    replay.record(2, OTHER_PID, *offset_record(TP1, 20, group="h"))
    replay.record(3, -1, group_key("h"), None)  # DeleteGroups: the open offsets go too
    replay.marker(PID, COMMIT_KEY)
    replay.marker(OTHER_PID, COMMIT_KEY)
    assert replay.committed() == {}
    assert not replay.pending
    replay.record(5, -1, group_key(G), group_value(manager_group_record()))
    assert set(replay.groups) == {G}


def manager_group_record() -> GroupRecord:
    m = manager()
    stable_member(m)
    return m.groups[G].record()


def test_replay_refuses_records_not_in_kafkas_format() -> None:
    replay = PartitionReplay()
    with pytest.raises(RecordFormatError):
        replay.record(0, PID, b"\x00\x09junk", b"")
