"""What ``tidelog transactions`` shows, and decides without a broker (pure): the views of
transactions and producers, their tables and JSON as kafka-transactions.sh prints them,
and find-hanging's and abort's choices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidelog.cli.output import format_table
from tidelog.model import TopicPartition


@dataclass(frozen=True, slots=True)
class TxnListing:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TxnDescription:
    coordinator: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    #: When the current transaction started; None when none runs (-1 on the wire).
    start_ms: int | None
    partitions: tuple[TopicPartition, ...]

    def duration_ms(self, now_ms: int) -> int | None:
        return None if self.start_ms is None else now_ms - self.start_ms


@dataclass(frozen=True, slots=True)
class ProducerView:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    #: The coordinator epoch of the producer's newest marker; -1: it never got one.
    coordinator_epoch: int
    #: The first offset of its open transaction; -1: none is open.
    current_txn_start_offset: int


@dataclass(frozen=True, slots=True)
class OpenTxn:
    tp: TopicPartition
    producer: ProducerView


def _none(value: int | None) -> str:
    return "None" if value is None else str(value)


def tp_text(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def format_listings(listings: Sequence[TxnListing]) -> str:
    return format_table(
        ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
        [[x.transactional_id, x.coordinator, x.producer_id, x.state] for x in listings],
    )


def format_description(d: TxnDescription, now_ms: int) -> str:
    return format_table(
        [
            "CoordinatorId",
            "TransactionalId",
            "ProducerId",
            "ProducerEpoch",
            "TransactionState",
            "TransactionTimeoutMs",
            "CurrentTransactionStartTimeMs",
            "TransactionDurationMs",
            "TopicPartitions",
        ],
        [
            [
                d.coordinator,
                d.transactional_id,
                d.producer_id,
                d.producer_epoch,
                d.state,
                d.timeout_ms,
                _none(d.start_ms),
                _none(d.duration_ms(now_ms)),
                ",".join(tp_text(tp) for tp in d.partitions) or "-",
            ]
        ],
    )


def format_producers(producers: Sequence[ProducerView]) -> str:
    return format_table(
        [
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ],
        [
            [
                p.producer_id,
                p.producer_epoch,
                p.coordinator_epoch,
                p.last_sequence,
                p.last_timestamp,
                _none(p.current_txn_start_offset if p.current_txn_start_offset >= 0 else None),
            ]
            for p in producers
        ],
    )


def format_hanging(hanging: Sequence[OpenTxn], now_ms: int) -> str:
    return format_table(
        [
            "Topic",
            "Partition",
            "ProducerId",
            "ProducerEpoch",
            "CoordinatorEpoch",
            "StartOffset",
            "LastTimestamp",
            "Duration(min)",
        ],
        [
            [
                t.tp.topic,
                t.tp.partition,
                t.producer.producer_id,
                t.producer.producer_epoch,
                t.producer.coordinator_epoch,
                t.producer.current_txn_start_offset,
                t.producer.last_timestamp,
                (now_ms - t.producer.last_timestamp) // 60_000,
            ]
            for t in hanging
        ],
    )


def description_to_json(d: TxnDescription, now_ms: int) -> dict[str, Any]:
    return {
        "coordinator": d.coordinator,
        "transactional_id": d.transactional_id,
        "producer_id": d.producer_id,
        "producer_epoch": d.producer_epoch,
        "state": d.state,
        "timeout_ms": d.timeout_ms,
        "start_time_ms": d.start_ms,
        "duration_ms": d.duration_ms(now_ms),
        "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in d.partitions],
    }


def producer_to_json(p: ProducerView) -> dict[str, Any]:
    return {
        "producer_id": p.producer_id,
        "producer_epoch": p.producer_epoch,
        "coordinator_epoch": p.coordinator_epoch,
        "last_sequence": p.last_sequence,
        "last_timestamp": p.last_timestamp,
        "current_txn_start_offset": (
            p.current_txn_start_offset if p.current_txn_start_offset >= 0 else None
        ),
    }


def open_transactions(
    producers: Mapping[TopicPartition, Sequence[ProducerView]], now_ms: int, max_timeout_ms: int
) -> list[OpenTxn]:
    """find-hanging's candidates: open transactions whose producer wrote nothing to the
    partition for longer than ``max_timeout_ms`` (no transaction may run that long)."""
    return [
        OpenTxn(tp, p)
        for tp, ps in sorted(producers.items())
        for p in ps
        if p.current_txn_start_offset >= 0 and now_ms - p.last_timestamp > max_timeout_ms
    ]


def hanging_transactions(
    candidates: Sequence[OpenTxn],
    transactional_ids: Mapping[int, str],
    descriptions: Mapping[str, TxnDescription | None],
) -> list[OpenTxn]:
    """The candidates no coordinator will ever end: their producer id has no transactional
    id, the id is not found (None), or its transaction does not include the partition."""
    out = []
    for txn in candidates:
        txn_id = transactional_ids.get(txn.producer.producer_id)
        described = descriptions.get(txn_id) if txn_id is not None else None
        if described is None or txn.tp not in described.partitions:
            out.append(txn)
    return out


def transaction_starting_at(
    producers: Iterable[ProducerView], start_offset: int
) -> ProducerView | None:
    """The producer whose open transaction starts at ``start_offset``, or None."""
    for p in producers:
        if p.current_txn_start_offset >= 0 and p.current_txn_start_offset == start_offset:
            return p
    return None


def marker_coordinator_epoch(coordinator_epoch: int) -> int:
    """A producer that never got a marker shows -1; 0 is at or below every real one."""
    return max(0, coordinator_epoch)
