"""The transaction coordinator as a pure state machine: every rule of
``tidelog.coordinator.txn`` (numbered as in its docstring), full commit and abort cycles,
zombie fencing, timeouts, failover, epoch exhaustion, and a hypothesis state machine."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tidelog.coordinator.txn import (
    EXHAUSTED_EPOCH,
    MAX_EPOCH,
    Transition,
    TransitionKind,
    TxnConfig,
    TxnManager,
    TxnMetadata,
    TxnState,
)
from tidelog.coordinator.txn_records import decode_txn_value, encode_txn_value
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

T = "txn"
PID = 1000
TIMEOUT = 60_000
A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)
B0 = TopicPartition("b", 0)


def transition(result: Transition | ErrorCode | None) -> Transition:
    assert isinstance(result, Transition), result
    return result


def done(m: TxnManager, result: Transition | ErrorCode | None) -> TxnMetadata:
    """The transition is written: complete it and return the new state."""
    t = transition(result)
    m.complete(t)
    assert m.get(t.transactional_id) == t.after
    assert m.pending(t.transactional_id) is None
    return t.after


def init(
    m: TxnManager,
    now: int = 0,
    *,
    txn: str = T,
    pid: int | None = PID,
    timeout: int = TIMEOUT,
    expected: tuple[int, int] = (-1, -1),
) -> TxnMetadata:
    return done(
        m,
        m.init_producer_id(
            txn,
            timeout,
            now,
            new_producer_id=pid,
            expected_producer_id=expected[0],
            expected_epoch=expected[1],
        ),
    )


def ongoing(
    m: TxnManager, now: int = 0, tps: tuple[TopicPartition, ...] = (A0,), txn: str = T
) -> TxnMetadata:
    meta = m.get(txn) or init(m, now, txn=txn)
    return done(m, m.add_partitions(txn, meta.producer_id, meta.producer_epoch, tps, now))


def in_state(m: TxnManager, state: TxnState, now: int = 0, epoch: int = 0) -> TxnMetadata:
    """A txn id loaded in ``state`` (partitions and start as that state has them)."""
    in_txn = state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
    tps = frozenset({A0}) if in_txn else frozenset()
    start = 0 if in_txn else -1
    meta = TxnMetadata(T, PID, epoch, TIMEOUT, state, tps, start, now)
    m.load({T: meta})
    return meta


def manager() -> TxnManager:
    return TxnManager(TxnConfig())


# --- rule 1: one change at a time ----------------------------------------------------------


def test_rule1_pending_transition_answers_concurrent_transactions() -> None:
    m = manager()
    meta = init(m)
    t = transition(m.add_partitions(T, PID, meta.producer_epoch, [A0], 10))
    assert m.pending(T) == t
    assert m.get(T) == meta  # not yet written
    assert m.init_producer_id(T, TIMEOUT, 11, new_producer_id=None) == (
        ErrorCode.CONCURRENT_TRANSACTIONS
    )
    assert m.add_partitions(T, PID, 0, [A1], 11) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert m.end_txn(T, PID, 0, True, 11) == ErrorCode.CONCURRENT_TRANSACTIONS
    # ... even for a request that would be fenced otherwise.
    assert m.end_txn(T, PID, 7, True, 11) == ErrorCode.CONCURRENT_TRANSACTIONS
    m.complete(t)
    # A pending prepare is neither in needs_markers nor completable, an ongoing txn not expired.
    prep = transition(m.end_txn(T, PID, 0, True, 12))
    assert m.needs_markers() == []
    assert m.complete_markers(T, 13) is None
    assert m.expired(10**9) == []
    m.complete(prep)
    assert [x.transactional_id for x in m.needs_markers()] == [T]


def test_rule1_pending_unknown_id_also_blocks() -> None:
    m = manager()
    t = transition(m.init_producer_id(T, TIMEOUT, 0, new_producer_id=PID))
    assert t.before is None
    assert m.get(T) is None
    assert m.init_producer_id(T, TIMEOUT, 0, new_producer_id=PID + 1) == (
        ErrorCode.CONCURRENT_TRANSACTIONS
    )
    # Unknown until written: AddPartitions has no producer to map to yet.
    assert m.add_partitions(T, PID, 0, [A0], 0) == ErrorCode.CONCURRENT_TRANSACTIONS
    m.complete(t)
    assert m.get(T) == t.after


# --- rule 2: empty transactional id ------------------------------------------------------------


def test_rule2_empty_transactional_id_is_an_invalid_request() -> None:
    m = manager()
    assert m.init_producer_id("", TIMEOUT, 0, new_producer_id=PID) == ErrorCode.INVALID_REQUEST
    assert m.add_partitions("", PID, 0, [A0], 0) == ErrorCode.INVALID_REQUEST
    assert m.end_txn("", PID, 0, True, 0) == ErrorCode.INVALID_REQUEST
    assert m.all() == []


# --- rule 3: timeout and the expected producer's shape -------------------------------------


@pytest.mark.parametrize("timeout", [0, -1, 900_001, 2**31 - 1])
def test_rule3_invalid_transaction_timeout(timeout: int) -> None:
    m = manager()
    assert m.init_producer_id(T, timeout, 0, new_producer_id=PID) == (
        ErrorCode.INVALID_TRANSACTION_TIMEOUT
    )
    assert m.pending(T) is None
    # Checked before the state: even with a pending transition or a fenced producer.
    init(m)
    m.add_partitions(T, PID, 0, [A0], 0)
    assert m.init_producer_id(T, timeout, 0, new_producer_id=None) == (
        ErrorCode.INVALID_TRANSACTION_TIMEOUT
    )


def test_rule3_timeout_bounds_follow_the_config() -> None:
    assert init(manager(), timeout=900_000).timeout_ms == 900_000
    assert init(manager(), timeout=1).timeout_ms == 1
    m = TxnManager(TxnConfig(max_timeout_ms=5000))
    assert m.init_producer_id(T, 5001, 0, new_producer_id=PID) == (
        ErrorCode.INVALID_TRANSACTION_TIMEOUT
    )
    assert init(m, timeout=5000).timeout_ms == 5000


@pytest.mark.parametrize("expected", [(PID, -1), (-1, 0)])
def test_rule3_half_an_expected_producer_is_an_invalid_request(
    expected: tuple[int, int],
) -> None:
    m = manager()
    init(m)
    result = m.init_producer_id(
        T,
        TIMEOUT,
        0,
        new_producer_id=None,
        expected_producer_id=expected[0],
        expected_epoch=expected[1],
    )
    assert result == ErrorCode.INVALID_REQUEST


# --- rule 4: a new transactional id ----------------------------------------------------------


def test_rule4_unknown_id_gets_the_new_producer_id_with_epoch_0() -> None:
    m = manager()
    assert m.needs_new_producer_id(T)
    t = transition(m.init_producer_id(T, TIMEOUT, 42, new_producer_id=PID))
    assert t.kind == TransitionKind.INIT
    assert t.before is None
    assert t.after == TxnMetadata(T, PID, 0, TIMEOUT, TxnState.EMPTY, frozenset(), -1, 42)
    m.complete(t)
    assert m.get(T) == t.after
    assert m.all() == [t.after]
    assert not m.needs_new_producer_id(T)


def test_rule4_unknown_id_without_a_producer_id_is_a_shell_bug() -> None:
    m = manager()
    with pytest.raises(ValueError, match="new producer id"):
        m.init_producer_id(T, TIMEOUT, 0, new_producer_id=None)
    with pytest.raises(ValueError, match="new producer id"):
        m.init_producer_id(T, TIMEOUT, 0, new_producer_id=-1)
    assert m.pending(T) is None


def test_rule4_unknown_id_takes_any_expected_producer() -> None:
    # An idempotent producer (id 5, epoch 9) that starts using a transactional id.
    m = manager()
    meta = init(m, expected=(5, 9))
    assert (meta.producer_id, meta.producer_epoch) == (PID, 0)


def test_rule4_dead_id_is_taken_as_new() -> None:
    m = manager()
    dead = in_state(m, TxnState.DEAD, epoch=4)
    assert m.needs_new_producer_id(T)
    t = transition(m.init_producer_id(T, TIMEOUT, 5, new_producer_id=PID + 1))
    assert t.kind == TransitionKind.INIT
    assert t.before == dead
    assert (t.after.producer_id, t.after.producer_epoch, t.after.state) == (
        PID + 1,
        0,
        TxnState.EMPTY,
    )


# --- rules 5 and 6: InitProducerId on a known id (KIP-360) ------------------------------------


@pytest.mark.parametrize(
    "state", [TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT]
)
def test_rule6_idle_states_bump_the_epoch(state: TxnState) -> None:
    m = manager()
    before = in_state(m, state, epoch=3)
    assert not m.needs_new_producer_id(T)
    t = transition(m.init_producer_id(T, 30_000, 99, new_producer_id=None))
    assert t.kind == TransitionKind.INIT
    assert t.before == before
    assert t.after == TxnMetadata(T, PID, 4, 30_000, TxnState.EMPTY, frozenset(), -1, 99)


def test_rule6_a_new_producer_fences_the_old_one() -> None:
    m = manager()
    first = init(m)
    second = init(m, 1)
    assert second.producer_epoch == first.producer_epoch + 1
    assert m.add_partitions(T, PID, first.producer_epoch, [A0], 2) == ErrorCode.PRODUCER_FENCED
    assert m.end_txn(T, PID, first.producer_epoch, True, 2) == ErrorCode.PRODUCER_FENCED
    # A KIP-360 re-init by the old one is fenced too: nothing remembered it.
    assert m.init_producer_id(
        T, TIMEOUT, 2, new_producer_id=None, expected_producer_id=PID, expected_epoch=0
    ) == (ErrorCode.PRODUCER_FENCED)


def test_rule5_expected_producer_must_be_current() -> None:
    m = manager()
    init(m)
    init(m)  # epoch 1
    for expected in [(PID + 1, 1), (PID, 0), (PID, 2), (PID + 1, 0)]:
        result = m.init_producer_id(
            T,
            TIMEOUT,
            0,
            new_producer_id=None,
            expected_producer_id=expected[0],
            expected_epoch=expected[1],
        )
        assert result == ErrorCode.PRODUCER_FENCED, expected
    assert m.pending(T) is None
    bumped = init(m, expected=(PID, 1))
    assert (bumped.producer_epoch, bumped.last_producer_id, bumped.last_producer_epoch) == (
        2,
        PID,
        1,
    )


def test_rule5_stale_expected_producer_is_fenced_before_the_state_is_looked_at() -> None:
    m = manager()
    in_state(m, TxnState.PREPARE_COMMIT, epoch=3)
    stale = m.init_producer_id(
        T, TIMEOUT, 0, new_producer_id=None, expected_producer_id=PID, expected_epoch=2
    )
    assert stale == ErrorCode.PRODUCER_FENCED
    current = m.init_producer_id(
        T, TIMEOUT, 0, new_producer_id=None, expected_producer_id=PID, expected_epoch=3
    )
    assert current == ErrorCode.CONCURRENT_TRANSACTIONS
    # Ongoing: a stale producer cannot abort the current one's transaction (a difference
    # from Kafka, which checks only the producer id there).
    m = manager()
    in_state(m, TxnState.ONGOING, epoch=3)
    stale = m.init_producer_id(
        T, TIMEOUT, 0, new_producer_id=None, expected_producer_id=PID, expected_epoch=2
    )
    assert stale == ErrorCode.PRODUCER_FENCED


def test_rule6_retry_of_a_bump_whose_answer_was_lost_gets_the_same_epoch() -> None:
    m = manager()
    init(m)
    bumped = init(m, 1, expected=(PID, 0))
    assert bumped.producer_epoch == 1
    # The client never saw epoch 1 and asks again with epoch 0.
    retry = init(m, 2, timeout=20_000, expected=(PID, 0))
    assert (retry.producer_id, retry.producer_epoch) == (PID, 1)
    assert retry.timeout_ms == 20_000
    assert retry.last_update_ms == 2
    # Still remembered after a transaction, so a late retry answers the same.
    ongoing(m, 3)
    done(m, m.end_txn(T, PID, 1, True, 4))
    done(m, m.complete_markers(T, 5))
    late = init(m, 6, expected=(PID, 0))
    assert late.producer_epoch == 1
    # The current producer's own re-init bumps again and forgets epoch 0.
    again = init(m, 7, expected=(PID, 1))
    assert (again.producer_epoch, again.last_producer_epoch) == (2, 1)
    assert m.init_producer_id(
        T, TIMEOUT, 8, new_producer_id=None, expected_producer_id=PID, expected_epoch=0
    ) == (ErrorCode.PRODUCER_FENCED)


def test_rule6_epoch_overflow_takes_a_new_producer_id() -> None:
    m = manager()
    in_state(m, TxnState.COMPLETE_COMMIT, epoch=EXHAUSTED_EPOCH - 1)
    assert not m.needs_new_producer_id(T)
    last_bump = init(m, pid=None)
    assert (last_bump.producer_id, last_bump.producer_epoch) == (PID, EXHAUSTED_EPOCH)
    assert m.needs_new_producer_id(T)
    with pytest.raises(ValueError, match="new producer id"):
        m.init_producer_id(T, TIMEOUT, 0, new_producer_id=None)
    rotated = init(m, 3, pid=PID + 50)
    assert (rotated.producer_id, rotated.producer_epoch) == (PID + 50, 0)
    assert rotated.last_producer_epoch == -1  # no expected producer: nothing remembered
    assert not m.needs_new_producer_id(T)
    # The old producer id is gone.
    assert m.add_partitions(T, PID, EXHAUSTED_EPOCH, [A0], 4) == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )


def test_rule6_epoch_overflow_with_an_expected_producer_remembers_it() -> None:
    m = manager()
    in_state(m, TxnState.EMPTY, epoch=EXHAUSTED_EPOCH)
    rotated = init(m, pid=PID + 1, expected=(PID, EXHAUSTED_EPOCH))
    assert (rotated.producer_id, rotated.producer_epoch) == (PID + 1, 0)
    assert (rotated.last_producer_id, rotated.last_producer_epoch) == (PID, EXHAUSTED_EPOCH)
    # The client missed the answer: its retry gets the rotated producer, no new id used.
    retry = init(m, pid=PID + 2, expected=(PID, EXHAUSTED_EPOCH))
    assert (retry.producer_id, retry.producer_epoch) == (PID + 1, 0)


def test_rule6_exhausted_epoch_retry_of_the_last_bump_does_not_rotate() -> None:
    m = manager()
    in_state(m, TxnState.EMPTY, epoch=EXHAUSTED_EPOCH - 1)
    init(m, pid=None, expected=(PID, EXHAUSTED_EPOCH - 1))
    retry = init(m, pid=PID + 9, expected=(PID, EXHAUSTED_EPOCH - 1))
    assert (retry.producer_id, retry.producer_epoch) == (PID, EXHAUSTED_EPOCH)


# --- rule 7: InitProducerId during a transaction ----------------------------------------------


def test_rule7_fence_abort_then_zombie_is_fenced_everywhere() -> None:
    m = manager()
    zombie = ongoing(m, 10, (A0, B0))
    t = transition(m.init_producer_id(T, 30_000, 20, new_producer_id=None))
    assert t.kind == TransitionKind.FENCE_ABORT
    assert t.before == zombie
    assert t.after == TxnMetadata(
        T, PID, 1, TIMEOUT, TxnState.PREPARE_ABORT, frozenset({A0, B0}), 10, 20
    )
    m.complete(t)  # the shell answers the new producer CONCURRENT_TRANSACTIONS
    assert m.needs_markers() == [t.after]
    # The zombie, still on epoch 0.
    assert m.add_partitions(T, PID, 0, [A1], 21) == ErrorCode.PRODUCER_FENCED
    assert m.end_txn(T, PID, 0, True, 21) == ErrorCode.PRODUCER_FENCED
    assert m.end_txn(T, PID, 0, False, 21) == ErrorCode.PRODUCER_FENCED
    # The new producer retries while the ABORT markers are being written.
    assert m.init_producer_id(T, 30_000, 22, new_producer_id=None) == (
        ErrorCode.CONCURRENT_TRANSACTIONS
    )
    aborted = done(m, m.complete_markers(T, 23))
    assert aborted.state == TxnState.COMPLETE_ABORT
    fresh = init(m, 24, timeout=30_000)
    assert (fresh.producer_epoch, fresh.state, fresh.timeout_ms) == (2, TxnState.EMPTY, 30_000)
    assert m.add_partitions(T, PID, 1, [A0], 25) == ErrorCode.PRODUCER_FENCED
    assert m.add_partitions(T, PID, 0, [A0], 25) == ErrorCode.PRODUCER_FENCED


@pytest.mark.parametrize("state", [TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT])
def test_rule7_prepare_states_answer_concurrent_transactions(state: TxnState) -> None:
    m = manager()
    in_state(m, state)
    assert m.init_producer_id(T, TIMEOUT, 0, new_producer_id=None) == (
        ErrorCode.CONCURRENT_TRANSACTIONS
    )
    assert m.pending(T) is None


def test_rule7_fence_of_an_exhausted_epoch_then_rotation() -> None:
    m = manager()
    in_state(m, TxnState.ONGOING, epoch=EXHAUSTED_EPOCH)
    assert not m.needs_new_producer_id(T)  # the fence keeps the producer id
    fenced = done(m, m.init_producer_id(T, TIMEOUT, 1, new_producer_id=None))
    assert fenced.producer_epoch == MAX_EPOCH
    done(m, m.complete_markers(T, 2))
    assert m.needs_new_producer_id(T)
    rotated = init(m, 3, pid=PID + 1)
    assert (rotated.producer_id, rotated.producer_epoch) == (PID + 1, 0)


def test_rule13_epoch_never_passes_short_max() -> None:
    m = manager()
    in_state(m, TxnState.ONGOING, epoch=MAX_EPOCH)  # only from a log: never produced here
    t = transition(m.init_producer_id(T, TIMEOUT, 1, new_producer_id=None))
    assert t.after.producer_epoch == MAX_EPOCH
    m.fail(t)
    (timeout,) = m.expired(10**9)
    assert timeout.after.producer_epoch == MAX_EPOCH


# --- rule 8: AddPartitionsToTxn ----------------------------------------------------------------


def test_rule8_producer_checks() -> None:
    m = manager()
    assert m.add_partitions(T, PID, 0, [A0], 0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    init(m)
    assert m.add_partitions(T, PID + 1, 0, [A0], 0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert m.add_partitions(T, PID, 1, [A0], 0) == ErrorCode.PRODUCER_FENCED
    assert m.add_partitions(T, PID, -1, [A0], 0) == ErrorCode.PRODUCER_FENCED
    # The id check comes first.
    assert m.add_partitions(T, PID + 1, 1, [A0], 0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert m.pending(T) is None


@pytest.mark.parametrize("state", [TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT])
def test_rule8_prepare_states_answer_concurrent_transactions(state: TxnState) -> None:
    m = manager()
    in_state(m, state)
    assert m.add_partitions(T, PID, 0, [B0], 0) == ErrorCode.CONCURRENT_TRANSACTIONS


def test_rule8_dead_is_an_invalid_state() -> None:
    m = manager()
    in_state(m, TxnState.DEAD)
    assert m.add_partitions(T, PID, 0, [B0], 0) == ErrorCode.INVALID_TXN_STATE


@pytest.mark.parametrize(
    "state", [TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT]
)
def test_rule8_first_add_starts_the_transaction(state: TxnState) -> None:
    m = manager()
    before = in_state(m, state, epoch=2)
    t = transition(m.add_partitions(T, PID, 2, [A0, A1, A0], 500))
    assert t.kind == TransitionKind.ADD_PARTITIONS
    assert t.before == before
    assert t.after == TxnMetadata(
        T, PID, 2, TIMEOUT, TxnState.ONGOING, frozenset({A0, A1}), 500, 500
    )


def test_rule8_later_adds_union_and_keep_the_start() -> None:
    m = manager()
    init(m)
    first = done(m, m.add_partitions(T, PID, 0, [A0], 100))
    second = done(m, m.add_partitions(T, PID, 0, [A0, B0], 200))
    assert second.partitions == {A0, B0}
    assert (second.txn_start_ms, second.last_update_ms) == (first.txn_start_ms, 200)
    # Nothing new: NONE, no transition to write.
    assert m.add_partitions(T, PID, 0, [B0], 300) == ErrorCode.NONE
    assert m.add_partitions(T, PID, 0, [], 300) == ErrorCode.NONE
    assert m.pending(T) is None
    assert m.get(T) == second


def test_rule8_empty_add_still_starts_a_transaction() -> None:
    # As Kafka: the subset shortcut is for an Ongoing transaction only.
    m = manager()
    init(m)
    started = done(m, m.add_partitions(T, PID, 0, [], 7))
    assert (started.state, started.partitions, started.txn_start_ms) == (
        TxnState.ONGOING,
        frozenset(),
        7,
    )


# --- rule 9: EndTxn -------------------------------------------------------------------------------


def test_rule9_producer_checks() -> None:
    m = manager()
    assert m.end_txn(T, PID, 0, True, 0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    ongoing(m)
    assert m.end_txn(T, PID + 1, 0, True, 0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert m.end_txn(T, PID, 1, True, 0) == ErrorCode.PRODUCER_FENCED
    assert m.end_txn(T, PID, 1, False, 0) == ErrorCode.PRODUCER_FENCED
    assert m.pending(T) is None


@pytest.mark.parametrize(
    ("state", "commit", "outcome"),
    [
        (TxnState.ONGOING, True, TransitionKind.PREPARE_COMMIT),
        (TxnState.ONGOING, False, TransitionKind.PREPARE_ABORT),
        (TxnState.COMPLETE_COMMIT, True, ErrorCode.NONE),
        (TxnState.COMPLETE_COMMIT, False, ErrorCode.INVALID_TXN_STATE),
        (TxnState.COMPLETE_ABORT, False, ErrorCode.NONE),
        (TxnState.COMPLETE_ABORT, True, ErrorCode.INVALID_TXN_STATE),
        (TxnState.PREPARE_COMMIT, True, ErrorCode.CONCURRENT_TRANSACTIONS),
        (TxnState.PREPARE_COMMIT, False, ErrorCode.INVALID_TXN_STATE),
        (TxnState.PREPARE_ABORT, False, ErrorCode.CONCURRENT_TRANSACTIONS),
        (TxnState.PREPARE_ABORT, True, ErrorCode.INVALID_TXN_STATE),
        (TxnState.EMPTY, True, ErrorCode.INVALID_TXN_STATE),
        (TxnState.EMPTY, False, ErrorCode.INVALID_TXN_STATE),
        (TxnState.DEAD, True, ErrorCode.INVALID_TXN_STATE),
        (TxnState.DEAD, False, ErrorCode.INVALID_TXN_STATE),
    ],
)
def test_rule9_end_txn_by_state(
    state: TxnState, commit: bool, outcome: TransitionKind | ErrorCode
) -> None:
    m = manager()
    before = in_state(m, state, epoch=5)
    result = m.end_txn(T, PID, 5, commit, 1234)
    if isinstance(outcome, ErrorCode):
        assert result == outcome
        assert m.pending(T) is None
        assert m.get(T) == before
        return
    t = transition(result)
    assert t.kind == outcome
    expected_state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    assert t.after == TxnMetadata(
        T, PID, 5, TIMEOUT, expected_state, before.partitions, before.txn_start_ms, 1234
    )


# --- rule 10 and full cycles ---------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_full_cycle(commit: bool) -> None:
    m = manager()
    meta = init(m, 1)
    assert meta.last_update_ms == 1
    meta = done(m, m.add_partitions(T, PID, 0, [A0], 2))
    meta = done(m, m.add_partitions(T, PID, 0, [B0], 3))
    assert (meta.state, meta.partitions, meta.txn_start_ms, meta.last_update_ms) == (
        TxnState.ONGOING,
        frozenset({A0, B0}),
        2,
        3,
    )
    t = transition(m.end_txn(T, PID, 0, commit, 4))
    assert t.kind == (TransitionKind.PREPARE_COMMIT if commit else TransitionKind.PREPARE_ABORT)
    m.complete(t)
    assert m.needs_markers() == [t.after]
    assert t.after.last_update_ms == 4
    # The shell writes the markers to A0 and B0 with epoch 0, then:
    c = transition(m.complete_markers(T, 5))
    assert c.kind == TransitionKind.COMPLETE
    m.complete(c)
    final = m.get(T)
    assert final == TxnMetadata(
        T,
        PID,
        0,
        TIMEOUT,
        TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
        frozenset(),
        -1,
        5,
    )
    assert m.needs_markers() == []
    # A retried EndTxn with the same result: NONE; the opposite: INVALID_TXN_STATE.
    assert m.end_txn(T, PID, 0, commit, 6) == ErrorCode.NONE
    assert m.end_txn(T, PID, 0, not commit, 6) == ErrorCode.INVALID_TXN_STATE
    # The next transaction, same producer epoch.
    nxt = done(m, m.add_partitions(T, PID, 0, [A1], 7))
    assert (nxt.state, nxt.partitions, nxt.txn_start_ms) == (TxnState.ONGOING, frozenset({A1}), 7)


def test_rule10_complete_markers_only_for_prepare_states() -> None:
    m = manager()
    assert m.complete_markers(T, 0) is None
    for state in (
        TxnState.EMPTY,
        TxnState.ONGOING,
        TxnState.COMPLETE_COMMIT,
        TxnState.COMPLETE_ABORT,
        TxnState.DEAD,
    ):
        in_state(m, state)
        assert m.complete_markers(T, 0) is None, state
        assert m.needs_markers() == []
        assert m.pending(T) is None


# --- rule 11: timeouts ------------------------------------------------------------------------


def test_rule11_timed_out_transaction_is_aborted_and_its_producer_fenced() -> None:
    m = manager()
    init(m, timeout=1000)
    ongoing(m, 100)
    init(m, txn="other", timeout=1000)  # Empty: never times out
    assert m.expired(1099) == []
    (t,) = m.expired(1100)  # start + timeout <= now
    assert t.kind == TransitionKind.TIMEOUT_ABORT
    assert t.after == TxnMetadata(
        T, PID, 1, 1000, TxnState.PREPARE_ABORT, frozenset({A0}), 100, 1100
    )
    assert m.pending(T) == t
    assert m.expired(5000) == []  # pending: not again
    m.complete(t)
    assert m.needs_markers() == [t.after]
    # The producer's next requests, with its old epoch.
    assert m.add_partitions(T, PID, 0, [B0], 1200) == ErrorCode.PRODUCER_FENCED
    assert m.end_txn(T, PID, 0, False, 1200) == ErrorCode.PRODUCER_FENCED
    assert m.end_txn(T, PID, 0, True, 1200) == ErrorCode.PRODUCER_FENCED
    done(m, m.complete_markers(T, 1300))
    assert m.init_producer_id(
        T, 1000, 1400, new_producer_id=None, expected_producer_id=PID, expected_epoch=0
    ) == (ErrorCode.PRODUCER_FENCED)
    assert init(m, 1500).producer_epoch == 2  # a new producer instance is fine


def test_rule11_failed_timeout_abort_is_retried_at_the_next_check() -> None:
    m = manager()
    init(m, timeout=1000)
    ongoing(m, 0)
    (t,) = m.expired(1000)
    m.fail(t)
    assert m.get(T) == t.before
    (again,) = m.expired(1001)
    assert again.after.producer_epoch == 1  # bumped once from the unchanged state


def test_rule11_later_adds_do_not_extend_the_timeout() -> None:
    m = manager()
    init(m, timeout=1000)
    ongoing(m, 0, (A0,))
    ongoing(m, 900, (B0,))
    assert len(m.expired(1000)) == 1


# --- rule 12: load and failover -----------------------------------------------------------------


def test_rule12_load_then_needs_markers_resumes_a_prepare_commit() -> None:
    old = manager()
    ongoing(old, 10, (A0, B0))
    prepared = done(old, old.end_txn(T, PID, 0, True, 20))
    ongoing(old, 30, txn="b")
    # Coordinator failover: the new leader replays the partition's records.
    replayed = {
        x.transactional_id: decode_txn_value(x.transactional_id, encode_txn_value(x))
        for x in old.all()
    }
    m = manager()
    m.load(replayed)
    assert m.needs_markers() == [prepared]
    done(m, m.complete_markers(T, 40))
    assert m.get(T) is not None
    assert m.needs_markers() == []


def test_rule12_load_replaces_state_and_pending() -> None:
    m = manager()
    init(m)
    t = transition(m.add_partitions(T, PID, 0, [A0], 1))
    other = TxnMetadata("b", 7, 0, TIMEOUT, TxnState.EMPTY, frozenset(), -1, 0)
    m.load({"b": other})
    assert m.get(T) is None
    assert m.pending(T) is None
    assert m.all() == [other]
    with pytest.raises(ValueError, match="not the pending transition"):
        m.complete(t)


def test_rule12_load_prepare_epoch_fence_as_prepare_abort() -> None:
    m = manager()
    fence = TxnMetadata(T, PID, 3, TIMEOUT, TxnState.PREPARE_EPOCH_FENCE, frozenset({A0}), 5, 6)
    m.load({T: fence})
    meta = m.get(T)
    assert meta is not None
    assert meta.state == TxnState.PREPARE_ABORT
    assert m.needs_markers() == [meta]
    assert done(m, m.complete_markers(T, 7)).state == TxnState.COMPLETE_ABORT


def test_rule12_load_refuses_a_record_under_another_id() -> None:
    m = manager()
    meta = TxnMetadata("x", PID, 0, TIMEOUT, TxnState.EMPTY, frozenset(), -1, 0)
    with pytest.raises(ValueError, match="under"):
        m.load({"y": meta})


# --- complete() and fail() ------------------------------------------------------------------


def test_fail_leaves_the_state_unchanged() -> None:
    m = manager()
    t = transition(m.init_producer_id(T, TIMEOUT, 0, new_producer_id=PID))
    m.fail(t)
    assert m.get(T) is None
    assert m.pending(T) is None
    meta = init(m)
    m.fail(transition(m.add_partitions(T, PID, 0, [A0], 1)))
    assert m.get(T) == meta
    assert m.pending(T) is None
    m.fail(transition(m.init_producer_id(T, TIMEOUT, 1, new_producer_id=None)))
    assert m.get(T) == meta
    assert m.pending(T) is None
    ongoing(m)
    before = m.get(T)
    for commit in (True, False):
        m.fail(transition(m.end_txn(T, PID, 0, commit, 2)))
        assert m.get(T) == before
    # A failed fence does not bump twice: the retry proposes the same epoch.
    fence = transition(m.init_producer_id(T, TIMEOUT, 3, new_producer_id=None))
    m.fail(fence)
    again = transition(m.init_producer_id(T, TIMEOUT, 3, new_producer_id=None))
    assert again.after.producer_epoch == fence.after.producer_epoch == 1
    m.complete(again)
    marker = transition(m.complete_markers(T, 4))
    m.fail(marker)
    assert m.needs_markers() == [again.after]


def test_complete_or_fail_of_a_transition_that_is_not_pending_is_refused() -> None:
    m = manager()
    t = transition(m.init_producer_id(T, TIMEOUT, 0, new_producer_id=PID))
    m.complete(t)
    with pytest.raises(ValueError, match="not the pending transition"):
        m.complete(t)
    with pytest.raises(ValueError, match="not the pending transition"):
        m.fail(t)


def test_views_are_sorted_by_transactional_id() -> None:
    m = manager()
    for txn in ("c", "a", "b"):
        ongoing(m, txn=txn)
        done(m, m.end_txn(txn, PID, 0, True, 1))
    assert [x.transactional_id for x in m.all()] == ["a", "b", "c"]
    assert [x.transactional_id for x in m.needs_markers()] == ["a", "b", "c"]
    assert [t.transactional_id for t in m.expired(10**9)] == []


# --- hypothesis: random operations ------------------------------------------------------------

_VALID_MOVES: dict[TransitionKind, tuple[set[TxnState | None], set[TxnState]]] = {
    TransitionKind.INIT: (
        {None, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT, TxnState.DEAD},
        {TxnState.EMPTY},
    ),
    TransitionKind.ADD_PARTITIONS: (
        {TxnState.EMPTY, TxnState.ONGOING, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
        {TxnState.ONGOING},
    ),
    TransitionKind.PREPARE_COMMIT: ({TxnState.ONGOING}, {TxnState.PREPARE_COMMIT}),
    TransitionKind.PREPARE_ABORT: ({TxnState.ONGOING}, {TxnState.PREPARE_ABORT}),
    TransitionKind.FENCE_ABORT: ({TxnState.ONGOING}, {TxnState.PREPARE_ABORT}),
    TransitionKind.TIMEOUT_ABORT: ({TxnState.ONGOING}, {TxnState.PREPARE_ABORT}),
    TransitionKind.COMPLETE: (
        {TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT},
        {TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    ),
    TransitionKind.EXPIRE: (
        {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
        {TxnState.DEAD},
    ),
}
IDS = ("a", "b")
TPS = (A0, A1, B0)


class TxnMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.m = TxnManager(TxnConfig(max_timeout_ms=10_000, transactional_id_expiration_ms=20_000))
        self.now = 0
        self.pids = itertools.count(100)
        #: Every transition handed out and not yet completed or failed.
        self.outstanding: dict[str, Transition] = {}
        #: Producers (id, epoch) each transactional id has answered: current and stale.
        self.seen: dict[str, list[tuple[int, int]]] = {txn: [] for txn in IDS}
        #: The highest epoch ever seen per producer id.
        self.max_epoch: dict[int, int] = {}

    def _producer(self, txn: str, pick: int) -> tuple[int, int]:
        """Mostly the current producer; else a stale one, or none."""
        meta = self.m.get(txn)
        if meta is not None and pick < 12:
            return meta.producer_id, meta.producer_epoch
        choices = [*self.seen[txn], (-1, -1)]
        return choices[pick % len(choices)]

    def _handed_out(self, result: Transition | ErrorCode | None, write: int = 3) -> None:
        """Check a transition handed out and track it until it is resolved: at once unless
        ``write`` is 0 (left pending for ``resolve``), failed when it is 1."""
        assert result is not None
        if isinstance(result, ErrorCode):
            return
        t = result
        assert t.transactional_id not in self.outstanding
        assert t.before == self.m.get(t.transactional_id)
        froms, tos = _VALID_MOVES[t.kind]
        assert (t.before.state if t.before else None) in froms, t
        assert t.after.state in tos, t
        assert t.after.last_update_ms == self.now
        if t.before is not None and t.before.producer_id == t.after.producer_id:
            assert t.after.producer_epoch >= t.before.producer_epoch
        self.outstanding[t.transactional_id] = t
        if write:
            self.resolve(t.transactional_id, ok=write > 1)

    @initialize()
    def producers(self) -> None:
        for txn in IDS:
            self._handed_out(
                self.m.init_producer_id(txn, 5000, self.now, new_producer_id=next(self.pids))
            )

    @rule(
        txn=st.sampled_from(IDS),
        pick=st.integers(0, 20),
        tps=st.lists(st.sampled_from(TPS), min_size=1, max_size=3),
        commit=st.booleans(),
    )
    def whole_transaction(
        self, txn: str, pick: int, tps: list[TopicPartition], commit: bool
    ) -> None:
        """What a live producer does most: add, then end (each written at once)."""
        pid, epoch = self._producer(txn, pick)
        self._handed_out(self.m.add_partitions(txn, pid, epoch, tps, self.now))
        self._handed_out(self.m.end_txn(txn, pid, epoch, commit, self.now))

    @rule(
        txn=st.sampled_from(IDS),
        timeout=st.integers(-1, 12_000),
        expect=st.booleans(),
        pick=st.integers(0, 20),
        write=st.integers(0, 5),
    )
    def init(self, txn: str, timeout: int, expect: bool, pick: int, write: int) -> None:
        expected = self._producer(txn, pick) if expect else (-1, -1)
        pid = next(self.pids) if self.m.needs_new_producer_id(txn) else None
        result = self.m.init_producer_id(
            txn,
            timeout,
            self.now,
            new_producer_id=pid,
            expected_producer_id=expected[0],
            expected_epoch=expected[1],
        )
        self._handed_out(result, write)

    @rule(
        txn=st.sampled_from(IDS),
        pick=st.integers(0, 20),
        tps=st.lists(st.sampled_from(TPS), max_size=3),
        write=st.integers(0, 5),
    )
    def add(self, txn: str, pick: int, tps: list[TopicPartition], write: int) -> None:
        pid, epoch = self._producer(txn, pick)
        result = self.m.add_partitions(txn, pid, epoch, tps, self.now)
        self._handed_out(result, write)

    @rule(
        txn=st.sampled_from(IDS),
        pick=st.integers(0, 20),
        commit=st.booleans(),
        write=st.integers(0, 5),
    )
    def end(self, txn: str, pick: int, commit: bool, write: int) -> None:
        pid, epoch = self._producer(txn, pick)
        result = self.m.end_txn(txn, pid, epoch, commit, self.now)
        self._handed_out(result, write)

    @rule(write=st.integers(0, 5))
    def markers(self, write: int) -> None:
        for meta in self.m.needs_markers():
            self._handed_out(self.m.complete_markers(meta.transactional_id, self.now), write)

    @rule(ms=st.integers(0, 15_000), write=st.integers(0, 5))
    def tick(self, ms: int, write: int) -> None:
        self.now += ms
        for t in self.m.expired(self.now):
            assert t.before is not None
            assert t.before.txn_start_ms + t.before.timeout_ms <= self.now
            self._handed_out(t, write)

    @rule(write=st.integers(0, 5))
    def expire_ids(self, write: int) -> None:
        """Rule 14: idle ids not updated for the expiration leave (once written)."""
        limit = self.now - self.m.config.transactional_id_expiration_ms
        expiring = self.m.expire_transactional_ids(self.now)
        # Right after the pass, every such id is pending (a failed write, below, leaves it
        # idle and not pending until the next pass retries it, as Kafka's cleanup does).
        for meta in self.m.all():
            idle = meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
            if idle and meta.last_update_ms <= limit:
                assert self.m.pending(meta.transactional_id) is not None
        for t in expiring:
            assert t.before is not None
            assert t.before.last_update_ms <= limit
            self._handed_out(t, write)

    @rule(txn=st.sampled_from(IDS), ok=st.booleans())
    def resolve(self, txn: str, ok: bool) -> None:
        t = self.outstanding.pop(txn, None)
        if t is None:
            return
        if ok and t.after.state == TxnState.DEAD:
            self.m.complete(t)
            assert self.m.get(txn) is None
            assert self.m.needs_new_producer_id(txn)
        elif ok:
            self.m.complete(t)
            assert self.m.get(txn) == t.after
            self.seen[txn].append((t.after.producer_id, t.after.producer_epoch))
        else:
            self.m.fail(t)
            assert self.m.get(txn) == t.before

    @rule()
    def failover(self) -> None:
        """The coordinator moves: only what was written survives (in Kafka's v0 format)."""
        replayed = {
            x.transactional_id: decode_txn_value(x.transactional_id, encode_txn_value(x))
            for x in self.m.all()
        }
        self.outstanding.clear()
        self.m = TxnManager(self.m.config)
        self.m.load(replayed)

    @invariant()
    def pending_is_exactly_what_was_handed_out(self) -> None:
        for txn in IDS:
            assert self.m.pending(txn) == self.outstanding.get(txn)

    @invariant()
    def epochs_never_decrease(self) -> None:
        for meta in self.m.all():
            assert 0 <= meta.producer_epoch <= MAX_EPOCH
            assert meta.producer_epoch >= self.max_epoch.get(meta.producer_id, 0)
            self.max_epoch[meta.producer_id] = meta.producer_epoch

    @invariant()
    def states_are_consistent(self) -> None:
        waiting = {x.transactional_id for x in self.m.needs_markers()}
        for meta in self.m.all():
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                assert (meta.transactional_id in waiting) != (
                    self.m.pending(meta.transactional_id) is not None
                )
                assert meta.partitions or meta.txn_start_ms >= 0
            if meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
                assert meta.partitions == frozenset()
                assert meta.txn_start_ms == -1
            if meta.state == TxnState.ONGOING:
                assert 0 <= meta.txn_start_ms <= meta.last_update_ms
            assert 0 < meta.timeout_ms <= self.m.config.max_timeout_ms

    def teardown(self) -> None:
        """Nothing is stuck: resolving what is outstanding and writing every due marker
        leaves no transaction pending or half-ended."""
        for t in list(self.outstanding.values()):
            self.m.complete(t)
        self.outstanding.clear()
        for _ in range(2):
            for meta in self.m.needs_markers():
                self.m.complete(transition(self.m.complete_markers(meta.transactional_id, 0)))
        for meta in self.m.all():
            assert self.m.pending(meta.transactional_id) is None
            assert meta.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


TxnMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestTxnStateful = TxnMachine.TestCase
