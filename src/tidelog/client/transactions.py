"""The transaction coordinator's APIs (KIP-98): FindCoordinator, InitProducerId,
AddPartitionsToTxn, EndTxn and DescribeTransactions; requests for a version, answers as
values. The client sends them to the node ``find_coordinator`` names."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tidelog.client.wire import error_code, make, ms, schema_module
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey

#: FindCoordinator key types.
COORDINATOR_GROUP: Final = 0
COORDINATOR_TRANSACTION: Final = 1


@dataclass(frozen=True, slots=True)
class CoordinatorResult:
    """FindCoordinator's answer for one key."""

    error_code: ErrorCode
    node_id: int
    host: str
    port: int
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class ProducerIdResult:
    """InitProducerId's answer."""

    error_code: ErrorCode
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """DescribeTransactions' answer for one transactional id (Kafka's state names:
    Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, ...)."""

    error_code: ErrorCode
    transactional_id: str
    state: str
    timeout_ms: int
    #: When the running transaction started; None when none runs (-1 on the wire).
    start_ms: int | None
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...] = ()


def find_coordinator_request(version: int, key: str, key_type: int) -> Any:
    """FindCoordinator request ``version`` for one key (v4+ sends it as a batch of one)."""
    m = schema_module(ApiKey.FIND_COORDINATOR, version)
    if version >= 4:
        return m.FindCoordinatorRequest(key_type=key_type, coordinator_keys=(key,))
    return m.FindCoordinatorRequest(key=key, key_type=key_type)


def read_find_coordinator(version: int, response: Any, key: str) -> CoordinatorResult | None:
    """``key``'s answer in a FindCoordinator response (None when a v4+ one lacks it)."""
    if version >= 4:
        found = [c for c in response.coordinators if c.key == key]
        if not found:
            return None
        c = found[0]
        return CoordinatorResult(
            error_code(c.error_code), int(c.node_id), str(c.host), int(c.port), c.error_message
        )
    return CoordinatorResult(
        error_code(response.error_code),
        int(response.node_id),
        str(response.host),
        int(response.port),
        response.error_message,
    )


def init_producer_id_request(
    version: int,
    transactional_id: str | None,
    *,
    transaction_timeout_ms: int,
    producer_id: int,
    producer_epoch: int,
) -> Any:
    """InitProducerId request ``version``."""
    m = schema_module(ApiKey.INIT_PRODUCER_ID, version)
    return make(
        m.InitProducerIdRequest,
        transactional_id=transactional_id,
        transaction_timeout=ms(transaction_timeout_ms),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
    )


def read_init_producer_id(response: Any) -> ProducerIdResult:
    return ProducerIdResult(
        error_code(response.error_code), int(response.producer_id), int(response.producer_epoch)
    )


def add_partitions_to_txn_request(
    version: int,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition],
) -> Any:
    """AddPartitionsToTxn request ``version`` (v0-3: one transaction per request)."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    m = schema_module(ApiKey.ADD_PARTITIONS_TO_TXN, version)
    return m.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=producer_id,
        v3_and_below_producer_epoch=producer_epoch,
        v3_and_below_topics=tuple(
            m.AddPartitionsToTxnTopic(name=t, partitions=tuple(sorted(ps)))
            for t, ps in sorted(by_topic.items())
        ),
    )


def read_add_partitions_to_txn(response: Any) -> dict[TopicPartition, ErrorCode]:
    return {
        TopicPartition(t.name, int(p.partition_index)): error_code(p.partition_error_code)
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def end_txn_request(
    version: int, transactional_id: str, producer_id: int, producer_epoch: int, *, commit: bool
) -> Any:
    """EndTxn request ``version``: commit or abort."""
    m = schema_module(ApiKey.END_TXN, version)
    return m.EndTxnRequest(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        committed=commit,
    )


def describe_transactions_request(version: int, transactional_ids: Sequence[str]) -> Any:
    m = schema_module(ApiKey.DESCRIBE_TRANSACTIONS, version)
    return m.DescribeTransactionsRequest(transactional_ids=tuple(transactional_ids))


def read_describe_transactions(response: Any) -> list[TransactionDescription]:
    """One description per transactional id, in the response's order."""
    out = []
    for s in response.transaction_states:
        start = int(s.transaction_start_time)
        out.append(
            TransactionDescription(
                error_code=error_code(s.error_code),
                transactional_id=str(s.transactional_id),
                state=str(s.transaction_state),
                timeout_ms=int(s.transaction_timeout),
                start_ms=start if start >= 0 else None,
                producer_id=int(s.producer_id),
                producer_epoch=int(s.producer_epoch),
                partitions=tuple(
                    sorted(
                        TopicPartition(str(t.topic), int(p)) for t in s.topics for p in t.partitions
                    )
                ),
            )
        )
    return out
