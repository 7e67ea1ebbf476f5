"""The transaction coordinator as a pure state machine (Kafka's TransactionCoordinator and
TransactionMetadata, KIP-98 with the KIP-360 epoch bumps that today's clients use).

Theory of operation. One ``TxnManager`` holds the transactional ids of one
``__transaction_state`` partition. Requests come in as method calls with the time as
``now_ms``; answers come out as values: an ``ErrorCode`` to send back at once, or a
``Transition``, a change that must be persisted before it takes effect. The shell writes
``Transition.after`` to the partition (``tidelog.coordinator.txn_records``) and calls
``complete(t)`` once the write is replicated, or ``fail(t)`` when it is not; until then the
transition is *pending*. Every returned ``Transition`` is pending (including those of
``complete_markers``, ``expired`` and ``expire_transactional_ids``). Writing the transaction
markers (the control batches in the data partitions) is the shell's job: ``needs_markers``
says which transactions await them, ``complete_markers`` ends one once every marker is
written.

States (``TxnState``, Kafka's names and ``__transaction_state`` status codes): Empty (a
producer id and epoch, no transaction), Ongoing (partitions added, no end yet),
PrepareCommit/PrepareAbort (the decision is persisted; markers are due), CompleteCommit/
CompleteAbort (markers written; same as Empty for a new transaction), Dead (an expired
id on its way out, rule 14) and PrepareEpochFence (Kafka's in-memory states, see rule 12).

Rules (each has tests in ``tests/unit/coordinator/test_txn.py``). The first that applies
decides; InitProducerId checks rules 2, 3, 1, 4, 5 and then the state, AddPartitionsToTxn
and EndTxn rules 2, 1, then the producer id and epoch, then the state:

1. Any request for a transactional id with a pending transition answers
   CONCURRENT_TRANSACTIONS (retriable): the coordinator does one change at a time per id.
   ``expired`` and ``expire_transactional_ids`` skip such ids; ``complete_markers``
   returns None for them.
2. An empty transactional id answers INVALID_REQUEST (InitProducerId, AddPartitions, EndTxn).
3. InitProducerId: ``timeout_ms`` outside ``(0, config.max_timeout_ms]`` answers
   INVALID_TRANSACTION_TIMEOUT (before any state is looked at). Exactly one of
   ``expected_producer_id``/``expected_epoch`` given (the other -1) answers INVALID_REQUEST.
4. InitProducerId, unknown id (or Dead): an INIT transition to Empty with
   ``new_producer_id`` and epoch 0. ``needs_new_producer_id`` tells the shell to allocate the
   id first; when an id is needed and not given, ``ValueError`` (a shell bug).
5. InitProducerId, KIP-360 (v3+: ``expected_producer_id``/``expected_epoch`` >= 0): they
   must name the current producer (id and epoch) or the one the last InitProducerId replaced
   on that client's behalf, remembered because the client may have missed the answer
   (rule 6); otherwise PRODUCER_FENCED. This check comes before the state's (a stale
   producer is fenced even when the transaction is in PrepareCommit/PrepareAbort), after
   rule 4's (an unknown id takes any expected producer: Kafka's idempotent producer that
   starts using transactions).
6. InitProducerId, state Empty/CompleteCommit/CompleteAbort: an INIT transition to Empty,
   partitions cleared, ``txn_start_ms`` -1, ``timeout_ms`` updated, and the epoch bumped by
   one. When the current epoch is exhausted (>= 32766, ``Short.MaxValue - 1``) the producer
   id is rotated instead: ``new_producer_id`` with epoch 0 (``needs_new_producer_id`` is
   True then). With an expected producer (the current one), the replaced producer id and
   epoch are remembered (``last_producer_id``/``last_producer_epoch``), and a retry naming
   that remembered producer gets the current id and epoch again, without a bump (still an
   INIT transition: the new timeout is written). Without an expected producer nothing is
   remembered (-1, -1): a new producer instance fences every older one.
7. InitProducerId, state Ongoing: a FENCE_ABORT transition: epoch bumped by one, state
   PrepareAbort, partitions kept, remembered producer forgotten. The shell writes it, answers
   the client CONCURRENT_TRANSACTIONS (so it retries and gets rule 6 once the abort is
   complete), and sends ABORT markers with the NEW epoch, which fence the zombie's writes.
   State PrepareCommit/PrepareAbort: CONCURRENT_TRANSACTIONS.
8. AddPartitionsToTxn: unknown id or another producer id answers INVALID_PRODUCER_ID_MAPPING;
   another epoch PRODUCER_FENCED; PrepareCommit/PrepareAbort CONCURRENT_TRANSACTIONS; Dead
   INVALID_TXN_STATE. Empty/CompleteCommit/CompleteAbort/Ongoing: an ADD_PARTITIONS
   transition to Ongoing with the union of the partitions; ``txn_start_ms`` is ``now_ms``
   when the transaction starts (the state was not Ongoing) and kept otherwise. Ongoing with
   every partition already in the transaction: NONE, no transition.
9. EndTxn: unknown id or another producer id answers INVALID_PRODUCER_ID_MAPPING; another
   epoch PRODUCER_FENCED (the shell answers INVALID_PRODUCER_EPOCH to EndTxn v0-v1, which
   predate PRODUCER_FENCED). Ongoing: a PREPARE_COMMIT or PREPARE_ABORT transition
   (partitions and ``txn_start_ms`` kept). CompleteCommit with commit, CompleteAbort with
   abort: NONE (a retry of an EndTxn that succeeded). PrepareCommit with commit,
   PrepareAbort with abort: CONCURRENT_TRANSACTIONS (markers still being written). The
   opposite result in any of these, Empty and Dead: INVALID_TXN_STATE.
10. ``complete_markers``: PrepareCommit -> CompleteCommit, PrepareAbort -> CompleteAbort
    (a COMPLETE transition), partitions cleared, ``txn_start_ms`` -1, producer kept.
11. ``expired``: every Ongoing transaction without a pending transition whose
    ``txn_start_ms + timeout_ms <= now_ms`` gets a TIMEOUT_ABORT transition (KIP-98's
    proactive abort): like rule 7's FENCE_ABORT (epoch bumped by one, PrepareAbort), so the
    producer of the timed-out transaction is fenced. The shell then sends ABORT markers and
    calls ``complete_markers`` as for any PrepareAbort.
12. ``load``: the state replayed from the partition replaces the manager's (pending
    transitions are dropped). A PrepareEpochFence record (Kafka never writes one; it is the
    in-memory step before a fence's abort) is loaded as PrepareAbort. Transactions loaded in
    PrepareCommit/PrepareAbort are in ``needs_markers``: a new coordinator resumes the
    markers of its predecessor. A Dead record is kept as read (Kafka writes none: an
    expired id is a tombstone, which the replay has already removed; rule 14).
13. Every transition sets ``last_update_ms`` to ``now_ms``; the epoch never decreases for a
    producer id and never passes 32767 (``Short.MaxValue``).
14. ``expire_transactional_ids`` (Kafka's ``removeExpiredTransactionalIds``): every id in
    state Empty/CompleteCommit/CompleteAbort without a pending transition whose
    ``last_update_ms <= now_ms - config.transactional_id_expiration_ms`` gets an EXPIRE
    transition to Dead (partitions cleared, producer kept). Ongoing and PrepareCommit/
    PrepareAbort ids never expire (an Ongoing one is first aborted by rule 11). The shell
    writes a tombstone (``txn_records.txn_record_value`` is None for Dead), so compaction
    drops the id's records and a load does not bring it back; ``complete`` then removes the
    id from memory. An InitProducerId for it afterwards is rule 4's: a newly allocated
    producer id, epoch 0 (the old producer id is not reused).

Known differences from Kafka (2.5 to 3.x, transaction version 1):

- Rule 5 checks the expected epoch in every state. Kafka checks only the expected producer
  id before an Ongoing transaction is fenced, so there a stale producer instance with the
  right id can abort the transaction of a newer one (and is fenced only on its retry).
- A producer whose transaction timed out (rule 11) gets PRODUCER_FENCED for any later
  request with its old epoch, InitProducerId with that expected epoch included (the fence
  forgot it). KIP-588's TRANSACTION_TIMED_OUT recovery and KIP-890's (transaction version 2)
  epoch bump per transaction are not implemented; as far as known Kafka with transaction
  version 1 behaves the same.
- ``last_producer_id``/``last_producer_epoch`` are in memory only (``__transaction_state``
  value version 0 does not carry them): a retried InitProducerId whose first answer was lost
  across a coordinator failover is fenced (Kafka has the same limit with version 0 records).
- Complete* states keep ``txn_start_ms`` -1 (Kafka keeps the start of the finished
  transaction).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

#: ``Short.MaxValue``: no epoch goes higher.
MAX_EPOCH = 32767
#: An epoch at or past this one cannot be bumped for a new producer: the id is rotated.
EXHAUSTED_EPOCH = MAX_EPOCH - 1
NO_PRODUCER_ID = -1
NO_EPOCH = -1


class TxnState(enum.Enum):
    """Kafka's ``TransactionState``: the value is Kafka's name, ``code`` the status byte of
    ``__transaction_state`` records."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def code(self) -> int:
        return _STATE_CODES[self]

    @classmethod
    def from_code(cls, code: int) -> TxnState:
        for state, state_code in _STATE_CODES.items():
            if state_code == code:
                return state
        raise ValueError(f"unknown transaction state code {code}")


