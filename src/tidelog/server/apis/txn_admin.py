"""The transaction admin APIs (KIP-664): what ``tidelog transactions`` and Kafka's
kafka-transactions.sh ask a broker about transactions and the producers of its partitions.

- DescribeTransactions (65, v0), per transactional id, at its coordinator: INVALID_REQUEST
  for an empty id, NOT_COORDINATOR when this broker does not lead the id's
  ``__transaction_state`` partition, TRANSACTIONAL_ID_NOT_FOUND (105) when the coordinator
  does not know it (or knows it as Dead); else its state (Kafka's name: "Ongoing",
  "PrepareCommit", ...), producer id and epoch, timeout, the start of the current
  transaction (-1 when none, as Kafka) and its partitions, grouped by topic.
- ListTransactions (66, v0-v2): the transactional ids this broker coordinates (Dead ones
  never; every ``__transaction_state`` partition led here loaded first at its current
  leader epoch, ``TransactionCoordinator.transactions``: never a partial list), filtered
  by ``state_filters`` (names; one this broker does not know is answered in
  ``unknown_state_filters`` and matches nothing, so only unknown names list nothing), by
  ``producer_id_filters``, (v1) by ``duration_filter``: only transactions running
  (``txn_start_ms`` >= 0) for longer than that many ms, and (v2, KIP-1152) by
  ``transactional_id_pattern``: a regular expression the whole id must match (Java's
  ``Matcher.matches``; Python's ``re`` syntax, which agrees with Java's for the usual
  patterns); one that does not compile is INVALID_REGULAR_EXPRESSION (128) and no rows.
  Empty filters (and a null or empty pattern) keep everything.
- DescribeProducers (61, v0), per partition, at its leader: the active producers of the
  partition's log (``tidelog.storage.producer_state``): id, epoch, last sequence and
  timestamp, the coordinator epoch of its newest marker and the first offset of its open
  transaction (-1: none), which is what an operator gives ``abort --start-offset``.
  NOT_LEADER_OR_FOLLOWER on a follower, ``ReplicaManager.not_hosted_error`` for a partition
  not hosted here, KAFKA_STORAGE_ERROR for one in an offline log dir (as Kafka).

Everything is answered from memory, at once (no request waits on anything).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from tidelog.coordinator.txn import TxnMetadata, TxnState
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.security.acls import AclOperation, ResourceType
from tidelog.server.auth import authz
from tidelog.server.coordinators.txn import TransactionCoordinator
from tidelog.server.replica.manager import now_ms
from tidelog.storage.producer_state import ProducerStateEntry

if TYPE_CHECKING:
    from tidelog.server.apis.helper import RequestHelper
    from tidelog.server.replica.manager import ReplicaManager

_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
#: Kafka's state names, which ListTransactions filters by.
STATE_NAMES: Final[Mapping[str, TxnState]] = {state.value: state for state in TxnState}


def kafka_datetime(ms: int) -> datetime.datetime:
    """A ``datetime_i64`` field's value for ``ms`` since the epoch (-1 included: kio writes
    ``round(timestamp() * 1000)``, so this is exact for any millisecond)."""
    return _EPOCH + datetime.timedelta(milliseconds=ms)


def describe_entry(txn_id: str, meta: TxnMetadata | None, error: ErrorCode) -> dict[str, Any]:
    """One DescribeTransactions answer: ``error`` (the coordinator lookup's) when not NONE,
    else TRANSACTIONAL_ID_NOT_FOUND for an unknown or Dead id, else the state."""
    if error == ErrorCode.NONE and (meta is None or meta.state == TxnState.DEAD):
        error = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    if error != ErrorCode.NONE or meta is None:
        # Kafka's defaults (zeros) in the other fields; ``build`` fills all but the time.
        return {
            "error_code": error,
            "transactional_id": txn_id,
            "transaction_start_time": kafka_datetime(0),
        }
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(meta.partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return {
        "error_code": ErrorCode.NONE,
        "transactional_id": txn_id,
        "transaction_state": meta.state.value,
        "transaction_timeout": meta.timeout_ms,
        "transaction_start_time": kafka_datetime(meta.txn_start_ms),
        "producer_id": meta.producer_id,
        "producer_epoch": meta.producer_epoch,
        "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
    }


@dataclass(frozen=True, slots=True)
class ListFilters:
    """ListTransactions' filters; empty / negative ones keep everything."""

    states: frozenset[str] = frozenset()
    producer_ids: frozenset[int] = frozenset()
    duration_ms: int = -1
    transactional_id_pattern: re.Pattern[str] | None = None

    @property
    def unknown_states(self) -> list[str]:
        return sorted(s for s in self.states if s not in STATE_NAMES)

    def matches(self, meta: TxnMetadata, now: int) -> bool:
        if meta.state == TxnState.DEAD:
            return False
        if self.producer_ids and meta.producer_id not in self.producer_ids:
            return False
        pattern = self.transactional_id_pattern
        if pattern is not None and pattern.fullmatch(meta.transactional_id) is None:
            return False
        if self.states:
            known = {STATE_NAMES[s] for s in self.states if s in STATE_NAMES}
            if meta.state not in known:
                return False
        if self.duration_ms >= 0:
            return meta.txn_start_ms >= 0 and now - meta.txn_start_ms > self.duration_ms
        return True


def list_transactions(
    transactions: Iterable[TxnMetadata], filters: ListFilters, now: int
) -> list[dict[str, Any]]:
    """The ListTransactions rows of ``transactions`` that pass ``filters``, by id."""
    return [
        {
            "transactional_id": meta.transactional_id,
            "producer_id": meta.producer_id,
            "transaction_state": meta.state.value,
        }
        for meta in sorted(transactions, key=lambda m: m.transactional_id)
        if filters.matches(meta, now)
    ]


def active_producers(producers: Mapping[int, ProducerStateEntry]) -> list[dict[str, Any]]:
    """DescribeProducers' ``active_producers`` of one partition, by producer id."""
    return [
        {
            "producer_id": entry.producer_id,
            "producer_epoch": entry.producer_epoch,
            "last_sequence": entry.last_seq,
            "last_timestamp": entry.last_timestamp,
            "coordinator_epoch": entry.coordinator_epoch,
            "current_txn_start_offset": entry.current_txn_first_offset,
        }
        for _pid, entry in sorted(producers.items())
    ]


class TxnAdmin:
    """DescribeTransactions, ListTransactions and DescribeProducers of one broker."""

    def __init__(
        self,
        helper: RequestHelper,
        replica_manager: ReplicaManager,
        coordinator: TransactionCoordinator,
    ) -> None:
        self.helper = helper
        self.coordinator = coordinator
        self.replica_manager = replica_manager

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {
            ApiKey.DESCRIBE_TRANSACTIONS: self.handle_describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.handle_list_transactions,
            ApiKey.DESCRIBE_PRODUCERS: self.handle_describe_producers,
        }

    # --- DescribeTransactions (65) ---------------------------------------------------------

    def handle_describe_transactions(self, header: RequestHeader, body: Any) -> Any:
        """Kafka's handleDescribeTransactionsRequest: DESCRIBE on each transactional id (else
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and only the topics the principal may
        describe among the transaction's partitions."""
        authorizer = self.helper.authorizer
        states = []
        for raw in body.transactional_ids:
            txn_id = str(raw)
            if authorizer is None:
                states.append(self._describe(txn_id))
                continue
            if not authorizer.authorize(
                AclOperation.DESCRIBE,
                ResourceType.TRANSACTIONAL_ID,
                txn_id,
                api_key=header.api_key,
            ):
                denied = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                states.append(describe_entry(txn_id, None, denied))
                continue
            entry = self._describe(txn_id)
            if entry.get("topics"):
                entry["topics"] = [
                    t
                    for t in entry["topics"]
                    if authorizer.authorize(
                        AclOperation.DESCRIBE,
                        ResourceType.TOPIC,
                        t["topic"],
                        api_key=header.api_key,
                    )
                ]
            states.append(entry)
        return self.helper.respond(header, {"transaction_states": states})

    def _describe(self, txn_id: str) -> dict[str, Any]:
        if not txn_id:
            return describe_entry(txn_id, None, ErrorCode.INVALID_REQUEST)
        _p, loaded, error = self.coordinator._lookup(txn_id)
        meta = loaded.manager.get(txn_id) if loaded is not None else None
        return describe_entry(txn_id, meta, error)

    # --- ListTransactions (66) -------------------------------------------------------------

    def handle_list_transactions(self, header: RequestHeader, body: Any) -> Any:
        raw_pattern = getattr(body, "transactional_id_pattern", None)
        try:
            pattern = re.compile(raw_pattern) if raw_pattern else None
        except re.error:
            return self.helper.respond(header, {"error_code": ErrorCode.INVALID_REGULAR_EXPRESSION})
        filters = ListFilters(
            states=frozenset(str(s) for s in body.state_filters),
            producer_ids=frozenset(int(p) for p in body.producer_id_filters),
            duration_ms=int(getattr(body, "duration_filter", -1)),
            transactional_id_pattern=pattern,
        )
        rows = list_transactions(self._coordinated(), filters, now_ms())
        authorizer = self.helper.authorizer
        if authorizer is not None:
            # Kafka's handleListTransactionsRequest: only ids the principal may describe.
            rows = [
                row
                for row in rows
                if authorizer.authorize(
                    AclOperation.DESCRIBE,
                    ResourceType.TRANSACTIONAL_ID,
                    row["transactional_id"],
                    api_key=header.api_key,
                )
            ]
        return self.helper.respond(
            header,
            {
                "error_code": ErrorCode.NONE,
                "unknown_state_filters": filters.unknown_states,
                "transaction_states": rows,
            },
        )

    def _coordinated(self) -> list[TxnMetadata]:
        """The transactions of the ``__transaction_state`` partitions this broker leads now."""
        return [meta for _p, meta in self.coordinator.transactions()]

    # --- DescribeProducers (61) ------------------------------------------------------------

    def handle_describe_producers(self, header: RequestHeader, body: Any) -> Any:
        # Kafka's handleDescribeProducersRequest: READ on each topic.
        denied = authz.denied_names(
            self.helper.authorizer,
            AclOperation.READ,
            ResourceType.TOPIC,
            [str(t.name) for t in body.topics for _ in t.partition_indexes],
            header.api_key,
        )
        topics = []
        for topic in body.topics:
            name = str(topic.name)
            if denied and name in denied:
                partitions = [
                    {
                        "partition_index": int(p),
                        "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        "error_message": authz.TOPIC_AUTHORIZATION_MESSAGE,
                        "active_producers": [],
                    }
                    for p in topic.partition_indexes
                ]
                topics.append({"name": name, "partitions": partitions})
                continue
            partitions = [
                self._producers_of(TopicPartition(name, int(p))) for p in topic.partition_indexes
            ]
            topics.append({"name": name, "partitions": partitions})
        return self.helper.respond(header, {"topics": topics})

    def _producers_of(self, tp: TopicPartition) -> dict[str, Any]:
        hosted = self.replica_manager.partitions.get(tp)
        if hosted is None:
            error = self.replica_manager.not_hosted_error(tp)
        elif self.replica_manager.is_offline(tp):
            error = ErrorCode.KAFKA_STORAGE_ERROR
        elif not hosted.partition.is_leader:
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        else:
            return {
                "partition_index": tp.partition,
                "error_code": ErrorCode.NONE,
                "error_message": None,
                "active_producers": active_producers(hosted.log.producer_state.producers),
            }
        return {
            "partition_index": tp.partition,
            "error_code": error,
            "error_message": None,
            "active_producers": [],
        }


__all__ = [
    "STATE_NAMES",
    "ListFilters",
    "TxnAdmin",
    "active_producers",
    "describe_entry",
    "kafka_datetime",
    "list_transactions",
]
