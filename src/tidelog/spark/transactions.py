"""Exactly-once writes (option ``exactlyOnce``): Kafka transactions that the write tasks open
and the driver ends. No Spark here (the Spark side is ``tidelog.spark.source``); why this is
exactly-once, case by case, and what it costs is docs/exactly-once.md.

Theory of operation:

1. Names. Write task ``p`` of micro-batch ``b`` of the streaming query with id ``q``
   writes as transactional id ``<transactionalIdPrefix>-<q>-<b>-<p>`` (``scope`` is all
   but ``-<p>``). Spark runs every attempt and every replay of micro-batch ``b`` with the
   same batch id and the same input partitions, so all attempts of one task share one id,
   and no two tasks of any query do (the query id is stable across restarts from a
   checkpoint and new for a new checkpoint).
2. Look first (``TransactionalProducer.begin``): DescribeTransactions of the id. State
   PrepareCommit or CompleteCommit means the driver committed this task's transaction in
   an earlier run of the micro-batch that did not live to record the batch as done: the
   task writes nothing. Any other state, or an unknown id, goes on.
3. Open: InitProducerId with the id. It bumps the epoch, which fences every earlier
   attempt of the task (one that failed, a zombie still writing), and aborts the open
   transaction of such an attempt, before anything is written.
4. Write: AddPartitionsToTxn before a partition's first batch; batches carry the producer
   id and epoch, per-partition sequences and the transactional bit. A retried batch is the
   same bytes (same sequence), so a leader that already has it answers with its offsets
   instead of appending it again. The task waits for every ack (acks=all) and leaves the
   transaction open; its commit message names it (``TxnHandle``).
5. Commit (driver, ``end_transactions(commit=True)``): EndTxn(commit) for every named
   transaction, concurrently. EndTxn of a transaction already committed with that producer
   id and epoch answers NONE, so a retried commit is harmless.
6. Abort (driver): EndTxn(abort) for the named transactions; ``fence_open_transactions``
   aborts the open transaction of each failed task (no message) now, rather than at its
   timeout, by an InitProducerId of its id, and fences an attempt that began without
   writing yet. Spark's abort does not wait for the job's other attempts to stop (a
   killed task's Python worker is destroyed ``spark.python.task.killTimeout``, 2 s, later),
   so the fence is repeated after ``ZOMBIE_GRACE_S`` for an attempt that began meanwhile.
7. Retries: CONCURRENT_TRANSACTIONS, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
   COORDINATOR_LOAD_IN_PROGRESS and lost connections find the coordinator again and retry
   with backoff (100 ms doubling to 2 s) until the deadline; anything else is final.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from tidelog.client import Client, ClientConnectionError, ClientTimeoutError
from tidelog.client.client import TransactionDescription
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.spark.compressed import frame_sink_section
from tidelog.spark.errors import ConnectorError
from tidelog.spark.options import WriteOptions
from tidelog.spark.producer import Producer
from tidelog.spark.session import Backoff, Session

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Answers after which the same request, at the coordinator found again, may succeed.
RETRIABLE: Final = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)
#: States in which the coordinator has decided to commit (markers may still be due).
COMMITTED_STATES: Final = frozenset({"PrepareCommit", "CompleteCommit"})
#: States ``fence`` acts on: a transaction still open (its records hold the LSO back), or an
#: instance that began (InitProducerId) and may yet add partitions and write.
FENCE_STATES: Final = frozenset({"Ongoing", "Empty"})
_MAX_SEQUENCE: Final = 0x7FFFFFFF
#: How long ``abort`` waits before fencing the failed tasks' ids a second time: past
#: Spark's ``spark.python.task.killTimeout`` (2 s), after which a killed task's Python
#: worker is destroyed. Attempts slower than that are left to the transaction timeout (or,
#: in a stream, to the replay's fencing).
ZOMBIE_GRACE_S: Final = 5.0


def transactional_id(scope: str, partition: int) -> str:
    """The transactional id of write task ``partition`` in ``scope``."""
    return f"{scope}-{partition}"


def stream_scope(prefix: str, query_id: str, batch_id: int) -> str:
    """``<prefix>-<query id>-<batch id>``: the ids of one micro-batch's write tasks."""
    return f"{prefix}-{query_id}-{batch_id}"


@dataclass(frozen=True, slots=True)
class TxnHandle:
    """A write task's open transaction, as its commit message carries it to the driver."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


async def _wait(backoff: Backoff, reason: object) -> None:
    """Sleep ``backoff``'s next delay in this coroutine."""
    await asyncio.sleep(backoff.next_delay(time.monotonic(), reason))