#: Kafka's ``TransactionState.id``, the status byte of ``__transaction_state`` values.
_STATE_CODES = {
    TxnState.EMPTY: 0,
    TxnState.ONGOING: 1,
    TxnState.PREPARE_COMMIT: 2,
    TxnState.PREPARE_ABORT: 3,
    TxnState.COMPLETE_COMMIT: 4,
    TxnState.COMPLETE_ABORT: 5,
    TxnState.DEAD: 6,
    TxnState.PREPARE_EPOCH_FENCE: 7,
}
_PREPARE = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})
#: States where a new transaction (or a new producer epoch) may begin.
_IDLE = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional id (Kafka's ``TransactionMetadata``)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    #: When the current transaction began (its first AddPartitions); -1 when none.
    txn_start_ms: int
    last_update_ms: int
    #: The producer (id, epoch) a KIP-360 InitProducerId may still name, having missed the
    #: answer that replaced it (rule 6); -1, -1 when none. In memory only.
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class TxnConfig:
    """Kafka's broker settings for transactions (defaults as Kafka's)."""

    #: ``transaction.max.timeout.ms``: the largest ``transaction.timeout.ms`` accepted.
    max_timeout_ms: int = 900_000
    #: ``transactional.id.expiration.ms`` (7 days): how long an idle id is kept (rule 14).
    transactional_id_expiration_ms: int = 604_800_000


class TransitionKind(enum.Enum):
    INIT = "init"
    ADD_PARTITIONS = "add_partitions"
    PREPARE_COMMIT = "prepare_commit"
    PREPARE_ABORT = "prepare_abort"
    COMPLETE = "complete"
    #: InitProducerId found an Ongoing transaction: epoch bumped, abort (rule 7).
    FENCE_ABORT = "fence_abort"
    #: The transaction outlived its timeout: epoch bumped, abort (rule 11).
    TIMEOUT_ABORT = "timeout_abort"
    #: The id was idle past ``transactional.id.expiration.ms``: Dead, a tombstone (rule 14).
    EXPIRE = "expire"


@dataclass(frozen=True, slots=True)
class Transition:
    """A pending change: the shell writes ``after`` to the log, then calls ``complete`` or
    ``fail`` with it."""

    transactional_id: str
    before: TxnMetadata | None
    after: TxnMetadata
    kind: TransitionKind


def _epoch_exhausted(epoch: int) -> bool:
    return epoch >= EXHAUSTED_EPOCH


class TxnManager:
    """The transactional ids of one ``__transaction_state`` partition; see the module
    docstring."""

    def __init__(self, config: TxnConfig) -> None:
        self.config = config
        self._txns: dict[str, TxnMetadata] = {}
        self._pending: dict[str, Transition] = {}

    # --- state -----------------------------------------------------------------------------

    def load(self, records: Mapping[str, TxnMetadata]) -> None:
        """The state replayed from the partition (the last record per id, tombstones
        removed) replaces this manager's (rule 12)."""
        self._txns.clear()
        self._pending.clear()
        for txn_id, meta in records.items():
            if meta.transactional_id != txn_id:
                raise ValueError(f"record of {meta.transactional_id!r} under {txn_id!r}")
            fenced = meta.state == TxnState.PREPARE_EPOCH_FENCE
            self._txns[txn_id] = replace(meta, state=TxnState.PREPARE_ABORT) if fenced else meta

    def get(self, txn_id: str) -> TxnMetadata | None:
        return self._txns.get(txn_id)

    def all(self) -> list[TxnMetadata]:
        return [self._txns[txn_id] for txn_id in sorted(self._txns)]

    def pending(self, txn_id: str) -> Transition | None:
        return self._pending.get(txn_id)

    def needs_markers(self) -> list[TxnMetadata]:
        """PrepareCommit/PrepareAbort transactions with no pending transition: their markers
        are due (again, after a load)."""
        return [
            meta
            for meta in self.all()
            if meta.state in _PREPARE and meta.transactional_id not in self._pending
        ]

    def needs_new_producer_id(self, txn_id: str) -> bool:
        """Must the shell allocate a producer id before ``init_producer_id``? (Unknown or Dead
        id, or an idle producer whose epoch is exhausted: rules 4 and 6.) May say True when
        ``init_producer_id`` ends up not using it (an error, a retry)."""
        meta = self._txns.get(txn_id)
        if meta is None or meta.state == TxnState.DEAD:
            return True
        return meta.state in _IDLE and _epoch_exhausted(meta.producer_epoch)

    # --- InitProducerId --------------------------------------------------------------------

    def init_producer_id(
        self,
        txn_id: str,
        timeout_ms: int,
        now_ms: int,
        *,
        new_producer_id: int | None,
        expected_producer_id: int = NO_PRODUCER_ID,
        expected_epoch: int = NO_EPOCH,
    ) -> Transition | ErrorCode:
        """InitProducerId with a transactional id (rules 1-7). An INIT transition's ``after``
        holds the producer id and epoch to answer; a FENCE_ABORT's answer is
        CONCURRENT_TRANSACTIONS once it is written."""
        error = self._init_request_error(txn_id, timeout_ms, expected_producer_id, expected_epoch)
        if error is not None:
            return error
        expected = expected_producer_id >= 0
        meta = self._txns.get(txn_id)
        if meta is None or meta.state == TxnState.DEAD:
            after = TxnMetadata(
                transactional_id=txn_id,
                producer_id=self._given_id(new_producer_id),
                producer_epoch=0,
                timeout_ms=timeout_ms,
                state=TxnState.EMPTY,
                partitions=frozenset(),
                txn_start_ms=-1,
                last_update_ms=now_ms,
            )
            return self._propose(TransitionKind.INIT, meta, after)
        if expected and not self._names_producer(meta, expected_producer_id, expected_epoch):
            return ErrorCode.PRODUCER_FENCED
        if meta.state == TxnState.ONGOING:
            return self._propose(TransitionKind.FENCE_ABORT, meta, self._fenced(meta, now_ms))
        if meta.state not in _IDLE:
            # PrepareCommit/PrepareAbort (and a loaded PrepareEpochFence, see load()).
            return ErrorCode.CONCURRENT_TRANSACTIONS
        after = self._reinitialized(
            meta,
            timeout_ms,
            now_ms,
            new_producer_id=new_producer_id,
            expected=(expected_producer_id, expected_epoch) if expected else None,
        )
        return self._propose(TransitionKind.INIT, meta, after)

    def _init_request_error(
        self, txn_id: str, timeout_ms: int, expected_producer_id: int, expected_epoch: int
    ) -> ErrorCode | None:
        """InitProducerId's rules 2, 3 and 1, in that order, before any state is looked at."""
        if not txn_id:
            return ErrorCode.INVALID_REQUEST
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT
        if (expected_producer_id < 0) != (expected_epoch < 0):
            return ErrorCode.INVALID_REQUEST
        if txn_id in self._pending:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return None

    def _reinitialized(
        self,
        meta: TxnMetadata,
        timeout_ms: int,
        now_ms: int,
        *,
        new_producer_id: int | None,
        expected: tuple[int, int] | None,
    ) -> TxnMetadata:
        """Rule 6: an idle transaction's next Empty state; ``expected`` is the KIP-360
        producer id and epoch the request names (already checked by rule 5), if any."""
        producer_id, epoch = meta.producer_id, meta.producer_epoch
        current = expected is None or expected == (producer_id, epoch)
        if not current:
            # A retry naming the remembered producer (rule 5 passed): same answer, no bump.
            last_id, last_epoch = meta.last_producer_id, meta.last_producer_epoch
        else:
            if _epoch_exhausted(epoch):
                producer_id, epoch = self._given_id(new_producer_id), 0
            else:
                epoch += 1
            last_id, last_epoch = meta.producer_id, meta.producer_epoch
            if expected is None:
                last_id, last_epoch = NO_PRODUCER_ID, NO_EPOCH
        return replace(
            meta,
            producer_id=producer_id,
            producer_epoch=epoch,
            timeout_ms=timeout_ms,
            state=TxnState.EMPTY,
            partitions=frozenset(),
            txn_start_ms=-1,
            last_update_ms=now_ms,
            last_producer_id=last_id,
            last_producer_epoch=last_epoch,
        )

    @staticmethod
    def _given_id(new_producer_id: int | None) -> int:
        if new_producer_id is None or new_producer_id < 0:
            raise ValueError("a new producer id is needed (see needs_new_producer_id)")
        return new_producer_id

    @staticmethod
    def _names_producer(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
        """Rule 5: the current producer, or the remembered one of rule 6."""
        if (producer_id, epoch) == (meta.producer_id, meta.producer_epoch):
            return True
        return meta.last_producer_epoch >= 0 and (producer_id, epoch) == (
            meta.last_producer_id,
            meta.last_producer_epoch,
        )

    @staticmethod
    def _fenced(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
        """Rules 7 and 11: bump the epoch and abort (partitions kept)."""
        return replace(
            meta,
            producer_epoch=min(meta.producer_epoch + 1, MAX_EPOCH),
            state=TxnState.PREPARE_ABORT,
            last_update_ms=now_ms,
            last_producer_id=NO_PRODUCER_ID,
            last_producer_epoch=NO_EPOCH,
        )

    # --- AddPartitionsToTxn ----------------------------------------------------------------

    def add_partitions(
        self,
        txn_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> Transition | ErrorCode:
        """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's ``__consumer_offsets``
        partition): rule 8. NONE alone when nothing changes."""
        if not txn_id:
            return ErrorCode.INVALID_REQUEST
        if txn_id in self._pending:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        meta = self._txns.get(txn_id)
        error = self._check_producer(meta, producer_id, producer_epoch)
        if error != ErrorCode.NONE:
            return error
        assert meta is not None
        if meta.state == TxnState.DEAD:
            return ErrorCode.INVALID_TXN_STATE
        if meta.state not in _IDLE and meta.state != TxnState.ONGOING:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        added = frozenset(partitions)
        if meta.state == TxnState.ONGOING and added <= meta.partitions:
            return ErrorCode.NONE
        after = replace(
            meta,
            state=TxnState.ONGOING,
            partitions=meta.partitions | added,
            txn_start_ms=meta.txn_start_ms if meta.state == TxnState.ONGOING else now_ms,
            last_update_ms=now_ms,
        )
        return self._propose(TransitionKind.ADD_PARTITIONS, meta, after)

    @staticmethod
    def _check_producer(meta: TxnMetadata | None, producer_id: int, epoch: int) -> ErrorCode:
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != epoch:
            return ErrorCode.PRODUCER_FENCED
        return ErrorCode.NONE

    # --- EndTxn ----------------------------------------------------------------------------

    def end_txn(
        self, txn_id: str, producer_id: int, producer_epoch: int, commit: bool, now_ms: int
    ) -> Transition | ErrorCode:
        """EndTxn: rule 9. NONE alone for a retry of a completed EndTxn."""
        if not txn_id:
            return ErrorCode.INVALID_REQUEST
        if txn_id in self._pending:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        meta = self._txns.get(txn_id)
        error = self._check_producer(meta, producer_id, producer_epoch)
        if error != ErrorCode.NONE:
            return error
        assert meta is not None
        match meta.state:
            case TxnState.ONGOING:
                state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
                kind = TransitionKind.PREPARE_COMMIT if commit else TransitionKind.PREPARE_ABORT
                return self._propose(kind, meta, replace(meta, state=state, last_update_ms=now_ms))
            case TxnState.COMPLETE_COMMIT if commit:
                return ErrorCode.NONE
            case TxnState.COMPLETE_ABORT if not commit:
                return ErrorCode.NONE
            case TxnState.PREPARE_COMMIT if commit:
                return ErrorCode.CONCURRENT_TRANSACTIONS
            case TxnState.PREPARE_ABORT | TxnState.PREPARE_EPOCH_FENCE if not commit:
                return ErrorCode.CONCURRENT_TRANSACTIONS
            case _:
                return ErrorCode.INVALID_TXN_STATE

    # --- markers and timeouts --------------------------------------------------------------

    def complete_markers(self, txn_id: str, now_ms: int) -> Transition | None:
        """Every marker of a PrepareCommit/PrepareAbort is written: the COMPLETE transition
        (rule 10); None when the id is not in such a state or has a pending transition."""
        meta = self._txns.get(txn_id)
        if meta is None or meta.state not in _PREPARE or txn_id in self._pending:
            return None
        state = (
            TxnState.COMPLETE_COMMIT
            if meta.state == TxnState.PREPARE_COMMIT
            else TxnState.COMPLETE_ABORT
        )
        after = replace(
            meta, state=state, partitions=frozenset(), txn_start_ms=-1, last_update_ms=now_ms
        )
        return self._propose(TransitionKind.COMPLETE, meta, after)

    def expired(self, now_ms: int) -> list[Transition]:
        """TIMEOUT_ABORT transitions of the Ongoing transactions past their timeout
        (rule 11), each pending from now on."""
        out = []
        for meta in self.all():
            if (
                meta.state == TxnState.ONGOING
                and meta.transactional_id not in self._pending
                and meta.txn_start_ms + meta.timeout_ms <= now_ms
            ):
                after = self._fenced(meta, now_ms)
                out.append(self._propose(TransitionKind.TIMEOUT_ABORT, meta, after))
        return out

    def expire_transactional_ids(self, now_ms: int) -> list[Transition]:
        """EXPIRE transitions (to Dead) of the idle ids not updated for
        ``config.transactional_id_expiration_ms`` (rule 14), each pending from now on."""
        limit = now_ms - self.config.transactional_id_expiration_ms
        out = []
        for meta in self.all():
            if (
                meta.state in _IDLE
                and meta.transactional_id not in self._pending
                and meta.last_update_ms <= limit
            ):
                after = replace(
                    meta,
                    state=TxnState.DEAD,
                    partitions=frozenset(),
                    txn_start_ms=-1,
                    last_update_ms=now_ms,
                )
                out.append(self._propose(TransitionKind.EXPIRE, meta, after))
        return out

    # --- persistence -----------------------------------------------------------------------

    def _propose(
        self, kind: TransitionKind, before: TxnMetadata | None, after: TxnMetadata
    ) -> Transition:
        t = Transition(after.transactional_id, before, after, kind)
        self._pending[t.transactional_id] = t
        return t

    def _take_pending(self, t: Transition) -> None:
        if self._pending.get(t.transactional_id) != t:
            raise ValueError(f"not the pending transition of {t.transactional_id!r}: {t}")
        del self._pending[t.transactional_id]

    def complete(self, t: Transition) -> None:
        """The write of ``t.after`` succeeded: it becomes the state (a Dead one, rule 14's
        tombstone, removes the id)."""
        self._take_pending(t)
        if t.after.state == TxnState.DEAD:
            del self._txns[t.transactional_id]
        else:
            self._txns[t.transactional_id] = t.after

    def fail(self, t: Transition) -> None:
        """The write of ``t.after`` failed: the state stays as it was (``t.before``)."""
        self._take_pending(t)


__all__ = [
    "EXHAUSTED_EPOCH",
    "MAX_EPOCH",
    "Transition",
    "TransitionKind",
    "TxnConfig",
    "TxnManager",
    "TxnMetadata",
    "TxnState",
]
