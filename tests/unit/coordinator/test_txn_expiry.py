"""Transactional id expiry (rule 14 of ``tidelog.coordinator.txn``, Kafka's
``removeExpiredTransactionalIds``): only idle ids (Empty, CompleteCommit, CompleteAbort) not
updated for ``transactional.id.expiration.ms`` expire, never an open or preparing one; the
expiry is a pending change whose record is a tombstone; once written the id is gone, and a
replay that ends in the tombstone does not bring it back. An InitProducerId afterwards starts
fresh with a new producer id."""

from __future__ import annotations

from tidelog.coordinator.txn import (
    Transition,
    TransitionKind,
    TxnConfig,
    TxnManager,
    TxnMetadata,
    TxnState,
)
from tidelog.coordinator.txn_records import (
    apply_txn_record,
    encode_txn_key,
    encode_txn_value,
    txn_record_value,
)
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

EXPIRATION = 10_000
TIMEOUT = 60_000
A0 = TopicPartition("a", 0)
_IN_TXN = (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


def manager() -> TxnManager:
    return TxnManager(TxnConfig(transactional_id_expiration_ms=EXPIRATION))


def meta(txn_id: str, state: TxnState, last_update_ms: int, pid: int = 1000) -> TxnMetadata:
    in_txn = state in _IN_TXN
    return TxnMetadata(
        transactional_id=txn_id,
        producer_id=pid,
        producer_epoch=3,
        timeout_ms=TIMEOUT,
        state=state,
        partitions=frozenset({A0}) if in_txn else frozenset(),
        txn_start_ms=0 if in_txn else -1,
        last_update_ms=last_update_ms,
    )


def expiring(m: TxnManager, now: int) -> list[str]:
    return [t.transactional_id for t in m.expire_transactional_ids(now)]


def test_only_idle_ids_older_than_the_expiration_expire() -> None:
    m = manager()
    every_state = [s for s in TxnState if s not in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE)]
    m.load(
        {s.value: meta(s.value, s, 0) for s in every_state}
        | {"fresh": meta("fresh", TxnState.EMPTY, 1)}
    )
    # Updated exactly EXPIRATION ago is expired (Kafka: lastUpdate <= now - expiration);
    # 1 ms less is not.
    assert expiring(m, EXPIRATION - 1) == []
    assert expiring(m, EXPIRATION) == ["CompleteAbort", "CompleteCommit", "Empty"]
    # Ongoing and PrepareCommit/PrepareAbort never expire, however old.
    assert expiring(m, 10**12) == ["fresh"]
    assert {x.transactional_id for x in m.all()} == {s.value for s in every_state} | {"fresh"}


def test_expiry_is_pending_then_a_tombstone_removes_the_id() -> None:
    m = manager()
    old = meta("t", TxnState.COMPLETE_COMMIT, 5)
    m.load({"t": old})
    [t] = m.expire_transactional_ids(EXPIRATION + 5)
    assert (t.kind, t.before, t.after.state) == (TransitionKind.EXPIRE, old, TxnState.DEAD)
    assert t.after.producer_id == old.producer_id
    assert txn_record_value(t.after) is None  # what the shell writes: a tombstone
    # Pending: one change at a time (rule 1), and a second round does not propose it again.
    assert m.pending("t") == t
    assert m.get("t") == old
    assert m.init_producer_id("t", TIMEOUT, 20_000, new_producer_id=2000) == (
        ErrorCode.CONCURRENT_TRANSACTIONS
    )
    assert m.add_partitions("t", 1000, 3, [A0], 20_000) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert m.expire_transactional_ids(10**12) == []
    m.complete(t)
    assert m.get("t") is None
    assert m.pending("t") is None
    assert m.all() == []
    # The old producer is unknown now; a new InitProducerId starts fresh (rule 4): the
    # shell is asked for a new producer id and the epoch is 0.
    assert m.end_txn("t", 1000, 3, True, 20_000) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert m.needs_new_producer_id("t")
    init = m.init_producer_id("t", TIMEOUT, 20_000, new_producer_id=2000)
    assert isinstance(init, Transition)
    assert (init.before, init.after.producer_id, init.after.producer_epoch) == (None, 2000, 0)


def test_failed_tombstone_keeps_the_id_for_the_next_round() -> None:
    m = manager()
    old = meta("t", TxnState.EMPTY, 0)
    m.load({"t": old})
    [t] = m.expire_transactional_ids(EXPIRATION)
    m.fail(t)
    assert m.get("t") == old
    assert m.pending("t") is None
    assert expiring(m, EXPIRATION) == ["t"]


def test_an_id_with_another_pending_change_does_not_expire() -> None:
    m = manager()
    m.load({"t": meta("t", TxnState.EMPTY, 0)})
    add = m.add_partitions("t", 1000, 3, [A0], EXPIRATION)
    assert isinstance(add, Transition)
    assert expiring(m, 10**12) == []
    m.complete(add)  # Ongoing and updated now: still not expired
    assert expiring(m, 10**12) == []


def test_a_transaction_in_use_is_not_expired() -> None:
    """Every transition updates ``last_update_ms``: an id used within the expiration stays."""
    m = manager()
    m.load({"t": meta("t", TxnState.EMPTY, 0)})
    init = m.init_producer_id("t", TIMEOUT, 9_000, new_producer_id=None)
    assert isinstance(init, Transition)
    m.complete(init)
    assert expiring(m, EXPIRATION) == []
    assert expiring(m, 9_000 + EXPIRATION) == ["t"]


def test_default_expiration_is_kafkas_seven_days() -> None:
    week = 7 * 24 * 3600 * 1000
    assert TxnConfig().transactional_id_expiration_ms == week
    m = TxnManager(TxnConfig())
    m.load({"t": meta("t", TxnState.COMPLETE_ABORT, 0)})
    assert expiring(m, week - 1) == []
    assert expiring(m, week) == ["t"]


def test_a_replay_ending_in_the_tombstone_does_not_bring_the_id_back() -> None:
    """The records a coordinator wrote for an id, then its expiry's tombstone: the load
    knows only the other ids."""
    m = manager()
    kept = meta("kept", TxnState.COMPLETE_COMMIT, 9_000)
    m.load({"gone": meta("gone", TxnState.EMPTY, 0), "kept": kept})
    [t] = m.expire_transactional_ids(EXPIRATION)
    log = [
        (encode_txn_key("gone"), encode_txn_value(meta("gone", TxnState.ONGOING, 0))),
        (encode_txn_key("gone"), encode_txn_value(meta("gone", TxnState.EMPTY, 0))),
        (encode_txn_key("kept"), encode_txn_value(kept)),
        (encode_txn_key("gone"), txn_record_value(t.after)),
    ]
    state: dict[str, TxnMetadata] = {}
    for key, value in log:
        apply_txn_record(state, key, value)
    reloaded = manager()
    reloaded.load(state)
    assert reloaded.all() == [kept]
    assert reloaded.needs_new_producer_id("gone")