async def at_coordinator(
    client: Client,
    txn_id: str,
    call: Callable[[int], Awaitable[T]],
    error_of: Callable[[T], ErrorCode],
    *,
    what: str,
    deadline: float,
) -> T:
    """``call(coordinator node id)`` for ``txn_id``; the coordinator is found (again) before
    each attempt, and retriable answers (``RETRIABLE``, lost connections, timeouts) are
    retried until ``deadline`` (``time.monotonic()``). Returns the first other answer."""
    backoff = Backoff(deadline, what)
    while True:
        try:
            found = await client.find_coordinator(txn_id)
            if found.error_code != ErrorCode.NONE:
                if found.error_code not in RETRIABLE:
                    raise ConnectorError(
                        f"{what}: FindCoordinator answered {found.error_code.name}"
                        + (f" ({found.error_message})" if found.error_message else "")
                    )
                await _wait(backoff, f"FindCoordinator: {found.error_code.name}")
                continue
            result = await call(found.node_id)
        except (ClientConnectionError, ClientTimeoutError) as exc:
            await _wait(backoff, exc)
            continue
        code = error_of(result)
        if code not in RETRIABLE:
            return result
        await _wait(backoff, code.name)


async def describe(client: Client, txn_id: str, deadline: float) -> TransactionDescription | None:
    """The coordinator's view of ``txn_id``; None when it does not know the id."""

    async def call(node: int) -> TransactionDescription:
        (found,) = await client.describe_transactions([txn_id], node_id=node)
        return found

    found = await at_coordinator(
        client,
        txn_id,
        call,
        lambda d: d.error_code,
        what=f"describing transactional id {txn_id}",
        deadline=deadline,
    )
    if found.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
        return None
    if found.error_code != ErrorCode.NONE:
        raise ConnectorError(f"describing transactional id {txn_id}: {found.error_code.name}")
    return found


async def init_producer(
    client: Client, txn_id: str, timeout_ms: int, deadline: float
) -> tuple[int, int]:
    """InitProducerId for ``txn_id``: (producer id, epoch); fences earlier instances and
    waits until the coordinator has aborted a transaction they left open."""

    async def call(node: int) -> tuple[ErrorCode, int, int]:
        r = await client.init_producer_id(txn_id, transaction_timeout_ms=timeout_ms, node_id=node)
        return r.error_code, r.producer_id, r.producer_epoch

    code, producer_id, epoch = await at_coordinator(
        client, txn_id, call, lambda r: r[0], what=f"InitProducerId of {txn_id}", deadline=deadline
    )
    if code == ErrorCode.INVALID_TRANSACTION_TIMEOUT:
        raise ConnectorError(
            f"InitProducerId of {txn_id}: the brokers refuse a transaction timeout of "
            f"{timeout_ms} ms (above their transaction.max.timeout.ms): lower the option "
            "'kafka.transaction.timeout.ms'"
        )
    if code != ErrorCode.NONE:
        raise ConnectorError(f"InitProducerId of {txn_id}: {code.name}")
    return producer_id, epoch


async def add_partitions(
    client: Client, handle: TxnHandle, tps: Sequence[TopicPartition], deadline: float
) -> None:
    """AddPartitionsToTxn: ``tps`` join the transaction of ``handle``."""
    what = f"adding {len(tps)} partition(s) to transaction {handle.transactional_id}"

    async def call(node: int) -> dict[TopicPartition, ErrorCode]:
        return await client.add_partitions_to_txn(
            handle.transactional_id,
            handle.producer_id,
            handle.producer_epoch,
            tps,
            node_id=node,
        )

    def error_of(result: dict[TopicPartition, ErrorCode]) -> ErrorCode:
        codes = {result.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in tps}
        codes.discard(ErrorCode.NONE)
        codes.discard(ErrorCode.OPERATION_NOT_ATTEMPTED)  # another partition failed
        final = sorted((c for c in codes if c not in RETRIABLE), key=lambda c: c.value)
        if final:
            return final[0]
        # All retriable (or none failed): one of them stands for the lot.
        return next(iter(codes), ErrorCode.NONE)

    result = await at_coordinator(
        client, handle.transactional_id, call, error_of, what=what, deadline=deadline
    )
    code = error_of(result)
    if code != ErrorCode.NONE:
        failed = ", ".join(
            f"{tp}: {c.name}" for tp, c in sorted(result.items()) if c != ErrorCode.NONE
        )
        raise ConnectorError(f"{what}: {failed}")


async def end_transaction(
    client: Client, handle: TxnHandle, *, commit: bool, deadline: float
) -> ErrorCode:
    """EndTxn(commit or abort) for ``handle``: NONE once the decision is persisted (the
    markers follow), else the coordinator's final answer (PRODUCER_FENCED: the transaction
    was aborted meanwhile, by a newer instance or its timeout)."""

    async def call(node: int) -> ErrorCode:
        return await client.end_txn(
            handle.transactional_id,
            handle.producer_id,
            handle.producer_epoch,
            commit=commit,
            node_id=node,
        )

    return await at_coordinator(
        client,
        handle.transactional_id,
        call,
        lambda code: code,
        what=f"{'committing' if commit else 'aborting'} transaction {handle.transactional_id}",
        deadline=deadline,
    )


# --- the driver ------------------------------------------------------------------------------


def _session(options: WriteOptions) -> Session:
    return Session(
        options.bootstrap_servers,
        options.client_id,
        options.request_timeout_ms,
        options.security_properties,
    )


def end_transactions(
    options: WriteOptions, handles: Sequence[TxnHandle], *, commit: bool
) -> dict[str, str | None]:
    """EndTxn for every handle, concurrently: transactional id -> None (done) or why not
    (an error code name, or the reason retries gave up)."""
    if not handles:
        return {}
    session = _session(options)
    deadline = time.monotonic() + options.retry_timeout_ms / 1000

    async def one(handle: TxnHandle) -> str | None:
        try:
            code = await end_transaction(
                session.client.client, handle, commit=commit, deadline=deadline
            )
        except ConnectorError as exc:
            return str(exc)
        return None if code == ErrorCode.NONE else code.name

    async def all_of() -> list[str | None]:
        return list(await asyncio.gather(*(one(h) for h in handles)))

    try:
        outcomes = session.client.run(all_of())
    finally:
        session.close()
    return {h.transactional_id: o for h, o in zip(handles, outcomes, strict=True)}


def fence_open_transactions(options: WriteOptions, txn_ids: Iterable[str]) -> list[str]:
    """For each id in state Ongoing or Empty: InitProducerId, which aborts an open
    transaction and fences the instance that began it (so it cannot add partitions or
    write any more). Unknown and completed ids are left alone. Returns the ids whose
    transaction was open (now aborted)."""
    ids = list(txn_ids)
    if not ids:
        return []
    session = _session(options)
    deadline = time.monotonic() + options.retry_timeout_ms / 1000

    async def one(txn_id: str) -> bool:
        client = session.client.client
        found = await describe(client, txn_id, deadline)
        if found is None or found.state not in FENCE_STATES:
            return False
        await init_producer(client, txn_id, options.transaction_timeout_ms, deadline)
        return found.state == "Ongoing"

    async def all_of() -> list[bool | BaseException]:
        return list(await asyncio.gather(*(one(i) for i in ids), return_exceptions=True))

    try:
        outcomes = session.client.run(all_of())
    finally:
        session.close()
    aborted = []
    for txn_id, outcome in zip(ids, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            log.warning("could not fence transactional id %s: %s", txn_id, outcome)
        elif outcome:
            aborted.append(txn_id)
    return aborted


# --- the write tasks -------------------------------------------------------------------------


class TransactionalProducer(Producer):
    """``Producer`` writing in one Kafka transaction: ``begin``, ``send``..., ``flush``, then
    ``handle`` goes to the driver, which ends the transaction."""

    def __init__(
        self,
        options: WriteOptions,
        txn_id: str,
        *,
        batch_records: int = 5000,
        batch_bytes: int | None = None,
    ) -> None:
        super().__init__(
            options.bootstrap_servers,
            client_id=options.client_id,
            request_timeout_ms=options.request_timeout_ms,
            acks=-1,
            retry_timeout_ms=options.retry_timeout_ms,
            batch_records=batch_records,
            batch_bytes=options.batch_bytes if batch_bytes is None else batch_bytes,
            security_properties=options.security_properties,
            compression=options.compression,
            compression_levels=options.compression_levels,
        )
        self.transactional_id = txn_id
        self.transaction_timeout_ms = options.transaction_timeout_ms
        self._handle: TxnHandle | None = None
        self._sequences: dict[TopicPartition, int] = {}
        self._in_transaction: set[TopicPartition] = set()
        #: What DescribeTransactions said before ``begin`` opened (None: unknown id).
        self.previous_state: str | None = None

    @property
    def handle(self) -> TxnHandle:
        if self._handle is None:
            raise ConnectorError(f"transaction {self.transactional_id} was not begun")
        return self._handle

    def _deadline(self) -> float:
        return time.monotonic() + self.retry_timeout_s

    def begin(self) -> bool:
        """Open the transaction (rules 2-3 of the module docstring). False: an earlier run
        of this task committed it, write nothing."""
        txn_id = self.transactional_id
        assert txn_id is not None
        deadline = self._deadline()

        async def run() -> TxnHandle | None:
            client = self.session.client.client
            found = await describe(client, txn_id, deadline)
            self.previous_state = found.state if found is not None else None
            if found is not None and found.state in COMMITTED_STATES:
                return None
            producer_id, epoch = await init_producer(
                client, txn_id, self.transaction_timeout_ms, deadline
            )
            return TxnHandle(txn_id, producer_id, epoch)

        self._handle = self.session.client.run(run())
        return self._handle is not None

    def _frame(self, tp: TopicPartition, section: bytes, count: int, now_ms: int) -> bytes:
        handle = self.handle
        sequence = self._sequences.get(tp, 0)
        self._sequences[tp] = (sequence + count) & _MAX_SEQUENCE
        return frame_sink_section(
            section,
            count,
            now_ms,
            self.compression,
            self.compression_levels,
            transactional=True,
            producer_id=handle.producer_id,
            producer_epoch=handle.producer_epoch,
            base_sequence=sequence,
        )

    def _before_produce(self, tps: Sequence[TopicPartition]) -> None:
        new = [tp for tp in tps if tp not in self._in_transaction]
        if not new:
            return
        handle = self.handle
        self.session.client.run(
            add_partitions(self.session.client.client, handle, new, self._deadline())
        )
        self._in_transaction.update(new)
